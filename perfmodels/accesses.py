"""Per level and tensor: fills, reads and updates (Timeloop's reuse analysis, DOSA's port).

Everything here works on one (layer, hardware, mapping) in log space and is `jit`/`vmap`/`grad`
safe; the exact model feeds integer factors and one-hot loop orders, the relaxed model
continuous factors and soft orders, through the same functions.

The rules (reference dosa-gemmini-isa.md §A.4-A.5, ``accesses_from_mapping``), stated for any
template:

* **Tiles.** Level l holds, per instance, the product of every factor at and below it for the
  dims that index a tensor; inputs add the sliding-window halo (`accel.mapping.tile_words`).
* **Fills** (writes into level l from its parent) = tile x every outer spatial factor (one copy
  per instance) x the outer temporal loops, walked inner to outer across levels, where the run
  of innermost loops *irrelevant* to the tensor is skipped: the tile stays put while they turn
  (stationarity). A loop "exists" when its factor exceeds 1; in the relaxed model the
  existence gate ``clip(log2 f, 0, 1)`` is fractional between 1 and 2 and exact at integers.
* **Input halo.** If the innermost loop above l slides the window (P or Q; or R/S followed by
  its P/Q), consecutive tiles overlap and only the new rows are fetched:
  ``fills = (f - 1) * new_rows + full_tile`` for that loop, DOSA's ``iters + last_iter``.
* **Reads** at the innermost level holding W or I = MACs / multicast (spatial factors below it
  that do not index the tensor); further out, reads = the child's fills / multicast.
  **Updates** of O: MACs (or the child's fills) / spatial reduction; O reads = updates minus
  the output size (Timeloop's first-read elision).

Loop orders enter as ranks ``rank[level, candidate, dim]`` (`order_rank`) with weights
``order_weights[level, candidate]``; only the order-dependent sums of each level are mixed (a
mean-field soft choice), which is exact for one-hot weights. Ranks are compared through
`inside_mask`, exact on integers with a smooth gradient, so a relaxed order can move to any
permutation.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import Template
from accel.mapping import span, tile_words

LN2 = float(np.log(2.0))
W, I, O = 0, 1, 2
R, S, P, Q, C, K, N = range(7)

# Dims each tensor depends on, for reuse (inputs move with R and S through the window) ...
RELEVANT = np.array([
    [1, 1, 0, 0, 1, 1, 0],   # W: R S C K
    [1, 1, 1, 1, 1, 0, 1],   # I: R S P Q C N
    [0, 0, 1, 1, 0, 1, 1],   # O: P Q K N
], dtype=np.float32)
# ... and dims a spatial fan-out over which the tensor is shared (multicast for W and I,
# spatial reduction for O) -- the complement of RELEVANT.
SHARED = 1.0 - RELEVANT


class LayerArrays(NamedTuple):
    """A layer as float arrays: ``dims[7]``, ``stride[2]``, ``dilation[2]`` (P/R axis first),
    ``groups`` (independent copies of the loop nest)."""

    dims: Any
    stride: Any
    dilation: Any
    groups: Any


class MappingArrays(NamedTuple):
    """A mapping as model inputs (one layer; a leading batch axis is added by vmap).

    ``log_temporal``, ``log_spatial``: ``[level, dim]`` logs of the factors;
    ``rank``: ``[level, candidate, dim]`` position of each dim's loop in candidate order
    ``candidate`` of that level, 0 innermost (`order_rank`);
    ``order_weights``: ``[level, candidate]`` summing to 1 per level;
    ``stages``: ``[level]`` (float, >= 1).
    """

    log_temporal: Any
    log_spatial: Any
    rank: Any
    order_weights: Any
    stages: Any


def order_rank(order_innermost_first: Any) -> np.ndarray:
    """``rank[..., d]``, the position of dim d's loop, from orders ``[..., 7]`` (dims,
    innermost first). Orders enter the model only through "loop e sits at or inside loop d",
    ``rank[e] <= rank[d]``, which keeps it free of gathers and scans."""
    return np.argsort(np.asarray(order_innermost_first), axis=-1).astype(np.float32)


ORDER_SOFTNESS = 1.0
"""Rank gap over which the relaxed "loop e inside loop d" turns from 0 to 1 (`inside_mask`)."""


def inside_mask(rank: Any) -> Any:
    """``[..., e, d]``: 1 where loop e is at or inside loop d.

    Exact on integer ranks; its gradient is that of
    ``sigmoid((rank[d] - rank[e]) / ORDER_SOFTNESS)`` (straight-through), so relaxed ranks
    (`perfmodels.relax`) learn which loops to swap while the score stays that of a real order.
    """
    gap = rank[..., None, :] - rank[..., :, None]                  # rank[d] - rank[e]
    soft = jax.nn.sigmoid(gap / ORDER_SOFTNESS)
    return (gap >= 0).astype(jnp.float32) + (soft - jax.lax.stop_gradient(soft))


def _tree(parts: list[Any]) -> tuple[Any, list[list[Any]]]:
    """The product of `parts` in the order JAX differentiates ``jnp.prod`` in
    (``lax._reduce_jvp``: the first half times the second, the odd one out passing through as
    if times 1, until one is left), and every level's terms."""
    levels = []
    while len(parts) > 1:
        levels.append(parts)
        half = (len(parts) + 1) // 2
        parts = [a * b for a, b in zip(parts[:half], parts[half:])] + parts[len(parts) - half:half]
    return parts[0], levels


def product(x: Any, axis: int) -> Any:
    """``jnp.prod(x, axis)`` with a cheaper gradient (undifferentiated, it is ``jnp.prod``).

    JAX differentiates ``jnp.prod`` by moving the axis to the front and padding every level of
    a halving tree, whose transpose pads again: on the model's ``[.., 7, 7, 3]`` products
    those copies took 45% of a gradient's time (profiled, plain model). Here the same tree
    runs over the axis's slices and its transpose is written out (a term's cotangent is its
    product's times its partner): the same arithmetic as JAX's rule, without the copies
    (XLA may still round a fused neighbour differently, so equal to the last bit is not
    promised)."""
    axis = axis % jnp.ndim(x)
    if jnp.shape(x)[axis] < 2:           # nothing multiplied: JAX's rule costs nothing here
        return jnp.prod(x, axis=axis)
    return _product(x, axis)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _product(x: Any, axis: int) -> Any:
    return jnp.prod(x, axis=axis)


def _product_fwd(x: Any, axis: int) -> tuple[Any, Any]:
    return _tree([jax.lax.index_in_dim(x, i, axis, keepdims=False)
                  for i in range(x.shape[axis])])


def _product_bwd(axis: int, levels: Any, ct: Any) -> tuple[Any]:
    cts = [ct]
    for parts in reversed(levels):
        half = (len(parts) + 1) // 2
        pairs = len(parts) - half
        cts = ([c * b for c, b in zip(cts, parts[half:])] + cts[pairs:]
               + [c * a for c, a in zip(cts, parts[:pairs])])
    return (jnp.stack(cts, axis=axis),)


_product.defvjp(_product_fwd, _product_bwd)


class Accesses(NamedTuple):
    """Word counts, per group of a grouped layer. ``[level, tensor]`` unless noted."""

    macs: Any
    tile_words: Any        # per instance
    fills: Any             # writes into the level from its parent (0 at the top)
    reads: Any
    updates: Any
    log_refills: Any       # [level] log of how many times a level's tile is (re)loaded


_OUT_AXES = np.array([P, Q])   # output dims a window slides along ...
_WIN_AXES = np.array([R, S])   # ... and the filter dims of the same axis


def _log_not(p: Any) -> Any:
    """``log(1 - p)`` for p in [0, 1], floored so that p = 1 stays finite (and its grad 0)."""
    return jnp.log(jnp.maximum(1.0 - p, 1e-30))


def _holder_structure(keeps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Static: each holder's child holder (-1 if innermost) and the levels in between.

    ``child[l, t]`` is the next level inside l that keeps t; ``span[l, t, k]`` is 1 for the
    levels k whose fan-out separates l from that child (all levels up to l if innermost).
    """
    n = keeps.shape[0]
    child = np.full((n, 3), -1)
    span_mask = np.zeros((n, 3, n), np.float32)
    for t in range(3):
        below = -1
        for level in range(n):
            if keeps[level, t]:
                child[level, t] = below
                span_mask[level, t, below + 1:level + 1] = 1.0
                below = level
    return child, span_mask


def gate(log_factor: Any) -> Any:
    """1 if a loop exists (factor >= 2), 0 if not (factor 1), linear in log2 f between."""
    return jnp.clip(log_factor / LN2, 0.0, 1.0)


def _new_rows_innermost(extent: Any, window: Any, stride: Any, dilation: Any) -> Any:
    """Rows fetched per step of a window-sliding loop just above the tile.

    The step shifts the window by ``extent * stride``; what is new is that shift, or the whole
    tile if consecutive tiles do not overlap (DOSA's ``Wend = Wstride``, ``Wend = 1`` cases).
    """
    return jnp.minimum(extent * stride, span(extent, window, stride, dilation))


def _new_rows_after_window(extent: Any, window: Any, stride: Any) -> Any:
    """Rows per P step when the filter loop R runs just inside it (DOSA's empirical ``Wend``).

    ``window`` already includes that R loop. Ported as is from ``accesses_from_mapping``;
    it ignores dilation, as DOSA does.
    """
    end = jnp.where(extent <= 1.0, window,
                    jnp.where(extent <= window, window - 1.0, jnp.maximum(stride, window)))
    return (extent - 1.0) * stride + end


def skipped_candidates(m: MappingArrays) -> Any:
    """``[level, candidate, tensor]``: the log-factors of a level's loops that turn before any
    loop relevant to the tensor (the tile below stays put while they do), per candidate order.

    Level 0 is never outside another level, so its order is never needed (0). ``quiet[d, t]``:
    no existing loop relevant to t sits inside d (a product, linear in each "inside", so a
    soft order has a gradient even where a relevant loop is surely inside).
    """
    busy = gate(m.log_temporal)[:, :, None] * jnp.asarray(RELEVANT).T[None]   # [L, 7(e), 3]
    return _skipped(m.log_temporal, busy, inside_mask(m.rank[1:]))


def _skipped(lt: Any, busy: Any, inside: Any) -> Any:
    """`skipped_candidates` from the loops' log-factors, which are relevant and turning
    (``busy [L, 7, 3]``) and which sit inside which (``inside [L-1, Kc, 7, 7]``)."""
    quiet = product(1.0 - inside[..., None] * busy[1:, None, :, None, :], axis=2)
    skipped_c = (lt[1:, None, :, None] * quiet).sum(2)             # [L-1, Kc, 3]
    return jnp.concatenate([jnp.zeros_like(skipped_c[:1]), skipped_c])


def accesses(template: Template, layer: LayerArrays, m: MappingArrays) -> Accesses:
    """Fills, reads and updates at every level for one layer and mapping (one group)."""
    keeps = template.keeps_mask
    n_levels = template.num_levels
    top = n_levels - 1
    lt, ls = m.log_temporal, m.log_spatial
    log_ext = jnp.cumsum(lt + ls, axis=0)                         # [L, 7]
    tiles = tile_words(log_ext, layer.stride, layer.dilation, jnp)  # [L, 3]
    log_tiles = jnp.log(tiles)
    macs = jnp.prod(layer.dims)

    # Order-independent sums per level, and the order-dependent "skipped" sum per tensor.
    exists = gate(lt)                                              # [L, 7]
    sum_t = lt.sum(-1)                                             # [L]
    sum_s = ls.sum(-1)                                             # [L]
    busy = exists[:, :, None] * jnp.asarray(RELEVANT).T[None]      # [L, 7(e), 3]
    log_idle = _log_not(busy)
    inside = inside_mask(m.rank[1:])                               # [L-1, Kc, 7(e), 7(d)]
    skipped_c = _skipped(lt, busy, inside)                         # [L, Kc, 3]
    skipped = (m.order_weights[..., None] * skipped_c).sum(1)      # [L, 3]

    # Outer-loop multipliers of every level's fills, for all levels and tensors at once:
    # log M[l, t] = sum over levels o > l of (all of o's factors) - u[l, o, t] * skipped[o, t],
    # with u[l, o, t] the probability that no loop relevant to t turned in levels l < k < o.
    lv_idx = np.arange(n_levels)
    outer = (lv_idx[None, :] > lv_idx[:, None]).astype(np.float32)            # [l, o]
    between = ((lv_idx[None, None, :] > lv_idx[:, None, None])
               & (lv_idx[None, None, :] < lv_idx[None, :, None])).astype(np.float32)  # [l,o,k]
    log_still = log_idle.sum(1)                                                # [k, t]
    u = jnp.exp((between[..., None] * log_still[None, None]).sum(2))          # [l, o, t]
    per_level = sum_t + sum_s                                                  # [o]
    log_mult = (outer[..., None] * (per_level[None, :, None] - u * skipped[None])).sum(1)

    def input_fill_log(level: int) -> Any:
        """Log fills of inputs at `level`, with the sliding-window halo.

        Both window axes at once: index 0 is (P, R, stride/dilation along P), 1 is (Q, S).
        """
        above = level + 1
        ext = jnp.exp(log_ext[level])
        out_ext, win_ext = ext[_OUT_AXES], ext[_WIN_AXES]                 # [2]
        st, dl = layer.stride, layer.dilation                             # [2]
        lt_out, lt_win = lt[above, _OUT_AXES], lt[above, _WIN_AXES]       # [2]
        strictly = inside[above - 1] * (1.0 - jnp.eye(7))               # [Kc, 7(e), 7(d)]
        gone = 1.0 - strictly * exists[above][:, None]                   # [Kc, e, d]
        first = exists[above] * product(gone, axis=1)                    # [Kc, 7]
        # second[d]: d exists and exactly one existing loop sits inside it (d = P, Q)
        col = gone[:, :, _OUT_AXES]                                      # [Kc, e, 2]
        all_but = jnp.where(np.eye(7, dtype=bool)[None, :, :, None], 1.0, col[:, :, None, :])
        others = product(all_but, axis=1)                                # [Kc, e, 2]: all but e
        second = exists[above, _OUT_AXES] * (strictly[:, :, _OUT_AXES]
                                             * exists[above][None, :, None] * others).sum(1)
        tile_span = span(out_ext, win_ext, st, dl)                       # [2]
        cross = tile_span[::-1]                                          # the other axis
        win_wide = win_ext * jnp.exp(lt_win)      # a filter loop just above joins the tile
        wide_span = span(out_ext, win_wide, st, dl)
        steps = jnp.maximum(jnp.exp(lt_out) - 1.0, 0.0)
        after_all = (outer[level] * per_level).sum()
        first_out, first_win = first[:, _OUT_AXES], first[:, _WIN_AXES]  # [Kc, 2]
        cases = [  # (probability [Kc, 2], log bracket [2], log of factors moved into it [2])
            # P (Q) innermost: slide the window along it
            (first_out, jnp.log(steps * _new_rows_innermost(out_ext, win_ext, st, dl) * cross
                                + tile_span * cross), lt_out),
            # R then P (S then Q): R joins the tile, slide along P
            (first_win * second, jnp.log(steps * _new_rows_after_window(out_ext, win_wide, st)
                                         * cross + wide_span * cross), lt_win + lt_out),
            # R (S) alone innermost: R joins the tile
            (first_win * (1.0 - second), jnp.log(wide_span * cross), lt_win),
        ]
        captured = sum((prob * (after_all - moved + bracket)).sum(-1)
                       for prob, bracket, moved in cases)                # [Kc]
        prob_any = (first_out + first_win).sum(-1)
        # No window-sliding loop innermost: ordinary reuse analysis, per candidate order
        # (u[level, above] = 1, so only the level above's skipped sum changes).
        plain = log_mult[level, I] + skipped[above, I] - skipped_c[above, :, I]   # [Kc]
        full = jnp.log(tile_span.prod())
        per_candidate = captured + (1.0 - prob_any) * (plain + full)
        base = log_ext[level, C] + log_ext[level, N]
        return base + (m.order_weights[above] * per_candidate).sum()

    stores = keeps.copy()
    stores[top] = False                                            # DRAM is never filled
    log_fills = jnp.where(stores, log_tiles + log_mult, -jnp.inf)  # [L, 3]
    for level in np.flatnonzero(stores[:, I]):
        log_fills = log_fills.at[level, I].set(input_fill_log(int(level)))
    fills = jnp.exp(log_fills)

    # Reads and updates: from the MACs at the innermost holder, then from the child's fills,
    # divided by the fan-out in between over which the tensor is shared.
    child, span_mask = _holder_structure(keeps)                    # [L, 3], [L, 3, L]
    shared_fanout = ls @ jnp.asarray(SHARED).T                     # [L, 3] log shared fan-out
    log_share = (span_mask * shared_fanout.T[None]).sum(-1)        # [L, 3]
    from_child = log_fills[np.maximum(child, 0), np.arange(3)[None, :]]
    arriving = jnp.where(child >= 0, from_child, jnp.log(macs)) - log_share
    arrived = jnp.where(keeps, jnp.exp(jnp.where(keeps, arriving, 0.0)), 0.0)   # [L, 3]
    out_size = layer.dims[P] * layer.dims[Q] * layer.dims[K] * layer.dims[N]
    is_out = np.arange(3) == O
    updates = jnp.where(is_out, arrived, 0.0)
    reads = jnp.where(is_out, jnp.where(keeps, jnp.maximum(arrived - out_size, 0.0), 0.0),
                      arrived)
    fills = jnp.where(jnp.asarray(keeps), fills, 0.0)

    # How many times each level's tile is loaded per instance (for per-load latency).
    outer_spatial = jnp.concatenate([jnp.cumsum(sum_s[::-1])[::-1][1:], jnp.zeros(1)])
    refill = jnp.where(jnp.asarray(keeps), log_fills - log_tiles - outer_spatial[:, None],
                       -jnp.inf)
    log_refills = jnp.max(refill, axis=-1)
    return Accesses(macs=macs, tile_words=tiles, fills=fills, reads=reads, updates=updates,
                    log_refills=log_refills)
