"""Repair of rounded designs (step 4 of `baco.rounding`): tiles that overflow a bound moved
outward a prime at a time, and the array narrowed with the tiles kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from accel.arch import HardwareConfig, level_arrays
from baco.rounding_factors import divisors
from baco.rounding_hardware import capacity_kb, footprint_kb, limit_fields
from workloads.errors import InfeasibleError

if TYPE_CHECKING:
    from baco.rounding import Rounder


def _smallest_prime(n: int) -> int:
    return next(d for d in divisors(n) if d > 1)


def repair(r: Rounder, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
           hw: HardwareConfig, limits: dict[str, float] | None = None) -> bool:
    """Shrink tiles (in place) of layers that overflow their bound (and `limits`, KiB
    per buffer field, if given); True if any did."""
    if r.hw_mode == "fixed":
        caps = capacity_kb(r, {})
    else:   # bounded by max_sp_kb/max_acc_kb, and levels of fixed size (the registers)
        caps = capacity_kb(r, limit_fields(r, max(hw.pe_rows, hw.pe_cols), limits))
    fanout = level_arrays(r.template, hw.to_params(), np).fanout
    changed = False
    n = r.template.num_levels
    for b in range(temporal.shape[0]):
        while True:
            need = footprint_kb(r, b, temporal[b], spatial[b], stages[b], fanout)
            over = [l for l in range(n - 1) if need[l] > caps[l] * (1 + 1e-6)]
            if not over:
                break
            changed = True
            level = over[0]
            fits = int(stages[b, level] * caps[level] / need[level] + 1e-9)
            if 1 <= fits < stages[b, level]:      # fewer buffers first: same tiles
                stages[b, level] = fits
                continue
            _shrink(r, b, level, temporal[b], spatial[b], stages[b])
    return changed


def narrow(axes: tuple[tuple[int, int], ...], temporal: np.ndarray, spatial: np.ndarray,
           dim: int) -> None:
    """Cap the spatial factor of every array axis ``(level, dim)`` of `axes` at `dim` (in
    place), the loop at the same level taking the rest: the tiles are unchanged, the array
    narrower."""
    for level, d in axes:
        for b in range(temporal.shape[0]):
            extent = int(temporal[b, level, d] * spatial[b, level, d])
            if spatial[b, level, d] > dim:
                c = max(x for x in divisors(int(spatial[b, level, d])) if x <= dim)
                spatial[b, level, d] = c
                temporal[b, level, d] = extent // c


def _shrink(r: Rounder, b: int, level: int, temporal: np.ndarray, spatial: np.ndarray,
            stages: np.ndarray) -> None:
    """Move one prime factor of the largest loop at or below `level` one level out
    (or, with every such loop at 1, drop the stages there to 1)."""
    n = r.template.num_levels
    for arr in (temporal, spatial):
        inner = arr[:level + 1]
        if inner.max() > 1:
            l, d = np.unravel_index(np.argmax(inner[::-1]), inner.shape)
            l = level - l                                  # ties go to the outer level
            p = _smallest_prime(int(arr[l, d]))
            arr[l, d] //= p
            dst = next(j for j in range(level + 1, n) if r.t_mask[j, d])
            temporal[dst, d] *= p
            return
    if stages[:level + 1].max() > 1:
        stages[:level + 1] = 1
        return
    layer = r.layers[b]
    raise InfeasibleError(f"layer {b} ({layer.name or layer.config_str()}): no tile fits "
                          f"level {r.template.levels[level].name}")
