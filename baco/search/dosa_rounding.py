"""DOSA's rounding of a descended mapping to exact factors, and its greedy choice of each
layer's DRAM loop order (`baco.search.dosa`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from baco.rounding import divisors
from perfmodels import relax

__all__ = ["DRAM_ORDERS", "greedy_dram_orders", "round_mapping"]

DRAM_ORDERS = tuple(relax.CANDIDATE_ORDERS.values())
"""DOSA's three DRAM orders (innermost first): weight, input and output stationary."""


def _nearest_choice(value: float, choices: Sequence[int]) -> int:
    """DOSA's ``utils.get_nearest_choice``: the nearest of sorted `choices`, ties upward."""
    for i, choice in enumerate(choices):
        if value < choice:
            if i == 0:
                return choice
            return choices[i - 1] if choice - value > value - choices[i - 1] else choice
    return choices[-1]


def round_mapping(dims: np.ndarray, temporal: np.ndarray, spatial: np.ndarray,
                  fan_cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DOSA's ``round_mapping`` (``round_perms=False``) of raw factors ``[layer, level, dim]``
    (innermost level first; the DRAM row is ignored) for layer sizes ``dims [layer, dim]``.

    Per layer and dim: the spatial factors of every level from the innermost out, then the
    temporal ones, each ``max(1, round(f))`` if it divides what is left of the dim (and, spatial,
    fits ``fan_cap[level]`` over the level's other spatial factors -- our PE bound), else the
    nearest such divisor (to the raw value if spatial, to the rounded one if temporal; ties
    upward); the DRAM temporal factor is the remainder.

    >>> t = np.array([[[1, 1], [2.5, 5.2], [1, 1]]]); s = np.array([[[1, 1], [4.6, 1], [1, 1]]])
    >>> T, S = round_mapping(np.array([[12, 10]]), t, s, np.array([np.inf, 16, np.inf]))
    >>> S[0, 1].tolist(), T[0, :, 0].tolist(), T[0, :, 1].tolist()
    ([4, 1], [1, 3, 1], [1, 5, 2])
    """
    dims = np.asarray(dims, np.int64)
    n_layers, n_levels, n_dims = np.shape(temporal)
    out_t = np.ones((n_layers, n_levels, n_dims), np.int64)
    out_s = np.ones((n_layers, n_levels, n_dims), np.int64)
    for b in range(n_layers):
        used = np.ones(n_levels)
        for d in range(n_dims):
            total = 1
            size = int(dims[b, d])
            for kind, raw, out in (("s", spatial, out_s), ("t", temporal, out_t)):
                for l in range(n_levels - 1):
                    value = float(raw[b, l, d])
                    left = size // total
                    f = max(1, round(value))
                    cap = fan_cap[l] / used[l] if kind == "s" else math.inf
                    choices = [x for x in divisors(left) if x <= cap + 1e-9]
                    if f not in choices:
                        f = _nearest_choice(value if kind == "s" else f, choices)
                    out[b, l, d] = f
                    total *= f
                    if kind == "s":
                        used[l] *= f
            out_t[b, -1, d] = size // total
    return out_t, out_s


def greedy_dram_orders(cycles: np.ndarray, energy_pj: np.ndarray, counts: Sequence[float],
                       start: np.ndarray) -> tuple[np.ndarray, float]:
    """DOSA's DRAM loop-order choice: per-layer metrics ``[candidate, layer]`` of each candidate
    order, and each layer's current candidate `start` ``[layer]``. Layers in turn, each tries
    every candidate with the other layers as they stand and keeps the first that lowers the
    network EDP ``(Σ count·cycles)(Σ count·pJ)`` most -- its current one unless one is strictly
    better. Returns the pick per layer and the network EDP.

    >>> cyc = np.array([[1.0, 4.0], [4.0, 1.0]]); en = np.array([[1.0, 4.0], [4.0, 1.0]])
    >>> pick, edp = greedy_dram_orders(cyc, en, [1, 1], np.array([1, 0]))
    >>> pick.tolist(), edp
    ([0, 1], 4.0)
    """
    counts = np.asarray(counts, np.float64)
    cyc = np.asarray(cycles, np.float64) * counts
    en = np.asarray(energy_pj, np.float64) * counts
    pick = np.asarray(start, np.int64).copy()
    layers = np.arange(cyc.shape[1])
    total_c = cyc[pick, layers].sum()
    total_e = en[pick, layers].sum()
    for b in layers:
        base_c = total_c - cyc[pick[b], b]
        base_e = total_e - en[pick[b], b]
        best = (base_c + cyc[pick[b], b]) * (base_e + en[pick[b], b])
        for k in range(cyc.shape[0]):
            edp = (base_c + cyc[k, b]) * (base_e + en[k, b])
            if edp < best:
                best, pick[b] = edp, k
        total_c = base_c + cyc[pick[b], b]
        total_e = base_e + en[pick[b], b]
    return pick, float(total_c * total_e)
