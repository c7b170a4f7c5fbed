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


def test_each_row_runs_on_the_build_its_fan_out_picked():
    # DOSA's collection sorted each mapping to the smallest array holding its C fan-out (below
    # the accumulator) and K fan-out (below the scratchpad) and ran it on that build.
    dims = [rtl.generator_pe_dim(rtl.parse_row(row, i).mapping) for i, row in enumerate(ROWS)]
    assert dims == [16, 32, 4, 8]
    flat = Mapping.from_timeloop("L3[WIO] K4 - L2[WI] N1 - L1[O] C8 - L0[W] N1")
    assert rtl.generator_pe_dim(flat) == rtl.PE_DIMS[0] == 2
    wide = Mapping.from_timeloop("L3[WIO] N1 - L2[WI] N1 K256X - L1[O] N1 - L0[W] N1")
    with pytest.raises(ConfigError, match="wider than any build"):
        rtl.generator_pe_dim(wide)


def test_conv_calls_follow_the_generator():
    conv = rtl.parse_row(ROWS[0], 0)
    # The script's tile: the accumulator level's factors, spatial included, with the
    # scratchpad's K fan-out and L0's P (`extract_data_csv.py`).
    tile = rtl.generator_tile(conv.mapping)
    assert dict(zip("RSPQCKN", tile.tolist())) == {"R": 3, "S": 3, "P": 4, "Q": 1, "C": 32,
                                                   "K": 16, "N": 1}
    # A square, "same"-padded image: the output side comes from P (Q is not used).
    assert rtl.generator_extents(conv.layer)[2:4].tolist() == [4, 4]
    plan = rtl.plan_row(conv.layer, conv.mapping)
    assert plan.calls == 8 and plan.counts == (8,)
    sub, program = plan.problems[0]
    assert (sub.R, sub.S, sub.P, sub.Q, sub.C, sub.K) == (3, 3, 4, 1, 32, 16)
    assert sub.pads == (0, 0, 0, 0)
    np.testing.assert_array_equal(np.prod(program.temporal * program.spatial, axis=0),
                                  [3, 3, 4, 1, 32, 16, 1])
    assert plan.dim == 16 and plan.software == "conv" and program.spatial.max() <= plan.dim
    # An even kernel: the output side is P + 1, so a 4-wide tile leaves a remainder call.
    even = Layer.conv2d(R=4, S=4, P=8, Q=8, C=16, K=16, pads=(2, 2, 2, 2))
    m = Mapping.from_timeloop("L3[WIO] Q8 P2 - L2[WI] N1 K16X - L1[O] R4 S4 C16X - L0[W] P4")
    assert rtl.generator_extents(even)[2] == 9
    plan = rtl.plan_row(even, m)
    # P: two calls of 4 columns and one of 1; Q: 9 rows one at a time.
    assert plan.counts == (18, 9) and plan.calls == 27
    assert [problem[0].P for problem in plan.problems] == [4, 1]
    m = Mapping.from_timeloop("L3[WIO] Q8 P4 - L2[WI] N1 K16X - L1[O] R4 S4 C16X - L0[W] P2")
    assert rtl.plan_row(even, m).counts == (36, 9)


def test_plans_and_how_they_combine():
    conv = rtl.parse_row(ROWS[0], 0)
    plan = rtl.plan_row(conv.layer, conv.mapping)
    assert plan.simulations == 2
    assert plan.combine([100, 160], host_call_cycles=20) == 100 + 20 + 7 * 60
    assert plan.combine([100, 110], host_call_cycles=20) == 100 + 20 + 7 * 20
    two = rtl.RowPlan(plan.problems * 2, (4, 1))
    assert two.simulations == 4 and two.calls == 5
    # The first call starts cold; every call then costs its steady-state cycles.
    assert two.combine([100, 160, 50, 70], host_call_cycles=30) == 100 + 30 + 3 * 60 + 30
    model = rtl.RtlModel(host_call_cycles=7, host_matmul_call_cycles=3)
    assert model.host_cycles("conv") == 7 and model.host_cycles("matmul") == 3


def test_gemm_calls_follow_tiled_matmul():
    gemm = rtl.parse_row(ROWS[1], 1)
    plan = rtl.plan_row(gemm.layer, gemm.mapping)
    # A 32x32 build; tiles of max(1, tile >> 4) blocks of 32: I 8 -> 32 rows, the reduction
    # 4 x 32 = 128 -> 256, J 8 -> 32; each covers the whole (small) GEMM.
    assert plan.software == "matmul" and plan.dim == 32 and plan.counts == (1,)
    sub, program = plan.problems[0]
    assert (sub.P, sub.C, sub.K) == (16, 128, 16)
    assert program.spatial.max() <= 32
    layer = Layer.gemm(M=102, K_red=64, N_out=40)
    m = Mapping.from_timeloop("L3[WIO] P4 K5 - L2[WI] N1 K4X - L1[O] K2 C16 C4X - L0[W] P25")
    tile = rtl.generator_matmul_tile(m, rtl.generator_pe_dim(m))
    assert dict(zip("RSPQCKN", tile.tolist())) == {"R": 1, "S": 1, "P": 4, "Q": 1, "C": 16,
                                                   "K": 4, "N": 1}
    plan = rtl.plan_row(layer, m)
    # I: 25 calls of 4 rows and one of 2; the reduction 4 calls of 16; J 10 calls of 4.
    assert plan.counts == (25 * 4 * 10, 4 * 10)
    assert [p[0].P for p in plan.problems] == [4, 2]
    assert rtl.plan_row(layer, m, dim=16).dim == 16


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


def test_the_next_call_runs_in_the_other_half_and_overlaps():
    from accel.isa import GARBAGE_ADDR, Funct
    from accel.lower import lower

    conv = rtl.parse_row(ROWS[0], 0)
    plan = rtl.plan_row(conv.layer, conv.mapping)
    layer, program = plan.problems[0]
    hw = rtl.rtl_chip(512, 512, plan.dim)
    arrays = lower(layer, program, hw, check=False, first_layer=False).trace.as_arrays()
    moved = rtl.other_loop(arrays, 1000, 70)
    funct = np.asarray(arrays[0])
    np.testing.assert_array_equal(moved[0], arrays[0])
    configs = funct == int(Funct.CONFIG)
    np.testing.assert_array_equal(moved[1][configs], arrays[1][configs])
    np.testing.assert_array_equal(moved[2][configs], arrays[2][configs])
    mvin = np.flatnonzero(funct == int(Funct.MVIN))[0]
    assert int(moved[2][mvin]) - int(arrays[2][mvin]) == 1000  # a scratchpad row
    mvout = np.flatnonzero(funct == int(Funct.MVOUT))[0]
    assert int(moved[2][mvout]) - int(arrays[2][mvout]) == 70  # an accumulator row
    garbage = (np.asarray(arrays[2], np.uint64) & np.uint64(0xFFFFFFFF)) == GARBAGE_ADDR
    assert garbage.any()
    np.testing.assert_array_equal(moved[2][garbage], arrays[2][garbage])
    # Simulated: the second call's loads overlap the first's computes.
    jobs, plans = rtl.prepare_rows([conv])
    one, two = (job[3] for job in jobs)
    assert len(two[0]) < 2 * len(one[0])  # one fence, after the last call
    predicted = rtl.run_jobs(jobs, plans, rtl.RtlModel(host_call_cycles=0))
    alone = rtl.run_jobs(jobs[:1] + [(0, 1, jobs[0][2], tuple(np.concatenate([a, a])
                                                              for a in one))], plans,
                         rtl.RtlModel(host_call_cycles=0))
    assert predicted[0] < alone[0]


def test_calls_issue_in_the_loop_fsms_order():
    from accel.isa import Funct, IsaParams
    from accel.lower import lower
    from accel.lower.check import expected_output, random_inputs
    from accel.sim.decode import Unit, decode
    from accel.sim.engine import run_batch

    layer = Layer.conv2d(R=3, S=3, P=16, Q=8, C=4, K=4, pads=(1, 1, 1, 1))
    m = Mapping.from_timeloop("L3[WIO] N1 - L2[WI] N1 K4X - L1[O] R3 S3 Q8 P4 C4X - L0[W] P4")
    plan = rtl.plan_row(layer, m)
    assert plan.dim == 4
    sub, program = plan.problems[0]
    hw = rtl.rtl_chip(64, 64, plan.dim)
    arrays = lower(sub, program, hw, check=False, first_layer=False).trace.as_arrays()
    ordered = rtl.fsm_order(arrays, hw)
    key = lambda arr: list(zip(*(a.tolist() for a in arr)))
    assert sorted(key(ordered)) == sorted(key(arrays))  # a permutation
    unit = decode(arrays, IsaParams.from_hardware(hw), None).column("unit")
    unit_after = decode(ordered, IsaParams.from_hardware(hw), None).column("unit")
    for u in (Unit.LOAD, Unit.EXECUTE, Unit.STORE):  # each queue keeps its own order
        assert key(tuple(a[unit_after == u] for a in ordered)) == key(
            tuple(a[unit == u] for a in arrays))
    funct = np.asarray(ordered[0])
    mvins = np.flatnonzero(funct == int(Funct.MVIN))
    computes = np.flatnonzero(np.isin(funct, [int(Funct.COMPUTE_PRELOADED),
                                              int(Funct.COMPUTE_ACCUMULATED)]))
    assert computes[0] < mvins[-1]  # computes go out while loads still do
    assert funct[-1] == int(Funct.FENCE)
    # The reservation station no longer holds every compute behind every load.
    before, after = run_batch([arrays, ordered], hw, functional=False,
                              timing_table=rtl.RtlModel().timing)
    assert after.cycles < before.cycles
    # Reordered, the program still computes numpy's answer: no dependence was broken.
    low = lower(sub, program, hw, check=False, first_layer=False)
    inputs, image, initialized = random_inputs(low, np.random.default_rng(0))
    res = run_batch([ordered], hw, [image], initialized=[initialized])[0]
    np.testing.assert_array_equal(low.layout.read(res.dram, "output"),
                                  expected_output(low, inputs))
