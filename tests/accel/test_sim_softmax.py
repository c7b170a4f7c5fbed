"""accel.sim's normalizer softmax (Gemmini's MAX / SUM_EXP+INV_SUM_EXP / RESET passes with
I-BERT's i-exp), bit for bit against `accel.sim.reference.softmax_rows`."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.arch import HardwareConfig
from accel.isa import Activation, Instruction, IsaParams, LocalAddr, NormCmd
from accel.lower import iexp_constants
from accel.sim import NORM_STAT_IDS, DramImage, decode, functional, reference, run, timing
from accel.trace import Trace
from workloads.errors import TraceError

HW = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2)  # 4x4; 1024 sp, 128 acc rows
HW_PARAMS = IsaParams.from_hardware(HW)
D = 4
ACC_MVIN_COLS = 16  # int32 columns one mvin moves (64-byte DMA rows)
CONSTS = iexp_constants()
ACC = LocalAddr.accumulator
SP = LocalAddr.sp
# Gemmini's software: the (non-last, last) command of each pass over a row's moves.
PASSES = ((NormCmd.MAX, NormCmd.MAX), (NormCmd.SUM_EXP, NormCmd.INV_SUM_EXP),
          (NormCmd.RESET, NormCmd.RESET))


def _values(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """int32 rows of several kinds: small spreads, full-range spreads (the differences wrap
    and most exps underflow to 0), a repeated maximum, a constant row."""
    kinds = [rng.integers(-600, 600, cols), rng.integers(-2**31, 2**31, cols),
             rng.integers(-5000, 50, cols), np.full(cols, int(rng.integers(-2**31, 2**31)))]
    x = np.stack([kinds[r % len(kinds)] for r in range(rows)]).astype(np.int32)
    if rows > 2:
        x[2, rng.choice(cols, 3, replace=False)] = x[2].max()  # equal maxima
    return x


class Layout:
    """Where row r, column block jj // DIM of an [R, L] matrix lives in a local memory: tiles
    of DIM rows, each ``ceil(L / DIM)`` blocks of DIM rows (Gemmini's C layout)."""

    def __init__(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        self.blocks = -(-cols // D)

    def row(self, r: int, jj: int = 0) -> int:
        return (r // D) * self.blocks * D + (jj // D) * D + r % D

    def tiles(self):
        for t in range(-(-self.rows // D)):
            yield t, t * D, min(D, self.rows - t * D)


def _program(x: np.ndarray, *, chunk: int, group: int = 1, via_spad: bool = False,
             passes=PASSES, scales=(1.0, 1.0, 1.0), reset_rows: bool = False):
    """A trace computing the softmax of ``x``'s rows as Gemmini's software does: load x into
    the accumulator, then for ``group`` rows at a time (row ``row0 + i`` on stat slot ``i``) the
    passes of `PASSES`, each row's moves ``chunk`` columns wide (``via_spad``: mvout_spad into
    the scratchpad, then mvouts of the scratchpad rows). ``scales[p]``: config_st's scale
    during pass p. Returns (trace, image)."""
    rows, cols = x.shape
    lay = Layout(rows, cols)
    image = DramImage()
    src = image.add("X", x)
    out = image.reserve("Y", x.shape, np.int8)
    ins = [Instruction.config_ld(cols * 4, block_stride=D)]
    for _, r0, n in lay.tiles():
        for j0 in range(0, cols, ACC_MVIN_COLS):
            ins.append(Instruction.mvin(src + (r0 * cols + j0) * 4, ACC(lay.row(r0, j0)), n,
                                        min(ACC_MVIN_COLS, cols - j0)))
    scale_now = None
    for row0 in range(0, rows, group):
        for p, (cmd_mid, cmd_last) in enumerate(passes):
            if scales[p] != scale_now:  # config_st clears softmax's msb: set it again
                ins += [Instruction.config_st(cols, acc_scale=scales[p]),
                        *Instruction.config_softmax(*CONSTS)]
                scale_now = scales[p]
            for sid in range(min(group, rows - row0)):
                r = row0 + sid
                ins.append(Instruction.config_norm_stats(sid))
                for jj in range(0, cols, chunk):
                    n = min(chunk, cols - jj)
                    cmd = int(cmd_last if jj + chunk >= cols else cmd_mid)
                    if via_spad:
                        ins.append(Instruction.mvout_spad(ACC(lay.row(r, jj), norm=cmd),
                                                          lay.row(r, jj), 1, n))
                    else:
                        ins.append(Instruction.mvout(out + r * cols + jj,
                                                     ACC(lay.row(r, jj), norm=cmd), 1, n))
    if via_spad and any(cmd == NormCmd.RESET for cmd, _ in passes):
        for _, r0, n in lay.tiles():
            for j0 in range(0, cols, 16 * D):
                ins.append(Instruction.mvout(out + r0 * cols + j0, SP(lay.row(r0, j0)), n,
                                             min(16 * D, cols - j0)))
    return Trace(ins), image


def _run(trace, image):
    return run(trace, HW, image)


@pytest.mark.parametrize("rows,cols,chunk", [
    (3, 22, 4),    # one-block moves; L not a multiple of DIM
    (4, 22, 8),    # two-block moves, the last one partial
    (2, 37, 64),   # the whole row in one ten-block move
    (1, 3, 4),     # a row shorter than a block
])
def test_softmax_by_mvout_matches_the_reference(rows, cols, chunk):
    x = _values(np.random.default_rng(rows * 100 + cols), rows, cols)
    result = _run(*_program(x, chunk=chunk))
    np.testing.assert_array_equal(result.read("Y"), reference.softmax_rows(x, CONSTS))


@pytest.mark.parametrize("rows,cols", [(3, 22), (4, 9)])
def test_softmax_by_mvout_spad_into_the_scratchpad(rows, cols):
    x = _values(np.random.default_rng(rows + cols), rows, cols)
    result = _run(*_program(x, chunk=D, via_spad=True))
    np.testing.assert_array_equal(result.read("Y"), reference.softmax_rows(x, CONSTS))


@pytest.mark.parametrize("group", [2, NORM_STAT_IDS])
@pytest.mark.parametrize("via_spad", [False, True])
def test_interleaved_stat_slots(group, via_spad):
    """Rows ``group`` at a time, each pass interleaved over the rows' slots, as Gemmini's
    software does; a slot's RESET clears only its own running state."""
    x = _values(np.random.default_rng(group), 6, 13)
    result = _run(*_program(x, chunk=D if via_spad else 8, group=group, via_spad=via_spad))
    np.testing.assert_array_equal(result.read("Y"), reference.softmax_rows(x, CONSTS))


def test_acc_scale_applies_only_on_the_inv_sum_exp_pass():
    x = _values(np.random.default_rng(7), 4, 10)
    x[0] = np.arange(10) * 3  # a gentle row, so a wrong scale would show
    trace, image = _program(x, chunk=8, group=2, scales=(9.0, 0.37, 3.0))
    result = _run(trace, image)
    np.testing.assert_array_equal(result.read("Y"),
                                  reference.softmax_rows(x, CONSTS, acc_scale=0.37))
    assert not np.array_equal(reference.softmax_rows(x, CONSTS, acc_scale=0.37),
                              reference.softmax_rows(x, CONSTS))


def test_a_multi_row_reset_move_uses_the_slot_statistics():
    x = _values(np.random.default_rng(3), 3, 7)
    x[1:] = x[0] - np.array([[0], [40]], np.int32)  # rows below row 0
    image = DramImage()
    src = image.add("X", x)
    out = image.reserve("Y", x.shape, np.int8)
    ins = [Instruction.config_ld(28, block_stride=D), Instruction.mvin(src, ACC(0), 3, 7),
           Instruction.config_st(7), *Instruction.config_softmax(*CONSTS),
           Instruction.config_norm_stats(1),
           Instruction.mvout(out, ACC(0, norm=NormCmd.MAX), 1, 7),
           Instruction.mvout(out, ACC(0, norm=NormCmd.INV_SUM_EXP), 1, 7),
           Instruction.mvout(out, ACC(0), 3, 7)]
    got = _run(Trace(ins), image).read("Y")
    e = reference.iexp(x - x[0].max(), *CONSTS)
    inv = np.float32(127) / np.float32(e[0].astype(np.int64).sum())
    expect = np.clip(np.round(e.astype(np.float32) * inv), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(got[0], reference.softmax_rows(x[:1], CONSTS)[0])


@pytest.mark.parametrize("via_spad", [False, True])
def test_statistics_passes_write_nothing(via_spad):
    x = _values(np.random.default_rng(5), 3, 10)
    trace, image = _program(x, chunk=D if via_spad else 8, via_spad=via_spad,
                            passes=PASSES[:2])
    sentinel = np.full(x.shape, 0x5A, np.uint8)
    data, ok = image.to_arrays()
    y = image.tensor("Y")
    data[y.offset:y.offset + y.nbytes] = sentinel.reshape(-1)
    result = run(trace, HW, data)
    np.testing.assert_array_equal(result.dram, data)  # the output's sentinel, X, all of it
    decoded = result.decoded
    stats = decoded.stat_passes()
    assert stats.sum() == 3 * 2 * len(range(0, 10, D if via_spad else 8))
    assert decoded.dram_write_bytes == 0 and decoded.dram_read_bytes == x.nbytes
    table = timing.TimingTable()
    cost = timing.costs(decoded, table, HW)
    assert (cost[stats, timing.CCOL["dma"]] == 0).all()
    assert (cost[stats, timing.CCOL["post"]] == table.mvout_read_cycles).all()
    np.testing.assert_array_equal(cost[stats, timing.CCOL["occ"]],
                                  decoded.column("nblocks")[stats])
    _, writes = timing.access_runs(decoded)
    assert (writes[stats, :, 1] == 0).all()  # no rows written
    # The cycles: one per block read, then the read pipeline; the store queue is in order.
    k = np.flatnonzero(stats)
    assert (result.end_cycles[k] - result.start_cycles[k]
            == decoded.column("nblocks")[k] + table.mvout_read_cycles).all()
    if via_spad:  # the scratchpad rows were never written either
        with pytest.raises(TraceError) as info:
            run(Trace([*trace, Instruction.config_st(10), Instruction.mvout(
                image.address("Y"), SP(0), 1, 4)]), HW, image)
        assert info.value.field == "sp"


def test_a_plain_move_resets_the_running_state():
    """RESET moves (any move out of the accumulator) clear the slot's sum and running max, so
    a row's statistics do not leak into the next row's."""
    x = np.array([[500, 0, 0, 0], [1, 2, 3, 4]], np.int32)
    image = DramImage()
    src = image.add("X", x)
    out = image.reserve("Y", x.shape, np.int8)
    ins = [Instruction.config_ld(16), Instruction.mvin(src, ACC(0), 2, 4),
           Instruction.config_st(4), *Instruction.config_softmax(*CONSTS)]
    for r in range(2):
        ins += [Instruction.mvout(out + 4 * r, ACC(r, norm=NormCmd.MAX), 1, 4),
                Instruction.mvout(out + 4 * r, ACC(r, norm=NormCmd.INV_SUM_EXP), 1, 4),
                Instruction.mvout(out + 4 * r, ACC(r), 1, 4)]
    np.testing.assert_array_equal(_run(Trace(ins), image).read("Y"),
                                  reference.softmax_rows(x, CONSTS))


def test_stat_pass_of_never_written_accumulator_is_reported():
    image = DramImage()
    out = image.reserve("Y", (1, 4), np.int8)
    for move, field in ((Instruction.mvout(out, ACC(8, norm=NormCmd.MAX), 1, 4), "sp"),
                        (Instruction.mvout_spad(ACC(8, norm=NormCmd.SUM_EXP), 0, 1, 4), "src")):
        with pytest.raises(TraceError) as info:
            run(Trace([Instruction.config_st(4), move]), HW, image)
        assert (info.value.index, info.value.field) == (1, field)


def test_decoded_normalizer_registers():
    ins = [Instruction.config_st(4, act="relu"),
           Instruction.config_igelu(-7, 11),
           Instruction.config_st(4),
           *Instruction.config_softmax(44, 1489, 86, -3930),
           Instruction.config_norm_stats(3),
           Instruction.mvout(0, ACC(0, norm=NormCmd.MAX), 1, 4),
           Instruction.config_norm(stat_id=2),  # a full config_norm: qln2, qb, qc 0, msb clear
           Instruction.mvout_spad(ACC(0), 0, 1, 4),
           Instruction.config_st(4, act="igelu"),
           Instruction.mvout(0, ACC(0), 1, 4)]
    decoded = decode(Trace(ins), HW_PARAMS, 64)
    col = {name: decoded.column(name)[[6, 8, 10]].tolist() for name in (
        "act", "norm", "stat_id", "iexp_qln2", "iexp_qln2_inv", "igelu_qb", "igelu_qc")}
    assert col == {"act": [Activation.SOFTMAX, 0, Activation.IGELU], "norm": [5, 0, 0],
                   "stat_id": [3, 2, 2], "iexp_qln2": [44, 0, 0], "iexp_qln2_inv": [1489] * 3,
                   "igelu_qb": [86, 0, 0], "igelu_qc": [-3930, 0, 0]}
    assert decoded.uses_norm
    assert not decode(Trace(ins[:5]), HW_PARAMS, 64).uses_norm  # no move


def _error(ins, image_bytes=256) -> TraceError:
    with pytest.raises(TraceError) as info:
        decode(Trace(ins), HW_PARAMS, image_bytes)
    return info.value


@pytest.mark.parametrize("cmd", [NormCmd.SUM, NormCmd.MEAN, NormCmd.VARIANCE,
                                 NormCmd.INV_STDDEV])
def test_layernorm_commands_are_rejected(cmd):
    err = _error([Instruction.config_st(4), Instruction.mvout(0, ACC(0, norm=cmd), 1, 4)])
    assert (err.index, err.field) == (1, "sp") and "layernorm" in str(err)
    err = _error([Instruction.mvout_spad(ACC(0, norm=cmd), 0, 1, 4)])
    assert (err.index, err.field) == (0, "src")


def test_malformed_statistics_passes_are_rejected():
    max_ = NormCmd.MAX
    cases = [
        (Instruction.mvout(0, ACC(0, norm=max_), 2, 4), "rows"),
        (Instruction.mvout(0, ACC(0, norm=NormCmd.INV_SUM_EXP), 0, 4), "rows"),
        (Instruction.mvout_spad(ACC(0, norm=NormCmd.SUM_EXP), 0, 3, 4), "rows"),
        (Instruction.mvout(0, ACC(0, full=True, norm=max_), 1, 4), "sp"),
        (Instruction.mvout(0, LocalAddr(0, norm=max_), 1, 4), "sp"),  # scratchpad source
        (Instruction.mvin(0, ACC(0, norm=max_), 1, 4), "sp"),
        (Instruction.mvout_spad(ACC(0), LocalAddr(0, norm=max_), 1, 4), "dst"),
        (Instruction.preload(LocalAddr.garbage(), ACC(0, norm=max_), 4, 4, 4, 4), "c"),
    ]
    for ins, field in cases:
        err = _error([Instruction.config_st(4), ins])
        assert (err.index, err.field) == (1, field), (ins, str(err))


def test_bad_normalizer_configurations_are_rejected():
    err = _error([Instruction.config_norm_stats(NORM_STAT_IDS)])
    assert (err.index, err.field) == (0, "stat_id")
    for act in ("relu", "igelu"):  # act_msb over relu / igelu: activations 5 and 7
        err = _error([Instruction.config_st(4, act=act), *Instruction.config_softmax(*CONSTS)])
        assert (err.index, err.field) == (1, "act_msb"), str(err)
    err = _error([Instruction.config_st(4, act="layernorm")])
    assert err.field == "act"
    # set_stats_id_only leaves the activation alone, so it cannot make a bad one.
    decode(Trace([Instruction.config_st(4, act="relu"), Instruction.config_norm_stats(1)]),
           HW_PARAMS, 64)


def test_a_statistics_pass_needs_no_dram_in_range():
    """A statistics pass touches no DRAM, so its address is not checked (a RESET move's is)."""
    x = np.arange(4, dtype=np.int32)[None]
    image = DramImage()
    src = image.add("X", x)
    far = 1 << 40
    run(Trace([Instruction.config_ld(16), Instruction.mvin(src, ACC(0), 1, 4),
               Instruction.config_st(4), Instruction.mvout(far, ACC(0, norm=NormCmd.MAX), 1, 4)]),
        HW, image)
    err = _error([Instruction.config_st(4), Instruction.mvout(far, ACC(0), 1, 4)])
    assert err.field == "dram"


def _python_iexp(q: int, qln2: int, qln2_inv: int, qb: int, qc: int) -> int:
    """The hardware's formula on Python integers (AccumulatorScale.iexp, wrapped -q)."""
    def wrap(v: int) -> int:
        return (v + 2**31) % 2**32 - 2**31

    z = wrap((wrap(-q) * qln2_inv) >> 16)
    saturated = 32 if (z % 2**32) >> 5 & 0x7FF else z % 2**32
    poly = wrap(qc + wrap(wrap(q + z * qln2) + qb) ** 2)
    return wrap((poly % 2**32) >> saturated) if saturated < 32 else 0


INT32 = st.integers(-2**31, 2**31 - 1)


_jax_iexp = jax.jit(functional.iexp)


@settings(max_examples=60, deadline=None)
@given(consts=st.one_of(st.just(CONSTS), st.tuples(INT32, INT32, INT32, INT32)),
       q=st.lists(st.one_of(INT32, st.integers(-4000, 0)), min_size=64, max_size=64))
def test_iexp_numpy_and_jax_match_the_hardware_formula(consts, q):
    arr = np.array(q, np.int32)
    expect = np.array([_python_iexp(v, *consts) for v in q], np.int64).astype(np.int32)
    np.testing.assert_array_equal(reference.iexp(arr, *consts), expect)
    got = _jax_iexp(arr, *(np.int32(c) for c in consts))
    np.testing.assert_array_equal(np.asarray(got), expect)


def test_softmax_reference_approximates_the_real_softmax():
    x = np.random.default_rng(0).integers(-400, 400, (4, 20)).astype(np.int32)
    real = np.exp((x - x.max(axis=1, keepdims=True)) / 64.0)
    real = 127 * real / real.sum(axis=1, keepdims=True)
    assert np.abs(reference.softmax_rows(x, CONSTS) - real).max() <= 2


def test_config_softmax_is_gemmini_softwares_pair():
    first, second = Instruction.config_softmax(44, 1489, 86, -3930)
    assert first["q_const_type"] is False and second["q_const_type"] is True
    assert (first["q_const"], second["q_const"]) == (44, 1489)
    for ins in (first, second):
        assert ins["act_msb"] and not ins["set_stats_id_only"]
        assert (ins["igelu_qb"], ins["igelu_qc"]) == (86, (-3930) & 0xFFFFFFFF)
    stats = Instruction.config_norm_stats(2)
    assert stats["set_stats_id_only"] and stats["stat_id"] == 2
