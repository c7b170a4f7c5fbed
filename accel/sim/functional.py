"""What each instruction does to DRAM, the scratchpad and the accumulator (Gemmini semantics).

One branch-free `step` per instruction: every path is computed and masked by the instruction's
kind, so the scan body is a single straight-line program that XLA compiles once. Memories carry
one extra "sink" row (DRAM: byte) that masked gathers read and masked scatters write, so no
index is ever clamped onto real data. `step` runs its parts in order, one function each: the
indices, the reads of the old memories, the array's product, the local writes, the reads of the
new memories and mvout's DRAM writes (plain Python calls, inlined when traced).

Semantics (``ExecuteController.scala``, ``AccumulatorScale.scala``, ``Configs.scala``):

* mvin: DRAM rows ``dram + r * stride`` (stride from ``config_ld``), ``cols`` elements each,
  into ``ceil(cols / DIM)`` blocks of DIM columns at local rows ``row + b * block_stride + r``.
  int8 into the scratchpad, multiplied by the ``config_ld`` scale (float32, round to nearest
  even, saturate to int8; identity at 1.0); int32 into the accumulator (int8 sign-extended if
  ``shrunk``), unscaled (``mvin_scale_acc_args = None``), added to the old value if the
  address has the accumulate bit. Columns beyond ``cols`` are left untouched. With
  ``config_ld`` pixel repeats p (first-layer packing) each row also goes to the p - 1 rows
  before it, shifted right by ``cols`` columns per row back (`_repeat_rows`).
* mvout: local rows (blocks DIM rows apart) to DRAM rows ``dram + r * stride``. From the
  accumulator: ``float32(x) * acc_scale`` rounded to nearest even, saturated to int8, then
  ReLU if ``config_st`` says so; with the full-width bit, the int32 values themselves.
  I-GELU (activation 3) applies `igelu` first; softmax (4) see below.
* mvout_spad (baco extension): accumulator rows ``local + r`` to scratchpad rows ``dst + r``,
  ``cols`` columns, through the mvout read path (``config_st`` scale and activation, saturated
  to int8); no DRAM access.
* The normalizer's softmax (``Normalizer.scala``, ``StoreController.scala``; I-BERT's `iexp`):
  `NORM_STAT_IDS` statistics slots of int32 ``running_max`` and ``max`` (reset INT32_MIN),
  int32 ``sum`` (reset 0, wrapping) and float32 ``inv_sum_exp`` (0); ``config_norm`` picks the
  slot ``s`` the moves use. A move out of the accumulator hands each row's DIM-wide blocks to the
  normalizer with its command (local address bits 28-26; a non-last block gets the command's
  non-reset form, INV_SUM_EXP -> SUM_EXP). Over the block's valid elements: MAX sets
  ``running_max = max(running_max, x)``, ``max = running_max``; SUM_EXP adds
  ``iexp(x - max)`` to ``sum``; INV_SUM_EXP then sets ``inv_sum_exp = float32(127) /
  float32(sum) * acc_scale``. These statistics passes (one row) write nothing. RESET (0) is the
  ordinary move, after which the slot's ``sum`` and ``running_max`` reset (``max`` and
  ``inv_sum_exp`` stay); with activation softmax each element becomes ``float32(iexp(x - max))
  * inv_sum_exp`` rounded half to even and saturated to int8. The scan carries the slots only
  for traces that use them (`DecodedTrace.uses_norm`).
* preload / compute, weight-stationary: the preload reads B (``bd_rows x bd_cols``, zero
  elsewhere; the garbage address is the zero matrix) into the array's shadow weights, a
  compute_preloaded makes them current, a compute_accumulated reuses the current ones. The
  compute reads A (rows ``a + r * a_stride``) and D (its ``bd`` operand, zero if garbage) and
  produces ``C = A @ W + D`` in int32, written to the C rows of its preload (rows
  ``c + r * c_stride``): into the accumulator (added with the accumulate bit) or, saturated to
  int8 and ReLU'd per ``config_ex``, into the scratchpad. A transpose flag transposes the
  operand block as stored.
* output-stationary: the preload reads D into the array's accumulators, compute_preloaded adds
  ``A @ B`` to it, compute_accumulated keeps adding; the array's value, shifted right by
  ``sys_shift`` with round-to-nearest-even, is written to the C of the preload that started the
  accumulation (rewritten after every compute, so the last write holds the full sum).
* Operands read from the accumulator (``ex_read_from_acc``) pass through ``config_ex``'s scale
  and activation to int8, as the hardware's read path does.
* Reading a DRAM byte, scratchpad or accumulator element that was never written (DRAM: not
  initialized by the caller and never stored to) records the instruction's index; `run` raises
  `TraceError` for the first one after the scan.

The array's partial sums are modelled as int32 (Gemmini's default mesh output type is 20
bits, which a 16x16 array of int8 products never overflows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax

from accel.isa import Activation, NormCmd
from accel.sim.decode import COL, FCOL, NORM_STAT_IDS, Op

INT32_MIN = -(1 << 31)

# Error codes: which read touched never-written memory, and the field to name.
ERROR_FIELDS = {1: "dram", 2: "sp", 3: "sp", 4: "a", 5: "bd", 6: "c", 7: "src"}
ERROR_DETAILS = {
    1: "mvin reads DRAM bytes that were never initialized or stored to",
    2: "mvin accumulates onto accumulator rows that were never written",
    3: "mvout reads scratchpad/accumulator elements that were never written",
    4: "the compute reads A elements that were never written",
    5: "the preload/compute reads B/D elements that were never written",
    6: "the compute accumulates onto accumulator rows that were never written",
    7: "mvout_spad reads accumulator elements that were never written",
}


@dataclasses.dataclass(frozen=True)
class FuncStatic:
    """Shapes and optional paths one compiled functional step depends on."""

    dim: int
    sp_rows: int
    acc_rows: int
    dram_len: int  # DRAM bytes including the sink byte at the end
    max_blocks: int
    row_bytes: int
    uses_os: bool
    reads_acc: bool
    moves_to_spad: bool = False  # the trace has mvout_spad (compiled in only then)
    normalizer: bool = False  # the trace uses the normalizer's softmax (likewise)
    pixel_repeats: bool = False  # the trace has mvins with pixel repeats (likewise)
    sp_half_rows: int = 0  # the pixel repeats' floor in the upper half of the scratchpad

    @property
    def dram_sink(self) -> int:
        return self.dram_len - 1


def igelu(q, qb, qc):
    """Gemmini's I-GELU on int32 values, wrapping as the hardware does
    (`accel.sim.reference.igelu`)."""
    clipped = jnp.minimum(jnp.abs(q), -qb) + qb
    poly = qc + clipped * clipped
    return q * (jnp.where(q < 0, -poly, poly) + qc)


def _product_bits_16_47(a, b):
    """Bits 16-47 of the signed 64-bit product of int32 ``a`` and ``b``, as int32, in 32-bit
    arithmetic (the scan runs without x64): the unsigned product from 16-bit halves, less the
    two's-complement corrections ``2**32 * (b if a < 0) + 2**32 * (a if b < 0)``."""
    ua = lax.bitcast_convert_type(a, jnp.uint32)
    ub = lax.bitcast_convert_type(b, jnp.uint32)
    lo, sixteen = jnp.uint32(0xFFFF), jnp.uint32(16)
    a0, a1, b0, b1 = ua & lo, ua >> sixteen, ub & lo, ub >> sixteen
    mid = ((a1 * b1) << sixteen) + a1 * b0 + a0 * b1 + ((a0 * b0) >> sixteen)
    mid = mid - jnp.where(a < 0, ub << sixteen, jnp.uint32(0))
    mid = mid - jnp.where(b < 0, ua << sixteen, jnp.uint32(0))
    return lax.bitcast_convert_type(mid, jnp.int32)


def iexp(q, qln2, qln2_inv, qb, qc):
    """I-BERT's integer exp as Gemmini's normalizer computes it on int32 values, wrapping as
    the hardware does (`accel.sim.reference.iexp`)."""
    z = _product_bits_16_47(-q, qln2_inv)
    live = (z >= 0) & (z < 32)  # z >= 32 (or saturated to 32) shifts everything out
    z = jnp.where(live, z, 0)
    t = z * qln2 + q + qb
    poly = t * t + qc
    return jnp.where(live, lax.shift_right_logical(poly, z), 0)


def scale_to_int8(x, scale, relu, gelu=None, softmax=None):
    """Gemmini's accumulator read path: I-GELU where ``gelu`` (a ``(mask, qb, qc)``), the
    softmax's ``iexp(x - max) * inv_sum_exp`` where ``softmax`` (a ``(mask, max, qln2,
    qln2_inv, qb, qc, inv_sum_exp)``) instead of ``x * scale``, float32 multiply, round half to
    even, saturate, ReLU."""
    if gelu is not None:
        mask, qb, qc = gelu
        x = jnp.where(mask, igelu(x, qb, qc), x)
    if softmax is not None:
        mask, top, qln2, qln2_inv, qb, qc, inv = softmax
        x = jnp.where(mask, iexp(x - top, qln2, qln2_inv, qb, qc), x)
        scale = jnp.where(mask, inv, scale)
    y = jnp.round(x.astype(jnp.float32) * scale)
    if softmax is not None:
        y = jnp.where(jnp.isnan(y), 0.0, y)  # 0 * inf after a zero sum
    y = jnp.clip(y, -128.0, 127.0)
    y = jnp.where(relu, jnp.maximum(y, 0.0), y)
    return y.astype(jnp.int32)


def rounding_shift(x, shift):
    """``x >> shift`` rounded to nearest, ties to even (Gemmini's SInt ``>>``)."""
    s = jnp.clip(shift, 0, 31)
    floor = x >> s
    rem = x - (floor << s)
    half = jnp.where(s > 0, jnp.left_shift(jnp.int32(1), jnp.maximum(s - 1, 0)), 0)
    up = (s > 0) & ((rem > half) | ((rem == half) & ((floor & 1) == 1)))
    return floor + up.astype(jnp.int32)


def init_state(st: FuncStatic, dram, dram_ok) -> dict:
    """Functional fields of a fresh `SimState` around a DRAM image (already sink-padded)."""
    d = st.dim
    return {
        "sp": jnp.zeros((st.sp_rows + 1, d), jnp.int8),
        "sp_ok": jnp.zeros((st.sp_rows + 1, d), jnp.bool_),
        "acc": jnp.zeros((st.acc_rows + 1, d), jnp.int32),
        "acc_ok": jnp.zeros((st.acc_rows + 1, d), jnp.bool_),
        "dram": dram,
        "dram_ok": dram_ok,
        "preloaded": jnp.zeros((d, d), jnp.int32),
        "weights": jnp.zeros((d, d), jnp.int32),
        "os_acc": jnp.zeros((d, d), jnp.int32),
        "os_base": jnp.zeros((d, d), jnp.int32),
        "error_index": jnp.int32(-1),
        "error_code": jnp.int32(0),
    } | (init_norm_state() if st.normalizer else {})


def init_norm_state() -> dict:
    """The normalizer's statistics slots at reset (`accel.sim.state.SimState`)."""
    return {
        "norm_running_max": jnp.full(NORM_STAT_IDS, INT32_MIN, jnp.int32),
        "norm_max": jnp.full(NORM_STAT_IDS, INT32_MIN, jnp.int32),
        "norm_sum": jnp.zeros(NORM_STAT_IDS, jnp.int32),
        "norm_inv_sum_exp": jnp.zeros(NORM_STAT_IDS, jnp.float32),
    }


def step(s, ints, floats, k, st: FuncStatic):
    """Apply instruction ``k`` (its decoded ``ints`` / ``floats`` row) to the functional state.

    Each memory is scattered once per step, and every read of its old version feeds that
    scatter (the values a write merges or computes); reads that feed nothing written to the
    same memory (mvout's sources, validity checks) read the new version instead. Then XLA
    updates the loop-carried buffers in place: an old version still needed after the write would
    force a copy of the whole memory on every step. One instruction is only one kind, so reading
    the new version is the same as reading the old one for those reads.
    """

    def g(name):
        return ints[COL[name]]

    op = g("op")
    x = _Ctx(st, g, jnp.arange(st.dim, dtype=jnp.int32), jnp.arange(st.dim, dtype=jnp.int32),
             jnp.arange(st.max_blocks, dtype=jnp.int32))
    kind = _kind(s, x, op, floats)
    # ---- indices -------------------------------------------------------------------------------
    mv = _move_indices(x, kind)
    a_ix = _operand_index(x, "a", kind.is_comp, g("a_stride"))
    bd_ix = _operand_index(x, "bd", kind.is_pre | kind.is_comp, 1)
    wr = _write_indices(x, kind, mv)
    # ---- reads of the old memories that feed this step's writes, the array, the writes ---------
    rd = _old_reads(s, x, kind, mv, a_ix, bd_ix, wr)
    preloaded, weights, result, os_acc, os_base, c_base = _array(s, x, kind, rd)
    acc, acc_ok, sp, sp_ok, write_errors = _local_writes(s, x, kind, mv, wr, rd, result, c_base)
    # ---- reads of the new local memories (this instruction did not write what they read) ------
    a_vals, s_vals, read_errors = _new_reads(x, kind, mv, a_ix, bd_ix, acc, acc_ok, sp, sp_ok)
    dram, dram_ok, dram_errors = _mvout_dram(s, x, kind, mv, a_vals, s_vals)
    norm = _normalizer(s, g, acc, kind.scale, st) if st.normalizer else {}
    err_index, err_code = _first_error(s, k, write_errors + read_errors + dram_errors)
    return s.set(sp=sp, sp_ok=sp_ok, acc=acc, acc_ok=acc_ok, dram=dram, dram_ok=dram_ok,
                 preloaded=preloaded, weights=weights, os_acc=os_acc, os_base=os_base,
                 error_index=err_index, error_code=err_code, **norm)


@dataclasses.dataclass(frozen=True)
class _Ctx:
    """What every part of a step reads: the static shapes, the instruction's int fields (``g``)
    and the index vectors over the array's rows ``r`` and columns ``c`` and a move's blocks."""

    st: FuncStatic
    g: Callable[[str], Any]
    r: Any
    c: Any
    blk: Any


@dataclasses.dataclass(frozen=True)
class _Kind:
    """The instruction's kind and the configuration it carries (``gelu``, ``softmax``: the
    read path's arguments of `scale_to_int8`; ``stats``: a statistics pass)."""

    op: Any
    is_mvin: Any
    is_mvout: Any
    is_pre: Any
    is_cp: Any
    is_ca: Any
    is_comp: Any
    scale: Any
    is_acc: Any
    ex_scale: Any
    ex_relu: Any
    gelu: tuple
    stats: Any
    softmax: tuple | None
    ws: Any
    a_t: Any
    b_t: Any


@dataclasses.dataclass(frozen=True)
class _Moves:
    """A move's DRAM bytes and local elements: ``didx`` ``[DIM, row_bytes]`` the DRAM byte of
    each row's byte, ``byte_mask`` those it moves, ``didx_in`` an mvin's (the sink elsewhere);
    ``row_live`` ``[blocks, DIM]`` the rows of each block it moves, ``elem_mask`` ``[blocks,
    DIM, DIM]`` the elements."""

    rows: Any
    cols: Any
    elem: Any
    byte_mask: Any
    didx: Any
    in_bytes: Any
    didx_in: Any
    row_live: Any
    elem_mask: Any


@dataclasses.dataclass(frozen=True)
class _Writes:
    """Where a step scatters into the local memories: accumulator rows ``acc_idx`` (the sink
    where none) and elements ``acc_mask`` (``[blocks * DIM, DIM]``: an mvin's blocks, or C's
    rows widened), scratchpad rows ``sp_idx`` and elements ``sp_mask``; what feeds them
    (``to_acc_in`` / ``to_sp_in``: an mvin; ``repeated``: an mvin with pixel repeats, written by
    `_repeat_rows`; ``is_msp``, ``msp_read``: an mvout_spad and the accumulator elements it
    reads, None unless compiled in) and whether C accumulates (``c_add``)."""

    c_add: Any
    to_acc_in: Any
    acc_mask: Any
    acc_idx: Any
    to_sp_in: Any
    repeated: Any
    sp_mask: Any
    sp_idx: Any
    is_msp: Any
    msp_read: Any


@dataclasses.dataclass(frozen=True)
class _Reads:
    """The old memories' values a step's writes use: the mvin's DRAM rows as int8 (``v8``,
    ``[DIM, row_bytes]``) and int32 (``v32``) values, the array's operands A and B/D, and the
    old values and validity of the rows the step writes."""

    v8: Any
    v32: Any
    a_mat: Any
    bd_mat: Any
    old_acc: Any
    old_acc_ok: Any
    old_sp: Any
    old_sp_ok: Any


def _kind(s, x: _Ctx, op, floats) -> _Kind:
    """The instruction's kind (``op``) and the configuration its row carries."""
    g, st = x.g, x.st
    is_mvin = op == Op.MVIN
    is_mvout = op == Op.MVOUT
    is_pre = op == Op.PRELOAD
    is_cp = op == Op.COMPUTE_PRELOADED
    is_ca = op == Op.COMPUTE_ACCUMULATED
    is_comp = is_cp | is_ca
    scale = floats[FCOL["scale"]]
    is_acc = g("is_acc") == 1
    ex_scale = floats[FCOL["ex_scale"]]
    ex_relu = g("ex_act") == 1
    gelu = (g("act") == Activation.IGELU, g("igelu_qb"), g("igelu_qc"))
    if st.normalizer:
        sid = g("stat_id")
        stats = g("norm") >= NormCmd.MAX  # decode sets norm only on moves from the accumulator
        softmax = (g("act") == Activation.SOFTMAX, s.norm_max[sid], g("iexp_qln2"),
                   g("iexp_qln2_inv"), g("igelu_qb"), g("igelu_qc"), s.norm_inv_sum_exp[sid])
    else:
        stats, softmax = jnp.bool_(False), None
    ws = g("dataflow") == 1
    a_t = g("a_transpose") == 1
    b_t = g("b_transpose") == 1
    return _Kind(op=op, is_mvin=is_mvin, is_mvout=is_mvout, is_pre=is_pre, is_cp=is_cp,
                 is_ca=is_ca, is_comp=is_comp, scale=scale, is_acc=is_acc, ex_scale=ex_scale,
                 ex_relu=ex_relu, gelu=gelu, stats=stats, softmax=softmax, ws=ws, a_t=a_t,
                 b_t=b_t)


def _blocks_of(values, st: FuncStatic):
    """``[d, cols] -> [nb, d, d]``: DIM-wide column blocks, zero-padded."""
    d, nb = st.dim, st.max_blocks
    have = min(values.shape[1] // d, nb)
    out = values[:, :have * d].reshape(d, have, d).transpose(1, 0, 2)
    if have < nb:
        out = jnp.concatenate([out, jnp.zeros((nb - have, d, d), out.dtype)], axis=0)
    return out


def _widen(vals, fill, st: FuncStatic):
    """C rows ``[d, ...] -> [nb*d, ...]``, to share the mvin blocks' shape."""
    pad_rows = st.max_blocks * st.dim - st.dim
    if pad_rows == 0:
        return vals
    return jnp.concatenate([vals, jnp.full((pad_rows,) + vals.shape[1:], fill, vals.dtype)])


def _move_indices(x: _Ctx, kind: _Kind) -> _Moves:
    """The DRAM bytes and local elements an mvin / mvout moves."""
    g, r, st = x.g, x.r, x.st
    rows, cols, elem = g("rows"), g("cols"), g("elem_bytes")
    row_bytes = cols * elem
    j = jnp.arange(st.row_bytes, dtype=jnp.int32)
    byte_mask = (r < rows)[:, None] & (j < row_bytes)[None, :]
    didx = g("dram") + r[:, None] * g("dram_stride") + j[None, :]
    in_bytes = byte_mask & kind.is_mvin
    didx_in = jnp.where(in_bytes, didx, st.dram_sink)
    # Block b of a move covers local rows row + b * stride + r and columns b * DIM + c.
    row_live = (x.blk[:, None] < g("nblocks")) & (r[None, :] < rows)  # [nb, d]
    elem_mask = (row_live[:, :, None]
                 & ((x.blk[:, None] * st.dim + x.c[None, :]) < cols)[:, None, :])
    return _Moves(rows=rows, cols=cols, elem=elem, byte_mask=byte_mask, didx=didx,
                  in_bytes=in_bytes, didx_in=didx_in, row_live=row_live, elem_mask=elem_mask)


def _operand_index(x: _Ctx, prefix, live, stride):
    """An array operand's ``(mask, from_acc, sp rows, acc rows)``: the elements it reads, and
    its rows in each memory (the sink in the one it does not read)."""
    g, r = x.g, x.r
    mask = ((r < g(f"{prefix}_rows"))[:, None] & (x.c < g(f"{prefix}_cols"))[None, :]
            & live & (g(f"{prefix}_garbage") == 0))
    rows_idx = g(prefix) + r * stride
    from_acc = g(f"{prefix}_acc") == 1
    any_row = mask.any(axis=1)
    return (mask, from_acc, jnp.where(any_row & ~from_acc, rows_idx, x.st.sp_rows),
            jnp.where(any_row & from_acc, rows_idx, x.st.acc_rows))


def _write_indices(x: _Ctx, kind: _Kind, mv: _Moves) -> _Writes:
    """The rows and elements the step writes in each local memory (C's rows are widened to
    an mvin's ``blocks * DIM``, so one scatter serves both)."""
    g, r, c, st = x.g, x.r, x.c, x.st
    d, nb = st.dim, st.max_blocks
    c_rows_idx = g("c") + r * g("c_stride")
    c_live = kind.is_comp & (g("c_garbage") == 0)
    c_mask = (r < g("c_rows"))[:, None] & (c < g("c_cols"))[None, :] & c_live
    c_acc = g("c_acc") == 1
    c_add = g("c_accumulate") == 1
    in_rows = (g("local") + x.blk[:, None] * g("block_stride") + r[None, :]).reshape(-1)
    in_mask = mv.elem_mask.reshape(nb * d, d)
    c_idx_w, c_mask_w = _widen(c_rows_idx, -1, st), _widen(c_mask, False, st)
    to_acc_in = kind.is_mvin & kind.is_acc
    acc_mask = jnp.where(to_acc_in, in_mask, c_mask_w & c_acc)
    acc_idx = jnp.where(acc_mask.any(axis=1), jnp.where(to_acc_in, in_rows, c_idx_w),
                        st.acc_rows)
    to_sp_in = kind.is_mvin & ~kind.is_acc
    repeated = to_sp_in & (g("repeats") > 1) if st.pixel_repeats else jnp.bool_(False)
    sp_mask = jnp.where(to_sp_in, in_mask & ~repeated, c_mask_w & ~c_acc)
    is_msp = msp_read = None
    if st.moves_to_spad:
        is_msp = kind.op == Op.MVOUT_SPAD
        msp_read = (r < mv.rows)[:, None] & (c < mv.cols)[None, :] & is_msp
        msp_mask = msp_read & ~kind.stats  # a statistics pass writes no row
        sp_mask = jnp.where(is_msp, _widen(msp_mask, False, st), sp_mask)
        sp_rows_w = jnp.where(is_msp, _widen(g("dst") + r, -1, st), c_idx_w)
    else:
        sp_rows_w = c_idx_w
    sp_idx = jnp.where(sp_mask.any(axis=1), jnp.where(to_sp_in, in_rows, sp_rows_w), st.sp_rows)
    return _Writes(c_add=c_add, to_acc_in=to_acc_in, acc_mask=acc_mask, acc_idx=acc_idx,
                   to_sp_in=to_sp_in, repeated=repeated, sp_mask=sp_mask, sp_idx=sp_idx,
                   is_msp=is_msp, msp_read=msp_read)


def _old_reads(s, x: _Ctx, kind: _Kind, mv: _Moves, a_ix, bd_ix, wr: _Writes) -> _Reads:
    """The reads of the old memories that feed this step's writes (`step`)."""
    d, rb = x.st.dim, x.st.row_bytes
    raw = s.dram[mv.didx_in]  # uint8 [d, rb]
    v8 = lax.bitcast_convert_type(raw, jnp.int8).astype(jnp.int32)
    v32 = lax.bitcast_convert_type(raw.reshape(d, rb // 4, 4), jnp.int32)

    def operand_values(ix):
        mask, from_acc, sp_i, acc_i = ix
        vals = s.sp[sp_i].astype(jnp.int32)
        if x.st.reads_acc:
            vals = jnp.where(from_acc, scale_to_int8(s.acc[acc_i], kind.ex_scale, kind.ex_relu),
                             vals)
        return jnp.where(mask, vals, 0)

    a_mat = operand_values(a_ix)
    bd_mat = operand_values(bd_ix)
    old_acc, old_acc_ok = s.acc[wr.acc_idx], s.acc_ok[wr.acc_idx]
    old_sp, old_sp_ok = s.sp[wr.sp_idx], s.sp_ok[wr.sp_idx]
    return _Reads(v8=v8, v32=v32, a_mat=a_mat, bd_mat=bd_mat, old_acc=old_acc,
                  old_acc_ok=old_acc_ok, old_sp=old_sp, old_sp_ok=old_sp_ok)


def _array(s, x: _Ctx, kind: _Kind, rd: _Reads):
    """The array's product: ``(preloaded, weights, result, os_acc, os_base, c_base)``, the new
    shadow and current weights, C's values, the OS accumulators and the accumulator rows C
    adds to."""
    d = x.st.dim
    a_mat, bd_mat, old_acc = rd.a_mat, rd.bd_mat, rd.old_acc
    a_eff = jnp.where(kind.a_t, a_mat.T, a_mat)
    loaded = jnp.where(kind.ws & kind.b_t, bd_mat.T, bd_mat)
    preloaded = jnp.where(kind.is_pre, loaded, s.preloaded)
    weights = jnp.where(kind.is_cp & kind.ws, preloaded, s.weights)
    dot = lambda p, q: jnp.dot(p, q, preferred_element_type=jnp.int32)
    result = dot(a_eff, weights) + bd_mat
    os_acc, os_base = s.os_acc, s.os_base
    c_base = old_acc[:d]
    if x.st.uses_os:
        ws, is_cp, is_ca = kind.ws, kind.is_cp, kind.is_ca
        b_os = jnp.where(kind.b_t, bd_mat.T, bd_mat)
        prod = dot(a_eff, b_os)
        os_acc = jnp.where(is_cp & ~ws, preloaded + prod,
                           jnp.where(is_ca & ~ws, s.os_acc + prod, s.os_acc))
        os_base = jnp.where(is_cp & ~ws, old_acc[:d], s.os_base)
        result = jnp.where(ws, result, rounding_shift(os_acc, x.g("sys_shift")))
        c_base = jnp.where(ws, old_acc[:d], os_base)
    return preloaded, weights, result, os_acc, os_base, c_base


def _local_writes(s, x: _Ctx, kind: _Kind, mv: _Moves, wr: _Writes, rd: _Reads, result,
                  c_base):
    """The accumulator and scratchpad after the step's one scatter into each (an mvin's rows,
    C, mvout_spad's rows, pixel repeats): ``(acc, acc_ok, sp, sp_ok, errors)``."""
    g, r, st = x.g, x.r, x.st
    d, nb = st.dim, st.max_blocks
    errors = []  # (bad, code)
    in_vals = jnp.where(mv.elem == 4, _blocks_of(rd.v32, st),
                        _blocks_of(rd.v8, st)).reshape(nb * d, d)
    c_vals_w = _widen(result, 0, st)
    c_base_w = jnp.concatenate([c_base, rd.old_acc[d:]]) if nb * d - d else c_base
    to_acc_in, acc_mask = wr.to_acc_in, wr.acc_mask
    old_acc, old_acc_ok = rd.old_acc, rd.old_acc_ok
    add = jnp.where(to_acc_in, g("accumulate") == 1, wr.c_add)
    base = jnp.where(to_acc_in, old_acc, c_base_w)
    new_vals = jnp.where(to_acc_in, in_vals, c_vals_w)
    new_acc = jnp.where(add, base + new_vals, new_vals)
    bad_add = jnp.any(acc_mask & add & ~old_acc_ok)
    errors.append((bad_add & to_acc_in, 2))
    errors.append((bad_add & ~to_acc_in, 6))
    acc = s.acc.at[wr.acc_idx].set(jnp.where(acc_mask, new_acc, old_acc))
    acc_ok = s.acc_ok.at[wr.acc_idx].set(old_acc_ok | acc_mask)

    sp_in = _blocks_of(scale_to_int8(rd.v8, kind.scale, False), st).reshape(nb * d, d)
    sp_c = jnp.clip(c_vals_w, -128, 127)
    sp_c = jnp.where(kind.ex_relu, jnp.maximum(sp_c, 0), sp_c)
    sp_new = jnp.where(wr.to_sp_in, sp_in, sp_c).astype(jnp.int8)
    if st.moves_to_spad:
        # mvout_spad writes no accumulator row, so the new accumulator is the one it reads.
        src_idx = jnp.where(wr.msp_read.any(axis=1), g("local") + r, st.acc_rows)
        moved = scale_to_int8(acc[src_idx], kind.scale, g("act") == 1, kind.gelu, kind.softmax)
        sp_new = jnp.where(wr.is_msp, _widen(moved, 0, st), sp_new).astype(jnp.int8)
        errors.append((jnp.any(wr.msp_read & ~acc_ok[src_idx]), 7))
    sp = s.sp.at[wr.sp_idx].set(jnp.where(wr.sp_mask, sp_new, rd.old_sp))
    sp_ok = s.sp_ok.at[wr.sp_idx].set(rd.old_sp_ok | wr.sp_mask)
    if st.pixel_repeats:
        sp, sp_ok = _repeat_rows(sp, sp_ok, sp_in[:d], wr.repeated, g, st)
    return acc, acc_ok, sp, sp_ok, errors


def _new_reads(x: _Ctx, kind: _Kind, mv: _Moves, a_ix, bd_ix, acc, acc_ok, sp, sp_ok):
    """The operands' validity and mvout's sources, read from the new local memories:
    ``(acc values, scratchpad values, errors)``, the sources ``[blocks, DIM, DIM]``."""
    g, r, st = x.g, x.r, x.st
    d, nb = st.dim, st.max_blocks

    def operand_bad(ix):
        mask, from_acc, sp_i, acc_i = ix
        okv = sp_ok[sp_i]
        if st.reads_acc:
            okv = jnp.where(from_acc, acc_ok[acc_i], okv)
        return jnp.any(mask & ~okv)

    errors = [(operand_bad(a_ix), 4), (operand_bad(bd_ix), 5)]
    out_rows = g("local") + x.blk[:, None] * d + r[None, :]
    src_live = mv.row_live & kind.is_mvout
    oidx_acc = jnp.where(src_live & kind.is_acc, out_rows, st.acc_rows).reshape(-1)
    oidx_sp = jnp.where(src_live & ~kind.is_acc, out_rows, st.sp_rows).reshape(-1)
    a_vals = acc[oidx_acc].reshape(nb, d, d)
    s_vals = sp[oidx_sp].reshape(nb, d, d).astype(jnp.int32)
    ok = jnp.where(kind.is_acc, acc_ok[oidx_acc], sp_ok[oidx_sp]).reshape(nb, d, d)
    errors.append((jnp.any(mv.elem_mask & kind.is_mvout & ~ok), 3))
    return a_vals, s_vals, errors


def _mvout_dram(s, x: _Ctx, kind: _Kind, mv: _Moves, a_vals, s_vals):
    """DRAM after an mvout's bytes (int8 through the read path, or full-width int32) and the
    mvin's DRAM check: ``(dram, dram_ok, errors)``."""
    st = x.st
    d, nb, rb = st.dim, st.max_blocks, st.row_bytes
    full = x.g("full") == 1
    small = jnp.where(kind.is_acc, scale_to_int8(a_vals, kind.scale, x.g("act") == 1, kind.gelu,
                                                 kind.softmax), s_vals)
    bytes8 = lax.bitcast_convert_type(
        small.astype(jnp.int8).transpose(1, 0, 2).reshape(d, nb * d), jnp.uint8)
    if nb * d < rb:
        bytes8 = jnp.concatenate([bytes8, jnp.zeros((d, rb - nb * d), jnp.uint8)], axis=1)
    bytes32 = lax.bitcast_convert_type(a_vals.transpose(1, 0, 2).reshape(d, nb * d),
                                       jnp.uint8).reshape(d, nb * d * 4)
    if bytes32.shape[1] < rb:
        bytes32 = jnp.concatenate(
            [bytes32, jnp.zeros((d, rb - bytes32.shape[1]), jnp.uint8)], axis=1)
    out_bytes = jnp.where(full, bytes32[:, :rb], bytes8[:, :rb])
    out_mask = mv.byte_mask & kind.is_mvout & ~kind.stats
    didx_out = jnp.where(out_mask, mv.didx, st.dram_sink).reshape(-1)
    dram = s.dram.at[didx_out].set(out_bytes.reshape(-1))
    dram_ok = s.dram_ok.at[didx_out].set(True)
    # mvin's DRAM check reads the new validity (an mvin stores nothing to DRAM).
    return dram, dram_ok, [(jnp.any(mv.in_bytes & ~dram_ok[mv.didx_in]), 1)]


def _first_error(s, k, errors):
    """The state's first error after this step: ``(error_index, error_code)``."""
    err_index, err_code = s.error_index, s.error_code
    for bad, code in sorted(errors, key=lambda e: -e[1]):  # the lowest code of a step wins
        take = (s.error_index < 0) & bad
        err_index = jnp.where(take, k, err_index)
        err_code = jnp.where(take, code, err_code)
    return err_index, err_code


def _repeat_rows(sp, sp_ok, rows_in, live, g, st: FuncStatic):
    """An mvin with pixel repeats p (``PixelRepeater.scala`` ~28-91): source row r (local row
    ``local + r``) is also written to rows ``local + r - j`` for j < p, shifted right by ``j *
    cols`` columns with only those ``cols`` columns enabled, and not below the floor of its
    half of the scratchpad. So destination row y holds, in column block j, source row ``y -
    local + j``: one gather over the ``DIM + p - 1`` rows from ``local - p + 1`` on."""
    d = st.dim
    p, cols, local = g("repeats"), jnp.maximum(g("cols"), 1), g("local")
    t = jnp.arange(2 * d, dtype=jnp.int32)
    c = jnp.arange(d, dtype=jnp.int32)
    j = c // cols
    dest = local - (p - 1) + t  # [2d]
    src = t[:, None] - (p - 1) + j[None, :]  # [2d, d] source row feeding (dest, column)
    src_addr = local + src
    floor = jnp.where(src_addr < st.sp_half_rows, 0, st.sp_half_rows)
    mask = (live & (j < p)[None, :] & (src >= 0) & (src < g("rows"))
            & (dest[:, None] >= floor) & (dest[:, None] < st.sp_rows))
    vals = rows_in[jnp.clip(src, 0, d - 1), c[None, :] - j[None, :] * cols]
    idx = jnp.where(mask.any(axis=1), dest, st.sp_rows)
    old, old_ok = sp[idx], sp_ok[idx]
    return (sp.at[idx].set(jnp.where(mask, vals.astype(jnp.int8), old)),
            sp_ok.at[idx].set(old_ok | mask))


def _normalizer(s, g, acc, scale, st: FuncStatic) -> dict:
    """The statistics slot after a move out of the accumulator (module docstring): a
    statistics pass (one row) updates it from the row's valid elements, any other move resets
    its ``sum`` and ``running_max``. A row's blocks reach the normalizer one after another, but
    max and wrapping int32 sums are associative, so the whole row is reduced at once."""
    d, nb = st.dim, st.max_blocks
    op, cmd, sid = g("op"), g("norm"), g("stat_id")
    blk = jnp.arange(nb, dtype=jnp.int32)
    cvec = jnp.arange(d, dtype=jnp.int32)
    through = ((op == Op.MVOUT) & (g("is_acc") == 1)) | (op == Op.MVOUT_SPAD)
    live_blk = through & (g("rows") > 0) & (blk < g("nblocks"))  # [nb]
    live = jnp.any(live_blk)
    # Row 0 of each block: all a statistics pass (rows == 1) reads.
    vals = acc[jnp.where(live_blk, g("local") + blk * d, st.acc_rows)]  # [nb, d]
    valid = live_blk[:, None] & ((blk[:, None] * d + cvec[None, :]) < g("cols"))
    running, top = s.norm_running_max[sid], s.norm_max[sid]
    total, inv = s.norm_sum[sid], s.norm_inv_sum_exp[sid]
    new_running = jnp.maximum(running, jnp.max(jnp.where(valid, vals, INT32_MIN)))
    exps = iexp(vals - top, g("iexp_qln2"), g("iexp_qln2_inv"), g("igelu_qb"), g("igelu_qc"))
    new_total = total + jnp.sum(jnp.where(valid, exps, 0), dtype=jnp.int32)
    new_inv = jnp.float32(127.0) / new_total.astype(jnp.float32) * scale
    is_max = live & (cmd == NormCmd.MAX)
    is_sum = live & ((cmd == NormCmd.SUM_EXP) | (cmd == NormCmd.INV_SUM_EXP))
    reset = live & (cmd == NormCmd.RESET)
    return {
        "norm_running_max": s.norm_running_max.at[sid].set(
            jnp.where(is_max, new_running, jnp.where(reset, INT32_MIN, running))),
        "norm_max": s.norm_max.at[sid].set(jnp.where(is_max, new_running, top)),
        "norm_sum": s.norm_sum.at[sid].set(
            jnp.where(is_sum, new_total, jnp.where(reset, 0, total))),
        "norm_inv_sum_exp": s.norm_inv_sum_exp.at[sid].set(
            jnp.where(live & (cmd == NormCmd.INV_SUM_EXP), new_inv, inv)),
    }


__all__ = ["ERROR_DETAILS", "ERROR_FIELDS", "NORM_STAT_IDS", "FuncStatic", "iexp", "igelu",
           "init_norm_state", "init_state", "rounding_shift", "scale_to_int8", "step"]
