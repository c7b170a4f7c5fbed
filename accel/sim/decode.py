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

This module holds what decoding produces (`Op`, `Unit`, the columns, `SimShape`,
`DecodedTrace`) and runs the stages in order; the stages live beside it, one concern each:
`accel.sim.decode_config` (step 3), `accel.sim.decode_moves` (the moves' fields and checks),
`accel.sim.decode_execute` (step 4, the operands' checks and the MAC count), on the bit-field
helpers of `accel.sim.decode_fields`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import numpy as np

from accel.isa import LAYOUTS, STAT_CMDS, Activation, Funct, IsaParams, Layout, trace_error
from accel.sim.decode_config import NORM_STAT_IDS, resolve_config
from accel.sim.decode_execute import decode_execute
from accel.sim.decode_fields import GARBAGE  # noqa: F401  (re-exported)
from accel.sim.decode_fields import STATS, Words, u64
from accel.sim.decode_moves import decode_moves, decode_mvout_spad
from accel.trace import Trace, TraceArrays


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
        return np.isin(self.column("norm"), STATS)

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

    def mvin_rows_before(self) -> np.ndarray:
        """Rows each instruction writes before its first local row: an mvin with pixel repeats
        p also writes the p - 1 rows before it (``PixelRepeater.scala`` ~60-68: row ``addr -
        r`` for repeat r), down to the floor of its half of the scratchpad (0, or half the
        rows); ``ReservationStation.scala`` ~297-307 widens the tracked range the same way.
        0 for every other instruction (their ``repeats`` is 1)."""
        local = self.column("local").astype(np.int64)
        floor = np.where(local < self.sp_half_rows, 0, self.sp_half_rows)
        return np.minimum(self.column("repeats").astype(np.int64) - 1, local - floor)

    def _move_bytes(self) -> np.ndarray:
        return (self.column("rows").astype(np.int64) * self.column("cols")
                * self.column("elem_bytes"))


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
            stray = values[sel] & u64(layout.reserved_mask(reg))
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
    arrays, origin, by_fsm = _expand_loops(arrays, params)
    funct = arrays.funct.astype(np.int64)
    w = Words(arrays.rs1, arrays.rs2, origin)
    n = len(funct)
    shape = SimShape.from_params(params)
    op, unit = _classify(arrays, funct)
    ints: dict[str, np.ndarray] = {name: np.zeros(n, np.int64) for name in INT_COLUMNS}
    floats = {name: np.ones(n, np.float32) for name in FLOAT_COLUMNS}
    ints["op"], ints["unit"] = op, unit
    ints["fsm"] = by_fsm.astype(np.int64)

    config = resolve_config(w, op == Op.CONFIG_EX, op == Op.CONFIG_LD, op == Op.CONFIG_ST,
                            op == Op.CONFIG_NORM, shape.dim, dataflow)
    moves = decode_moves(w, funct, op == Op.MVIN, op == Op.MVOUT, shape, config, dram_bytes,
                         dram_base)
    ints.update(moves.columns)
    floats["scale"] = moves.scale
    is_msp = op == Op.MVOUT_SPAD
    msp_stats = decode_mvout_spad(w, is_msp, moves, config.store, shape, ints, floats)
    ex = decode_execute(w, op == Op.PRELOAD, op == Op.COMPUTE_PRELOADED,
                        op == Op.COMPUTE_ACCUMULATED, unit == Unit.EXECUTE, config.execute,
                        shape)
    ints.update(ex.columns)
    floats["ex_scale"] = config.execute.scale

    int_rows, float_rows = _stack(w, ints, floats)
    dim = shape.dim
    alloc = SimShape(dim, memory_bucket(shape.sp_rows), memory_bucket(shape.acc_rows),
                     shape.dma_max_bytes)
    acc_reads = moves.acc_narrow | is_msp
    uses_norm = bool((moves.stats | msp_stats).any()
                     or (acc_reads & (config.store.act == Activation.SOFTMAX)).any())
    return DecodedTrace(ints=int_rows.astype(np.int32), floats=float_rows, origin=origin,
                        shape=alloc, dram_bytes=-1 if dram_bytes is None else int(dram_bytes),
                        uses_os=ex.uses_os, reads_acc_operands=ex.reads_acc,
                        macs=int(ex.macs.sum()), array_macs=int(ex.fed.sum()) * dim * dim,
                        moves_to_spad=bool(is_msp.any()), uses_norm=uses_norm,
                        pixel_repeats=moves.pixel_repeats, sp_half_rows=shape.sp_rows // 2)


def _expand_loops(arrays: TraceArrays,
                  params: IsaParams) -> tuple[TraceArrays, np.ndarray, np.ndarray]:
    """``arrays`` with its CISC loops expanded (`accel.sim.cisc`), each decoded instruction's
    index in the caller's trace, and which instructions a loop FSM issued."""
    funct = arrays.funct.astype(np.int64)
    if np.isin(funct, np.array(sorted(_LOOP_FUNCTS))).any():
        from accel.sim.cisc import expand_loops  # only traces with CISC loops pay for it

        return expand_loops(arrays, params)
    return arrays, np.arange(len(funct), dtype=np.int64), np.zeros(len(funct), bool)


def _classify(arrays: TraceArrays, funct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each instruction's `Op` and `Unit` (int64), after refusing reserved bits its layout
    does not own."""
    op = np.zeros(len(funct), np.int64)
    for f, o in _OP_OF_FUNCT.items():
        op[funct == f] = o
    is_config = funct == Funct.CONFIG
    cfg_type = (arrays.rs1 & u64(3)).astype(np.int64)
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
    return op, unit


def _stack(w: Words, ints: dict[str, np.ndarray],
           floats: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The columns as ``[n, len(INT_COLUMNS)]`` int64 (checked to fit int32) and
    ``[n, len(FLOAT_COLUMNS)]`` float32 arrays."""
    int_rows = np.stack([ints[name] for name in INT_COLUMNS], axis=1)
    if int_rows.size and (int_rows.max() > np.iinfo(np.int32).max
                          or int_rows.min() < np.iinfo(np.int32).min):
        r, c = np.unravel_index(int(np.argmax(np.abs(int_rows))), int_rows.shape)
        raise w.fail(int(r), f"value {int(int_rows[r, c])} does not fit the simulator's 32-bit "
                     "fields", INT_COLUMNS[c])
    float_rows = np.stack([floats[name] for name in FLOAT_COLUMNS], axis=1).astype(np.float32)
    return int_rows, float_rows


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
