"""The tile moves of the weight-stationary lowering (`accel.lower.ws`): the mvins of a
scratchpad tile of weights or inputs, and the moves of an accumulator tile of outputs before its
first compute (bias, residual, returning partial sums) and after its last (the final mvout or a
partial-sum spill).

They live apart from the tile walk that decides *when* a tile moves (`accel.lower.ws.lower_ws`)
because they only say *how*: which DRAM runs go to which local rows, planned once per tile shape
and replayed with the tile's bases. The module docstring of `accel.lower.ws` describes the
program they are part of (slots, spills, epilogues).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from accel.isa import IsaParams
from accel.lower.emit import Emitter, acc_addr
from accel.lower.layout import DramLayout, input_hw
from accel.lower.nest import (
    ACC,
    O_DIMS,
    REG,
    SP,
    C,
    K,
    N,
    Nest,
    P,
    Q,
    R,
    S,
    TileLayout,
    enumerate_digits,
    index_matrix,
    runs,
    window_geometry,
)

if TYPE_CHECKING:
    from accel.lower.ws import BufferRegion, Epilogue


# --------------------------------------------------------------------------- tile loads
class TileLoads:
    """The mvins of scratchpad tiles of weights (``mvin2``) and inputs (``mvin``).

    A tile's moves are planned once per tile shape (and, for inputs, per pattern of padding
    rows) relative to the tile's DRAM origin and slot, then replayed with those bases. Inputs
    are a window (``[c-block][n][h][w]``, zero rows for padding and upsampling holes, pixel
    repeats with first-layer packing) or blocked (the mixed radix of the inner N, P, Q, C
    loops), as `accel.lower.nest.input_layout` lays them out.
    """

    def __init__(self, nest: Nest, params: IsaParams, layout: DramLayout, il: TileLayout,
                 wl: TileLayout, em: Emitter) -> None:
        lay = nest.layer
        self.nest, self.params, self.layout, self.il, self.wl, self.em = (
            nest, params, layout, il, wl, em)
        self.gc = lay.groups * lay.C
        self.h_in, self.w_in = input_hw(lay)
        uh, uw = lay.upsample
        self.hz_total, self.wz_total = (self.h_in - 1) * uh + 1, (self.w_in - 1) * uw + 1
        self.blocked_loops = [lp for l in (SP, ACC, REG) for lp in nest.loops[l]
                              if lp.dim in (N, P, Q, C)]
        self.blocked_per = {N: self.h_in * self.w_in * self.gc, P: self.w_in * self.gc,
                            Q: self.gc, C: 1}
        last = self.blocked_loops[-1] if self.blocked_loops else None
        self.blocked_stride = (last.coef * self.blocked_per[last.dim] if last is not None
                               else self.gc)
        self.plans: dict[tuple, list] = {}

    def _replay(self, ld_id: int, plan: list, dram_base: int, local_base: int) -> None:
        zeros = self.layout["zeros"].offset_bytes
        for d_, s_, n_, c_ in plan:
            self.em.mvin(ld_id, zeros if d_ is None else dram_base + d_, local_base + s_, n_,
                         c_, 1)

    def load_weights(self, g: int, o3: np.ndarray, base: int) -> None:
        """The weight tile of group ``g`` at DRAM-loop origin ``o3`` into scratchpad row
        ``base``."""
        nest, lay = self.nest, self.nest.layer
        ext2 = nest.ext[SP]
        v = np.clip(nest.dims - o3, 0, ext2)
        self.em.config_ld(1, lay.K, block_stride=int(self.wl.rows // (ext2[K] // nest.ks)))
        origin = self.layout["weight"].address(g, int(o3[R]), int(o3[S]), int(o3[C]),
                                               int(o3[K]))
        self._replay(1, self._weight_plan(v), origin, base)

    def load_inputs(self, g: int, o3: np.ndarray, base: int) -> None:
        """The input tile of group ``g`` at DRAM-loop origin ``o3`` into scratchpad row
        ``base``."""
        nest, lay = self.nest, self.nest.layer
        x, gc, h_in, w_in = self.layout["input"], self.gc, self.h_in, self.w_in
        v = np.clip(nest.dims - o3, 0, nest.ext[SP])
        if nest.window:
            uh, uw = lay.upsample
            geo = window_geometry(nest)
            h0 = int(o3[P] * lay.Hstride + o3[R] * lay.Hdilation - lay.pads[0])
            w0 = int(o3[Q] * lay.Wstride + o3[S] * lay.Wdilation - lay.pads[1])
            self.em.config_ld(0, gc, block_stride=geo.n * geo.span_h * geo.span_w,
                              pixel_repeats=nest.pixels_per_row)
            origin = x.offset_bytes + ((int(o3[N]) * h_in + h0 // uh) * w_in + w0 // uw) * gc \
                + g * lay.C + int(o3[C])
            self._replay(0, self._window_plan(v, h0, w0), origin, base)
            return
        self.em.config_ld(0, int(self.blocked_stride))
        origin = x.address(int(o3[N]), int(o3[P]), int(o3[Q]), g * lay.C + int(o3[C]))
        self._replay(0, self._blocked_plan(v), origin, base)

    def _weight_plan(self, v: np.ndarray) -> list:
        key = ("w", *v.tolist())
        if key in self.plans:
            return self.plans[key]
        nest, lay, dim = self.nest, self.nest.layer, self.nest.dim
        ext2 = nest.ext[SP]
        r2, s2, c2 = ext2[R], ext2[S], ext2[C]
        rr, ss, cc = np.meshgrid(np.arange(v[R]), np.arange(v[S]), np.arange(v[C]),
                                 indexing="ij")
        rr, ss, cc = rr.ravel(), ss.ravel(), cc.ravel()
        sp = (rr * s2 + ss) * c2 + cc
        dram = ((rr * lay.S + ss) * lay.C + cc) * lay.K
        ones = np.ones_like(sp)
        spr, dr, _, _, rows = runs(sp, dram, ones, ones, lay.K, dim)
        kblocks = -(-int(v[K]) // nest.ks)
        per_mvin = self.params.max_block_len if nest.ks == dim else 1
        plan = []
        for kb in range(0, kblocks, per_mvin):
            cols = int(min(per_mvin * nest.ks, v[K] - kb * nest.ks))
            shift = kb * (r2 * s2 * c2)
            plan += [(d_ + kb * nest.ks, shift + s_, n_, cols)
                     for s_, d_, n_ in zip(spr.tolist(), dr.tolist(), rows.tolist())]
        self.plans[key] = plan
        return plan

    def _window_plan(self, v: np.ndarray, h0: int, w0: int) -> list:
        nest, lay, dim = self.nest, self.nest.layer, self.nest.dim
        uh, uw = lay.upsample
        geo = window_geometry(nest)
        hneed = int((v[P] - 1) * lay.Hstride + (v[R] - 1) * lay.Hdilation + 1)
        wneed = int((v[Q] - 1) * lay.Wstride + (v[S] - 1) * lay.Wdilation + 1)
        clip = (min(hneed, max(0, -h0)), min(hneed, max(0, h0 + hneed - self.hz_total)),
                min(wneed, max(0, -w0)), min(wneed, max(0, w0 + wneed - self.wz_total)))
        key = ("i", *v.tolist(), h0 % uh, w0 % uw, *clip)
        if key in self.plans:
            return self.plans[key]
        nn, hh, ww = np.meshgrid(np.arange(v[N]), np.arange(hneed), np.arange(wneed),
                                 indexing="ij")
        nn, hh, ww = nn.ravel(), hh.ravel(), ww.ravel()
        sp = (nn * geo.span_h + hh) * geo.span_w + ww
        hr, wr = h0 % uh + hh, w0 % uw + ww  # rows relative to the tile's origin pixel
        real = ((hh >= clip[0]) & (hh < hneed - clip[1]) & (hr % uh == 0)
                & (ww >= clip[2]) & (ww < wneed - clip[3]) & (wr % uw == 0))
        kind = np.where(real, 1, 2)
        dram = ((nn * self.h_in + hr // uh) * self.w_in + wr // uw) * self.gc
        ones = np.ones_like(sp)
        spr, dr, kd, _, rows = runs(sp, dram, kind, ones, self.gc, dim)
        block_stride = geo.n * geo.span_h * geo.span_w
        cblocks = -(-int(v[C]) // nest.cs)
        per_mvin = self.params.max_block_len if nest.cs == dim else 1
        plan = []
        for cb in range(0, cblocks, per_mvin):
            cols = int(min(per_mvin * nest.cs, v[C] - cb * nest.cs))
            shift = cb * block_stride
            plan += [(d_ + cb * nest.cs if k_ == 1 else None, shift + s_, n_, cols)
                     for s_, d_, k_, n_ in zip(spr.tolist(), dr.tolist(), kd.tolist(),
                                               rows.tolist())]
        self.plans[key] = plan
        return plan

    def _blocked_plan(self, v: np.ndarray) -> list:
        key = ("b", *v.tolist())
        if key in self.plans:
            return self.plans[key]
        loops, per = self.blocked_loops, self.blocked_per
        digits = enumerate_digits(loops)
        index = digits @ index_matrix(loops)
        sp = digits @ self.il.coef_vector(loops)
        ok = np.all(index[:, [N, P, Q, C]] < v[[N, P, Q, C]], axis=1)
        cols = np.minimum(self.nest.cs, v[C] - index[:, C])
        dram = sum(index[:, d] * per[d] for d in (N, P, Q, C))
        spr, dr, _, cr, rows = runs(sp, dram, ok.astype(np.int64), cols, self.blocked_stride,
                                    self.nest.dim)
        self.plans[key] = list(zip(dr.tolist(), spr.tolist(), rows.tolist(), cr.tolist()))
        return self.plans[key]


# --------------------------------------------------------------------------- output rows
@dataclasses.dataclass
class OutputRuns:
    """Accumulator-tile rows grouped into moves of consecutive rows (one DRAM stride)."""

    acc: list[int]
    elem: list[int]  # output element offset of each move's first row, tile-relative
    cols: list[int]
    rows: list[int]
    elem_stride: int  # output elements between consecutive rows of a move
    # The bias moves: rows grouped by output channel (a bias row is one channel vector).
    bias_acc: list[int]
    bias_k: list[int]  # output channel of each bias move's first row, tile-relative
    bias_cols: list[int]
    bias_rows: list[int]
    k_stride: int  # output channels between consecutive rows of a bias move


def output_runs(nest: Nest, valid: np.ndarray, ol: TileLayout) -> OutputRuns:
    lay = nest.layer
    gk = lay.groups * lay.K
    elem_per = {N: lay.P * lay.Q * gk, P: lay.Q * gk, Q: gk, K: 1}
    loops = [lp for lp in nest.inner_loops if lp.dim in O_DIMS]
    digits = enumerate_digits(loops)
    index = digits @ index_matrix(loops)
    acc = digits @ ol.coef_vector(loops)
    elem = sum(index[:, d] * elem_per[d] for d in O_DIMS)
    ok = np.all(index[:, list(O_DIMS)] < valid[list(O_DIMS)], axis=1)
    cols = np.minimum(nest.ks, valid[K] - index[:, K])
    if loops:
        inner = loops[-1]
        elem_stride = inner.coef * elem_per[inner.dim]
        k_stride = inner.coef if inner.dim == K else 0
    else:
        elem_stride, k_stride = gk, 0
    kind = ok.astype(np.int64)
    sp, first, _, cols_r, rows = runs(acc, elem, kind, cols, elem_stride, nest.dim)
    b_sp, b_k, _, b_cols, b_rows = runs(acc, index[:, K], kind, cols, k_stride, nest.dim)
    return OutputRuns(sp.tolist(), first.tolist(), cols_r.tolist(), rows.tolist(),
                      int(elem_stride), b_sp.tolist(), b_k.tolist(), b_cols.tolist(),
                      b_rows.tolist(), int(k_stride))


# --------------------------------------------------------------------------- output moves
class OutputMoves:
    """The moves of an accumulator tile of outputs around its computes.

    `init` before a visit's first compute: on the tile's first visit the bias (mvin3, int32,
    DRAM stride 0) and the residual (into the ``residual`` scratchpad region where there is one,
    else accumulated as int8 into the rows); on a later visit the partial sums back from DRAM,
    after a fence. `write` when the walk leaves the tile: the final requantizing mvout, or the
    int32 partial sums to DRAM (a spill, counted in ``spills``).
    """

    def __init__(self, nest: Nest, layout: DramLayout, epi: Epilogue, ol: TileLayout,
                 em: Emitter, residual: BufferRegion | None) -> None:
        lay = nest.layer
        self.nest, self.epi, self.ol, self.em, self.residual = nest, epi, ol, em, residual
        self.gk = lay.groups * lay.K
        self.out, self.part = layout["output"], layout.get("partial")
        self.bias = layout["bias"] if epi.bias else None
        self.resid = layout["residual"] if epi.residual else None
        self.runs: dict[tuple, OutputRuns] = {}
        self.spills = 0

    def _runs(self, valid: np.ndarray) -> OutputRuns:
        key = tuple(valid.tolist())
        if key not in self.runs:
            self.runs[key] = output_runs(self.nest, valid, self.ol)
        return self.runs[key]

    def _elem(self, g: int, origin: np.ndarray) -> int:
        lay = self.nest.layer
        return int(((origin[N] * lay.P + origin[P]) * lay.Q + origin[Q]) * self.gk
                   + g * lay.K + origin[K])

    def init(self, g: int, origin: np.ndarray, valid: np.ndarray, base: int, fresh: bool,
             slot: int) -> None:
        """The rows of the tile at ``origin`` (accumulator row ``base``, output slot ``slot``)
        before this visit's first compute; ``fresh``: its first visit."""
        rr, e0 = self._runs(valid), self._elem(g, origin)
        if not fresh:
            self._reload_partials(rr, e0, base)
            return
        if self.epi.bias:
            self._load_bias(rr, g, origin, base)
        if self.residual is not None:
            self._load_residual_to_sp(rr, e0, self.residual.slot_row(slot))
        elif self.epi.residual:
            self._accumulate_residual(rr, e0, base)

    def _reload_partials(self, rr: OutputRuns, e0: int, base: int) -> None:
        em = self.em
        # The load and store queues do not order DRAM accesses: wait for the spill.
        em.fence()
        em.config_ld(2, rr.elem_stride * 4)
        for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
            em.mvin(2, self.part.offset_bytes + (e0 + e_) * 4, acc_addr(base + a_), n_, c_, 4)

    def _load_bias(self, rr: OutputRuns, g: int, origin: np.ndarray, base: int) -> None:
        em = self.em
        em.config_ld(2, rr.k_stride * 4)
        k0 = g * self.nest.layer.K + int(origin[K])
        for a_, k_, c_, n_ in zip(rr.bias_acc, rr.bias_k, rr.bias_cols, rr.bias_rows):
            em.mvin(2, self.bias.offset_bytes + (k0 + k_) * 4, acc_addr(base + a_), n_, c_, 4)

    def _load_residual_to_sp(self, rr: OutputRuns, e0: int, r_base: int) -> None:
        em = self.em
        em.config_ld(2, rr.elem_stride)
        for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
            em.mvin(2, self.resid.offset_bytes + (e0 + e_), r_base + a_, n_, c_, 1)

    def _accumulate_residual(self, rr: OutputRuns, e0: int, base: int) -> None:
        em, bias = self.em, self.epi.bias
        # Accumulating (after the bias): fenced off from every compute on either side.
        if bias:
            em.fence()
        em.config_ld(2, rr.elem_stride, shrunk=True)
        for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
            em.mvin(2, self.resid.offset_bytes + (e0 + e_),
                    acc_addr(base + a_, accumulate=bias), n_, c_, 1)
        if bias:
            em.fence()

    def write(self, g: int, origin: np.ndarray, valid: np.ndarray, base: int,
              final: bool) -> None:
        """The tile at ``origin`` (accumulator row ``base``) out: to the output when its
        reduction is done (``final``), else its partial sums to the ``partial`` tensor."""
        em, epi = self.em, self.epi
        rr, e0 = self._runs(valid), self._elem(g, origin)
        if final:
            out_bytes = self.out.itemsize
            em.config_st(rr.elem_stride * out_bytes, act=epi.act, acc_scale=epi.acc_scale)
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvout(self.out.offset_bytes + (e0 + e_) * out_bytes,
                         acc_addr(base + a_, full=epi.full_output), n_, c_, out_bytes)
        else:
            self.spills += 1
            em.config_st(rr.elem_stride * 4, act=epi.act, acc_scale=epi.acc_scale)
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvout(self.part.offset_bytes + (e0 + e_) * 4, acc_addr(base + a_, full=True),
                         n_, c_, 4)


__all__ = ["OutputMoves", "OutputRuns", "TileLoads", "output_runs"]
