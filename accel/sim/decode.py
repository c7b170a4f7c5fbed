"""Decode a trace into the struct-of-arrays the simulator scans, and reject what it cannot run.

The simulator's `lax.scan` wants one row of plain int32 / float32 fields per instruction. This
module produces them with vectorized numpy (no per-instruction Python, so decoding a 100k-
instruction trace costs milliseconds):

1. the raw ``(funct, rs1, rs2)`` uint64 arrays (`Trace.as_arrays`) are checked for unknown
   functs and split into named bit fields using the layouts of `accel.isa.LAYOUTS`;
2. the CISC loops (``loop_ws``) are expanded to their primitive sequence first (`accel.sim.cisc`);
3. the configuration registers are resolved statically: every instruction carries the values of
   the ``config_ld`` / ``config_st`` / ``config_ex`` state in force when it executes (strides,
   scales, activation, dataflow, transposes), by a forward fill over the instruction index;
4. every compute gets the output address of the preload it pairs with (Gemmini pairs a compute
   with the preload just before it in the execute queue; a compute without one discards its
   result, as ``ExecuteController`` does for a "single mul");
5. ranges are checked: rows and columns within the array and DMA limits, scratchpad and
   accumulator rows within capacity, DRAM bytes within the caller's DRAM image. The first bad
   instruction raises `TraceError` naming its index (in the caller's trace) and field.

The normalizer's softmax state is resolved here too: every move out of the accumulator carries
its normalizer command (``norm``, local address bits 28-26), the statistics slot ``config_norm``
chose (``stat_id``), i-exp's constants (``iexp_qln2``, ``iexp_qln2_inv``, ``igelu_qb``,
``igelu_qc``) and the 3-bit store activation (``config_st``'s two bits, cleared msb; a
``config_norm`` without ``set_stats_id_only`` sets the msb, so none + msb = softmax). A move with
a statistics command (MAX, SUM_EXP, INV_SUM_EXP) is a *statistics pass*: it reads one row and
writes nothing, so its DRAM address is not checked.

Semantics the simulator does not implement (pooling on mvout, the normalizer's
layernorm commands 1-4 and activation, activations on the execute path, ``loop_conv_ws``) are
rejected here with a `TraceError` naming the field, instead of being silently mis-simulated;
so are statistics passes that are not one row read through the normalizer (``rows`` != 1, the
full-width bit, a scratchpad address), a ``stat_id`` beyond `NORM_STAT_IDS` and activations
5-7 (``act_msb`` over relu or igelu).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import numpy as np

from accel.isa import (LAYOUTS, STAT_CMDS, Activation, Funct, IsaParams, Layout, NormCmd,
                       trace_error)
from accel.trace import Trace, TraceArrays

GARBAGE = 0xFFFFFFFF
_ROW_MASK = (1 << 26) - 1
NORM_STAT_IDS = 4  # the normalizer's statistics slots (Gemmini's NORM_STAT_IDS)
_STATS = np.array([int(c) for c in STAT_CMDS])  # `accel.isa.STAT_CMDS`, for np.isin


class Op(enum.IntEnum):
    """The simulator's instruction kinds (one per behaviour, not per funct)."""

    NOP = 0  # padding to a length bucket: no effect, no time
    CONFIG_EX = 1
    CONFIG_LD = 2
    CONFIG_ST = 3
    CONFIG_NORM = 4
    MVIN = 5
    MVOUT = 6
    PRELOAD = 7
    COMPUTE_PRELOADED = 8
    COMPUTE_ACCUMULATED = 9
    FLUSH = 10
    FENCE = 11
    MVOUT_SPAD = 12  # baco extension: accumulator -> scratchpad through the mvout read path


class Unit(enum.IntEnum):
    """Gemmini's reservation-station queues, plus the host for fence / flush."""

    LOAD = 0
    EXECUTE = 1
    STORE = 2
    CONTROL = 3


UNIT_NAMES = ("load", "execute", "store")

INT_COLUMNS = (
    "op", "unit",
    # mvin / mvout
    "dram", "dram_stride", "rows", "cols", "local", "is_acc", "accumulate", "full",
    "elem_bytes", "block_stride", "nblocks", "act",
    # mvin into the scratchpad: config_ld's pixel repeats in force (1: none; PixelRepeater.scala)
    "repeats",
    # the I-GELU constants in force (config_norm), for a move with act igelu; i-exp's qb, qc too
    "igelu_qb", "igelu_qc",
    # moves out of the accumulator: the normalizer command (0 reset, 5-7 a statistics pass),
    # the statistics slot and i-exp's other constants in force
    "norm", "stat_id", "iexp_qln2", "iexp_qln2_inv",
    # mvout_spad: destination scratchpad row (its source row is "local")
    "dst",
    # preload / compute operands: A, B-or-D, C (C of a compute comes from its preload)
    "a", "a_garbage", "a_acc", "a_rows", "a_cols", "a_stride",
    "bd", "bd_garbage", "bd_acc", "bd_rows", "bd_cols",
    "c", "c_garbage", "c_acc", "c_accumulate", "c_rows", "c_cols", "c_stride",
    # execute configuration in force
    "dataflow", "a_transpose", "b_transpose", "sys_shift", "ex_act",
    # timing: preload merged with the compute before it (Gemmini's "mul_pre"); issued by a
    # loop FSM (an expanded CISC loop) rather than by the host
    "merged", "fsm",
)
FLOAT_COLUMNS = ("scale", "ex_scale")
COL = {name: i for i, name in enumerate(INT_COLUMNS)}
FCOL = {name: i for i, name in enumerate(FLOAT_COLUMNS)}


@dataclasses.dataclass(frozen=True)
class SimShape:
    """The static shape of a simulated machine: what a compiled simulator depends on.

    ``dim`` is the array side (DIM); ``sp_rows`` / ``acc_rows`` the memory rows; ``max_blocks``
    the most DIM-wide blocks one mvin/mvout moves (`dma_max_bytes` per DRAM row, Gemmini's
    MAX_BLOCK_LEN); ``row_bytes`` the widest DRAM row a move touches.
    """

    dim: int
    sp_rows: int
    acc_rows: int
    dma_max_bytes: int = 64

    @classmethod
    def from_params(cls, params: IsaParams) -> SimShape:
        return cls(params.dim, params.sp_rows, params.acc_rows, params.dma_max_bytes)

    @property
    def max_blocks(self) -> int:
        return max(1, self.dma_max_bytes // self.dim)

    @property
    def row_bytes(self) -> int:
        return max(self.max_blocks * self.dim, 4 * self.max_cols(acc=True))

    def max_cols(self, acc: bool) -> int:
        """Columns one move may carry: int8 rows up to MAX_BLOCK_LEN blocks, int32 rows up to
        MAX_BLOCK_LEN_ACC blocks (`IsaParams.max_block_len(_acc)`)."""
        elem = 4 if acc else 1
        return max(1, self.dma_max_bytes // (self.dim * elem)) * self.dim


@dataclasses.dataclass(frozen=True, eq=False)
class DecodedTrace:
    """A trace as the simulator runs it.

    ``ints`` is int32 ``[n, len(INT_COLUMNS)]``, ``floats`` float32 ``[n, len(FLOAT_COLUMNS)]``;
    ``origin[k]`` is the index, in the caller's trace, of decoded instruction ``k`` (several
    decoded instructions share one origin when a CISC loop was expanded). The flags say which
    optional hardware paths the trace uses, so the simulator compiles only those. ``macs`` are
    the multiply-accumulates the computes perform on real data (A rows x the reduction both
    operands cover x the weights' columns); ``array_macs`` what the array spends (rows fed x
    DIM x DIM).
    """

    ints: np.ndarray
    floats: np.ndarray
    origin: np.ndarray
    shape: SimShape
    dram_bytes: int  # -1 when decoded for timing only
    uses_os: bool
    reads_acc_operands: bool
    macs: int = 0
    array_macs: int = 0
    moves_to_spad: bool = False
    uses_norm: bool = False  # statistics passes or the softmax activation on an acc move
    pixel_repeats: bool = False  # an mvin with pixel repeats (config_ld pixel_repeats > 1)
    sp_half_rows: int = 0  # half the machine's scratchpad rows: the pixel repeats' floor

    def __len__(self) -> int:
        return int(self.ints.shape[0])

    def column(self, name: str) -> np.ndarray:
        return self.ints[:, COL[name]]

    def stat_passes(self) -> np.ndarray:
        """Which instructions are statistics passes (mvout / mvout_spad with a MAX, SUM_EXP or
        INV_SUM_EXP command): they read accumulator rows but write nothing."""
        return np.isin(self.column("norm"), _STATS)

    @property
    def dram_read_bytes(self) -> int:
        """Bytes the mvins read from DRAM."""
        is_mvin = self.column("op") == Op.MVIN
        return int(np.sum(np.where(is_mvin, self._move_bytes(), 0)))

    @property
    def dram_write_bytes(self) -> int:
        """Bytes the mvouts write to DRAM (statistics passes write none)."""
        writes = (self.column("op") == Op.MVOUT) & ~self.stat_passes()
        return int(np.sum(np.where(writes, self._move_bytes(), 0)))

    def mvin_first_rows(self) -> np.ndarray:
        """The first local row each mvin writes: an mvin with pixel repeats p also writes the
        p - 1 rows before its first (``PixelRepeater.scala`` ~60-68: row ``addr - r`` for
        repeat r), down to the floor of its half of the scratchpad (0, or half the rows);
        ``ReservationStation.scala`` ~297-307 widens the tracked range the same way."""
        local = self.column("local").astype(np.int64)
        half = self.sp_half_rows
        floor = np.where(local < half, 0, half)
        return np.maximum(local - (self.column("repeats").astype(np.int64) - 1), floor)

    def _move_bytes(self) -> np.ndarray:
        return (self.column("rows").astype(np.int64) * self.column("cols")
                * self.column("elem_bytes"))


# ---------------------------------------------------------------------------------------------
# Bit fields.


def _u64(value: int) -> np.uint64:
    return np.uint64(value)


def _bits(reg: np.ndarray, lsb: int, width: int) -> np.ndarray:
    return (reg >> _u64(lsb)) & _u64((1 << width) - 1)


def _field(layout: Layout, name: str, rs1: np.ndarray, rs2: np.ndarray) -> np.ndarray:
    f = layout.field(name)
    return _bits(rs1 if f.reg == "rs1" else rs2, f.lsb, f.width)


def _f32(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def _forward_fill(mask: np.ndarray, values: np.ndarray, default: Any) -> np.ndarray:
    """At each index, the value of the last masked index at or before it (else ``default``)."""
    n = mask.shape[0]
    last = np.maximum.accumulate(np.where(mask, np.arange(n), -1)) if n else np.zeros(0, int)
    out = values[np.maximum(last, 0)] if n else values[:0]
    return np.where(last >= 0, out, default)


# ---------------------------------------------------------------------------------------------
# Decoding.

_KNOWN_FUNCTS = {int(f) for f in Funct}
_OP_OF_FUNCT = {
    Funct.MVIN: Op.MVIN, Funct.MVIN2: Op.MVIN, Funct.MVIN3: Op.MVIN, Funct.MVOUT: Op.MVOUT,
    Funct.PRELOAD: Op.PRELOAD, Funct.COMPUTE_PRELOADED: Op.COMPUTE_PRELOADED,
    Funct.COMPUTE_ACCUMULATED: Op.COMPUTE_ACCUMULATED, Funct.FLUSH: Op.FLUSH,
    Funct.FENCE: Op.FENCE, Funct.MVOUT_SPAD: Op.MVOUT_SPAD,
}
_CONFIG_OPS = (Op.CONFIG_EX, Op.CONFIG_LD, Op.CONFIG_ST, Op.CONFIG_NORM)
_UNIT_OF_OP = {
    Op.NOP: Unit.CONTROL, Op.CONFIG_EX: Unit.EXECUTE, Op.CONFIG_LD: Unit.LOAD,
    Op.CONFIG_ST: Unit.STORE, Op.CONFIG_NORM: Unit.EXECUTE, Op.MVIN: Unit.LOAD,
    Op.MVOUT: Unit.STORE, Op.PRELOAD: Unit.EXECUTE, Op.COMPUTE_PRELOADED: Unit.EXECUTE,
    Op.COMPUTE_ACCUMULATED: Unit.EXECUTE, Op.FLUSH: Unit.CONTROL, Op.FENCE: Unit.CONTROL,
    Op.MVOUT_SPAD: Unit.STORE,
}
_LOOP_FUNCTS = {int(f) for f in Funct if f.name.startswith("LOOP_")}


def raw_arrays(trace: Trace | TraceArrays | Any) -> TraceArrays:
    """``(funct, rs1, rs2)`` uint64 arrays from a `Trace` or any triple of integer arrays."""
    if isinstance(trace, Trace):
        return trace.as_arrays()
    try:
        funct, rs1, rs2 = trace
    except (TypeError, ValueError):
        raise trace_error(f"expected a Trace or (funct, rs1, rs2) arrays, got "
                          f"{type(trace).__name__}") from None
    arrays = []
    for name, values in (("funct", funct), ("rs1", rs1), ("rs2", rs2)):
        arr = np.asarray(values)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise trace_error(f"{name} must be a 1-D integer array, got shape {arr.shape} "
                              f"dtype {arr.dtype}", field=name)
        if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
            k = int(np.argmax(arr < 0))
            raise trace_error(f"{name} is negative ({int(arr[k])})", field=name, index=k)
        arrays.append(arr.astype(np.uint64))
    if not len(arrays[0]) == len(arrays[1]) == len(arrays[2]):
        raise trace_error(f"array lengths differ: {len(arrays[0])}, {len(arrays[1])}, "
                          f"{len(arrays[2])}")
    return TraceArrays(*arrays)


def _check_functs(funct: np.ndarray, rs1: np.ndarray) -> None:
    known = np.isin(funct, np.array(sorted(_KNOWN_FUNCTS), np.uint64))
    if not known.all():
        k = int(np.argmin(known))
        raise trace_error(
            f"unknown funct {int(funct[k])}; Gemmini functs are 0-21 (and "
            f"{int(Funct.MVOUT_SPAD)} for mvout_spad, {int(Funct.FENCE)} for fence)",
            field="funct", index=k)


def _reserved_bits(arrays: TraceArrays, layouts: dict[int, Layout], where: np.ndarray) -> None:
    """Raw arrays may carry bits no field owns; `Instruction` refuses them, and so do we."""
    for key, layout in layouts.items():
        sel = where == key
        if not sel.any():
            continue
        for reg, values in (("rs1", arrays.rs1), ("rs2", arrays.rs2)):
            stray = values[sel] & _u64(layout.reserved_mask(reg))
            if stray.any():
                k = int(np.flatnonzero(sel)[int(np.argmax(stray != 0))])
                raise trace_error(f"reserved bits are set ({int(stray[stray != 0][0]):#x}); "
                                  "they must be zero", field=reg, index=k,
                                  mnemonic=layout.mnemonic)


def decode(trace: Trace | TraceArrays | Any, params: IsaParams, dram_bytes: int | None,
           dram_base: int = 0, dataflow: str = "WS") -> DecodedTrace:
    """Decode and check ``trace`` for a machine with ``params`` and a DRAM image of
    ``dram_bytes`` bytes mapped at address ``dram_base`` (``None``: timing only, DRAM ranges
    unchecked).

    Raises `TraceError` (with ``.index`` and ``.field``) at the first instruction the simulator
    cannot execute.
    """
    arrays = raw_arrays(trace)
    _check_functs(arrays.funct, arrays.rs1)
    funct = arrays.funct.astype(np.int64)
    if np.isin(funct, np.array(sorted(_LOOP_FUNCTS))).any():
        from accel.sim.cisc import expand_loops  # only traces with CISC loops pay for it

        arrays, origin, by_fsm = expand_loops(arrays, params)
        funct = arrays.funct.astype(np.int64)
    else:
        origin = np.arange(len(funct), dtype=np.int64)
        by_fsm = np.zeros(len(funct), bool)
    rs1, rs2 = arrays.rs1, arrays.rs2
    n = len(funct)
    shape = SimShape.from_params(params)
    dim = shape.dim

    def fail(k: int, detail: str, field: str, mnemonic: str | None = None):
        return trace_error(detail, field=field, index=int(origin[k]), mnemonic=mnemonic)

    # -- ops ------------------------------------------------------------------------------------
    op = np.zeros(n, np.int64)
    for f, o in _OP_OF_FUNCT.items():
        op[funct == f] = o
    is_config = funct == Funct.CONFIG
    cfg_type = (rs1 & _u64(3)).astype(np.int64)
    for t, o in enumerate(_CONFIG_OPS):
        op[is_config & (cfg_type == t)] = o
    layout_key = np.where(is_config, -1 - cfg_type, funct)
    keyed = {int(f): LAYOUTS[m] for m, f in (
        ("mvin", Funct.MVIN), ("mvin2", Funct.MVIN2), ("mvin3", Funct.MVIN3),
        ("mvout", Funct.MVOUT), ("preload", Funct.PRELOAD),
        ("compute_preloaded", Funct.COMPUTE_PRELOADED),
        ("compute_accumulated", Funct.COMPUTE_ACCUMULATED), ("flush", Funct.FLUSH),
        ("mvout_spad", Funct.MVOUT_SPAD))}
    keyed.update({-1 - t: LAYOUTS[m] for t, m in enumerate(
        ("config_ex", "config_ld", "config_st", "config_norm"))})
    _reserved_bits(arrays, keyed, layout_key)
    unit = np.array([_UNIT_OF_OP[Op(o)] for o in range(len(Op))])[op]

    cols_out: dict[str, np.ndarray] = {name: np.zeros(n, np.int64) for name in INT_COLUMNS}
    fl_out = {name: np.ones(n, np.float32) for name in FLOAT_COLUMNS}
    cols_out["op"], cols_out["unit"] = op, unit
    cols_out["fsm"] = by_fsm.astype(np.int64)

    # -- configuration state, forward filled ----------------------------------------------------
    lx, ll, ls = LAYOUTS["config_ex"], LAYOUTS["config_ld"], LAYOUTS["config_st"]
    is_ex = op == Op.CONFIG_EX
    only_strides = _field(lx, "set_only_strides", rs1, rs2).astype(bool)
    ex_full = is_ex & ~only_strides
    ex_act = _field(lx, "act", rs1, rs2).astype(np.int64)
    default_df = 1 if dataflow == "WS" else 0
    cfg = {
        "dataflow": _forward_fill(ex_full, _field(lx, "dataflow", rs1, rs2).astype(np.int64),
                                  default_df),
        "ex_act": _forward_fill(ex_full, ex_act, 0),
        "a_transpose": _forward_fill(ex_full, _field(lx, "a_transpose", rs1, rs2)
                                     .astype(np.int64), 0),
        "b_transpose": _forward_fill(ex_full, _field(lx, "b_transpose", rs1, rs2)
                                     .astype(np.int64), 0),
        "sys_shift": _forward_fill(ex_full, _field(lx, "sys_shift", rs1, rs2)
                                   .astype(np.int64), 0),
        "a_stride": _forward_fill(is_ex, _field(lx, "a_stride", rs1, rs2).astype(np.int64), 1),
        "c_stride": _forward_fill(is_ex, _field(lx, "c_stride", rs1, rs2).astype(np.int64), 1),
    }
    ex_scale = _forward_fill(ex_full, _f32(_field(lx, "acc_scale", rs1, rs2)),
                             np.float32(1.0)).astype(np.float32)
    bad_act = is_ex & ~only_strides & (ex_act > 1)
    if bad_act.any():
        k = int(np.argmax(bad_act))
        raise fail(k, "activation (layernorm / igelu) is not simulated; use none or relu",
                   "act", "config_ex")

    is_ld = op == Op.CONFIG_LD
    ld_id = _field(ll, "id", rs1, rs2).astype(np.int64)
    bad = is_ld & (ld_id > 2)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"id {int(ld_id[k])} is not a load state (0, 1 or 2)", "id", "config_ld")
    # LoadController.scala ~148 keeps one pixel_repeats per load state, 0 read as 1.
    repeats_raw = np.maximum(_field(ll, "pixel_repeats", rs1, rs2).astype(np.int64), 1)
    bad = is_ld & (repeats_raw > dim)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"pixel_repeats {int(repeats_raw[k])} exceeds the array dimension {dim}",
                   "pixel_repeats", "config_ld")
    ld_repeats = [_forward_fill(is_ld & (ld_id == k), repeats_raw, 1) for k in range(3)]
    ld_stride = [_forward_fill(is_ld & (ld_id == k), _field(ll, "stride", rs1, rs2)
                               .astype(np.int64), -1) for k in range(3)]
    ld_block = [_forward_fill(is_ld & (ld_id == k), _field(ll, "block_stride", rs1, rs2)
                              .astype(np.int64), dim) for k in range(3)]
    ld_shrunk = [_forward_fill(is_ld & (ld_id == k), _field(ll, "shrunk", rs1, rs2)
                               .astype(np.int64), 0) for k in range(3)]
    ld_scale = [_forward_fill(is_ld & (ld_id == k), _f32(_field(ll, "scale", rs1, rs2)),
                              np.float32(1.0)).astype(np.float32) for k in range(3)]

    is_st = op == Op.CONFIG_ST
    st_act_raw = _field(ls, "act", rs1, rs2).astype(np.int64)
    bad = is_st & (st_act_raw == Activation.LAYERNORM)
    if bad.any():
        raise fail(int(np.argmax(bad)), "activation layernorm is not simulated; use none, relu "
                   "or igelu", "act", "config_st")
    # The normalizer's registers (StoreController): every config_norm sets the statistics slot;
    # one without set_stats_id_only also sets I-GELU's / i-exp's signed 32-bit constants (zero
    # until set), qln2 or qln2_inv (q_const_type 0 / 1) and the activation's msb.
    ln = LAYOUTS["config_norm"]
    is_norm = op == Op.CONFIG_NORM

    def signed(name: str) -> np.ndarray:
        return _field(ln, name, rs1, rs2).astype(np.uint32).view(np.int32).astype(np.int64)

    norm_full = is_norm & ~_field(ln, "set_stats_id_only", rs1, rs2).astype(bool)
    stat_raw = _field(ln, "stat_id", rs1, rs2).astype(np.int64)
    bad = is_norm & (stat_raw >= NORM_STAT_IDS)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"stat_id {int(stat_raw[k])} is not a statistics slot (0.."
                   f"{NORM_STAT_IDS - 1})", "stat_id", "config_norm")
    stat_id = _forward_fill(is_norm, stat_raw, 0)
    igelu = {name: _forward_fill(norm_full, signed(name), 0)
             for name in ("igelu_qb", "igelu_qc")}
    q_type = _field(ln, "q_const_type", rs1, rs2).astype(np.int64)
    iexp = {name: _forward_fill(norm_full & (q_type == t), signed("q_const"), 0)
            for t, name in enumerate(("iexp_qln2", "iexp_qln2_inv"))}
    st_stride = _forward_fill(is_st, _field(ls, "stride", rs1, rs2).astype(np.int64), -1)
    # The store activation: config_st's two bits (clearing the msb), config_norm's msb on top.
    act_msb = _forward_fill(is_st | norm_full, np.where(
        is_st, 0, _field(ln, "act_msb", rs1, rs2).astype(np.int64)), 0)
    st_act = act_msb << 2 | _forward_fill(is_st, st_act_raw, 0)
    bad = norm_full & (st_act > Activation.SOFTMAX)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"act_msb over config_st's act {int(st_act[k]) & 3} makes activation "
                   f"{int(st_act[k])}, which is none of Gemmini's; softmax (4) needs config_st "
                   "act none", "act_msb", "config_norm")
    st_scale = _forward_fill(is_st, _f32(_field(ls, "acc_scale", rs1, rs2)),
                             np.float32(1.0)).astype(np.float32)
    st_pool = _forward_fill(is_st, _field(ls, "pool_stride", rs1, rs2).astype(np.int64), 0)

    for sel, layout, name in ((is_ld, ll, "scale"), (is_st, ls, "acc_scale"),
                              (ex_full, lx, "acc_scale")):
        bad = sel & ~np.isfinite(_f32(_field(layout, name, rs1, rs2)))
        if bad.any():
            raise fail(int(np.argmax(bad)), "the scale is not a finite float", name,
                       layout.mnemonic)

    # -- moves ----------------------------------------------------------------------------------
    mv = LAYOUTS["mvin"]  # mvin, mvin2, mvin3 and mvout share one layout
    is_mvin, is_mvout = op == Op.MVIN, op == Op.MVOUT
    is_move = is_mvin | is_mvout
    local_raw = _field(mv, "sp", rs1, rs2).astype(np.int64)
    dram_addr = _field(mv, "dram", rs1, rs2)
    rows = _field(mv, "rows", rs1, rs2).astype(np.int64)
    cols = _field(mv, "cols", rs1, rs2).astype(np.int64)
    garbage = local_raw == GARBAGE
    l_acc = (local_raw >> 31) & 1
    l_accum = (local_raw >> 30) & 1
    l_full = (local_raw >> 29) & 1
    l_norm = (local_raw >> 26) & 7
    l_row = local_raw & _ROW_MASK
    bad = is_move & garbage
    if bad.any():
        raise fail(int(np.argmax(bad)), "a move needs a real local address, not garbage", "sp")
    bad = is_move & (l_norm != 0) & ((l_acc == 0) | is_mvin)
    if bad.any():
        raise fail(int(np.argmax(bad)), "normalizer commands (local address bits 28-26) apply "
                   "only to moves out of the accumulator", "sp")
    _check_norm(is_mvout, l_norm, l_full, rows, "sp", fail)
    stats = is_mvout & np.isin(l_norm, _STATS)
    bad = is_move & (rows > dim)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"rows {int(rows[k])} exceed the array dimension {dim}", "rows")
    ld_of = np.select([funct == Funct.MVIN, funct == Funct.MVIN2, funct == Funct.MVIN3],
                      [0, 1, 2], 0)
    shrunk = np.choose(ld_of, ld_shrunk)
    # int32 elements: acc mvin (unless shrunk), full-width acc mvout
    wide = np.where(is_mvin, (l_acc == 1) & (shrunk == 0), (l_acc == 1) & (l_full == 1))
    elem = np.where(wide, 4, 1)
    max_cols = np.where(wide, shape.max_cols(True), shape.max_cols(False))
    bad = is_move & (cols > max_cols)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"cols {int(cols[k])} exceed {int(max_cols[k])} (DMA of "
                   f"{shape.dma_max_bytes} bytes per row)", "cols")
    row_bytes = cols * elem
    stride = np.where(is_mvin, np.choose(ld_of, ld_stride), st_stride)
    stride = np.where(stride < 0, row_bytes, stride)  # no config yet: rows packed
    block_stride = np.where(is_mvin, np.choose(ld_of, ld_block), dim)
    nblocks = np.where(is_move, -(-cols // dim), 0)
    repeats = np.where(is_mvin, np.choose(ld_of, ld_repeats), 1)
    bad = is_mvin & (repeats > 1) & ((l_acc == 1) | (nblocks > 1))
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, "pixel repeats apply to an mvin of at most DIM columns into the "
                   f"scratchpad (config_ld pixel_repeats {int(repeats[k])})", "sp", "mvin")
    bad = is_mvout & (st_pool != 0)
    if bad.any():
        raise fail(int(np.argmax(bad)), "max-pooling on mvout (config_st pool_stride) is not "
                   "simulated", "pool_stride", "mvout")
    bad = is_mvout & (l_acc == 0) & (l_full == 1)
    if bad.any():
        raise fail(int(np.argmax(bad)), "the full-width bit (29) needs an accumulator address",
                   "sp")
    bad = is_mvout & (l_acc == 1) & (l_accum == 1)
    if bad.any():
        raise fail(int(np.argmax(bad)), "the accumulate bit (30) means nothing on a read",
                   "sp", "mvout")
    bad = is_mvin & (l_acc == 0) & ((l_accum == 1) | (l_full == 1))
    if bad.any():
        raise fail(int(np.argmax(bad)), "accumulate / full-width bits need an accumulator "
                   "address", "sp", "mvin")
    # Local ranges: block b covers rows [row + b*block_stride, + rows).
    live = is_move & (rows > 0) & (cols > 0)
    last_row = l_row + np.maximum(nblocks - 1, 0) * block_stride + rows
    cap = np.where(l_acc == 1, shape.acc_rows, shape.sp_rows)
    bad = live & (last_row > cap)
    if bad.any():
        k = int(np.argmax(bad))
        name = "accumulator" if l_acc[k] else "scratchpad"
        raise fail(k, f"{name} rows {int(l_row[k])}..{int(last_row[k]) - 1} are out of range: "
                   f"the {name} has {int(cap[k])} rows", "sp")
    # DRAM ranges.
    offset = dram_addr.astype(np.int64) - np.int64(dram_base)
    big = dram_addr > _u64(np.iinfo(np.int64).max)
    end = offset + (rows - 1) * stride + row_bytes
    bad = live & ~stats & (big | (offset < 0)
                           | (end > (dram_bytes if dram_bytes is not None else end)))
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"DRAM bytes {int(dram_addr[k]):#x}..{int(dram_base) + int(end[k]) - 1:#x}"
                   f" fall outside the DRAM image [{dram_base:#x}, "
                   f"{dram_base + dram_bytes:#x})", "dram")
    touches_dram = is_move & ~stats  # a statistics pass touches no DRAM
    cols_out.update(
        dram=np.where(touches_dram, offset, 0), dram_stride=np.where(touches_dram, stride, 0),
        rows=np.where(is_move, rows, 0), cols=np.where(is_move, cols, 0),
        local=np.where(is_move, l_row, 0), is_acc=np.where(is_move, l_acc, 0),
        accumulate=np.where(is_mvin, l_accum, 0), full=np.where(is_mvout, l_full, 0),
        elem_bytes=np.where(is_move, elem, 0), block_stride=np.where(is_move, block_stride, 0),
        nblocks=nblocks, act=np.where(is_mvout, st_act, 0),
        repeats=np.where(is_mvin, repeats, 1),
        igelu_qb=np.where(is_mvout, igelu["igelu_qb"], 0),
        igelu_qc=np.where(is_mvout, igelu["igelu_qc"], 0))
    acc_out = is_mvout & (l_acc == 1)
    cols_out.update(norm=np.where(acc_out, l_norm, 0), stat_id=np.where(acc_out, stat_id, 0),
                    **{name: np.where(acc_out, v, 0) for name, v in iexp.items()})
    fl_out["scale"] = np.where(is_mvin, np.choose(ld_of, ld_scale),
                               np.where(is_mvout, st_scale, np.float32(1.0))).astype(np.float32)

    # -- mvout_spad: accumulator rows -> scratchpad rows, scaled as an mvout ------------------
    ms = LAYOUTS["mvout_spad"]
    is_msp = op == Op.MVOUT_SPAD
    src_raw = _field(ms, "src", rs1, rs2).astype(np.int64)
    dst_raw = _field(ms, "dst", rs1, rs2).astype(np.int64)
    bad = is_msp & ((src_raw >> 29) != 0b100)
    if bad.any():
        raise fail(int(np.argmax(bad)), "the source must be an accumulator address (no "
                   "accumulate or full-width bits)", "src", "mvout_spad")
    src_norm = (src_raw >> 26) & 7
    _check_norm(is_msp, src_norm, np.zeros(n, np.int64), rows, "src", fail, "mvout_spad")
    msp_stats = is_msp & np.isin(src_norm, _STATS)
    bad = is_msp & ((dst_raw >> 26) != 0)
    if bad.any():
        raise fail(int(np.argmax(bad)), "the destination must be a plain scratchpad address",
                   "dst", "mvout_spad")
    for name, sel_cap in (("rows", dim), ("cols", dim)):
        bad = is_msp & (_field(ms, name, rs1, rs2).astype(np.int64) > sel_cap)
        if bad.any():
            k = int(np.argmax(bad))
            raise fail(k, f"{name} {int(_field(ms, name, rs1, rs2)[k])} exceed the array "
                       f"dimension {dim}", name, "mvout_spad")
    src_row, dst_row = src_raw & _ROW_MASK, dst_raw & _ROW_MASK
    for row, cap, name, what in ((src_row, shape.acc_rows, "src", "accumulator"),
                                 (dst_row, shape.sp_rows, "dst", "scratchpad")):
        bad = is_msp & (rows > 0) & (row + rows > cap)
        if bad.any():
            k = int(np.argmax(bad))
            raise fail(k, f"{what} rows {int(row[k])}..{int(row[k] + rows[k]) - 1} are out of "
                       f"range: the {what} has {cap} rows", name, "mvout_spad")
    for name, values in (("rows", rows), ("cols", cols), ("local", src_row),
                         ("is_acc", np.ones(n, np.int64)), ("nblocks", np.ones(n, np.int64)),
                         ("act", st_act), ("dst", dst_row), ("igelu_qb", igelu["igelu_qb"]),
                         ("igelu_qc", igelu["igelu_qc"]), ("norm", src_norm),
                         ("stat_id", stat_id), ("iexp_qln2", iexp["iexp_qln2"]),
                         ("iexp_qln2_inv", iexp["iexp_qln2_inv"])):
        cols_out[name] = np.where(is_msp, values, cols_out[name])
    fl_out["scale"] = np.where(is_msp, st_scale, fl_out["scale"]).astype(np.float32)

    # -- execute operands -----------------------------------------------------------------------
    pl = LAYOUTS["preload"]
    cp = LAYOUTS["compute_preloaded"]
    is_pre = op == Op.PRELOAD
    is_comp = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)

    def local(layout: Layout, name: str) -> dict[str, np.ndarray]:
        raw = _field(layout, name, rs1, rs2).astype(np.int64)
        return {"raw": raw, "garbage": (raw == GARBAGE).astype(np.int64),
                "acc": (raw >> 31) & 1, "accumulate": (raw >> 30) & 1,
                "full": (raw >> 29) & 1, "norm": (raw >> 26) & 7, "row": raw & _ROW_MASK,
                "rows": _field(layout, f"{name}_rows", rs1, rs2).astype(np.int64),
                "cols": _field(layout, f"{name}_cols", rs1, rs2).astype(np.int64)}

    pre_bd, pre_c = local(pl, "bd"), local(pl, "c")
    comp_a, comp_bd = local(cp, "a"), local(cp, "bd")
    for sel, operands, mnem in ((is_pre, (("bd", pre_bd), ("c", pre_c)), "preload"),
                                (is_comp, (("a", comp_a), ("bd", comp_bd)), "compute")):
        for name, o in operands:
            real = sel & (o["garbage"] == 0)
            for what in ("rows", "cols"):
                bad = sel & (o[what] > dim)
                if bad.any():
                    k = int(np.argmax(bad))
                    raise fail(k, f"{name}_{what} {int(o[what][k])} exceeds the array "
                               f"dimension {dim}", f"{name}_{what}", mnem)
            bad = real & (o["norm"] != 0)
            if bad.any():
                raise fail(int(np.argmax(bad)), "normalizer commands (local address bits 28-26) "
                           "are not simulated", name, mnem)
            if name != "c":
                bad = real & ((o["accumulate"] == 1) | (o["full"] == 1))
                if bad.any():
                    raise fail(int(np.argmax(bad)), "accumulate / full-width bits mean nothing "
                               "on an operand the array reads", name, mnem)
    bad = is_pre & (pre_c["garbage"] == 0) & (pre_c["acc"] == 0) & (
        (pre_c["accumulate"] == 1) | (pre_c["full"] == 1))
    if bad.any():
        raise fail(int(np.argmax(bad)), "accumulate / full-width bits need an accumulator "
                   "address", "c", "preload")

    # Pair every compute with the preload right before it in the execute stream (WS); under
    # OS a compute belongs to the accumulation the last preload started.
    exec_idx = np.flatnonzero(unit == Unit.EXECUTE)
    prev_exec = np.full(n, -1, np.int64)
    prev_exec[exec_idx[1:]] = exec_idx[:-1]
    last_pre = np.maximum.accumulate(np.where(is_pre, np.arange(n), -1)) if n else prev_exec
    os_now = cfg["dataflow"] == 0
    ws_paired = is_comp & (prev_exec >= 0) & is_pre[np.maximum(prev_exec, 0)]
    paired = np.where(os_now, is_comp & (last_pre >= 0), ws_paired)
    src = np.where(os_now, np.maximum(last_pre, 0), np.where(ws_paired, prev_exec, 0))
    c_garbage = np.where(is_pre, pre_c["garbage"], np.where(paired, pre_c["garbage"][src], 1))

    def pick(key: str) -> np.ndarray:
        return np.where(is_pre, pre_c[key], np.where(paired, pre_c[key][src], 0))

    c_row, c_acc, c_accum = pick("row"), pick("acc"), pick("accumulate")
    c_rows, c_cols = pick("rows"), pick("cols")
    merged = is_pre & (prev_exec >= 0) & is_comp[np.maximum(prev_exec, 0)]

    a_stride = np.where(is_comp, cfg["a_stride"], 1)
    c_stride = np.where(is_comp, cfg["c_stride"], 1)
    ws = cfg["dataflow"] == 1
    bad = is_comp & ws & (cfg["a_transpose"] == 1) & (cfg["b_transpose"] == 1)
    if bad.any():
        raise fail(int(np.argmax(bad)), "the weight-stationary dataflow cannot transpose both A "
                   "and B", "b_transpose", "compute")

    def check_range(sel: np.ndarray, row: np.ndarray, acc: np.ndarray, count: np.ndarray,
                    step: np.ndarray, name: str, mnem: str) -> None:
        last = row + np.maximum(count - 1, 0) * step + 1
        cap = np.where(acc == 1, shape.acc_rows, shape.sp_rows)
        bad = sel & (count > 0) & (last > cap)
        if bad.any():
            k = int(np.argmax(bad))
            what = "accumulator" if acc[k] else "scratchpad"
            raise fail(k, f"{what} rows {int(row[k])}..{int(last[k]) - 1} are out of range: the "
                       f"{what} has {int(cap[k])} rows", name, mnem)

    # The instruction carries an operand's logical rows x cols; a transposed operand is stored
    # transposed, so the block the array reads is cols x rows (ExecuteController's a_cols =
    # Mux(a_transpose, a_rows, a_cols), likewise for B under OS and the preloaded B under WS).
    def stored(o: dict[str, np.ndarray], flip: np.ndarray) -> None:
        rows_, cols_ = o["rows"].copy(), o["cols"].copy()
        o["rows"], o["cols"] = np.where(flip, cols_, rows_), np.where(flip, rows_, cols_)

    stored(comp_a, cfg["a_transpose"] == 1)
    stored(comp_bd, ~ws & (cfg["b_transpose"] == 1))
    stored(pre_bd, ws & (cfg["b_transpose"] == 1))
    check_range(is_comp & (comp_a["garbage"] == 0), comp_a["row"], comp_a["acc"],
                comp_a["rows"], a_stride, "a", "compute")
    check_range(is_comp & (comp_bd["garbage"] == 0), comp_bd["row"], comp_bd["acc"],
                comp_bd["rows"], np.ones(n, np.int64), "bd", "compute")
    check_range(is_pre & (pre_bd["garbage"] == 0), pre_bd["row"], pre_bd["acc"],
                pre_bd["rows"], np.ones(n, np.int64), "bd", "preload")
    check_range((is_pre | is_comp) & (c_garbage == 0), c_row, c_acc, c_rows,
                np.where(is_comp, c_stride, cfg["c_stride"]), "c", "preload")

    bd = {k: np.where(is_pre, pre_bd[k], np.where(is_comp, comp_bd[k], 0))
          for k in ("row", "garbage", "acc", "rows", "cols")}
    cols_out.update(
        a=np.where(is_comp, comp_a["row"], 0), a_garbage=np.where(is_comp, comp_a["garbage"], 1),
        a_acc=np.where(is_comp, comp_a["acc"], 0), a_rows=np.where(is_comp, comp_a["rows"], 0),
        a_cols=np.where(is_comp, comp_a["cols"], 0), a_stride=a_stride,
        bd=bd["row"], bd_garbage=np.where(is_pre | is_comp, bd["garbage"], 1), bd_acc=bd["acc"],
        bd_rows=bd["rows"], bd_cols=bd["cols"],
        c=c_row, c_garbage=np.where(is_pre | is_comp, c_garbage, 1), c_acc=c_acc,
        c_accumulate=c_accum, c_rows=c_rows, c_cols=c_cols, c_stride=c_stride,
        dataflow=cfg["dataflow"], a_transpose=cfg["a_transpose"],
        b_transpose=cfg["b_transpose"], sys_shift=cfg["sys_shift"], ex_act=cfg["ex_act"],
        merged=merged.astype(np.int64))
    fl_out["ex_scale"] = ex_scale

    ints = np.stack([cols_out[name] for name in INT_COLUMNS], axis=1)
    if ints.size and (ints.max() > np.iinfo(np.int32).max or ints.min() < np.iinfo(np.int32).min):
        r, c = np.unravel_index(int(np.argmax(np.abs(ints))), ints.shape)
        raise fail(int(r), f"value {int(ints[r, c])} does not fit the simulator's 32-bit fields",
                   INT_COLUMNS[c])
    floats = np.stack([fl_out[name] for name in FLOAT_COLUMNS], axis=1).astype(np.float32)
    # MACs: logical A (rows x k) against the weights in the array (WS: those the last
    # compute_preloaded flipped in from its preload) or the compute's own B (OS).
    logical = {"a": (np.where(cfg["a_transpose"] == 1, comp_a["cols"], comp_a["rows"]),
                     np.where(cfg["a_transpose"] == 1, comp_a["rows"], comp_a["cols"]))}
    pre_flip = ws & (cfg["b_transpose"] == 1)
    w_rows = np.where(pre_bd["garbage"] == 1, 0, np.where(pre_flip, pre_bd["cols"],
                                                           pre_bd["rows"]))
    w_cols = np.where(pre_bd["garbage"] == 1, 0, np.where(pre_flip, pre_bd["rows"],
                                                           pre_bd["cols"]))
    is_cp = op == Op.COMPUTE_PRELOADED
    flip_src = np.where(is_cp & ws_paired, prev_exec, -1)
    last_flip = np.maximum.accumulate(np.where(is_cp, np.arange(n), -1)) if n else flip_src
    src_pre = np.where(last_flip >= 0, flip_src[np.maximum(last_flip, 0)], -1)
    ws_w_rows = np.where(src_pre >= 0, w_rows[np.maximum(src_pre, 0)], 0)
    ws_w_cols = np.where(src_pre >= 0, w_cols[np.maximum(src_pre, 0)], 0)
    os_b_flip = cfg["b_transpose"] == 1
    os_rows = np.where(comp_bd["garbage"] == 1, 0, np.where(os_b_flip, comp_bd["cols"],
                                                             comp_bd["rows"]))
    os_cols = np.where(comp_bd["garbage"] == 1, 0, np.where(os_b_flip, comp_bd["rows"],
                                                             comp_bd["cols"]))
    k_rows = np.where(ws, ws_w_rows, os_rows)
    n_cols = np.where(ws, ws_w_cols, os_cols)
    live = is_comp & (comp_a["garbage"] == 0)
    macs = np.where(live, logical["a"][0] * np.minimum(logical["a"][1], k_rows) * n_cols, 0)
    fed = np.where(live, comp_a["rows"], 0)
    uses_os = bool(((is_pre | is_comp) & (cfg["dataflow"] == 0)).any())
    reads_acc = bool((((is_comp & (comp_a["garbage"] == 0) & (comp_a["acc"] == 1))
                       | ((is_pre | is_comp) & (bd["garbage"] == 0) & (bd["acc"] == 1)))).any())
    alloc = SimShape(dim, memory_bucket(shape.sp_rows), memory_bucket(shape.acc_rows),
                     shape.dma_max_bytes)
    acc_reads = (is_mvout & (l_acc == 1) & (l_full == 0)) | is_msp
    uses_norm = bool((stats | msp_stats).any()
                     or (acc_reads & (st_act == Activation.SOFTMAX)).any())
    return DecodedTrace(ints=ints.astype(np.int32), floats=floats, origin=origin, shape=alloc,
                        dram_bytes=-1 if dram_bytes is None else int(dram_bytes),
                        uses_os=uses_os, reads_acc_operands=reads_acc,
                        macs=int(macs.sum()), array_macs=int(fed.sum()) * dim * dim,
                        moves_to_spad=bool(is_msp.any()), uses_norm=uses_norm,
                        pixel_repeats=bool((is_mvin & (repeats > 1)).any()),
                        sp_half_rows=shape.sp_rows // 2)


def _check_norm(sel: np.ndarray, norm: np.ndarray, full: np.ndarray, rows: np.ndarray,
                field: str, fail: Any, mnemonic: str | None = None) -> None:
    """Reject the normalizer commands the simulator does not run (layernorm's 1-4) and
    statistics passes that are not one row through the normalizer."""
    bad = sel & (norm >= NormCmd.SUM) & (norm <= NormCmd.INV_STDDEV)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"normalizer command {int(norm[k])} ({NormCmd(int(norm[k])).name}, "
                   "layernorm's) is not simulated; softmax uses 0, 5, 6 and 7", field, mnemonic)
    stats = sel & (norm >= NormCmd.MAX)
    bad = stats & (full == 1)
    if bad.any():
        raise fail(int(np.argmax(bad)), "a statistics pass (normalizer command 5-7) reads "
                   "through the normalizer, not full width (bit 29)", field, mnemonic)
    bad = stats & (rows != 1)
    if bad.any():
        k = int(np.argmax(bad))
        raise fail(k, f"a statistics pass (normalizer command {int(norm[k])}) moves one row, "
                   f"not {int(rows[k])}", "rows", mnemonic)


def pad_decoded(decoded: DecodedTrace, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ints, floats)`` padded with NOP rows to ``length`` (a jit length bucket)."""
    n = len(decoded)
    if length < n:
        raise ValueError(f"cannot pad {n} instructions to {length}")
    ints = np.zeros((length, len(INT_COLUMNS)), np.int32)
    ints[:n] = decoded.ints
    ints[n:, COL["unit"]] = Unit.CONTROL
    ints[n:, COL["a_garbage"]] = ints[n:, COL["bd_garbage"]] = ints[n:, COL["c_garbage"]] = 1
    floats = np.ones((length, len(FLOAT_COLUMNS)), np.float32)
    floats[:n] = decoded.floats
    return ints, floats


def memory_bucket(rows: int) -> int:
    """Rows the simulator allocates for a memory of ``rows`` rows: the next power of two, so
    hardware points of similar size share one compiled simulator (ranges are checked against
    the real size when decoding)."""
    return 1 << max(0, math.ceil(math.log2(max(rows, 1))))


__all__ = [
    "COL",
    "FCOL",
    "FLOAT_COLUMNS",
    "INT_COLUMNS",
    "NORM_STAT_IDS",
    "STAT_CMDS",
    "UNIT_NAMES",
    "DecodedTrace",
    "Op",
    "SimShape",
    "Unit",
    "decode",
    "memory_bucket",
    "pad_decoded",
    "raw_arrays",
]
