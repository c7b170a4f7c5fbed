"""The values the simulator backend computes with: blocks still in DRAM, blocks in the
scratchpad or the accumulator, dot results not yet placed, and the row runs Gemmini moves
them in."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from baco.dsl.ir import Loc
from baco.dsl.types import DType, int32
from workloads.errors import DSLError, InfeasibleError


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


def is_data(x: Any) -> bool:
    return isinstance(x, (DramBlock, DotExpr, AccView))


def kind(x: Any) -> str:
    return {DramBlock: "a loaded block", DotExpr: "a dot result",
            AccView: "an accumulator block"}.get(type(x), "a value")


def prefix(mask: np.ndarray) -> np.ndarray:
    """Valid columns of each row of a 2-D mask (which must keep a prefix of every row)."""
    cols = mask.shape[1]
    return np.where(mask.all(axis=1), cols, mask.argmin(axis=1))


def consecutive(indices: np.ndarray) -> list[tuple[int, int]]:
    """Runs of consecutive integers: [(start, length)]."""
    out: list[tuple[int, int]] = []
    for i in indices.tolist():
        if out and out[-1][0] + out[-1][1] == i:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


def row_runs(offsets: np.ndarray, mask: np.ndarray | None, dim: int, loc: Loc, what: str
             ) -> list[tuple[int, int, int, int | None, int]]:
    """Strided row runs of a 2-D access: (first row, rows, first offset, row stride or None
    for one row, valid columns); runs never cross a DIM-row boundary."""
    rows, cols = offsets.shape
    m = np.ones(offsets.shape, bool) if mask is None else mask
    valid = prefix(m)
    if not np.array_equal(m, np.arange(cols)[None, :] < valid[:, None]):
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
        p = int(valid[r])
        if p == 0:
            continue
        cur = out[-1] if out else None
        joinable = (cur is not None and cur[0] + cur[1] == r and r % dim != 0
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


__all__ = ["AccTile", "AccView", "CapacityError", "DotExpr", "DramBlock", "OnChipBlock",
           "SpTile", "consecutive", "is_data", "kind", "prefix", "row_runs"]
