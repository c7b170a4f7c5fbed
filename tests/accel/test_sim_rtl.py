"""accel.sim.rtl: reading DOSA's RTL rows, the program the chip ran, and the metrics."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from accel.mapping import Mapping
from accel.sim import rtl
from workloads.errors import ConfigError
from workloads.layer import Layer

HEADER = ["target.cycle", "mapping.mapping", "arch.pe", "arch.mem1_depth", "arch.mem1_width",
          "arch.mem1_instances", "arch.mem2_depth", "arch.mem2_width", "arch.mem2_instances",
          "prob.C", "prob.Hdilation", "prob.Hstride", "prob.K", "prob.N", "prob.P", "prob.Q",
          "prob.R", "prob.S", "prob.Wdilation", "prob.Wstride", "target.gemmini_cycle"]


def _row(mapping: str, cycles: float, **prob) -> dict[str, str]:
    base = {"R": 1, "S": 1, "P": 1, "Q": 1, "C": 1, "K": 1, "N": 1, "Hdilation": 1,
            "Hstride": 1, "Wdilation": 1, "Wstride": 1}
    base.update(prob)
    row = {f"prob.{k}": str(v) for k, v in base.items()}
    row.update({"mapping.mapping": mapping, "target.cycle": str(cycles),
                "target.gemmini_cycle": str(cycles), "arch.pe": "16384",
                "arch.mem1_depth": "2048", "arch.mem1_width": "32", "arch.mem1_instances": "128",
                "arch.mem2_depth": "8192", "arch.mem2_width": "1024",
                "arch.mem2_instances": "1"})
    return row


ROWS = [
    _row("L3[WIO] K2 Q2 - L2[WI] N1 K16X - L1[O] R3 S3 C2 C16X - L0[W] P4", 40000, R=3, S=3,
         P=4, Q=2, C=32, K=32),
    _row("L3[WIO] P2 K2 - L2[WI] N1 K8X - L1[O] C4 C32X - L0[W] P8", 9000, P=16, C=128, K=16),
    _row("L3[WIO] K4 - L2[WI] N1 K4X - L1[O] C8 C4X - L0[W] N1", 3000, C=32, K=16),
    _row("L3[WIO] Q2 - L2[WI] N1 K8X - L1[O] S3 R3 C4X - L0[W] P4", 20000, R=3, S=3, P=4,
         Q=2, C=4, K=8, Wstride=2, Hstride=2),
]


def test_parse_row_builds_the_layer_and_mapping():
    conv = rtl.parse_row(ROWS[0], 0)
    assert conv.layer.kind == "conv2d" and conv.layer.pads == (1, 1, 1, 1)
    assert conv.cycles == 40000 and conv.sp_kb == 1024 and conv.acc_kb == 1024
    assert conv.mapping.to_timeloop() == ROWS[0]["mapping.mapping"]
    gemm = rtl.parse_row(ROWS[1], 1)
    assert gemm.layer.kind == "gemm" and (gemm.layer.P, gemm.layer.C, gemm.layer.K) == (16, 128,
                                                                                        16)
    strided = rtl.parse_row(ROWS[3], 3)
    assert (strided.layer.Hstride, strided.layer.Wstride) == (2, 2)
    with pytest.raises(ConfigError):
        rtl.parse_row({**ROWS[0], "prob.C": "-3"}, 0)
    with pytest.raises(ConfigError):
        rtl.parse_row({**ROWS[0], "target.gemmini_cycle": ""}, 0)


def test_fold_spatial_keeps_every_tile():
    m = Mapping.from_timeloop("L3[WIO] K2 - L2[WI] N1 K32X - L1[O] C3 C64X - L0[W] P4")
    folded = rtl.fold_spatial(m, 16)
    assert folded.spatial.max() == 16
    assert int(folded.temporal[1, 4]) == 3 * 4 and int(folded.temporal[1, 5]) == 2
    # The scratchpad tile and everything above it do not change; an accumulator instance (one
    # per PE column) now holds the K values its column computes in turn.
    ext = lambda x: np.cumprod(x.temporal * x.spatial, axis=0)
    np.testing.assert_array_equal(ext(folded)[2:], ext(m)[2:])
    odd = rtl.fold_spatial(Mapping.from_timeloop("L3[WIO] N1 - L2[WI] N1 K24X - L1[O] N1 - "
                                                 "L0[W] N1"), 16)
    assert int(odd.spatial[2, 5]) == 12 and int(odd.temporal[1, 5]) == 2


def test_conv_calls_follow_the_generator():
    conv = rtl.parse_row(ROWS[0], 0)
    # The generator's tile: the factors below DRAM, spatial included, with L0's P counted twice.
    tile = rtl.generator_tile(conv.mapping)
    assert dict(zip("RSPQCKN", tile.tolist())) == {"R": 3, "S": 3, "P": 16, "Q": 1, "C": 32,
                                                   "K": 16, "N": 1}
    # A square, "same"-padded image: the output side comes from P (Q is not used).
    assert rtl.generator_extents(conv.layer)[2:4].tolist() == [4, 4]
    plan = rtl.plan_row(conv.layer, conv.mapping)
    assert plan.kind == "calls" and plan.calls == 8 and plan.counts == (8,)
    sub, program = plan.problems[0]
    assert (sub.R, sub.S, sub.P, sub.Q, sub.C, sub.K) == (3, 3, 4, 1, 32, 16)
    assert sub.pads == (0, 0, 0, 0)
    np.testing.assert_array_equal(np.prod(program.temporal * program.spatial, axis=0),
                                  [3, 3, 4, 1, 32, 16, 1])
    assert program.spatial.max() <= rtl.RTL_DIM
    # An even kernel: the output side is P + 1, so a 4-wide tile leaves a remainder call.
    even = Layer.conv2d(R=4, S=4, P=8, Q=8, C=16, K=16, pads=(2, 2, 2, 2))
    m = Mapping.from_timeloop("L3[WIO] Q8 P2 - L2[WI] N1 K16X - L1[O] R4 S4 C16X - L0[W] P4")
    assert rtl.generator_extents(even)[2] == 9
    plan = rtl.plan_row(even, m)
    # P: tile 4 x 4 = 16 covers the 9 columns in one call; Q: 9 rows one at a time.
    assert plan.calls == 9 and plan.counts == (9,)
    m = Mapping.from_timeloop("L3[WIO] Q8 P4 - L2[WI] N1 K16X - L1[O] R4 S4 C16X - L0[W] P2")
    plan = rtl.plan_row(even, m)
    assert plan.counts == (18, 9) and plan.calls == 27
    assert [problem[0].P for problem in plan.problems] == [4, 1]


def test_plans_and_how_they_combine():
    conv = rtl.parse_row(ROWS[0], 0)
    plan = rtl.plan_row(conv.layer, conv.mapping)
    assert plan.simulations == 2
    assert plan.combine([100, 160], host_call_cycles=20) == 100 + 20 + 7 * 60
    assert plan.combine([100, 110], host_call_cycles=20) == 100 + 20 + 7 * 20
    two = rtl.RowPlan("calls", plan.problems * 2, calls=5, counts=(4, 1))
    assert two.simulations == 4
    # The first call starts cold; every call then costs its steady-state cycles.
    assert two.combine([100, 160, 50, 70], host_call_cycles=30) == 100 + 30 + 3 * 60 + 30
    gemm = rtl.parse_row(ROWS[1], 1)
    assert rtl.plan_row(gemm.layer, gemm.mapping).kind == "stream"
    big = Layer.gemm(M=4096, K_red=4096, N_out=4096)
    huge = Mapping.from_timeloop("L3[WIO] P64 K256 C256 - L2[WI] N1 K16X - L1[O] C16X - "
                                 "L0[W] P64")
    cut = rtl.plan_row(big, huge, budget_instructions=5000)
    assert len(cut.problems) == 2 and cut.trips in (64, 256) and cut.repeats >= 1
    one, two = cut.problems
    assert one[0].macs * 2 == two[0].macs or cut.trips == 1
    assert cut.combine([10, 15]) == (10 + (cut.trips - 1) * 5) * cut.repeats


def test_metrics():
    measured = np.array([10.0, 20.0, 30.0, 40.0])
    m = rtl.metrics(measured * 2, measured)
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] == pytest.approx(1.0)
    assert m["mape"] == pytest.approx(1.0) and m["rows"] == 4
    m = rtl.metrics(np.array([4.0, 3.0, 2.0, 1.0]), measured)
    assert m["spearman"] == pytest.approx(-1.0)
    ties = rtl.metrics(np.array([1.0, 1.0, 2.0, 3.0]), measured)
    assert 0.9 < ties["spearman"] < 1.0
    with pytest.raises(ConfigError):
        rtl.metrics(np.array([1.0]), np.array([1.0]))


def test_validate_on_a_small_csv(tmp_path):
    path = tmp_path / "rtl.csv"
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(ROWS)
    report = rtl.validate_rtl_sim(path, held_out_every=2)
    assert report["rows"] == len(ROWS)
    for key in ("pearson", "pearson_log", "spearman", "mape"):
        assert np.isfinite(report[key])
    assert report["held_out"]["rows"] == 2 and report["train"]["rows"] == 2
    assert report["model"]["dram_latency_cycles"] > 0
    predicted = rtl.simulate_rows(rtl.read_rtl_csv(path))
    assert np.all(predicted > 0)
    with pytest.raises(ConfigError):
        rtl.read_rtl_csv(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError):
        rtl.read_rtl_csv(bad)
