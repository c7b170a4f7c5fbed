"""The simulator backend: the block IR lowered to one Gemmini trace and run on `accel.sim`.

Each program instance is walked with concrete scalars (`baco.dsl.machine.Machine`), so address
arithmetic is evaluated on the host, as the seed's pointer analysis removes it (§4.6); only
data movement and compute become instructions:

* a ``load`` is a `DramBlock` until it is used. As a ``dot`` operand it is moved into the
  scratchpad by ``mvin``s of DIM-row strided runs (a run: rows whose DRAM addresses step by one
  stride, with the same number of valid columns); masked-off tails are left out and the array
  pads them with zeros, masked rows inside a block are filled from a zero region in DRAM.
  Added to an accumulator block it is moved into the accumulator with the accumulate bit
  (int32, or int8 ``shrunk``; a broadcast row is a DRAM stride of 0).
* ``zeros`` (int32, 2-D) reserves accumulator rows; ``dot`` is ``preload`` / ``compute_preloaded``
  (weights reused over the M blocks by ``compute_accumulated``) on DIM x DIM blocks; the first
  write of a block overwrites, the next ones accumulate.
* ``gelu(acc)``, ``maximum(acc, 0)``, ``acc * scale`` and ``.to(int8)`` ride on the final
  ``mvout`` (Gemmini's I-GELU, whose constants a ``config_norm`` sets, or ReLU; float32 scale,
  round-half-even and saturation); a ``store`` of int32 is a full-width ``mvout``.
* such an int8 accumulator block used as a ``dot`` operand (a chain of two dots, as in
  attention) moves into the scratchpad by ``mvout_spad`` with the same scale, ReLU and
  saturation: the intermediate never goes to DRAM (`accel.lower.chain` is the same fusion for
  layers).
* ``softmax(acc, mask=...)`` runs on Gemmini's normalizer as its software drives it: row by
  row, the moves out of the block (``mvout_spad`` for a dot operand, ``mvout`` for a store)
  make three passes over the valid columns, MAX, SUM_EXP (INV_SUM_EXP on the last block) and
  the written one with the softmax activation; the mask keeps the same prefix of every row.

Scratchpad blocks are allocated from a ring (so consecutive loads land in different rows and
can overlap with computes), accumulator blocks per program instance; a block that does not fit
is a `DSLError`. Programs of the grid run one after another in one trace, ended by a fence.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.isa import Instruction, IsaParams, LocalAddr
from accel.lower import iexp_constants, igelu_constants
from accel.lower.chain import softmax_passes
from accel.sim import DramImage, SimResult
from accel.sim import run as sim_run
from accel.trace import Trace
from baco.dsl.ir import Function, Loc, Op
from baco.dsl.machine import Machine
from baco.dsl.types import DType, float32, int8, int32
from workloads.errors import ConfigError, DSLError, InfeasibleError

GARBAGE = LocalAddr.garbage()
_MOVES = {0: Instruction.mvin, 1: Instruction.mvin2, 2: Instruction.mvin3}
_SP_DATA, _ZERO_FILL, _ACC_DATA = (0, 1), (2, 1, 0), (2,)  # config_ld ids each may use


class CapacityError(DSLError, InfeasibleError):
    """A kernel's blocks do not fit the scratchpad or the accumulator."""


@dataclasses.dataclass(eq=False)
class DramBlock:
    """A loaded block still in DRAM: array, element offsets, mask, fill value, dtype."""

    arg: int
    offsets: np.ndarray
    mask: np.ndarray | None
    other: Any
    dtype: DType
    loc: Loc
    sp: SpTile | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.offsets.shape


@dataclasses.dataclass(eq=False)
class SpTile:
    """A block in the scratchpad: rows ``[base, base+rows)``, DIM-blocks ``[rb][cb]`` with their
    valid (rows, cols)."""

    base: int
    rows: int
    ncb: int
    valid: np.ndarray
    alive: bool = True
    pinned: bool = False

    def row(self, rb: int, cb: int, dim: int) -> int:
        return self.base + (rb * self.ncb + cb) * dim


@dataclasses.dataclass(eq=False)
class AccTile:
    """A block in the accumulator: DIM-blocks ``[mb][nb]``, which ones hold data, a version
    bumped by every in-place update."""

    base: int
    shape: tuple[int, int]
    written: np.ndarray
    version: int = 0

    @property
    def nnb(self) -> int:
        return self.written.shape[1]

    def row(self, mb: int, nb: int, dim: int) -> int:
        return self.base + (mb * self.nnb + nb) * dim


@dataclasses.dataclass(frozen=True)
class AccView:
    """An accumulator block as a kernel value, with the epilogue its mvout will apply."""

    tile: AccTile
    version: int
    dtype: DType = int32
    scale: float | None = None
    relu: bool = False
    gelu: bool = False
    softmax_cols: int | None = None   # the normalizer's softmax over this many columns

    @property
    def act(self) -> str:
        """The activation its requantizing move applies (``config_st``'s; a softmax's is set
        by ``config_norm``)."""
        return "igelu" if self.gelu else "relu" if self.relu else "none"


@dataclasses.dataclass(eq=False)
class OnChipBlock:
    """An int8 accumulator block moved into the scratchpad (``mvout_spad``) for a dot."""

    tile: SpTile
    shape: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class DotExpr:
    """``dot(a, b)`` before it knows which accumulator rows it writes."""

    a: DramBlock | OnChipBlock
    b: DramBlock | OnChipBlock


@dataclasses.dataclass(frozen=True, eq=False)
class SimReport:
    """What a ``backend="sim"`` launch did: the trace, its cycles, its instructions by kind."""

    trace: Trace
    cycles: int
    result: SimResult
    hw: HardwareConfig

    @property
    def instructions(self) -> dict[str, int]:
        counts = collections.Counter(ins.mnemonic for ins in self.trace)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.instructions.items())
        return (f"{len(self.trace)} instructions ({kinds}); {self.cycles} cycles on "
                f"{self.hw.pe_rows}x{self.hw.pe_cols} PEs; {self.result.macs} MACs")


def _is_data(x: Any) -> bool:
    return isinstance(x, (DramBlock, DotExpr, AccView))


def _prefix(mask: np.ndarray) -> np.ndarray:
    """Valid columns of each row of a 2-D mask (which must keep a prefix of every row)."""
    cols = mask.shape[1]
    return np.where(mask.all(axis=1), cols, mask.argmin(axis=1))


class SimCodegen(Machine):
    """Walks every program instance and emits the Gemmini instructions of its data ops."""

    def __init__(self, fn: Function, args: Sequence[Any], grid: tuple[int, ...],
                 hw: HardwareConfig) -> None:
        super().__init__(fn, args, grid)
        self.hw = hw
        self.params = IsaParams.from_hardware(hw)
        p = self.params
        self.dim = p.dim
        self.max_cols = {False: p.max_block_len * p.dim, True: p.max_block_len_acc * p.dim}
        self.image = DramImage()
        zero_bytes = 8 * p.dim * max(p.max_block_len, p.max_block_len_acc) + 64
        self.zero_addr = self.image.add("zeros", np.zeros(zero_bytes, np.int8))
        self.addr = [self.image.add(f"arg{i}", a) for i, a in enumerate(self.arrays)]
        self.stored: set[int] = set()
        self.ins: list[Instruction] = [Instruction.config_ex("ws", "none")]
        self.ld_config: dict[int, tuple] = {}
        self.ld_lru = [0, 1, 2]
        self.st_config: tuple | None = None
        self.igelu_set = False
        self.sp_ptr = 0
        self.sp_tiles: list[SpTile] = []
        self.acc_ptr = 0
        self.acc_tiles: list[AccTile] = []

    # ------------------------------------------------------------------ program hooks
    def begin_program(self) -> None:
        self.acc_tiles = []

    # ------------------------------------------------------------------ allocation
    def sp_alloc(self, rows: int, loc: Loc, what: str) -> int:
        cap = self.params.sp_rows
        if rows > cap:
            raise loc.error(f"sim backend: {what} needs {rows} scratchpad rows but the "
                            f"scratchpad has {cap}; use smaller blocks", CapacityError)
        if self.sp_ptr + rows > cap:
            self.sp_ptr = 0
        lo, hi = self.sp_ptr, self.sp_ptr + rows
        for t in list(self.sp_tiles):
            if t.base < hi and lo < t.base + t.rows:
                if t.pinned:
                    raise loc.error(f"sim backend: the operands of this dot need more than the "
                                    f"{cap} scratchpad rows; use smaller blocks", CapacityError)
                t.alive = False
                self.sp_tiles.remove(t)
        self.sp_ptr = hi
        return lo

    def acc_tile(self, shape: tuple[int, ...], loc: Loc) -> AccTile:
        if len(shape) != 2:
            raise loc.error(f"sim backend: accumulator blocks are 2-D, got shape {shape}")
        d, cap = self.dim, self.params.acc_rows
        nmb, nnb = -(-shape[0] // d), -(-shape[1] // d)
        rows = nmb * nnb * d
        if rows > cap:
            raise loc.error(f"sim backend: a {shape[0]}x{shape[1]} accumulator block needs "
                            f"{rows} accumulator rows but the accumulator has {cap}; use "
                            "smaller BLOCK sizes", CapacityError)
        if self.acc_ptr + rows > cap:
            self.acc_ptr = 0
        lo, hi = self.acc_ptr, self.acc_ptr + rows
        if any(t.base < hi and lo < t.base + t.written.size * d for t in self.acc_tiles):
            raise loc.error(f"sim backend: this program's accumulator blocks need more than "
                            f"the {cap} accumulator rows; use smaller BLOCK sizes",
                            CapacityError)
        self.acc_ptr = hi
        tile = AccTile(lo, (shape[0], shape[1]), np.zeros((nmb, nnb), bool))
        self.acc_tiles.append(tile)
        return tile

    # ------------------------------------------------------------------ configuration
    def config_ld(self, ids: tuple[int, ...], stride_bytes: int | None, shrunk: bool | None
                  ) -> int:
        """A load config id among ``ids`` set to this stride (None: any; shrunk None: any),
        reconfiguring the least recently used one if none is."""
        for ident in ids:
            cur = self.ld_config.get(ident)
            if cur is not None and stride_bytes in (None, cur[0]) and shrunk in (None, cur[1]):
                self.ld_lru.remove(ident)
                self.ld_lru.append(ident)
                return ident
        ident = next(i for i in self.ld_lru if i in ids)
        key = (0 if stride_bytes is None else stride_bytes, bool(shrunk))
        self.ins.append(Instruction.config_ld(key[0], shrunk=key[1], block_stride=self.dim,
                                              id=ident))
        self.ld_config[ident] = key
        self.ld_lru.remove(ident)
        self.ld_lru.append(ident)
        return ident

    def config_softmax(self) -> None:
        """The normalizer's softmax for the next moves: scale 1 (127 x the probabilities)."""
        self.config_st(None, "none", 1.0)
        self.ins.extend(Instruction.config_softmax(*iexp_constants()))
        self.st_config = None     # the activation is now softmax: config_st must clear it
        self.igelu_set = False    # i-exp's qb and qc took I-GELU's registers

    def softmax_moves(self, tile: AccTile, row: int, cols: int, write_cols: int,
                      move) -> None:
        """A row's three passes through the normalizer: ``move(block, local, cols)`` emits one
        move of that many columns; the statistics cover ``cols``, the written pass
        ``write_cols``."""
        d = self.dim
        mb, lr = divmod(row, d)
        for nb, cmd, n in softmax_passes(cols, d, write_cols):
            move(nb, LocalAddr.accumulator(tile.row(mb, nb, d) + lr, norm=int(cmd)), n)

    def config_st(self, stride_bytes: int | None, act: str, scale: float) -> None:
        if act == "igelu" and not self.igelu_set:
            self.ins.append(Instruction.config_igelu(*igelu_constants()))
            self.igelu_set = True
        current = self.st_config
        if stride_bytes is None:
            if current is not None and current[1:] == (act, scale):
                return
            stride_bytes = 0
        key = (stride_bytes, act, scale)
        if current != key:
            self.ins.append(Instruction.config_st(stride_bytes, act=act, acc_scale=scale))
            self.st_config = key

    # ------------------------------------------------------------------ row runs
    def runs(self, offsets: np.ndarray, mask: np.ndarray | None, loc: Loc, what: str
             ) -> list[tuple[int, int, int, int | None, int]]:
        """Strided row runs of a 2-D access: (first row, rows, first offset, row stride or None
        for one row, valid columns); runs never cross a DIM-row boundary."""
        rows, cols = offsets.shape
        m = np.ones(offsets.shape, bool) if mask is None else mask
        prefix = _prefix(m)
        if not np.array_equal(m, np.arange(cols)[None, :] < prefix[:, None]):
            raise loc.error(f"sim backend: the mask of this {what} must keep a prefix of every "
                            "row (edge tails like `offs_n[None, :] < N`); other masks run on "
                            "the interpreter")
        step = offsets - offsets[:, :1]
        if np.any(m & (step != np.arange(cols)[None, :])):
            raise loc.error(f"sim backend: this {what} must be contiguous along its last axis "
                            "(unit stride, as Gemmini moves rows); transpose the data in DRAM "
                            "or use the interpreter")
        first = offsets[:, 0]
        out: list[list] = []
        for r in range(rows):
            p = int(prefix[r])
            if p == 0:
                continue
            cur = out[-1] if out else None
            joinable = (cur is not None and cur[0] + cur[1] == r and r % self.dim != 0
                        and cur[4] == p)
            if joinable:
                delta = int(first[r] - first[r - 1])
                if cur[3] is None and delta >= 0:
                    cur[3] = delta
                elif cur[3] != delta:
                    joinable = False
            if joinable:
                cur[1] += 1
            else:
                out.append([r, 1, int(first[r]), None, p])
        return [tuple(run) for run in out]

    # ------------------------------------------------------------------ loads
    def op_load(self, op: Op, pointer: Any, mask: Any = None) -> DramBlock:
        arg, offsets, m = self.address(op, pointer, mask, "load")
        dtype = op.results[0].type.dtype
        if dtype == float32:
            raise op.loc.error("sim backend: float32 data does not run on Gemmini (int8 inputs, "
                               "int32 accumulators); run float kernels on the interpreter")
        if m is not None and not m.all() and op.attrs["other"] != 0:
            raise op.loc.error("sim backend: masked-off elements are zeros on Gemmini; use "
                               "other=0")
        return DramBlock(arg, np.asarray(offsets, np.int64), m, op.attrs["other"], dtype, op.loc)

    def op_expand_dims(self, op: Op, x: Any) -> Any:
        if isinstance(x, DramBlock):
            shape = op.results[0].type.shape
            mask = None if x.mask is None else x.mask.reshape(shape)
            return dataclasses.replace(x, offsets=x.offsets.reshape(shape), mask=mask, sp=None)
        if _is_data(x):
            raise op.loc.error("sim backend: reshaping accumulator blocks is not supported")
        return super().op_expand_dims(op, x)

    def zero_fill(self, local: int, rows: int, cols: int, acc: bool) -> None:
        ident = self.config_ld(_ZERO_FILL, 0, None)
        addr = LocalAddr.accumulator(local) if acc else LocalAddr.sp(local)
        self.ins.append(_MOVES[ident](self.zero_addr, addr, rows, cols))

    def to_scratchpad(self, block: DramBlock | OnChipBlock, loc: Loc) -> SpTile:
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
        d = self.dim
        rows, cols = block.shape
        nrb, ncb = -(-rows // d), -(-cols // d)
        base = self.sp_alloc(nrb * ncb * d, loc, f"a {rows}x{cols} block")
        tile = SpTile(base, nrb * ncb * d, ncb, np.zeros((nrb, ncb, 2), np.int64))
        runs = self.runs(block.offsets, block.mask, block.loc, "load")
        prefix = np.zeros(rows, np.int64)
        for r0, n, _, _, p in runs:
            prefix[r0:r0 + n] = p
        for rb in range(nrb):
            part = prefix[rb * d:(rb + 1) * d]
            for cb in range(ncb):
                clipped = np.clip(part - cb * d, 0, d)
                live = np.flatnonzero(clipped)
                vr = int(live[-1]) + 1 if live.size else 0
                vc = int(clipped.max()) if live.size else 0
                tile.valid[rb, cb] = (vr, vc)
                short = np.flatnonzero(clipped[:vr] < vc)
                for start, length in _consecutive(short):
                    self.zero_fill(tile.row(rb, cb, d) + start, length, vc, acc=False)
        esize = block.dtype.numpy.itemsize
        step = self.max_cols[False] // d
        for r0, n, off0, stride, p in runs:
            rb, lr = divmod(r0, d)
            ident = self.config_ld(_SP_DATA, None if stride is None else stride * esize, None)
            for cb0 in range(0, -(-p // d), step):
                ncols = min(p - cb0 * d, step * d)
                self.ins.append(_MOVES[ident](
                    self.addr[block.arg] + (off0 + cb0 * d) * esize,
                    tile.row(rb, cb0, d) + lr, n, ncols))
        self.sp_tiles.append(tile)
        block.sp = tile
        return tile

    def acc_to_scratchpad(self, view: AccView, loc: Loc) -> OnChipBlock:
        """An int8 accumulator block as a dot operand: ``mvout_spad`` moves it into the
        scratchpad, requantized as an mvout would store it."""
        if view.dtype != int8:
            raise loc.error("sim backend: an accumulator block feeds a dot once it is "
                            ".to(baco.int8) (it moves to the scratchpad requantized, as an "
                            "mvout stores it)")
        tile = self.fresh(view, loc)
        self.ensure_written(tile, np.argwhere(np.ones_like(tile.written)))
        d = self.dim
        rows, cols = tile.shape
        nrb, ncb = tile.written.shape
        base = self.sp_alloc(nrb * ncb * d, loc, f"a {rows}x{cols} on-chip block")
        sp = SpTile(base, nrb * ncb * d, ncb, np.zeros((nrb, ncb, 2), np.int64))
        if view.softmax_cols is not None:
            n = view.softmax_cols
            for rb in range(nrb):
                for cb in range(ncb):
                    sp.valid[rb, cb] = (min(d, rows - rb * d), max(0, min(d, n - cb * d)))
            self.config_softmax()
            for r in range(rows):
                self.softmax_moves(tile, r, n, n, lambda nb, src, k, r=r: self.ins.append(
                    Instruction.mvout_spad(src, sp.row(r // d, nb, d) + r % d, 1, k)))
            self.sp_tiles.append(sp)
            return OnChipBlock(sp, (rows, cols))
        self.config_st(None, view.act, 1.0 if view.scale is None else view.scale)
        for rb in range(nrb):
            for cb in range(ncb):
                sp.valid[rb, cb] = (min(d, rows - rb * d), min(d, cols - cb * d))
                self.ins.append(Instruction.mvout_spad(
                    LocalAddr.accumulator(tile.row(rb, cb, d)), sp.row(rb, cb, d),
                    *(int(v) for v in sp.valid[rb, cb])))
        self.sp_tiles.append(sp)
        return OnChipBlock(sp, (rows, cols))

    # ------------------------------------------------------------------ accumulator
    def fresh(self, view: AccView, loc: Loc) -> AccTile:
        if view.version != view.tile.version:
            raise loc.error("sim backend: this accumulator value was updated in place after it "
                            "was read; keep one accumulator variable per block")
        return view.tile

    def plain(self, view: AccView, loc: Loc) -> AccTile:
        if view.dtype != int32 or view.scale is not None or view.act != "none":
            raise loc.error("sim backend: gelu, scaling, relu and casts happen on the final "
                            "mvout; apply them just before baco.store")
        return self.fresh(view, loc)

    def bump(self, tile: AccTile, view: AccView | None = None) -> AccView:
        tile.version += 1
        return AccView(tile, tile.version)

    def ensure_written(self, tile: AccTile, blocks: Any) -> None:
        """Zero the accumulator DIM-blocks that no dot or load has written yet."""
        d = self.dim
        for mb, nb in blocks:
            if not tile.written[mb, nb]:
                crows = min(d, tile.shape[0] - mb * d)
                ccols = min(d, tile.shape[1] - nb * d)
                self.zero_fill(tile.row(mb, nb, d), crows, ccols, acc=True)
                tile.written[mb, nb] = True

    def emit_dot(self, tile: AccTile, expr: DotExpr, loc: Loc) -> None:
        d = self.dim
        if (expr.a.shape[0], expr.b.shape[1]) != tile.shape:
            raise loc.error(f"sim backend: dot result {expr.a.shape[0]}x{expr.b.shape[1]} does "
                            f"not match the accumulator block {tile.shape}")
        sa = self.to_scratchpad(expr.a, loc)
        sa.pinned = True
        try:
            sb = self.to_scratchpad(expr.b, loc)
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
                        self.ins.append(Instruction.preload(sb.row(kb, nb, d), c, brows, bcols,
                                                            crows, ccols))
                        self.ins.append(Instruction.compute_preloaded(
                            sa.row(mb, kb, d), GARBAGE, arows, acols, d, d))
                        first = False
                    else:
                        self.ins.append(Instruction.preload(GARBAGE, c, brows, bcols, crows,
                                                            ccols))
                        self.ins.append(Instruction.compute_accumulated(
                            sa.row(mb, kb, d), GARBAGE, arows, acols, d, d))
                    tile.written[mb, nb] = True

    def materialize(self, x: Any, loc: Loc) -> AccView:
        if isinstance(x, AccView):
            return x
        if isinstance(x, DotExpr):
            tile = self.acc_tile((x.a.shape[0], x.b.shape[1]), loc)
            self.emit_dot(tile, x, loc)
            return self.bump(tile)
        raise loc.error("sim backend: only dot results and accumulator blocks can be combined "
                        "here; loaded blocks feed baco.dot or are added to an accumulator")

    def add_load(self, view: AccView, block: DramBlock, loc: Loc) -> AccView:
        tile = self.plain(view, loc)
        if block.dtype not in (int8, int32):
            raise loc.error(f"sim backend: cannot add a {block.dtype} block to the accumulator")
        try:
            offsets = np.broadcast_to(block.offsets, tile.shape)
            mask = None if block.mask is None else np.broadcast_to(block.mask, tile.shape)
        except ValueError:
            raise loc.error(f"sim backend: a {block.shape} block does not broadcast to the "
                            f"accumulator block {tile.shape}") from None
        d = self.dim
        full = mask is None or mask.all()
        if full and not tile.written.any():
            accumulate = False
        else:
            self.ensure_written(tile, np.argwhere(np.ones_like(tile.written)))
            accumulate = True
        shrunk = block.dtype == int8
        esize = block.dtype.numpy.itemsize
        step = self.max_cols[not shrunk] // d
        for r0, n, off0, stride, p in self.runs(offsets, mask, block.loc, "load"):
            mb, lr = divmod(r0, d)
            ident = self.config_ld(_ACC_DATA, None if stride is None else stride * esize,
                                   shrunk)
            for nb0 in range(0, -(-p // d), step):
                ncols = min(p - nb0 * d, step * d)
                self.ins.append(_MOVES[ident](
                    self.addr[block.arg] + (off0 + nb0 * d) * esize,
                    LocalAddr.accumulator(tile.row(mb, nb0, d) + lr, accumulate=accumulate),
                    n, ncols))
        tile.written[:] = True
        return self.bump(tile)

    # ------------------------------------------------------------------ data ops
    def op_full(self, op: Op) -> Any:
        rtype = op.results[0].type
        if len(rtype.shape) == 2 and rtype.dtype == int32 and op.attrs["value"] == 0:
            return self.bump(self.acc_tile(rtype.shape, op.loc))
        return super().op_full(op)

    def op_dot(self, op: Op, a: Any, b: Any, acc: Any = None) -> Any:
        operands = []
        for x in (a, b):
            if isinstance(x, AccView):
                x = self.acc_to_scratchpad(x, op.loc)
            elif not isinstance(x, DramBlock):
                raise op.loc.error("sim backend: dot operands come from baco.load, or are "
                                   "accumulator blocks converted .to(baco.int8) (Gemmini "
                                   "multiplies scratchpad blocks)")
            operands.append(x)
        expr = DotExpr(*operands)
        if acc is None:
            return expr
        return self.accumulate(op, acc, expr)

    def accumulate(self, op: Op, acc: Any, expr: DotExpr) -> AccView:
        view = self.materialize(acc, op.loc)
        tile = self.plain(view, op.loc)
        self.emit_dot(tile, expr, op.loc)
        return self.bump(tile)

    def binary(self, op: Op, a: Any, b: Any) -> Any:
        if not (_is_data(a) or _is_data(b)):
            return super().binary(op, a, b)
        if op.name == "add":
            for x, y in ((a, b), (b, a)):
                if isinstance(y, DotExpr) and _is_data(x):
                    return self.accumulate(op, x, y)
                if isinstance(y, DramBlock) and isinstance(x, (AccView, DotExpr)):
                    return self.add_load(self.materialize(x, op.loc), y, op.loc)
        if op.name == "mul":
            for x, y in ((a, b), (b, a)):
                if isinstance(x, (AccView, DotExpr)) and isinstance(y, (int, float)):
                    view = self.materialize(x, op.loc)
                    self.fresh(view, op.loc)
                    sign_ok = float(y) > 0 or (float(y) < 0 and view.gelu)
                    if view.scale is not None or view.dtype == int8 or not sign_ok:
                        raise op.loc.error("sim backend: one positive float32 scale per "
                                           "accumulator block (negative only after gelu), "
                                           "before .to(int8) (Gemmini's acc_scale; relu "
                                           "commutes with it)")
                    return dataclasses.replace(view, scale=float(np.float32(y)),
                                               dtype=op.results[0].type.dtype)
        raise op.loc.error(f"sim backend: `{op.name}` on {_kind(a)} and {_kind(b)} has no "
                           "Gemmini form; supported: acc + dot, acc + loaded block, acc * "
                           "scale, maximum(acc, 0), .to(), store")

    def op_maximum(self, op: Op, x: Any, y: Any) -> Any:
        if not (_is_data(x) or _is_data(y)):
            return super().op_maximum(op, x, y)
        view, other = (x, y) if _is_data(x) else (y, x)
        if not isinstance(view, (AccView, DotExpr)) or other != 0:
            raise op.loc.error("sim backend: maximum on data blocks is only ReLU: "
                               "baco.maximum(acc, 0)")
        view = self.materialize(view, op.loc)
        self.fresh(view, op.loc)
        if view.gelu:
            raise op.loc.error("sim backend: the mvout applies one activation: gelu or "
                               "maximum(acc, 0), not both")
        return dataclasses.replace(view, relu=True)

    def raw_accumulator(self, op: Op, x: Any, not_acc: str, not_raw: str
                        ) -> tuple[AccView, AccTile]:
        """A unit on the read path (I-GELU, the normalizer) takes an accumulator block before
        its scale, relu or cast: the view and its tile, else the given errors."""
        if not isinstance(x, (AccView, DotExpr)):
            raise op.loc.error(not_acc)
        view = self.materialize(x, op.loc)
        tile = self.fresh(view, op.loc)
        if view.dtype != int32 or view.scale is not None or view.act != "none":
            raise op.loc.error(not_raw)
        return view, tile

    def op_gelu(self, op: Op, x: Any) -> Any:
        view, _ = self.raw_accumulator(
            op, x, "sim backend: baco.gelu applies to an accumulator block (a dot result) on "
            "its mvout; other values run on the interpreter",
            "sim backend: baco.gelu comes first, on the int32 accumulator, before its scale, "
            "relu or cast (Gemmini's I-GELU)")
        return dataclasses.replace(view, gelu=True)

    def op_softmax(self, op: Op, x: Any, mask: Any = None) -> Any:
        view, tile = self.raw_accumulator(
            op, x, "sim backend: baco.softmax applies to an accumulator block (a dot result) "
            "as it moves out; other values run on the interpreter",
            "sim backend: baco.softmax reads the raw int32 accumulator (Gemmini's normalizer): "
            "no scale, relu, gelu or cast before it")
        rows, cols = tile.shape
        keep = (np.ones((rows, cols), bool) if mask is None
                else np.broadcast_to(np.asarray(mask, bool), (rows, cols)))
        n = _prefix(keep)
        if (not np.array_equal(keep, np.arange(cols)[None, :] < n[:, None])
                or len(set(n.tolist())) != 1 or n[0] == 0):
            raise op.loc.error("sim backend: the softmax mask must keep the same non-empty "
                               "prefix of every row's columns (the normalizer's moves cover "
                               "the valid columns)")
        return dataclasses.replace(view, dtype=int8, softmax_cols=int(n[0]))

    def op_minimum(self, op: Op, x: Any, y: Any) -> Any:
        if _is_data(x) or _is_data(y):
            raise op.loc.error("sim backend: minimum on data blocks has no Gemmini form; "
                               "saturation comes with .to(baco.int8)")
        return super().op_minimum(op, x, y)

    def op_where(self, op: Op, c: Any, x: Any, y: Any) -> Any:
        if _is_data(x) or _is_data(y):
            raise op.loc.error("sim backend: baco.where on data blocks has no Gemmini form; "
                               "mask the load or the store instead")
        return super().op_where(op, c, x, y)

    def op_neg(self, op: Op, x: Any) -> Any:
        if _is_data(x):
            raise op.loc.error("sim backend: negating data blocks has no Gemmini form")
        return super().op_neg(op, x)

    def op_cast(self, op: Op, x: Any) -> Any:
        if not _is_data(x):
            return super().op_cast(op, x)
        dst = op.results[0].type.dtype
        if isinstance(x, DramBlock):
            if dst == int32 and x.dtype in (int8, int32):
                return x  # widening happens as it moves into the accumulator
            raise op.loc.error(f"sim backend: cannot convert a loaded {x.dtype} block to {dst}")
        view = self.materialize(x, op.loc)
        self.fresh(view, op.loc)
        if view.dtype == int8 and dst != int8:
            raise op.loc.error("sim backend: .to(int8) saturates on the final mvout; do not "
                               "convert back")
        return dataclasses.replace(view, dtype=dst)

    def op_store(self, op: Op, pointer: Any, value: Any, mask: Any = None) -> None:
        arg, offsets, m = self.address(op, pointer, mask, "store")
        if not isinstance(value, (AccView, DotExpr)):
            raise op.loc.error("sim backend: store an accumulator block (a dot result, possibly "
                               "scaled, relu'd and .to(int8)); other values run on the "
                               "interpreter")
        view = self.materialize(value, op.loc)
        tile = self.fresh(view, op.loc)
        if offsets.shape != tile.shape:
            raise op.loc.error(f"sim backend: storing a {tile.shape} block through {offsets.shape} "
                               "pointers; make the pointer block the value's shape")
        ptype = op.operands[0].type.dtype
        if ptype == int32:
            if view.scale is not None or view.act != "none" or view.softmax_cols is not None:
                raise op.loc.error("sim backend: int32 stores are raw accumulator reads "
                                   "(no activation or scale); convert with .to(baco.int8)")
            full = True
        elif ptype == int8:
            full = False
        else:
            raise op.loc.error(f"sim backend: cannot store {ptype} data")
        d = self.dim
        runs = self.runs(offsets, m, op.loc, "store")
        touched = {(r0 // d, nb) for r0, _, _, _, p in runs for nb in range(-(-p // d))}
        self.ensure_written(tile, sorted(touched))
        esize = ptype.numpy.itemsize
        if view.softmax_cols is not None:
            self.store_softmax(op, arg, tile, view.softmax_cols, runs, esize)
            return
        step = self.max_cols[full] // d
        scale = 1.0 if view.scale is None else view.scale
        for r0, n, off0, stride, p in runs:
            mb, lr = divmod(r0, d)
            self.config_st(None if stride is None else stride * esize, view.act, scale)
            for nb0 in range(0, -(-p // d), step):
                ncols = min(p - nb0 * d, step * d)
                self.ins.append(Instruction.mvout(
                    self.addr[arg] + (off0 + nb0 * d) * esize,
                    LocalAddr.accumulator(tile.row(mb, nb0, d) + lr, full=full), n, ncols))
        self.stored.add(arg)

    def store_softmax(self, op: Op, arg: int, tile: AccTile, cols: int, runs: list,
                      esize: int) -> None:
        """A softmax block to DRAM: each stored row's three passes (`softmax_moves`); the
        statistics passes write nothing, the last one the row's stored columns."""
        if any(p > cols for *_, p in runs):
            raise op.loc.error("sim backend: the store keeps more columns than the softmax's "
                               "mask; store its valid columns only")
        self.config_softmax()
        d = self.dim
        for r0, n, off0, stride, p in runs:
            for i in range(n):
                at = self.addr[arg] + (off0 + i * (stride or 0)) * esize
                self.softmax_moves(tile, r0 + i, cols, p, lambda nb, src, k, at=at: (
                    self.ins.append(Instruction.mvout(at + nb * d * esize, src, 1, k))))
        self.stored.add(arg)

    # ------------------------------------------------------------------ result
    def trace(self) -> Trace:
        return Trace([*self.ins, Instruction.fence()])


def _kind(x: Any) -> str:
    return {DramBlock: "a loaded block", DotExpr: "a dot result",
            AccView: "an accumulator block"}.get(type(x), "a value")


def _consecutive(indices: np.ndarray) -> list[tuple[int, int]]:
    """Runs of consecutive integers: [(start, length)]."""
    out: list[tuple[int, int]] = []
    for i in indices.tolist():
        if out and out[-1][0] + out[-1][1] == i:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


def resolve_hw(hw: Any) -> HardwareConfig:
    """A `HardwareConfig` from itself or a preset name."""
    if isinstance(hw, HardwareConfig):
        return hw
    if isinstance(hw, str):
        return HardwareConfig.preset(hw)
    raise DSLError(f"hw must be a HardwareConfig or a preset name, got {hw!r}")


def compile_trace(fn: Function, args: Sequence[Any], grid: tuple[int, ...], hw: Any
                  ) -> SimCodegen:
    """The trace of a launch (not run): the code generator after every program instance."""
    gen = SimCodegen(fn, args, grid, resolve_hw(hw))
    gen.run()
    return gen


def simulate(fn: Function, args: Sequence[Any], grid: tuple[int, ...], hw: Any,
             functional: bool = True) -> SimReport:
    """Compile the launch to a trace, run it on `accel.sim`, write the stored arrays back."""
    gen = compile_trace(fn, args, grid, hw)
    trace = gen.trace()
    try:
        result = sim_run(trace, gen.hw, gen.image, functional=functional)
    except ConfigError as exc:
        raise DSLError(f"{fn.loc}: the simulator rejected the kernel's trace: {exc}") from exc
    if functional:
        for i in sorted(gen.stored):
            gen.arrays[i][...] = result.read(f"arg{i}")
    return SimReport(trace, result.cycles, result, gen.hw)


__all__ = ["AccTile", "AccView", "CapacityError", "DotExpr", "DramBlock", "SimCodegen", "SimReport", "SpTile",
           "compile_trace", "resolve_hw", "simulate"]
