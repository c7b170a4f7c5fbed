"""The loop nest a `Mapping` describes, and the row layouts of the tiles it keeps on chip.

A Gemmini mapping has four levels (0 registers, 1 accumulator, 2 scratchpad, 3 DRAM), C fanned
out over the PE rows below the accumulator (``Cs = spatial[1, C]``) and K over the PE columns
below the scratchpad (``Ks = spatial[2, K]``). One compute instruction therefore multiplies a
block of up to DIM output pixels x ``Cs`` input channels by ``Cs`` x ``Ks`` weights.

Index of dim d for one iteration: the spatial index (C and K only) is innermost, then the
temporal digits from level 0 outwards, so a loop's *coefficient* (the step of the dim's index
per iteration) is ``spatial[d] * prod(temporal[:level, d])``. Timeloop nests K's fan-out outside
the accumulator's K loop; putting it innermost instead changes no tile shape and no access
count, and it keeps each compute's ``Ks`` output channels contiguous in DRAM.

A mapping may cover *more* than the layer (factors whose product exceeds a dim): the trailing
iterations are padding, dropped from rows or shortened in columns, the way ``gemmini.h`` pads
trailing DIM-blocks (seed 001 §4.6: "BACO automatically pads them with the value 0").

Tile layouts (rows of DIM elements) are linear in the loop digits, so a program fragment built
once for an accumulator tile is reused for every tile by adding base addresses:

* weights, scratchpad: ``[k-block][r][s][c]``, each row ``Ks`` output channels (gemmini.h's
  ``sp_tiled_conv`` layout);
* inputs, scratchpad, *window* form (a sliding window: kernel > 1, stride, padding or
  upsampling): ``[c-block][n][h][w]`` with the tile's halo, each row one pixel's ``Cs``
  channels -- the compute addresses ``h = p*stride + r*dilation`` into it (implicit im2col);
* inputs, scratchpad, *blocked* form (a GEMM or 1x1 conv): the mixed radix of the input loops
  in nest order, so a GEMM with loops ``P2 C5 | P2`` stores A as ``[m-block][k-block][m]``,
  gemmini.h's ``sp_tiled_matmul_ws`` layout and the seed's 4x9x4 address formula;
* outputs, accumulator: the mixed radix of the output loops at levels 1 and 0 in nest order,
  so the pixels one preloaded weight block streams through are contiguous rows.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel.mapping import Mapping
from workloads.errors import InfeasibleError
from workloads.layer import DIMS, Layer

R, S, P, Q, C, K, N = range(7)
REG, ACC, SP, DRAM = range(4)
W_DIMS = (R, S, C, K)
I_DIMS = (N, P, Q, C, R, S)
O_DIMS = (N, P, Q, K)
PIXEL_DIMS = (N, P, Q)
RED_DIMS = (C, R, S)
GEMMINI_TAGS = ("W", "O", "WI", "WIO")


@dataclasses.dataclass(frozen=True)
class Loop:
    """One temporal loop of the nest: its level, dim, trip count and coefficient."""

    level: int
    dim: int
    trip: int
    coef: int

    def __repr__(self) -> str:
        return f"L{self.level}:{DIMS[self.dim]}{self.trip}"


def padded_layer(layer: Layer, mapping: Mapping) -> Layer:
    """`layer` with each dim replaced by what the mapping covers (>= the layer's dims)."""
    cover = (mapping.temporal * mapping.spatial).prod(axis=0)
    changes = {d: int(cover[i]) for i, d in enumerate(DIMS)}
    kind = layer.kind
    if kind == "gemv" and (changes["N"], changes["P"]) != (1, 1):
        kind = "gemm"
    return dataclasses.replace(layer, kind=kind, **changes)


class Nest:
    """The mapping's loops, tile extents and spatial blocks for one layer.

    ``loops[l]`` are level l's loops with trip > 1, outermost first. ``ext[l, d]`` is the
    extent of dim d in a level-l tile (all PE instances together).
    """

    def __init__(self, layer: Layer, mapping: Mapping, dim: int, pack: bool = True) -> None:
        if mapping.tags != GEMMINI_TAGS:
            raise InfeasibleError(f"lowering targets Gemmini's four levels {GEMMINI_TAGS}; the "
                                  f"mapping keeps {mapping.tags}")
        t, sp = mapping.temporal, mapping.spatial
        spatial = np.ones(7, np.int64)
        spatial[C], spatial[K] = sp[ACC, C], sp[SP, K]
        expected = np.ones_like(sp)
        expected[ACC, C], expected[SP, K] = sp[ACC, C], sp[SP, K]
        if not np.array_equal(sp, expected):
            l, d = np.argwhere(sp != expected)[0]
            raise InfeasibleError(f"level L{l}: spatial factor on {DIMS[d]}; Gemmini fans out "
                                  "only C across PE rows (L1) and K across PE columns (L2)")
        if spatial[C] > dim or spatial[K] > dim:
            raise InfeasibleError(f"spatial C{spatial[C]} x K{spatial[K]} exceeds the "
                                  f"{dim}x{dim} array")
        self.layer = layer
        self.dim = dim
        self.dims = np.array([getattr(layer, d) for d in DIMS], np.int64)
        self.spatial = spatial
        self.temporal = t.astype(np.int64)
        self.cover = spatial * t.prod(axis=0)
        if np.any(self.cover < self.dims):
            d = int(np.argmax(self.cover < self.dims))
            raise InfeasibleError(f"dim {DIMS[d]}: the mapping covers {self.cover[d]} but the "
                                  f"layer has {DIMS[d]}={self.dims[d]}")
        self.coef = np.stack([spatial * t[:l].prod(axis=0) for l in range(4)])
        self.ext = np.stack([spatial * t[:l + 1].prod(axis=0) for l in range(4)])
        self.loops = tuple(
            tuple(Loop(l, int(d), int(t[l, d]), int(self.coef[l, d]))
                  for d in mapping.order[l] if t[l, d] > 1)
            for l in range(4))
        self.stages = mapping.stages.astype(np.int64)
        self.cs, self.ks = int(spatial[C]), int(spatial[K])
        self.mapping = mapping
        # First-layer packing: the S loop `packed_loop` steps over groups of
        # `pixels_per_row` kernel columns (the last group may be shorter: `packed_columns`).
        self.pixels_per_row, self.packed_trip = 1, 1
        self.packed_loop: Loop | None = None
        loop = self._packable_loop() if pack else None
        if loop is not None:
            self.pixels_per_row = int(kernel_columns_per_row(dim, self.cs, loop.trip))
            self.packed_trip = loop.trip
            self.packed_loop = Loop(loop.level, S, -(-loop.trip // self.pixels_per_row),
                                    self.pixels_per_row)
            self.loops = tuple(tuple(self.packed_loop if lp is loop else lp for lp in level)
                               for level in self.loops)

    def _packable_loop(self) -> Loop | None:
        """The S loop whose kernel columns share one array row group (first-layer packing, as
        Gemmini's ``LoopConv`` with ``max_pixels_per_row``), or None.

        Packing needs the inputs in window form at unit kernel dilation along W, every input
        channel in the array's rows at once (``Cs = C``, no temporal C: each scratchpad row then
        holds one pixel's ``C`` channels and consecutive kernel columns' weights are consecutive
        rows), room for two kernel columns (``2 Cs <= DIM``), and the innermost S loop inside
        the accumulator tile (the loops of one weight block's program)."""
        lay = self.layer
        if not self.window or lay.Wdilation != 1 or self.cover[C] != self.cs:
            return None
        if self.cs != self.dims[C] or 2 * self.cs > self.dim:
            return None
        for level in (REG, ACC):
            for lp in self.loops[level]:
                if lp.dim == S:
                    return lp if lp.coef == 1 else None
        return None

    def unpacked(self) -> Nest:
        """The same nest without first-layer packing."""
        return Nest(self.layer, self.mapping, self.dim, pack=False)

    # ------------------------------------------------------------------ loop groups
    @property
    def inner_loops(self) -> tuple[Loop, ...]:
        """Accumulator and register loops, outermost first: one accumulator tile's program."""
        return self.loops[ACC] + self.loops[REG]

    @property
    def stream_loops(self) -> tuple[Loop, ...]:
        """The innermost inner loops over N, P, Q: pixels that reuse one preloaded weight block.

        Weight-stationary reuse extends over every loop inside the innermost weight-relevant
        loop (Timeloop sees the same reuse), so a weight block is preloaded once per stream.
        """
        out: list[Loop] = []
        for loop in reversed(self.inner_loops):
            if loop.dim not in PIXEL_DIMS:
                break
            out.append(loop)
        return tuple(reversed(out))

    @property
    def outer_inner_loops(self) -> tuple[Loop, ...]:
        """Inner loops outside the stream: each iteration preloads one weight block."""
        return self.inner_loops[:len(self.inner_loops) - len(self.stream_loops)]

    def matching(self, macro: bool = False) -> tuple[list[str], list[str], list[str]]:
        """Software dims on the array's rows (i1), columns (i2) and reduction (r1).

        Unrolled: the stream's pixel dims stream down the rows, the dims fanned out over PE
        columns and rows (K, C) fill the other two. The ``loop_ws`` FSM puts GEMM rows (N, P)
        on i1, K on i2 and C on r1 whatever the mapping's spatial factors.
        """
        if macro:
            return ["N", "P"], ["K"], ["C"]
        rows = sorted({DIMS[lp.dim] for lp in self.stream_loops})
        cols = [DIMS[d] for d in range(7) if self.spatial[d] > 1 and d != C]
        red = [DIMS[d] for d in range(7) if self.spatial[d] > 1 and d == C]
        return rows, cols, red

    def red_steps(self) -> int:
        """Reduction steps an accumulator tile takes across scratchpad and DRAM loops."""
        return math.prod(lp.trip for l in (SP, DRAM) for lp in self.loops[l]
                         if lp.dim in RED_DIMS)

    @property
    def window(self) -> bool:
        """Whether inputs need the sliding-window (halo) layout rather than the blocked one."""
        lay = self.layer
        return not (lay.R == 1 and lay.S == 1 and lay.Hstride == 1 and lay.Wstride == 1
                    and lay.pads == (0, 0, 0, 0) and lay.upsample == (1, 1)
                    and self.cover[R] == 1 and self.cover[S] == 1)


def accumulator_tile(layer: Layer, mapping: Mapping, dim: int) -> dict[str, int]:
    """Each dim's extent in the mapping's accumulator (level-1) tile, all PE instances
    together, by dim name (`Nest`'s checks apply)."""
    ext = Nest(layer, mapping, dim).ext[ACC]
    return {d: int(ext[i]) for i, d in enumerate(DIMS)}


def kernel_columns_per_row(dim: Any, cs: Any, s_trip: Any, xp: Any = np) -> Any:
    """Kernel columns one weight block packs: ``sp_tiled_conv``'s ``max_pixels_per_row``,
    ``DIM / ichs`` capped at the kernel columns (gemmini.h ~1405-1414). Over numpy or jax
    (`xp`): the lowering and the instruction-aware model (`perfmodels.aware`) share it."""
    return xp.maximum(1, xp.minimum(xp.floor(dim / xp.maximum(cs, 1)), s_trip))


def digits_index(loops: Sequence[Loop], digits: Sequence[int]) -> np.ndarray:
    """Index contribution ``[7]`` of loop digits."""
    idx = np.zeros(7, np.int64)
    for lp, v in zip(loops, digits):
        idx[lp.dim] += v * lp.coef
    return idx


def enumerate_digits(loops: Sequence[Loop]) -> np.ndarray:
    """All digit combinations of `loops` in nest order (last loop fastest): ``[n, len]``."""
    if not loops:
        return np.zeros((1, 0), np.int64)
    grids = np.indices([lp.trip for lp in loops]).reshape(len(loops), -1).T
    return grids.astype(np.int64)


def index_matrix(loops: Sequence[Loop]) -> np.ndarray:
    """``[len(loops), 7]``: digits @ this = dim indices."""
    mat = np.zeros((len(loops), 7), np.int64)
    for i, lp in enumerate(loops):
        mat[i, lp.dim] = lp.coef
    return mat


# --------------------------------------------------------------------------- tile layouts
@dataclasses.dataclass(frozen=True)
class TileLayout:
    """Rows of one tile in a local memory as a linear function of loop digits.

    ``coef[(level, dim)]`` is the row step per iteration of that loop; ``rows`` the rows one
    tile occupies; ``inner`` a row step per unit of the spatial index that runs down rows
    (weights: the ``Cs`` channels of a block are consecutive rows), else 0.
    """

    name: str
    rows: int
    coef: dict
    inner: int = 0

    def row(self, loops: Sequence[Loop], digits: Sequence[int]) -> int:
        return int(sum(self.coef.get((lp.level, lp.dim), 0) * v for lp, v in zip(loops, digits)))

    def coef_vector(self, loops: Sequence[Loop]) -> np.ndarray:
        return np.array([self.coef.get((lp.level, lp.dim), 0) for lp in loops], np.int64)


def weight_layout(nest: Nest) -> TileLayout:
    """``[k-block][r][s][c]`` over the scratchpad tile; each row holds ``Ks`` channels."""
    e = nest.ext[SP]
    kb, r2, s2, c2 = e[K] // nest.ks, e[R], e[S], e[C]
    per_dim = {K: r2 * s2 * c2, R: s2 * c2, S: c2, C: 1}
    unit = {K: nest.ks, R: 1, S: 1, C: 1}
    coef = {(lp.level, lp.dim): int(per_dim[lp.dim] * lp.coef // unit[lp.dim])
            for l in (ACC, SP) for lp in nest.loops[l] if lp.dim in W_DIMS}
    return TileLayout("weight", int(kb * r2 * s2 * c2), coef, inner=1)


@dataclasses.dataclass(frozen=True)
class WindowGeometry:
    """Input tile extents with the halo: ``span_h`` x ``span_w`` pixels per (c-block, n)."""

    cblocks: int
    n: int
    span_h: int
    span_w: int

    @property
    def rows(self) -> int:
        return self.cblocks * self.n * self.span_h * self.span_w


def window_geometry(nest: Nest) -> WindowGeometry:
    e, lay = nest.ext[SP], nest.layer
    span_h = (e[P] - 1) * lay.Hstride + (e[R] - 1) * lay.Hdilation + 1
    span_w = (e[Q] - 1) * lay.Wstride + (e[S] - 1) * lay.Wdilation + 1
    return WindowGeometry(int(e[C] // nest.cs), int(e[N]), int(span_h), int(span_w))


def input_layout(nest: Nest) -> TileLayout:
    """The input tile layout: window (``[c-block][n][h][w]``) or blocked (loop mixed radix)."""
    lay = nest.layer
    if nest.window:
        g = window_geometry(nest)
        per_dim = {C: g.n * g.span_h * g.span_w, N: g.span_h * g.span_w,
                   P: lay.Hstride * g.span_w, R: lay.Hdilation * g.span_w,
                   Q: lay.Wstride, S: lay.Wdilation}
        unit = {C: nest.cs, N: 1, P: 1, R: 1, Q: 1, S: 1}
        coef = {(lp.level, lp.dim): int(per_dim[lp.dim] * lp.coef // unit[lp.dim])
                for l in (REG, ACC, SP) for lp in nest.loops[l] if lp.dim in I_DIMS}
        return TileLayout("input", g.rows, coef)
    loops = [lp for l in (SP, ACC, REG) for lp in nest.loops[l] if lp.dim in (N, P, Q, C)]
    return TileLayout("input", *_mixed_radix(loops))


def output_layout(nest: Nest) -> TileLayout:
    """Accumulator rows of one output tile: the mixed radix of the level-1/0 output loops."""
    loops = [lp for lp in nest.inner_loops if lp.dim in O_DIMS]
    return TileLayout("output", *_mixed_radix(loops))


def _mixed_radix(loops: Sequence[Loop]) -> tuple[int, dict]:
    coef, step = {}, 1
    for lp in reversed(loops):
        coef[(lp.level, lp.dim)] = step
        step *= lp.trip
    return step, coef


# --------------------------------------------------------------------------- row runs
def runs(sp: np.ndarray, dram: np.ndarray, kind: np.ndarray, cols: np.ndarray,
         stride: int, max_rows: int) -> tuple[np.ndarray, ...]:
    """Split rows (in local-memory order) into moves of consecutive rows at one DRAM stride.

    ``kind`` is 0 (skip), 1 (data at ``dram``) or 2 (zeros, read from the zero region).
    Consecutive kept rows join a move when their local rows are adjacent, their kinds and
    column counts agree, and (for data) their DRAM addresses differ by ``stride``; a move has
    at most ``max_rows`` rows. Returns ``(sp, dram, kind, cols, rows)`` per move.
    """
    keep = kind != 0
    sp, dram, kind, cols = sp[keep], dram[keep], kind[keep], cols[keep]
    n = sp.size
    if n == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty
    join = ((sp[1:] == sp[:-1] + 1) & (kind[1:] == kind[:-1]) & (cols[1:] == cols[:-1])
            & ((kind[1:] == 2) | (dram[1:] - dram[:-1] == stride)))
    start = np.r_[True, ~join]
    first = np.flatnonzero(start)
    run_id = np.cumsum(start) - 1
    pos = np.arange(n) - first[run_id]
    piece = start | (pos % max_rows == 0)
    idx = np.flatnonzero(piece)
    rows = np.diff(np.r_[idx, n])
    return sp[idx], dram[idx], kind[idx], cols[idx], rows


def product_ranges(*extents: int):
    return itertools.product(*(range(int(e)) for e in extents))


__all__ = [
    "ACC",
    "DRAM",
    "REG",
    "SP",
    "C",
    "K",
    "Loop",
    "N",
    "Nest",
    "P",
    "Q",
    "R",
    "S",
    "TileLayout",
    "WindowGeometry",
    "accumulator_tile",
    "digits_index",
    "enumerate_digits",
    "index_matrix",
    "input_layout",
    "kernel_columns_per_row",
    "output_layout",
    "padded_layer",
    "runs",
    "weight_layout",
    "window_geometry",
]
