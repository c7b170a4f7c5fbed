"""accel.sim, functional side: hand-written traces against numpy, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import Instruction, IsaParams, LocalAddr
from accel.sim import DramImage, SimState, programs, reference, run, run_batch
from accel.sim.functional import rounding_shift, scale_to_int8
from accel.trace import Trace

HW = HardwareConfig.preset("gemmini_default")
G = LocalAddr.garbage()
ACC = LocalAddr.accumulator


def _rand(rng, shape, lo=-128, hi=128, dtype=np.int8):
    return rng.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("m,k,n,tiles", [
    (16, 16, 16, None), (37, 50, 29, (2, 1, 2)), (64, 70, 90, None), (5, 130, 7, (1, 1, 3)),
])
def test_tiled_gemm_matches_numpy(m, k, n, tiles):
    rng = np.random.default_rng(m * 1000 + k)
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    bias = rng.integers(-20000, 20000, n).astype(np.int32)
    prog = programs.gemm_ws(a, b, bias, scale=0.0123, relu=True, tiles=tiles)
    result = run(prog.trace, HW, prog.image)
    np.testing.assert_array_equal(result.read("C"), reference.gemm(a, b, bias, 0.0123, True))
    assert result.cycles > 0 and result.instructions == len(prog.trace)


def test_gemm_full_width_output_and_per_row_bias():
    rng = np.random.default_rng(1)
    a, b = _rand(rng, (33, 40)), _rand(rng, (40, 20))
    bias = rng.integers(-10**6, 10**6, (33, 20)).astype(np.int32)
    prog = programs.gemm_ws(a, b, bias, full_output=True, tiles=(1, 2, 1))
    result = run(prog.trace, HW, prog.image)
    np.testing.assert_array_equal(result.read("C"), reference.gemm_acc(a, b, bias))


def test_conv_by_im2col_addressing_with_stride_and_padding():
    rng = np.random.default_rng(2)
    x, w = _rand(rng, (2, 9, 11, 20)), _rand(rng, (3, 3, 20, 18))
    bias = rng.integers(-500, 500, 18).astype(np.int32)
    prog = programs.conv_ws(x, w, stride=(2, 1), padding=(1, 2, 1, 0), bias=bias,
                            scale=0.003, relu=True)
    result = run(prog.trace, HW, prog.image)
    want = reference.conv(x, w, (2, 1), (1, 2, 1, 0), bias, 0.003, True)
    np.testing.assert_array_equal(result.read("Y"), want)


def test_mvout_epilogue_rounds_half_to_even_and_saturates():
    # int32 values straight into the accumulator, then mvout with a float scale: the epilogue
    # alone decides the bytes. Ties (x.5), saturation both ways, int32 -> float32 rounding.
    acc = np.array([[1, 3, 5, -1, -3, -5, 255, 256, -257, 254, 300, -300, 2**24 + 3,
                     -(2**31), 2**31 - 1, 0]], np.int32).repeat(16, axis=0)
    acc[1] += 1
    for scale, relu in ((0.5, False), (0.5, True), (1 / 3, False), (1.0, False)):
        image = DramImage()
        src = image.add("acc", acc)
        dst = image.reserve("out", acc.shape, np.int8)
        trace = Trace([
            Instruction.config_ld(64, id=2), Instruction.mvin3(src, ACC(0), 16, 16),
            Instruction.config_st(16, act="relu" if relu else "none", acc_scale=scale),
            Instruction.mvout(dst, ACC(0), 16, 16)])
        got = run(trace, HW, image).read("out")
        np.testing.assert_array_equal(got, reference.requantize(acc, scale, relu))
    # The exact values for scale 0.5: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0, -2.5 -> -2.
    np.testing.assert_array_equal(reference.requantize(np.array([1, 3, 5, -1, -5]), 0.5),
                                  [0, 2, 2, 0, -2])


def test_mvin_scale_rounds_and_saturates_into_the_scratchpad():
    x = np.array([[-128, -3, -1, 1, 3, 5, 7, 100, 127, 0, 2, -2, 9, -9, 11, 64]], np.int8)
    x = x.repeat(4, axis=0)
    for scale in (0.5, 2.0, 1.5):
        image = DramImage()
        src = image.add("x", x)
        dst = image.reserve("y", x.shape, np.int8)
        trace = Trace([Instruction.config_ld(16, scale=scale), Instruction.mvin(src, 0, 4, 16),
                       Instruction.config_st(16), Instruction.mvout(dst, 0, 4, 16)])
        got = run(trace, HW, image).read("y")
        want = np.clip(np.round(x.astype(np.float32) * np.float32(scale)), -128, 127)
        np.testing.assert_array_equal(got, want.astype(np.int8))


def test_compute_into_scratchpad_saturates_and_applies_relu():
    rng = np.random.default_rng(3)
    a, b = _rand(rng, (16, 16)), _rand(rng, (16, 16))
    image = DramImage()
    pa, pb = image.add("A", a), image.add("B", b)
    pc = image.reserve("C", (16, 16), np.int8)
    trace = Trace([
        Instruction.config_ex("ws", "relu"), Instruction.config_ld(16),
        Instruction.config_ld(16, id=1), Instruction.mvin(pa, 0, 16, 16),
        Instruction.mvin2(pb, 16, 16, 16),
        Instruction.preload(16, 32, 16, 16, 16, 16),  # C into scratchpad rows 32..47
        Instruction.compute_preloaded(0, G, 16, 16, 16, 16),
        Instruction.config_st(16), Instruction.mvout(pc, 32, 16, 16)])
    got = run(trace, HW, image).read("C")
    want = np.maximum(np.clip(a.astype(np.int64) @ b.astype(np.int64), -128, 127), 0)
    np.testing.assert_array_equal(got, want)


def _single_block(a_stored, b_stored, *, a_t=False, b_t=False, rows=16, k=16, cols=16,
                  d=None, dataflow="ws", shift=0):
    """One compute on a 16x16 array; operands stored as given; C full-width to DRAM."""
    image = DramImage()
    pa, pb = image.add("A", a_stored), image.add("B", b_stored)
    pc = image.reserve("C", (16, 16), np.int32)
    ins = [Instruction.config_ex(dataflow, a_transpose=a_t, b_transpose=b_t, sys_shift=shift),
           Instruction.config_ld(a_stored.shape[1]), Instruction.config_ld(b_stored.shape[1], id=1),
           Instruction.mvin(pa, 0, a_stored.shape[0], a_stored.shape[1]),
           Instruction.mvin2(pb, 16, b_stored.shape[0], b_stored.shape[1])]
    if d is not None:
        pd = image.add("D", d)
        ins += [Instruction.config_ld(16, id=2), Instruction.mvin3(pd, 32, 16, 16)]
    if dataflow == "ws":
        ins += [Instruction.preload(16, ACC(0), k, cols, rows, cols),
                Instruction.compute_preloaded(0, 32 if d is not None else G, rows, k, 16, 16)]
    else:
        ins += [Instruction.preload(32 if d is not None else G, ACC(0), 16, 16, rows, cols),
                Instruction.compute_preloaded(0, 16, rows, k, k, cols)]
    ins += [Instruction.config_st(64), Instruction.mvout(pc, ACC(0, full=True), rows, cols)]
    result = run(Trace(ins), HW, image, initialized=None)
    return result.read("C")[:rows, :cols]


def test_transposed_operands_follow_the_stored_layout():
    rng = np.random.default_rng(4)
    a, b = _rand(rng, (12, 10)), _rand(rng, (10, 14))  # logical A 12x10, B 10x14
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(
        _single_block(np.ascontiguousarray(a.T), b, a_t=True, rows=12, k=10, cols=14), want)
    np.testing.assert_array_equal(
        _single_block(a, np.ascontiguousarray(b.T), b_t=True, rows=12, k=10, cols=14), want)


def test_weight_stationary_adds_the_compute_d_operand():
    rng = np.random.default_rng(5)
    a, b, d = _rand(rng, (16, 16)), _rand(rng, (16, 16)), _rand(rng, (16, 16))
    want = a.astype(np.int64) @ b.astype(np.int64) + d
    np.testing.assert_array_equal(_single_block(a, b, d=d), want)


def test_output_stationary_accumulates_and_shifts_with_rounding():
    rng = np.random.default_rng(6)
    a, b, d = _rand(rng, (16, 16)), _rand(rng, (16, 16)), _rand(rng, (16, 16))
    acc = a.astype(np.int64) @ b.astype(np.int64) + d
    np.testing.assert_array_equal(_single_block(a, b, d=d, dataflow="os"), acc)
    shifted = _single_block(a, b, d=d, dataflow="os", shift=3)
    floor = acc >> 3
    rem = acc - (floor << 3)
    want = floor + ((rem > 4) | ((rem == 4) & (floor % 2 == 1)))
    np.testing.assert_array_equal(shifted, want)


def test_rounding_shift_ties_to_even():
    x = np.array([5, 6, 7, -5, -6, -7, 12, 20, 0, -1], np.int32)
    got = np.asarray(rounding_shift(x, 2))
    # 5/4=1.25->1, 6/4=1.5->2, 7/4=1.75->2, -1.25->-1, -1.5->-2, -1.75->-2, 3, 5, 0, -0.25->0
    np.testing.assert_array_equal(got, [1, 2, 2, -1, -2, -2, 3, 5, 0, 0])
    np.testing.assert_array_equal(np.asarray(rounding_shift(x, 0)), x)
    np.testing.assert_array_equal(np.asarray(scale_to_int8(np.int32(5), 0.5, False)), 2)


def test_operands_read_from_the_accumulator_are_scaled_to_int8():
    rng = np.random.default_rng(7)
    a32 = rng.integers(-2000, 2000, (16, 16)).astype(np.int32)
    b = _rand(rng, (16, 16))
    image = DramImage()
    pa, pb = image.add("A", a32), image.add("B", b)
    pc = image.reserve("C", (16, 16), np.int32)
    trace = Trace([
        Instruction.config_ex("ws", acc_scale=0.125), Instruction.config_ld(64, id=2),
        Instruction.mvin3(pa, ACC(64), 16, 16), Instruction.config_ld(16, id=1),
        Instruction.mvin2(pb, 0, 16, 16),
        Instruction.preload(0, ACC(0), 16, 16, 16, 16),
        Instruction.compute_preloaded(ACC(64), G, 16, 16, 16, 16),
        Instruction.config_st(64), Instruction.mvout(pc, ACC(0, full=True), 16, 16)])
    got = run(trace, HW, image).read("C")
    a8 = reference.requantize(a32, 0.125)
    np.testing.assert_array_equal(got, a8.astype(np.int64) @ b.astype(np.int64))


def test_loop_ws_expansion_computes_the_same_gemm():
    rng = np.random.default_rng(8)
    m, k, n = 40, 35, 50
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    bias = rng.integers(-900, 900, n).astype(np.int32)
    image = DramImage()
    pa, pb, pd = image.add("A", a), image.add("B", b), image.add("bias", bias)
    pc = image.reserve("C", (m, n), np.int8)
    blocks = [-(-x // 16) for x in (m, n, k)]
    trace = Trace([
        Instruction.config_ex("ws"), Instruction.config_st(n, acc_scale=0.01),
        Instruction.config_ld(k), Instruction.config_ld(n, id=1), Instruction.config_ld(0, id=2),
        *Instruction.loop_ws(i=blocks[0], j=blocks[1], k=blocks[2], pad_i=blocks[0] * 16 - m,
                             pad_j=blocks[1] * 16 - n, pad_k=blocks[2] * 16 - k, a=pa, b=pb,
                             c=pc, d=pd, a_stride=k, b_stride=n, c_stride=n, d_stride=0,
                             ex_accumulate=True),
        Instruction.fence()])
    result = run(trace, HW, image)
    np.testing.assert_array_equal(result.read("C"), reference.gemm(a, b, bias, 0.01))
    assert result.instructions > len(trace)  # the loop expanded into primitives
    assert set(result.origin.tolist()) <= set(range(len(trace)))


def test_batch_equals_separate_runs():
    rng = np.random.default_rng(9)
    progs = [programs.gemm_ws(_rand(rng, (m, 20)), _rand(rng, (20, 24)), scale=0.02)
             for m in (10, 30, 47)]
    batch = run_batch([p.trace for p in progs], HW, [p.image for p in progs])
    for prog, got in zip(progs, batch):
        alone = run(prog.trace, HW, prog.image)
        np.testing.assert_array_equal(got.read("C"), alone.read("C"))
        assert got.cycles == alone.cycles
        np.testing.assert_array_equal(got.end_cycles, alone.end_cycles)


# The small machines the other accel.sim tests use too (one compilation each).
SMALL = {4: HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2),
         8: HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=8, acc_kb=4)}


def test_other_array_sizes():
    rng = np.random.default_rng(10)
    for dim, hw in SMALL.items():
        a, b = _rand(rng, (13, 11)), _rand(rng, (11, 9))
        params = IsaParams.from_hardware(hw)
        prog = programs.gemm_ws(a, b, scale=0.05, dim=dim, sp_rows=params.sp_rows,
                                acc_rows=params.acc_rows)
        got = run(prog.trace, hw, prog.image).read("C")
        np.testing.assert_array_equal(got, reference.gemm(a, b, None, 0.05))


def test_state_is_a_pytree_with_set():
    import jax

    state = SimState(all_done=np.int32(3))
    leaves = jax.tree_util.tree_leaves(state)
    assert leaves == [3]
    assert state.set(all_done=np.int32(4)).all_done == 4
