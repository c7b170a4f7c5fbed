"""The exact analytical model: hand-derived counts, stages, groups, batching, the CSV bounds."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from perfmodels.analytic import exact, exact_batch
from perfmodels.validate import evaluate_rows, read_rows, summarize
from workloads.errors import InfeasibleError
from workloads.layer import Layer

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSV = ROOT / "data" / "timeloop_gemmini_10k.csv"
HW = HardwareConfig.preset("gemmini_default")


def test_hand_derived_example():
    """R=S=Q=N=1, P=4, C=K=8 (256 MACs) on a 16x16 Gemmini; by hand:

    registers: W fills 256 (the accumulator's C loop is innermost, so every weight is
    reloaded), reads = MACs 256 -> 512 accesses;
    accumulator: O fills 1 x K4X x P4 x K2 = 32, updates 256 / C4X = 64, reads 64 - 32 = 32;
    scratchpad: W fills 32 x K2 = 64 (stationary across P), I fills 8 x 4 x K2 = 64, W reads
    = register fills 256, I reads = 256 / K4X = 64 -> 448;
    DRAM: W 64 + I 64 + O updates 32 (+ 0 reads) = 160.
    Rooflines: compute 256/16, registers 512/(2*16), accumulator 128/(2*4), scratchpad 448/32,
    DRAM 160/8 = 20 -> 20 cycles at 2 stages; 16 -> 32 -> 46 -> 66 serialized at 1 stage.
    """
    layer = Layer.conv2d(P=4, C=8, K=8)
    m = Mapping.from_timeloop("L3[WIO] K2 P4 - L2[WI] N1 K4X - L1[O] C2 C4X - L0[W] N1")
    out = exact(layer, HW, m)
    np.testing.assert_allclose(out.macs, 256)
    np.testing.assert_allclose(out.fills, [[256, 0, 0], [0, 0, 32], [64, 64, 0], [0, 0, 0]],
                               rtol=1e-5)
    np.testing.assert_allclose(out.reads, [[256, 0, 0], [0, 0, 32], [256, 64, 0], [64, 64, 0]],
                               rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(out.updates[:, 2], [0, 64, 0, 32], rtol=1e-5)
    np.testing.assert_allclose(out.level_accesses, [512, 128, 448, 160], rtol=1e-5)
    np.testing.assert_allclose(out.port_cycles, [16, 16, 14, 20], rtol=1e-5)
    np.testing.assert_allclose(out.cycles, 20, rtol=1e-5)
    energy = 256 * 0.5608 + 512 * 0.48746172 + 128 * 2.342 + 448 * 6.92328 + 160 * 100
    np.testing.assert_allclose(out.energy_pj, energy, rtol=1e-5)
    np.testing.assert_allclose(out.edp, 20 * energy, rtol=1e-5)
    serial = exact(layer, HW, m.with_stages(1))
    np.testing.assert_allclose(serial.cycles, 66, rtol=1e-5)
    np.testing.assert_allclose(serial.energy_pj, energy, rtol=1e-5)   # stages move no data


def test_sliding_window_reuse_depends_on_the_loop_order():
    """R=3, P=8, K=2: the scratchpad holds 4 input rows ((P0=2 - 1) + R=3).

    P innermost at DRAM slides the window: 4 + 3 x 2 new rows = 10 (the whole input), times
    K2 outside = 20; K innermost keeps the tile across K, then P refetches whole tiles: 4 x 4.
    """
    layer = Layer.conv2d(R=3, P=8, K=2)
    sliding = Mapping.from_timeloop("L3[WIO] K2 P4 - L2[WI] N1 - L1[O] R3 - L0[W] P2")
    refetch = Mapping.from_timeloop("L3[WIO] P4 K2 - L2[WI] N1 - L1[O] R3 - L0[W] P2")
    np.testing.assert_allclose(exact(layer, HW, sliding).fills[2, 1], 20, rtol=1e-5)
    np.testing.assert_allclose(exact(layer, HW, refetch).fills[2, 1], 16, rtol=1e-5)
    # stride 2: 5 rows per tile ((2-1)*2 + 3), steps of 4 new rows: 5 + 3 x 4 = 17 = input rows
    strided = dataclasses.replace(layer, Hstride=2)
    np.testing.assert_allclose(exact(strided, HW, sliding).fills[2, 1], 2 * 17, rtol=1e-5)


def test_groups_scale_cycles_and_energy():
    layer = Layer.conv2d(R=3, S=3, P=7, Q=7, C=4, K=4)
    m = Mapping.from_timeloop("L3[WIO] Q7 P7 - L2[WI] N1 K4X - L1[O] S3 R3 C4X - L0[W] N1")
    one, four = exact(layer, HW, m), exact(dataclasses.replace(layer, groups=4), HW, m)
    np.testing.assert_allclose(four.cycles, 4 * one.cycles, rtol=1e-6)
    np.testing.assert_allclose(four.energy_pj, 4 * one.energy_pj, rtol=1e-6)
    np.testing.assert_allclose(four.footprint_kb, one.footprint_kb)


def test_stages_follow_alcop(tmp_path):
    """1 stage sums load and use, 2+ take the max; a per-load latency (counted with
    ``load_latency``) is what 3-4 amortize."""
    layer = Layer.conv2d(R=3, S=3, P=28, Q=28, C=64, K=64)
    m = Mapping.from_timeloop("L3[WIO] K4 Q4 P4 - L2[WI] N1 K16X - L1[O] S3 R3 C4 P7 Q7 C16X "
                              "- L0[W] N1")

    def staged(s: int) -> Mapping:   # the registers hold two weights: at most 2 stages there
        return m.replace(stages=np.array([min(s, 2), s, s, 1]))

    by_stage = [float(exact(layer, HW, staged(s)).cycles) for s in (1, 2, 3, 4)]
    ports = exact(layer, HW, m).port_cycles
    assert by_stage[0] > by_stage[1] == by_stage[2] == by_stage[3]
    np.testing.assert_allclose(by_stage[1], max(float(ports.max()),
                                                float(exact(layer, HW, m).compute_cycles)))
    # The per-load latency counts only with load_latency (the instruction-aware yardstick);
    # the plain model above is Timeloop's roofline. The same template with a (large)
    # 10000-cycle DRAM latency per tile load:
    text = (ROOT / "accel" / "templates" / "gemmini.yaml").read_text()
    dram_latency = "    latency_cycles: dram_latency_cycles + mvin_write_cycles"
    assert text.count(dram_latency) == 1
    text = text.replace(dram_latency, "    latency_cycles: 10000")
    path = tmp_path / "gemmini_lat.yaml"
    path.write_text(text.replace("name: gemmini", "name: gemmini_lat"))
    slow = dataclasses.replace(HW, template=str(path))
    assert [float(exact(layer, slow, staged(s)).cycles) for s in (1, 2, 3, 4)] == by_stage
    lat = [float(exact(layer, slow, staged(s), load_latency=True).cycles) for s in (1, 2, 3, 4)]
    assert lat[0] > lat[1] > lat[2] > lat[3] >= by_stage[1]
    assert all(a >= b for a, b in zip(lat, by_stage))


def test_exact_checks_first_and_batch_matches_single():
    layer = Layer.conv2d(R=3, S=3, P=14, Q=14, C=32, K=32)
    bad = Mapping.from_timeloop("L3[WIO] K2 - L2[WI] N1 - L1[O] N1 - L0[W] N1")
    with pytest.raises(InfeasibleError, match="dim R"):
        exact(layer, HW, bad)
    rng = np.random.default_rng(0)
    layers = [layer, Layer.gemm(M=32, K_red=64, N_out=48), layer]
    maps = [Mapping.random(x, HW, rng) for x in layers]
    batch = exact_batch(layers, HW, maps)
    for i, (x, m) in enumerate(zip(layers, maps)):
        single = exact(x, HW, m)
        np.testing.assert_allclose(batch.cycles[i], single.cycles, rtol=1e-6)
        np.testing.assert_allclose(batch.energy_pj[i], single.energy_pj, rtol=1e-6)


@pytest.mark.parametrize("preset", ["gemmini_dosa", "nvdla_small", "nvdla_large", "eyeriss"])
def test_every_preset_evaluates_finite_and_feasible(preset):
    hw = HardwareConfig.preset(preset)
    rng = np.random.default_rng(1)
    layers = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64, Hstride=2, Wstride=2),
              Layer.gemm(M=16, K_red=256, N_out=128)] * 4
    maps = [Mapping.random(x, hw, rng) for x in layers]
    out = exact_batch(layers, hw, maps)
    for name, leaf in out._asdict().items():
        values = leaf[..., :-1] if name == "capacity_kb" else leaf   # DRAM's is unbounded
        assert np.all(np.isfinite(values)), name
    assert np.all(out.cycles >= out.compute_cycles * (1 - 1e-6))
    assert np.all(out.cycles > 0) and np.all(out.energy_pj > 0)
    np.testing.assert_allclose(out.overflow, 0)          # validated mappings fit
    np.testing.assert_allclose(out.fanout_excess, 0)
    assert np.all(out.area_mm2 > 0)


def test_matches_timeloop_on_dataset_rows():
    """DOSA-level agreement with Timeloop on the first 400 rows (the whole file is checked by
    `baco validate timeloop`)."""
    rows = read_rows(CSV, limit=400)
    summary = summarize(rows, evaluate_rows(rows, batch=512))
    assert summary["rows"] == 400
    assert summary["cycles_mean_abs_rel_err"] <= 0.01
    assert summary["energy_mean_abs_rel_err"] <= 0.01
    assert summary["cycles_max_abs_rel_err"] <= 0.15
    assert summary["energy_max_abs_rel_err"] <= 0.15
