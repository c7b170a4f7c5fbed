"""The moves for the trace decoder: mvin, mvout and mvout_spad, their ranges and checks.

`accel.sim.decode` hands this module the instructions that move data between DRAM and the
local memories (mvin, mvin2, mvin3, mvout) or between the accumulator and the scratchpad
(mvout_spad) with the configuration in force (`accel.sim.decode_config`); it resolves each
move's element width, strides, blocks and pixel repeats, checks its local and DRAM ranges and
its address bits (normalizer commands, statistics passes, accumulate / full-width bits), and
fills the move columns of the decoded trace. It is its own module because those checks are
most of the decoder's rules and concern only the moves.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from accel.isa import LAYOUTS, Funct, NormCmd
from accel.sim.decode_config import Config, StoreConfig
from accel.sim.decode_fields import GARBAGE, ROW_MASK, STATS, Words, split_local, u64

if TYPE_CHECKING:
    from accel.sim.decode import SimShape


@dataclasses.dataclass(frozen=True)
class Moves:
    """The decoded mvin / mvout: ``columns`` (the int columns the moves fill, zero for other
    instructions) and ``scale`` (float32, 1.0 for others); ``rows`` / ``cols`` are the move
    layout's fields of every instruction (mvout_spad reads them too). ``stats`` marks the
    statistics passes, ``acc_narrow`` the mvouts from the accumulator that are not full
    width (through the normalizer's read path), ``pixel_repeats`` whether an mvin repeats
    pixels."""

    columns: dict[str, np.ndarray]
    scale: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    stats: np.ndarray
    acc_narrow: np.ndarray
    pixel_repeats: bool


def decode_moves(w: Words, funct: np.ndarray, is_mvin: np.ndarray, is_mvout: np.ndarray,
                 shape: SimShape, config: Config, dram_bytes: int | None,
                 dram_base: int) -> Moves:
    """Decode and check the mvin / mvout (``funct``: each instruction's, int64). Raises
    `TraceError` at the first bad move."""
    dim = shape.dim
    mv = LAYOUTS["mvin"]  # mvin, mvin2, mvin3 and mvout share one layout
    is_move = is_mvin | is_mvout
    local_raw = w.field(mv, "sp").astype(np.int64)
    dram_addr = w.field(mv, "dram")
    rows = w.field(mv, "rows").astype(np.int64)
    cols = w.field(mv, "cols").astype(np.int64)
    loc = split_local(local_raw)
    _check_move_local(w, is_mvin, is_mvout, local_raw == GARBAGE, loc, rows, dim)
    stats = is_mvout & np.isin(loc["norm"], STATS)
    ld, st = config.load, config.store
    ld_of = np.select([funct == Funct.MVIN, funct == Funct.MVIN2, funct == Funct.MVIN3],
                      [0, 1, 2], 0)
    shrunk = np.choose(ld_of, ld.shrunk)
    # int32 elements: acc mvin (unless shrunk), full-width acc mvout
    wide = np.where(is_mvin, (loc["acc"] == 1) & (shrunk == 0),
                    (loc["acc"] == 1) & (loc["full"] == 1))
    elem = np.where(wide, 4, 1)
    max_cols = np.where(wide, shape.max_cols(True), shape.max_cols(False))
    bad = is_move & (cols > max_cols)
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"cols {int(cols[k])} exceed {int(max_cols[k])} (DMA of "
                     f"{shape.dma_max_bytes} bytes per row)", "cols")
    row_bytes = cols * elem
    stride = np.where(is_mvin, np.choose(ld_of, ld.stride), st.stride)
    stride = np.where(stride < 0, row_bytes, stride)  # no config yet: rows packed
    block_stride = np.where(is_mvin, np.choose(ld_of, ld.block_stride), dim)
    nblocks = np.where(is_move, -(-cols // dim), 0)
    repeats = np.where(is_mvin, np.choose(ld_of, ld.repeats), 1)
    _check_move_bits(w, is_mvin, is_mvout, loc, repeats, nblocks, st.pool)
    live = is_move & (rows > 0) & (cols > 0)
    _check_local_range(w, shape, live, loc, rows, nblocks, block_stride)
    offset = _dram_offset(w, live & ~stats, dram_addr, rows, stride, row_bytes, dram_bytes,
                          dram_base)
    touches_dram = is_move & ~stats  # a statistics pass touches no DRAM
    columns = dict(
        dram=np.where(touches_dram, offset, 0), dram_stride=np.where(touches_dram, stride, 0),
        rows=np.where(is_move, rows, 0), cols=np.where(is_move, cols, 0),
        local=np.where(is_move, loc["row"], 0), is_acc=np.where(is_move, loc["acc"], 0),
        accumulate=np.where(is_mvin, loc["accumulate"], 0),
        full=np.where(is_mvout, loc["full"], 0), elem_bytes=np.where(is_move, elem, 0),
        block_stride=np.where(is_move, block_stride, 0), nblocks=nblocks,
        act=np.where(is_mvout, st.act, 0), repeats=np.where(is_mvin, repeats, 1),
        igelu_qb=np.where(is_mvout, st.igelu["igelu_qb"], 0),
        igelu_qc=np.where(is_mvout, st.igelu["igelu_qc"], 0))
    acc_out = is_mvout & (loc["acc"] == 1)
    columns.update(norm=np.where(acc_out, loc["norm"], 0),
                   stat_id=np.where(acc_out, st.stat_id, 0),
                   **{name: np.where(acc_out, v, 0) for name, v in st.iexp.items()})
    scale = np.where(is_mvin, np.choose(ld_of, ld.scale),
                     np.where(is_mvout, st.scale, np.float32(1.0))).astype(np.float32)
    return Moves(columns=columns, scale=scale, rows=rows, cols=cols, stats=stats,
                 acc_narrow=is_mvout & (loc["acc"] == 1) & (loc["full"] == 0),
                 pixel_repeats=bool((is_mvin & (repeats > 1)).any()))


def _check_move_local(w: Words, is_mvin: np.ndarray, is_mvout: np.ndarray,
                      garbage: np.ndarray, loc: dict[str, np.ndarray], rows: np.ndarray,
                      dim: int) -> None:
    """A move's local address is real, its normalizer command one the simulator runs on a
    move out of the accumulator, and it moves at most DIM rows."""
    is_move = is_mvin | is_mvout
    bad = is_move & garbage
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "a move needs a real local address, not garbage",
                     "sp")
    bad = is_move & (loc["norm"] != 0) & ((loc["acc"] == 0) | is_mvin)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "normalizer commands (local address bits 28-26) "
                     "apply only to moves out of the accumulator", "sp")
    _check_norm(is_mvout, loc["norm"], loc["full"], rows, "sp", w.fail)
    bad = is_move & (rows > dim)
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"rows {int(rows[k])} exceed the array dimension {dim}", "rows")


def _check_move_bits(w: Words, is_mvin: np.ndarray, is_mvout: np.ndarray,
                     loc: dict[str, np.ndarray], repeats: np.ndarray, nblocks: np.ndarray,
                     pool: np.ndarray) -> None:
    """Pixel repeats only on a narrow mvin into the scratchpad, no pooling on mvout, and the
    accumulate / full-width bits only where they mean something."""
    l_acc, l_accum, l_full = loc["acc"], loc["accumulate"], loc["full"]
    bad = is_mvin & (repeats > 1) & ((l_acc == 1) | (nblocks > 1))
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, "pixel repeats apply to an mvin of at most DIM columns into the "
                     f"scratchpad (config_ld pixel_repeats {int(repeats[k])})", "sp", "mvin")
    bad = is_mvout & (pool != 0)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "max-pooling on mvout (config_st pool_stride) is not "
                     "simulated", "pool_stride", "mvout")
    bad = is_mvout & (l_acc == 0) & (l_full == 1)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "the full-width bit (29) needs an accumulator "
                     "address", "sp")
    bad = is_mvout & (l_acc == 1) & (l_accum == 1)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "the accumulate bit (30) means nothing on a read",
                     "sp", "mvout")
    bad = is_mvin & (l_acc == 0) & ((l_accum == 1) | (l_full == 1))
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "accumulate / full-width bits need an accumulator "
                     "address", "sp", "mvin")


def _check_local_range(w: Words, shape: SimShape, live: np.ndarray, loc: dict[str, np.ndarray],
                       rows: np.ndarray, nblocks: np.ndarray, block_stride: np.ndarray) -> None:
    """Block b of a move covers local rows [row + b*block_stride, + rows): all within the
    memory."""
    l_acc, l_row = loc["acc"], loc["row"]
    last_row = l_row + np.maximum(nblocks - 1, 0) * block_stride + rows
    cap = np.where(l_acc == 1, shape.acc_rows, shape.sp_rows)
    bad = live & (last_row > cap)
    if bad.any():
        k = int(np.argmax(bad))
        name = "accumulator" if l_acc[k] else "scratchpad"
        raise w.fail(k, f"{name} rows {int(l_row[k])}..{int(last_row[k]) - 1} are out of "
                     f"range: the {name} has {int(cap[k])} rows", "sp")


def _dram_offset(w: Words, checked: np.ndarray, dram_addr: np.ndarray, rows: np.ndarray,
                 stride: np.ndarray, row_bytes: np.ndarray, dram_bytes: int | None,
                 dram_base: int) -> np.ndarray:
    """Each move's DRAM address as an offset into the DRAM image; the ``checked`` moves' bytes
    must lie within it (``dram_bytes`` None: only that they lie above ``dram_base``)."""
    offset = dram_addr.astype(np.int64) - np.int64(dram_base)
    big = dram_addr > u64(np.iinfo(np.int64).max)
    end = offset + (rows - 1) * stride + row_bytes
    bad = checked & (big | (offset < 0) | (end > (dram_bytes if dram_bytes is not None else end)))
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"DRAM bytes {int(dram_addr[k]):#x}.."
                     f"{int(dram_base) + int(end[k]) - 1:#x} fall outside the DRAM image "
                     f"[{dram_base:#x}, {dram_base + dram_bytes:#x})", "dram")
    return offset


def decode_mvout_spad(w: Words, is_msp: np.ndarray, moves: Moves, store: StoreConfig,
                      shape: SimShape, ints: dict[str, np.ndarray],
                      floats: dict[str, np.ndarray]) -> np.ndarray:
    """Check the mvout_spad (accumulator rows -> scratchpad rows, scaled as an mvout) and set
    their columns in ``ints`` / ``floats``; returns which are statistics passes. Raises
    `TraceError` at the first bad one."""
    n, dim = len(w), shape.dim
    ms = LAYOUTS["mvout_spad"]
    rows, cols = moves.rows, moves.cols
    src_raw = w.field(ms, "src").astype(np.int64)
    dst_raw = w.field(ms, "dst").astype(np.int64)
    bad = is_msp & ((src_raw >> 29) != 0b100)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "the source must be an accumulator address (no "
                     "accumulate or full-width bits)", "src", "mvout_spad")
    src_norm = (src_raw >> 26) & 7
    _check_norm(is_msp, src_norm, np.zeros(n, np.int64), rows, "src", w.fail, "mvout_spad")
    msp_stats = is_msp & np.isin(src_norm, STATS)
    bad = is_msp & ((dst_raw >> 26) != 0)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "the destination must be a plain scratchpad address",
                     "dst", "mvout_spad")
    for name, sel_cap in (("rows", dim), ("cols", dim)):
        bad = is_msp & (w.field(ms, name).astype(np.int64) > sel_cap)
        if bad.any():
            k = int(np.argmax(bad))
            raise w.fail(k, f"{name} {int(w.field(ms, name)[k])} exceed the array "
                         f"dimension {dim}", name, "mvout_spad")
    src_row, dst_row = src_raw & ROW_MASK, dst_raw & ROW_MASK
    for row, cap, name, what in ((src_row, shape.acc_rows, "src", "accumulator"),
                                 (dst_row, shape.sp_rows, "dst", "scratchpad")):
        bad = is_msp & (rows > 0) & (row + rows > cap)
        if bad.any():
            k = int(np.argmax(bad))
            raise w.fail(k, f"{what} rows {int(row[k])}..{int(row[k] + rows[k]) - 1} are out "
                         f"of range: the {what} has {cap} rows", name, "mvout_spad")
    for name, values in (("rows", rows), ("cols", cols), ("local", src_row),
                         ("is_acc", np.ones(n, np.int64)), ("nblocks", np.ones(n, np.int64)),
                         ("act", store.act), ("dst", dst_row),
                         ("igelu_qb", store.igelu["igelu_qb"]),
                         ("igelu_qc", store.igelu["igelu_qc"]), ("norm", src_norm),
                         ("stat_id", store.stat_id), ("iexp_qln2", store.iexp["iexp_qln2"]),
                         ("iexp_qln2_inv", store.iexp["iexp_qln2_inv"])):
        ints[name] = np.where(is_msp, values, ints[name])
    floats["scale"] = np.where(is_msp, store.scale, floats["scale"]).astype(np.float32)
    return msp_stats


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


__all__ = ["Moves", "decode_moves", "decode_mvout_spad"]
