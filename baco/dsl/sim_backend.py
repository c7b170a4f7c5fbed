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

`SimCodegen` gives each IR op its Gemmini meaning; the values it works with are in
`sim_blocks`, the trace and on-chip state in `sim_chip`, the moves and dots in `sim_moves`, and
the normalizer's softmax passes here.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.isa import Instruction, LocalAddr
from accel.lower import softmax_passes
from accel.sim import SimResult
from accel.sim import run as sim_run
from accel.trace import Trace
from baco.dsl import sim_moves as moves
from baco.dsl.ir import Function, Loc, Op
from baco.dsl.machine import Machine
from baco.dsl.sim_blocks import (
    AccTile,
    AccView,
    CapacityError,
    DotExpr,
    DramBlock,
    OnChipBlock,
    SpTile,
    is_data,
    kind,
    prefix,
    row_runs,
)
from baco.dsl.sim_chip import Chip
from baco.dsl.types import float32, int8, int32
from workloads.errors import ConfigError, DSLError


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


def softmax_columns(mask: Any, shape: tuple[int, int], loc: Loc) -> int:
    """The columns a softmax keeps: its mask must keep the same non-empty prefix of every
    row."""
    rows, cols = shape
    keep = (np.ones((rows, cols), bool) if mask is None
            else np.broadcast_to(np.asarray(mask, bool), (rows, cols)))
    n = prefix(keep)
    if (not np.array_equal(keep, np.arange(cols)[None, :] < n[:, None])
            or len(set(n.tolist())) != 1 or n[0] == 0):
        raise loc.error("sim backend: the softmax mask must keep the same non-empty "
                        "prefix of every row's columns (the normalizer's moves cover "
                        "the valid columns)")
    return int(n[0])


def softmax_moves(chip: Chip, tile: AccTile, row: int, cols: int, write_cols: int,
                  move: Callable[[int, LocalAddr, int], Any]) -> None:
    """A row's three passes through the normalizer: ``move(block, local, cols)`` emits one
    move of that many columns; the statistics cover ``cols``, the written pass
    ``write_cols``."""
    d = chip.dim
    mb, lr = divmod(row, d)
    for nb, cmd, n in softmax_passes(cols, d, write_cols):
        move(nb, LocalAddr.accumulator(tile.row(mb, nb, d) + lr, norm=int(cmd)), n)


def softmax_to_scratchpad(chip: Chip, tile: AccTile, sp: SpTile, n: int) -> None:
    """A softmax block as a dot operand: every row's passes, the written one by
    ``mvout_spad`` of its ``n`` valid columns."""
    d = chip.dim
    rows, _ = tile.shape
    nrb, ncb = tile.written.shape
    for rb in range(nrb):
        for cb in range(ncb):
            sp.valid[rb, cb] = (min(d, rows - rb * d), max(0, min(d, n - cb * d)))
    chip.config_softmax()
    for r in range(rows):
        softmax_moves(chip, tile, r, n, n, lambda nb, src, k, r=r: chip.ins.append(
            Instruction.mvout_spad(src, sp.row(r // d, nb, d) + r % d, 1, k)))


def store_softmax(chip: Chip, loc: Loc, arg: int, tile: AccTile, cols: int, runs: list,
                  esize: int) -> None:
    """A softmax block to DRAM: each stored row's three passes (`softmax_moves`); the
    statistics passes write nothing, the last one the row's stored columns."""
    if any(p > cols for *_, p in runs):
        raise loc.error("sim backend: the store keeps more columns than the softmax's "
                        "mask; store its valid columns only")
    chip.config_softmax()
    d = chip.dim
    for r0, n, off0, stride, p in runs:
        for i in range(n):
            at = chip.addr[arg] + (off0 + i * (stride or 0)) * esize
            softmax_moves(chip, tile, r0 + i, cols, p, lambda nb, src, k, at=at: (
                chip.ins.append(Instruction.mvout(at + nb * d * esize, src, 1, k))))


class SimCodegen(Machine):
    """Walks every program instance and emits the Gemmini instructions of its data ops."""

    def __init__(self, fn: Function, args: Sequence[Any], grid: tuple[int, ...],
                 hw: HardwareConfig) -> None:
        super().__init__(fn, args, grid)
        self.hw = hw
        self.chip = Chip(self.arrays, hw)
        self.stored: set[int] = set()

    # ------------------------------------------------------------------ program hooks
    def begin_program(self) -> None:
        self.chip.acc_tiles = []

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
        if is_data(x):
            raise op.loc.error("sim backend: reshaping accumulator blocks is not supported")
        return super().op_expand_dims(op, x)

    def acc_to_scratchpad(self, view: AccView, loc: Loc) -> OnChipBlock:
        """An int8 accumulator block as a dot operand: ``mvout_spad`` moves it into the
        scratchpad, requantized as an mvout would store it."""
        if view.dtype != int8:
            raise loc.error("sim backend: an accumulator block feeds a dot once it is "
                            ".to(baco.int8) (it moves to the scratchpad requantized, as an "
                            "mvout stores it)")
        tile = self.fresh(view, loc)
        sp = moves.onchip_tile(self.chip, tile, loc)
        if view.softmax_cols is not None:
            softmax_to_scratchpad(self.chip, tile, sp, view.softmax_cols)
        else:
            moves.requantize_to_scratchpad(self.chip, view, tile, sp)
        self.chip.sp_tiles.append(sp)
        return OnChipBlock(sp, tile.shape)

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

    def materialize(self, x: Any, loc: Loc) -> AccView:
        if isinstance(x, AccView):
            return x
        if isinstance(x, DotExpr):
            tile = self.chip.acc_tile((x.a.shape[0], x.b.shape[1]), loc)
            moves.emit_dot(self.chip, tile, x, loc)
            return self.bump(tile)
        raise loc.error("sim backend: only dot results and accumulator blocks can be combined "
                        "here; loaded blocks feed baco.dot or are added to an accumulator")

    def add_load(self, view: AccView, block: DramBlock, loc: Loc) -> AccView:
        tile = self.plain(view, loc)
        moves.load_into_accumulator(self.chip, tile, block, loc)
        return self.bump(tile)

    # ------------------------------------------------------------------ data ops
    def op_full(self, op: Op) -> Any:
        rtype = op.results[0].type
        if len(rtype.shape) == 2 and rtype.dtype == int32 and op.attrs["value"] == 0:
            return self.bump(self.chip.acc_tile(rtype.shape, op.loc))
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
        moves.emit_dot(self.chip, tile, expr, op.loc)
        return self.bump(tile)

    def binary(self, op: Op, a: Any, b: Any) -> Any:
        if not (is_data(a) or is_data(b)):
            return super().binary(op, a, b)
        if op.name == "add":
            for x, y in ((a, b), (b, a)):
                if isinstance(y, DotExpr) and is_data(x):
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
        raise op.loc.error(f"sim backend: `{op.name}` on {kind(a)} and {kind(b)} has no "
                           "Gemmini form; supported: acc + dot, acc + loaded block, acc * "
                           "scale, maximum(acc, 0), .to(), store")

    def op_maximum(self, op: Op, x: Any, y: Any) -> Any:
        if not (is_data(x) or is_data(y)):
            return super().op_maximum(op, x, y)
        view, other = (x, y) if is_data(x) else (y, x)
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
        cols = softmax_columns(mask, tile.shape, op.loc)
        return dataclasses.replace(view, dtype=int8, softmax_cols=cols)

    def op_minimum(self, op: Op, x: Any, y: Any) -> Any:
        if is_data(x) or is_data(y):
            raise op.loc.error("sim backend: minimum on data blocks has no Gemmini form; "
                               "saturation comes with .to(baco.int8)")
        return super().op_minimum(op, x, y)

    def op_where(self, op: Op, c: Any, x: Any, y: Any) -> Any:
        if is_data(x) or is_data(y):
            raise op.loc.error("sim backend: baco.where on data blocks has no Gemmini form; "
                               "mask the load or the store instead")
        return super().op_where(op, c, x, y)

    def op_neg(self, op: Op, x: Any) -> Any:
        if is_data(x):
            raise op.loc.error("sim backend: negating data blocks has no Gemmini form")
        return super().op_neg(op, x)

    def op_cast(self, op: Op, x: Any) -> Any:
        if not is_data(x):
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
        d = self.chip.dim
        runs = row_runs(offsets, m, d, op.loc, "store")
        touched = {(r0 // d, nb) for r0, _, _, _, p in runs for nb in range(-(-p // d))}
        moves.ensure_written(self.chip, tile, sorted(touched))
        esize = ptype.numpy.itemsize
        if view.softmax_cols is not None:
            store_softmax(self.chip, op.loc, arg, tile, view.softmax_cols, runs, esize)
        else:
            scale = 1.0 if view.scale is None else view.scale
            moves.mvout_runs(self.chip, arg, tile, runs, esize, full, view.act, scale)
        self.stored.add(arg)

    # ------------------------------------------------------------------ result
    def trace(self) -> Trace:
        return self.chip.trace()


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
        result = sim_run(trace, gen.hw, gen.chip.image, functional=functional)
    except ConfigError as exc:
        raise DSLError(f"{fn.loc}: the simulator rejected the kernel's trace: {exc}") from exc
    if functional:
        for i in sorted(gen.stored):
            gen.arrays[i][...] = result.read(f"arg{i}")
    return SimReport(trace, result.cycles, result, gen.hw)


__all__ = ["AccTile", "AccView", "CapacityError", "DotExpr", "DramBlock", "SimCodegen",
           "SimReport", "SpTile", "compile_trace", "resolve_hw", "simulate"]
