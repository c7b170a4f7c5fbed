"""The instructions that move the simulator backend's blocks and multiply them: ``mvin``s of
DRAM blocks into the scratchpad or onto an accumulator, ``mvout_spad`` of a requantized
accumulator block, a dot's ``preload`` / ``compute`` pairs, and a store's ``mvout``s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accel.isa import Instruction, LocalAddr
from baco.dsl.ir import Loc
from baco.dsl.sim_blocks import (
    AccTile,
    AccView,
    CapacityError,
    DotExpr,
    DramBlock,
    OnChipBlock,
    SpTile,
    consecutive,
    row_runs,
)
from baco.dsl.sim_chip import ACC_DATA, MOVES, SP_DATA, Chip
from baco.dsl.types import int8, int32

GARBAGE = LocalAddr.garbage()


def to_scratchpad(chip: Chip, block: DramBlock | OnChipBlock, loc: Loc) -> SpTile:
    """Move a dot operand into the scratchpad (once, while its rows are not reused)."""
    if isinstance(block, OnChipBlock):
        if not block.tile.alive:
            raise loc.error("sim backend: an on-chip dot operand was overwritten in the "
                            "scratchpad before its dot; use smaller blocks", CapacityError)
        return block.tile
    if block.sp is not None and block.sp.alive:
        return block.sp
    if len(block.shape) != 2 or block.dtype != int8:
        raise loc.error(f"sim backend: dot operands must be 2-D int8 blocks loaded from "
                        f"DRAM, got {block.dtype} {block.shape}")
    d = chip.dim
    rows, cols = block.shape
    nrb, ncb = -(-rows // d), -(-cols // d)
    base = chip.sp_alloc(nrb * ncb * d, loc, f"a {rows}x{cols} block")
    tile = SpTile(base, nrb * ncb * d, ncb, np.zeros((nrb, ncb, 2), np.int64))
    runs = row_runs(block.offsets, block.mask, d, block.loc, "load")
    valid = np.zeros(rows, np.int64)
    for r0, n, _, _, p in runs:
        valid[r0:r0 + n] = p
    for rb in range(nrb):
        part = valid[rb * d:(rb + 1) * d]
        for cb in range(ncb):
            clipped = np.clip(part - cb * d, 0, d)
            live = np.flatnonzero(clipped)
            vr = int(live[-1]) + 1 if live.size else 0
            vc = int(clipped.max()) if live.size else 0
            tile.valid[rb, cb] = (vr, vc)
            short = np.flatnonzero(clipped[:vr] < vc)
            for start, length in consecutive(short):
                chip.zero_fill(tile.row(rb, cb, d) + start, length, vc, acc=False)
    mvin_runs(chip, block, runs, SP_DATA, None, chip.max_cols[False],
              lambda rb, cb, row: tile.row(rb, cb, d) + row)
    chip.sp_tiles.append(tile)
    block.sp = tile
    return tile


def onchip_tile(chip: Chip, tile: AccTile, loc: Loc) -> SpTile:
    """Scratchpad rows for an accumulator block about to move there (its unwritten DIM-blocks
    zeroed first)."""
    ensure_written(chip, tile, np.argwhere(np.ones_like(tile.written)))
    d = chip.dim
    rows, cols = tile.shape
    nrb, ncb = tile.written.shape
    base = chip.sp_alloc(nrb * ncb * d, loc, f"a {rows}x{cols} on-chip block")
    return SpTile(base, nrb * ncb * d, ncb, np.zeros((nrb, ncb, 2), np.int64))


def requantize_to_scratchpad(chip: Chip, view: AccView, tile: AccTile, sp: SpTile) -> None:
    """``mvout_spad`` of every DIM-block with the view's scale and activation."""
    d = chip.dim
    rows, cols = tile.shape
    nrb, ncb = tile.written.shape
    chip.config_st(None, view.act, 1.0 if view.scale is None else view.scale)
    for rb in range(nrb):
        for cb in range(ncb):
            sp.valid[rb, cb] = (min(d, rows - rb * d), min(d, cols - cb * d))
            chip.ins.append(Instruction.mvout_spad(
                LocalAddr.accumulator(tile.row(rb, cb, d)), sp.row(rb, cb, d),
                *(int(v) for v in sp.valid[rb, cb])))


def ensure_written(chip: Chip, tile: AccTile, blocks: Any) -> None:
    """Zero the accumulator DIM-blocks that no dot or load has written yet."""
    d = chip.dim
    for mb, nb in blocks:
        if not tile.written[mb, nb]:
            crows = min(d, tile.shape[0] - mb * d)
            ccols = min(d, tile.shape[1] - nb * d)
            chip.zero_fill(tile.row(mb, nb, d), crows, ccols, acc=True)
            tile.written[mb, nb] = True


def emit_dot(chip: Chip, tile: AccTile, expr: DotExpr, loc: Loc) -> None:
    """``tile (+)= a @ b``: the weights of each (k, n) block preloaded once and reused over
    the M blocks."""
    d = chip.dim
    if (expr.a.shape[0], expr.b.shape[1]) != tile.shape:
        raise loc.error(f"sim backend: dot result {expr.a.shape[0]}x{expr.b.shape[1]} does "
                        f"not match the accumulator block {tile.shape}")
    sa = to_scratchpad(chip, expr.a, loc)
    sa.pinned = True
    try:
        sb = to_scratchpad(chip, expr.b, loc)
    finally:
        sa.pinned = False
    m, n = tile.shape
    nmb, nkb, nnb = sa.valid.shape[0], sa.valid.shape[1], sb.valid.shape[1]
    for nb in range(nnb):
        ccols = min(d, n - nb * d)
        for kb in range(nkb):
            brows, bcols = (int(v) for v in sb.valid[kb, nb])
            if brows == 0 or bcols == 0:
                continue
            first = True
            for mb in range(nmb):
                arows, acols = (int(v) for v in sa.valid[mb, kb])
                if arows == 0 or acols == 0:
                    continue
                crows = min(d, m - mb * d)
                c = LocalAddr.accumulator(tile.row(mb, nb, d),
                                          accumulate=bool(tile.written[mb, nb]))
                if first:
                    chip.ins.append(Instruction.preload(sb.row(kb, nb, d), c, brows, bcols,
                                                        crows, ccols))
                    chip.ins.append(Instruction.compute_preloaded(
                        sa.row(mb, kb, d), GARBAGE, arows, acols, d, d))
                    first = False
                else:
                    chip.ins.append(Instruction.preload(GARBAGE, c, brows, bcols, crows,
                                                        ccols))
                    chip.ins.append(Instruction.compute_accumulated(
                        sa.row(mb, kb, d), GARBAGE, arows, acols, d, d))
                tile.written[mb, nb] = True


def load_into_accumulator(chip: Chip, tile: AccTile, block: DramBlock, loc: Loc) -> None:
    """``acc + block``: the loaded block moved onto the accumulator rows (widened from int8
    by the shrunk load; it overwrites them when nothing is written yet)."""
    if block.dtype not in (int8, int32):
        raise loc.error(f"sim backend: cannot add a {block.dtype} block to the accumulator")
    try:
        offsets = np.broadcast_to(block.offsets, tile.shape)
        mask = None if block.mask is None else np.broadcast_to(block.mask, tile.shape)
    except ValueError:
        raise loc.error(f"sim backend: a {block.shape} block does not broadcast to the "
                        f"accumulator block {tile.shape}") from None
    d = chip.dim
    full = mask is None or mask.all()
    if full and not tile.written.any():
        accumulate = False
    else:
        ensure_written(chip, tile, np.argwhere(np.ones_like(tile.written)))
        accumulate = True
    shrunk = block.dtype == int8
    mvin_runs(chip, block, row_runs(offsets, mask, d, block.loc, "load"), ACC_DATA, shrunk,
              chip.max_cols[not shrunk],
              lambda mb, nb, row: LocalAddr.accumulator(tile.row(mb, nb, d) + row,
                                                        accumulate=accumulate))
    tile.written[:] = True



def mvin_runs(chip: Chip, block: DramBlock, runs: list, level: int, shrunk: bool | None,
              max_cols: int, local: Callable[[int, int, int], Any]) -> None:
    """Each run's rows moved in from DRAM, at most `max_cols` columns (whole blocks) a mvin;
    ``local(block row, column block, row in block)`` is where a mvin's first row lands."""
    d = chip.dim
    esize = block.dtype.numpy.itemsize
    step = max_cols // d
    for r0, n, off0, stride, p in runs:
        rb, lr = divmod(r0, d)
        ident = chip.config_ld(level, None if stride is None else stride * esize, shrunk)
        for cb0 in range(0, -(-p // d), step):
            ncols = min(p - cb0 * d, step * d)
            chip.ins.append(MOVES[ident](chip.addr[block.arg] + (off0 + cb0 * d) * esize,
                                         local(rb, cb0, lr), n, ncols))

def mvout_runs(chip: Chip, arg: int, tile: AccTile, runs: list, esize: int, full: bool,
               act: str, scale: float) -> None:
    """A store's ``mvout``s: each row run in pieces as wide as one move allows."""
    d = chip.dim
    step = chip.max_cols[full] // d
    for r0, n, off0, stride, p in runs:
        mb, lr = divmod(r0, d)
        chip.config_st(None if stride is None else stride * esize, act, scale)
        for nb0 in range(0, -(-p // d), step):
            ncols = min(p - nb0 * d, step * d)
            chip.ins.append(Instruction.mvout(
                chip.addr[arg] + (off0 + nb0 * d) * esize,
                LocalAddr.accumulator(tile.row(mb, nb0, d) + lr, full=full), n, ncols))


__all__ = ["GARBAGE", "emit_dot", "ensure_written", "load_into_accumulator", "mvout_runs",
           "onchip_tile", "requantize_to_scratchpad", "to_scratchpad"]
