"""Hardware for rounded designs: buffer capacities and the bounds on them, per-level
footprints, the minimal hardware inferred from integer factors (step 3 of `baco.rounding`),
and a design realized on DIM x DIM instructions.

Each function takes the `baco.rounding.Rounder` whose immutable settings (template, layers,
bounds, mode) it sizes for."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from accel.arch import HardwareConfig, level_arrays
from accel.buildable import (
    buildable_below_kb,
    buildable_hardware,
    grown_hardware,
    has_rules,
    smallest_buildable,
)
from accel.design import Design
from accel.mapping import footprint_kb as mapping_footprint_kb
from accel.mapping import tile_words
from baco.rounding_factors import NUM_DIMS, fill_array
from perfmodels import aware as aware_model
from perfmodels import relax
from perfmodels.accesses import MappingArrays
from perfmodels.analytic import fast_jit
from workloads.errors import ConfigError, InfeasibleError

if TYPE_CHECKING:
    from baco.rounding import Rounder

_BIG_KB = 1e12


@functools.partial(fast_jit, static_argnums=(0, 4))
def _infer_many(template: Any, base: Any, layers: Any, maps: MappingArrays, aware: bool) -> Any:
    """Hard-max minimal hardware of many designs (``maps`` is ``[design, layer, ...]``)."""
    return jax.vmap(lambda m: aware_model.infer_hw(template, base, layers, m, 0.0, aware))(maps)


def capacity_kb(r: Rounder, hw_fields: dict[str, float]) -> np.ndarray:
    """Per-instance capacity of each level on `r.base_hw` with `hw_fields` changed."""
    hw = dataclasses.replace(r.base_hw, **hw_fields)
    cap = level_arrays(r.template, hw.to_params(), np).capacity_kb.astype(np.float64)
    return np.where(np.isfinite(cap), cap, np.inf)


def limit_fields(r: Rounder, pe: int, limits: dict[str, float] | None = None
                 ) -> dict[str, float]:
    """Largest buffers a design with PE dims `pe` may get (min_hw/free modes), within
    `limits` (KiB per field) too if given."""
    fields: dict[str, float] = {"pe_rows": pe, "pe_cols": pe}
    for key, value in r.max_kb.items():
        fields[key] = _BIG_KB if value is None else float(value)
        if limits and key in limits:
            fields[key] = min(fields[key], float(limits[key]))
    if has_rules(r.base_hw):
        _buildable_limits(r, pe, fields)
    return fields


def _buildable_limits(r: Rounder, pe: int, fields: dict[str, float]) -> None:
    """Bounds (in place) that rounding's snap up to buildable sizes keeps: each the largest
    buildable size within it, the accumulator also no more DIM x DIM tiles than the bounded
    scratchpad holds less two (`accel.buildable`: USABLE_SP_TILES >= TOTAL_ACC_TILES)."""
    hw = buildable_hardware(r.base_hw, pe_rows=pe, pe_cols=pe)

    def floor(key: str) -> None:
        if fields[key] < _BIG_KB:
            below = buildable_below_kb(hw, key, fields[key])
            fields[key] = fields[key] if below is None else below

    floor("sp_kb")
    if fields["sp_kb"] < _BIG_KB:
        dim = hw.pe_rows
        sp_tiles = fields["sp_kb"] * 1024 * 8 / (dim * dim * hw.input_bits)
        acc_kb = (sp_tiles - 2) * dim * dim * hw.acc_bits / 8 / 1024
        if acc_kb > 0:
            fields["acc_kb"] = min(fields["acc_kb"], acc_kb)
    floor("acc_kb")


def bounded_pe_dim(base_hw: HardwareConfig, max_pe_dim: int,
                   max_kb: dict[str, float | None]) -> int:
    """`max_pe_dim`, halved while the smallest buildable buffers of that array pass the
    ``max_sp_kb``/``max_acc_kb`` bounds (a wider Gemmini array has larger least banks: DIM
    rows of DIM words each, `accel.buildable`); as given on a template without rules."""
    dim = int(max_pe_dim)
    if not has_rules(base_hw) or all(v is None for v in max_kb.values()):
        return dim
    while dim > 2:
        least = buildable_hardware(base_hw, pe_rows=dim, pe_cols=dim, sp_kb=1e-9, acc_kb=1e-9)
        if all(v is None or getattr(least, k) <= v * (1 + 1e-9) for k, v in max_kb.items()):
            break
        dim //= 2
    return dim


def check_bounds(r: Rounder) -> None:
    """Refuse bounds that even the smallest tile (every loop at DRAM) cannot meet."""
    least = smallest_buildable(r.base_hw, r.sram_step_kb)
    for key, value in r.max_kb.items():
        if value is not None and value < getattr(least, key) * (1 - 1e-9):
            raise InfeasibleError(
                f"codesign.max_{key}: {value:g} KB is below the smallest buffer rounding "
                f"gives ({getattr(least, key):g} KB: "
                + ("the smallest Gemmini's generator builds)" if has_rules(r.base_hw) else
                   f"one SRAM step, codesign.sram_step_kb = {r.sram_step_kb:g} KB)")
                + "; raise it")
    if r.hw_mode == "fixed":
        caps = capacity_kb(r, {})
        where = f"the fixed hardware ({r.base_hw.name or 'hardware'})"
        fanout = level_arrays(r.template, r.base_hw.to_params(), np).fanout
    else:
        caps = capacity_kb(r, limit_fields(r, 1))
        where = "codesign.max_sp_kb / codesign.max_acc_kb"
        fanout = np.ones(r.template.num_levels)
    n = r.template.num_levels
    ones = np.ones((n, NUM_DIMS), np.int64)
    for b, layer in enumerate(r.layers):
        temporal = ones.copy()
        temporal[-1] = r.dims[b]
        need = footprint_kb(r, b, temporal, ones, np.ones(n, np.int64), fanout)
        for l in range(n - 1):
            if need[l] > caps[l] * (1 + 1e-6):
                raise InfeasibleError(
                    f"layer {b} ({layer.name or layer.config_str()}): its smallest tile needs "
                    f"{need[l]:.4g} KiB at {r.template.levels[l].name} per instance, "
                    f"more than {caps[l]:.4g} KiB allowed by {where}")


def footprint_kb(r: Rounder, b: int, temporal: np.ndarray, spatial: np.ndarray,
                 stages: np.ndarray, fanout: np.ndarray) -> np.ndarray:
    """Per-instance KiB each level of layer `b` holds (`accel.mapping.footprint_kb`),
    padded to the array if aware as `perfmodels.aware.pad` pads (`padding`:
    each array axis's spatial factor up to its fan-out, folded into the temporal one)."""
    s = spatial.astype(np.float64)
    log_ts = np.log(temporal * s)
    for level, d in r.axes:
        log_ts[level, d] += aware_model.padding(np.float64(fanout[level]),
                                                 np.log(s[level, d]), np)
    log_ext = np.cumsum(log_ts, axis=0)
    _, stride, dilation = r.geometry[b]
    words = tile_words(log_ext, stride.astype(np.float64), dilation.astype(np.float64))
    return mapping_footprint_kb(words, r.keeps, r.bits, stages)


def infer_hardware(r: Rounder, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
                   dram_bw_words: Sequence[float]) -> list[HardwareConfig]:
    """Each point's hardware: the fixed one, or the minimal one its factors need, PE dims
    and buffers rounded up (buffers to ``sram_step_kb`` steps)."""
    points = temporal.shape[0]
    if r.hw_mode == "fixed":
        return [r.base_hw] * points
    maps = MappingArrays(
        log_temporal=np.log(temporal).astype(np.float32),
        log_spatial=np.log(spatial).astype(np.float32),
        rank=np.zeros(temporal.shape[:3] + (1, NUM_DIMS), np.float32),
        order_weights=np.ones(temporal.shape[:3] + (1,), np.float32),
        stages=stages.astype(np.float32))
    hwp = jax.tree_util.tree_map(np.asarray, _infer_many(
        r.template, r.base_hw.to_params(), r.packed, maps, r.aware))
    hws = [relax.rounded_up_hardware(r.base_hw, hwp.pe_rows[p], hwp.pe_cols[p], hwp.sp_kb[p],
                                     hwp.acc_kb[p], r.sram_step_kb,
                                     dram_bw_words=float(dram_bw_words[p]), name="baco")
           for p in range(points)]
    if has_rules(r.base_hw):
        hws = [_hold_padded(r, hw, temporal[p], spatial[p], stages[p])
               for p, hw in enumerate(hws)]
    return hws


def _hold_padded(r: Rounder, hw: HardwareConfig, temporal: np.ndarray, spatial: np.ndarray,
                 stages: np.ndarray) -> HardwareConfig:
    """`hw` (its array snapped up to a buildable DIM) with its buffers grown to hold the tiles
    on that array (per-column accumulators, tiles padded to DIM if aware), which the sizes
    inferred for the array before the snap may not."""
    fanout = level_arrays(r.template, hw.to_params(), np).fanout
    need = np.max([footprint_kb(r, b, temporal[b], spatial[b], stages[b], fanout)
                   for b in range(len(r.layers))], axis=0)
    return grown_hardware(hw, r.sram_step_kb, **_fields_kb(r, hw, need))


def _fields_kb(r: Rounder, hw: HardwareConfig, need: np.ndarray,
               caps: np.ndarray | None = None) -> dict[str, float]:
    """The ``sp_kb``/``acc_kb`` values whose levels hold `need` KiB per instance (levels
    sized by one field each) on `hw`'s array; with `caps`, only of levels it overflows."""
    fields: dict[str, float] = {}
    for l, lv in enumerate(r.template.levels[:-1]):
        names = [f for f in ("sp_kb", "acc_kb") if lv.capacity_kb is not None
                 and f in lv.capacity_kb.names]
        if len(names) != 1 or (caps is not None and need[l] <= caps[l] * (1 + 1e-6)):
            continue
        unit = capacity_kb(r, {"pe_rows": hw.pe_rows, "pe_cols": hw.pe_cols, names[0]: 1.0})[l]
        fields[names[0]] = max(fields.get(names[0], 0.0), need[l] / unit)
    return fields


def realize(r: Rounder, design: Design) -> Design:
    """`design` as DIM x DIM instructions run it (`baco.rounding.Rounder.realize`), buffers
    grown to hold the padded tiles (`accel.buildable.grown_hardware`)."""
    if not r.aware:
        raise ConfigError("rounding: realize needs an instruction-aware Rounder")
    hw = design.hw
    fanout = level_arrays(r.template, hw.to_params(), np).fanout
    temporal, spatial = design.temporal.copy(), design.spatial.copy()
    fill_array(r.axes, r.fan_cap, r.hw_mode == "fixed", temporal[None], spatial[None],
               block={level: float(fanout[level]) for level, _ in r.axes})
    need = np.max([footprint_kb(r, b, temporal[b], spatial[b], design.stages[b], fanout)
                   for b in range(len(r.layers))], axis=0)
    caps = capacity_kb(r, {f: getattr(hw, f) for f in ("pe_rows", "pe_cols", "sp_kb",
                                                       "acc_kb")})
    hw = grown_hardware(hw, r.sram_step_kb, **_fields_kb(r, hw, need, caps))
    return Design(hw=hw, temporal=temporal, spatial=spatial, order=design.order.copy(),
                  stages=design.stages.copy())
