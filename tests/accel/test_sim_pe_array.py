"""The cycle-level PE-array model checks the fast path's compute results and latencies."""

from __future__ import annotations

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import Instruction, IsaParams, LocalAddr
from accel.sim import DramImage, TimingTable, decode, pe_array, run, timing
from accel.trace import Trace

ACC = LocalAddr.accumulator


def _one_compute(dim: int, a: np.ndarray, w: np.ndarray, d: np.ndarray, d_row: int):
    """A trace computing ``a @ w + d`` with one preload and one compute, C full-width out; D
    at scratchpad row ``d_row`` (another bank than A's, so the two are read side by side)."""
    n = a.shape[0]
    image = DramImage()
    pa, pw, pd = image.add("A", a), image.add("W", w), image.add("D", d)
    pc = image.reserve("C", (n, dim), np.int32)
    trace = Trace([
        Instruction.config_ex("ws"), Instruction.config_ld(dim, block_stride=dim),
        Instruction.config_ld(dim, id=1, block_stride=dim),
        Instruction.mvin(pa, 0, n, dim), Instruction.mvin2(pw, dim, dim, dim),
        Instruction.mvin(pd, d_row, n, dim),
        Instruction.preload(dim, ACC(0), dim, dim, n, dim),
        Instruction.compute_preloaded(0, d_row, n, dim, n, dim),
        Instruction.config_st(4 * dim), Instruction.mvout(pc, ACC(0, full=True), n, dim)])
    return trace, image


# The machines the other accel.sim tests use (so this file adds few compilations).
MACHINES = {16: HardwareConfig.preset("gemmini_default"),
            8: HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=8, acc_kb=4),
            4: HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2)}


@pytest.mark.parametrize("dim,n", [(16, 16), (16, 5), (16, 2), (8, 8), (4, 3)])
def test_ws_compute_matches_fast_path_result_and_fill_drain(dim, n):
    rng = np.random.default_rng(dim * 100 + n)
    a = rng.integers(-128, 128, (n, dim)).astype(np.int8)
    w = rng.integers(-128, 128, (dim, dim)).astype(np.int8)
    d = rng.integers(-128, 128, (n, dim)).astype(np.int8)
    hw = MACHINES[dim]
    trace, image = _one_compute(dim, a, w, d, IsaParams.from_hardware(hw).sp_rows // 4)
    fast = run(trace, hw, image)

    # The array is fed max(rows, 4) rows (ExecuteController pads with zero rows).
    table = TimingTable()
    decoded = decode(trace, IsaParams.from_hardware(hw), image.size_bytes)
    cost = timing.costs(decoded, table, hw)
    k = 7  # the compute
    fed = int(cost[k, timing.CCOL["occ"]])
    assert fed == max(n, table.min_compute_rows)
    a_fed = np.zeros((fed, dim), np.int64)
    a_fed[:n] = a
    d_fed = np.zeros((fed, dim), np.int64)
    d_fed[:n] = d
    c_pe, cycles = pe_array.ws_compute(a_fed, w, d_fed)

    want = a.astype(np.int64) @ w.astype(np.int64) + d
    np.testing.assert_array_equal(c_pe[:n], want)
    np.testing.assert_array_equal(fast.read("C"), c_pe[:n])
    # Fill + drain: the fast path's closed form is what the cycle model measures.
    assert cycles == pe_array.ws_latency_cycles(fed, dim, dim)
    assert cycles == fed + timing.array_latency_cycles(dim, dim)
    span = int(fast.end_cycles[k] - fast.start_cycles[k])
    assert span - table.spad_read_cycles - table.acc_write_cycles == cycles


@pytest.mark.parametrize("dim", [16, 8, 4])
def test_ws_preload_takes_one_cycle_per_row(dim):
    rng = np.random.default_rng(dim)
    b = rng.integers(-128, 128, (dim, dim))
    regs, cycles = pe_array.ws_preload(b)
    np.testing.assert_array_equal(regs, b)
    hw = MACHINES[dim]
    trace = Trace([Instruction.preload(0, ACC(0), dim, dim, dim, dim)])
    decoded = decode(trace, IsaParams.from_hardware(hw), None)
    assert int(timing.costs(decoded, TimingTable(), hw)[0, timing.CCOL["occ"]]) == cycles


def test_os_compute_matches_numpy_and_latency():
    rng = np.random.default_rng(3)
    dim = 8
    a = rng.integers(-128, 128, (dim, dim))
    b = rng.integers(-128, 128, (dim, dim))
    d = rng.integers(-128, 128, (dim, dim))
    acc, cycles = pe_array.os_compute(a, b, d)
    np.testing.assert_array_equal(acc, d + a @ b)
    assert cycles == pe_array.os_latency_cycles(dim, dim, dim)
    # The fast path's OS compute holds the array DIM cycles, then fills and drains.
    hw = HardwareConfig(pe_rows=dim, pe_cols=dim, sp_kb=8, acc_kb=4, dataflow="OS")
    trace = Trace([Instruction.config_ex("os"),
                   Instruction.preload(LocalAddr.garbage(), ACC(0), dim, dim, dim, dim),
                   # B in another bank than A's: the two are read side by side
                   Instruction.compute_preloaded(0, IsaParams.from_hardware(hw).sp_rows // 4,
                                                 dim, dim, dim, dim)])
    cost = timing.costs(decode(trace, IsaParams.from_hardware(hw), None), TimingTable(), hw)
    assert int(cost[2, timing.CCOL["occ"]]) + timing.array_latency_cycles(dim, dim) == cycles


def test_skew_makes_short_computes_latency_bound():
    # One row through a 16x16 array still pays the whole diagonal.
    _, one = pe_array.ws_compute(np.ones((1, 16)), np.ones((16, 16)))
    _, full = pe_array.ws_compute(np.ones((16, 16)), np.ones((16, 16)))
    assert one == 31 and full == 46
