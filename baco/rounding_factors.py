"""Relaxed factors to integers: nearest divisors level by level, the array filled, the DRAM
bandwidth and loop orders picked (steps 1 and 2 of `baco.rounding`)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from workloads.layer import DIMS

NUM_DIMS = len(DIMS)


@functools.lru_cache(maxsize=65536)
def divisors(n: int) -> tuple[int, ...]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return tuple(sorted(set(small + [n // i for i in small])))


def nearest_divisor(n: int, target: float, cap: float = math.inf, linear: bool = False) -> int:
    """The divisor of `n` (at most `cap`) closest to `target`, in log space or linearly."""
    best, best_err = 1, math.inf
    for d in divisors(n):
        if d > cap + 1e-9:
            break
        err = abs(d - target) if linear else abs(math.log(d) - math.log(max(target, 1e-30)))
        if err < best_err - 1e-12:
            best, best_err = d, err
    return best


def round_factors(dims: np.ndarray, s_mask: np.ndarray, t_mask: np.ndarray,
                  fan_cap: np.ndarray, linear: bool, log_temporal: np.ndarray,
                  log_spatial: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer ``(temporal, spatial)`` ``[point, layer, level, dim]`` from log factors, for
    layers of dims ``dims`` ``[layer, dim]`` on a template with these masks, spatial factors
    within ``fan_cap`` per level (`baco.rounding.Rounder.round_factors`)."""
    log_t = np.asarray(log_temporal, np.float64)
    log_s = np.asarray(log_spatial, np.float64)
    points, n_layers, n_levels, _ = log_t.shape
    temporal = np.ones(log_t.shape, np.int64)
    spatial = np.ones(log_s.shape, np.int64)
    for p in range(points):
        for b in range(n_layers):
            used = np.ones(n_levels)
            for d in range(NUM_DIMS):
                rem = int(dims[b, d])
                done, target = 1, 0.0
                for l in range(n_levels - 1):
                    for kind in ("s", "t"):
                        mask = s_mask if kind == "s" else t_mask
                        if not mask[l, d]:
                            continue
                        value = (log_s if kind == "s" else log_t)[p, b, l, d]
                        cap = fan_cap[l] / used[l] if kind == "s" else math.inf
                        if linear:
                            f = nearest_divisor(rem, max(1.0, round(math.exp(value))), cap,
                                                linear=True)
                        else:
                            target += value
                            f = nearest_divisor(rem, math.exp(target) / done, cap)
                        (spatial if kind == "s" else temporal)[p, b, l, d] = f
                        if kind == "s":
                            used[l] *= f
                        rem //= f
                        done *= f
                temporal[p, b, n_levels - 1, d] = rem
    return temporal, spatial


def fill_array(axes: tuple[tuple[int, int], ...], fan_cap: np.ndarray, fixed: bool,
               temporal: np.ndarray, spatial: np.ndarray,
               block: dict[int, float] | None = None, any_loop: bool = False) -> None:
    """Widen each array axis ``(level, dim)`` of `axes` (in place) as
    `baco.rounding.Rounder.fill_array` describes; `fixed`: the hardware is given, so the
    array is its fan-out ``fan_cap`` when no `block` is."""
    n_levels = temporal.shape[2]
    for p in range(temporal.shape[0]):
        for level, d in axes:
            if block is not None:
                dim = block[level]
            elif fixed:
                dim = fan_cap[level]
            else:
                dim = max(int(spatial[p][:, a_l, a_d].max()) for a_l, a_d in axes)
                dim = min(dim, fan_cap[level])
            loops = [level] + ([l for l in range(n_levels) if l != level] if any_loop
                               else [])
            for b in range(temporal.shape[1]):
                s = int(spatial[p, b, level, d])
                widest, source = s, None
                for l in loops:
                    f = int(temporal[p, b, l, d])
                    if f > 1:
                        c = max(x for x in divisors(s * f) if x <= dim)
                        if c > widest:
                            widest, source = c, l
                if source is not None:
                    temporal[p, b, source, d] = temporal[p, b, source, d] * s // widest
                    spatial[p, b, level, d] = widest


def round_bandwidth(max_dram_bw_words: float, dram_bw_words: Any) -> np.ndarray:
    """DRAM words/cycle ``[point]`` to buildable ones: the nearest power of two (in log),
    from 1 to the largest within `max_dram_bw_words`."""
    top = max(0, math.floor(math.log2(max_dram_bw_words) + 1e-9))
    exp = np.clip(np.rint(np.log2(np.asarray(dram_bw_words, np.float64))), 0, top)
    return np.exp2(exp)


def argmax_orders(order_weights: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The heaviest candidate order per level: ``[..., level, 7]`` innermost first, from
    decoded weights ``[..., level, cand]`` and ranks ``[..., level, cand, 7]``."""
    pick = np.argmax(np.asarray(order_weights), axis=-1)[..., None, None]
    chosen = np.take_along_axis(np.asarray(rank), pick, axis=-2)[..., 0, :]
    return np.argsort(chosen, axis=-1, kind="stable").astype(np.int32)
