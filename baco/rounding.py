"""From relaxed points to real designs: valid per-layer `Mapping`s on minimal hardware.

A design (`accel.design.Design`) is one whole-network point: a `HardwareConfig` and, per
unique layer, integer temporal and spatial factors, a loop order per level and pipeline stages.
`Rounder` turns relaxed factors (logs, as `perfmodels.relax.decode` gives them) into designs,
for many points at once, and scores them exactly:

1. **Factors**, dim by dim, level by level from L0 outward, spatial before temporal (DOSA's
   `round_mapping`, reference §A.8): each factor becomes a divisor of what is left of the dim.
   ``nearest="log"`` (BACO) aims at the *cumulative* tile extent in log space, so an error at
   one level is corrected at the next; ``nearest="linear"`` is DOSA's ``max(1, round(f))`` then
   the nearest divisor by absolute difference. The outermost level takes the remainder, so
   the product is exact. Spatial factors never exceed the fan-out (PE dims <= ``max_pe_dim``).
2. **Loop orders and stages** are given by the caller (the argmax of a soft choice, or DOSA's
   exact choice among DRAM orders); stages are rounded to 1..`MAX_STAGES`.
3. **Minimal hardware** (``min_hw``/``free`` modes): DOSA's ``min_hw`` with ``ceil`` -- PE dims
   from the largest spatial factors, buffers from the largest tiles (padded to DIM rows when
   instruction-aware) rounded up to ``sram_step_kb``. In ``fixed`` mode the hardware is given.
4. **Repair**: a layer whose tile overflows a bound (``max_sp_kb``/``max_acc_kb``, or a fixed
   buffer) has factors moved outward, a prime at a time, until it fits.
5. **Area budget** (``area_budget_mm2``, by the template's area model,
   `perfmodels.energy.hardware_area_mm2`): a design over it has its largest area term cut
   (the PE array narrowed, or one buffer's tiles shrunk until it needs fewer KiB), and the
   hardware inferred again, until it fits or nothing is left to cut. A design still over the
   budget scores an infinite EDP (`Rounder.score`) and fails `Rounder.check`: it is never
   kept as a best design.

Every design `Rounder.check` accepts validates (`accel.mapping.Mapping.validate`) on its
hardware, and, when instruction-aware, its padded tiles fit too (the property the tests check).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from accel.arch import (
    MAX_STAGES,
    HardwareConfig,
    level_arrays,
    stack_hw,
    tensor_bits,
    unit_area_mm2,
)
from accel.design import Design
from accel.lower import gelu_on_chip
from accel.lower.nest import padded_layer
from accel.mapping import Mapping, footprint_kb, layer_geometry, tile_words
from perfmodels import aware as aware_model
from perfmodels.accesses import MappingArrays
from perfmodels.analytic import Metrics, fast_jit, stack_layers
from perfmodels.energy import config_area_mm2
from perfmodels.score import design_arrays, network_edp
from workloads.errors import ConfigError, InfeasibleError
from workloads.layer import DIMS, Layer

NUM_DIMS = len(DIMS)
_BIG_KB = 1e12
_HW_MODES = ("min_hw", "free", "fixed")


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


def _smallest_prime(n: int) -> int:
    return next(d for d in divisors(n) if d > 1)


@functools.partial(fast_jit, static_argnums=(0, 4))
def _infer_many(template: Any, base: Any, layers: Any, maps: MappingArrays, aware: bool) -> Any:
    """Hard-max minimal hardware of many designs (``maps`` is ``[design, layer, ...]``)."""
    return jax.vmap(lambda m: aware_model.infer_hw(template, base, layers, m, 0.0, aware))(maps)


@functools.partial(fast_jit, static_argnums=(0, 4))
def _score_many(template: Any, layers: Any, hwps: Any, maps: MappingArrays, aware: bool
                ) -> Metrics:
    """Exact metrics ``[design, layer]`` of many designs, each on its own hardware."""
    per_layer = jax.vmap(lambda hwp, layer, m: aware_model.evaluate(template, layer, hwp, m,
                                                                     aware),
                         in_axes=(None, 0, 0))
    return jax.vmap(per_layer, in_axes=(0, None, 0))(hwps, layers, maps)


class Rounder:
    """Rounds relaxed points to `Design`s and scores them, for one network and set of bounds.

    >>> from workloads.layer import Layer
    >>> hw = HardwareConfig.preset("gemmini_default")
    >>> layers = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64)]
    >>> r = Rounder(hw, layers)
    >>> log_t = np.zeros((1, 1, 4, 7)); log_s = np.zeros((1, 1, 4, 7))
    >>> log_s[0, 0, 1, 4] = np.log(16); log_s[0, 0, 2, 5] = np.log(16)   # C16X, K16X
    >>> orders = np.tile(np.arange(7), (1, 1, 4, 1)); stages = np.full((1, 1, 4), 2.0)
    >>> design = r.round(log_t, log_s, orders, stages)[0]
    >>> design.hw.pe_rows, design.mappings()[0].to_timeloop()
    (16, 'L3[WIO] K4 C4 Q14 P14 S3 R3 - L2[WI] N1 K16X - L1[O] N1 C16X - L0[W] N1')
    """

    def __init__(self, base_hw: HardwareConfig, layers: Sequence[Layer], *,
                 hw_mode: str = "min_hw", aware: bool = True, max_pe_dim: int = 128,
                 sram_step_kb: float = 1.0, max_sp_kb: float | None = None,
                 max_acc_kb: float | None = None, nearest: str = "log",
                 area_budget_mm2: float | None = None, max_dram_bw_words: float = 64.0,
                 fusion: Any = None, residual: Any = None) -> None:
        if hw_mode not in _HW_MODES:
            raise ConfigError(f"rounding: hw_mode must be one of {_HW_MODES}, got {hw_mode!r}")
        if not layers:
            raise ConfigError("rounding: no layers")
        self.base_hw = base_hw
        self.template = base_hw.template_spec
        self.layers = tuple(layers)
        self.gelu_on_chip = gelu_on_chip(self.layers)
        self.hw_mode = hw_mode
        self.aware = aware
        self.axes = aware_model.array_axes(self.template) if aware else ()
        self.max_pe_dim = int(max_pe_dim)
        self.sram_step_kb = float(sram_step_kb)
        self.max_kb = {"sp_kb": max_sp_kb, "acc_kb": max_acc_kb}
        self.linear = nearest == "linear"
        self.area_budget_mm2 = None if area_budget_mm2 is None else float(area_budget_mm2)
        self.max_dram_bw_words = float(max_dram_bw_words)
        self.fusion = fusion   # a baco.fusion.FusionPlan: chains scored fused where better
        # A learned correction of the model's cycles, pure in its inputs: ``residual(template,
        # layers, hwps, maps)`` gives log-cycle residuals ``[design, layer]`` (a fitted
        # `perfmodels.atformer.Hybrid`'s ``residual_grid``); None: the model's own cycles.
        self.residual = residual
        try:
            self.pe_axes = aware_model.array_axes(self.template)   # for narrowing the array
        except ConfigError:
            self.pe_axes = ()
        self.dims = np.array([[getattr(x, d) for d in DIMS] for x in self.layers], np.int64)
        self.packed = stack_layers(self.layers)
        self.geometry = [layer_geometry(x) for x in self.layers]
        self.bits = tensor_bits(base_hw.to_params(), np).astype(np.float64)
        self.keeps = self.template.keeps_mask
        self.t_mask = self.template.temporal_mask
        self.s_mask = self.template.spatial_mask
        if hw_mode == "fixed":
            self.fan_cap = level_arrays(self.template, base_hw.to_params(), np).fanout
        else:
            top = dataclasses.replace(base_hw, pe_rows=self.max_pe_dim, pe_cols=self.max_pe_dim)
            self.fan_cap = level_arrays(self.template, top.to_params(), np).fanout
        self.fan_cap = np.where(np.isfinite(self.fan_cap), self.fan_cap, np.inf)
        self._check_bounds()
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"a Rounder is immutable: use .replace({name}=...) for one "
                                 "that differs")
        object.__setattr__(self, name, value)

    def replace(self, *, fusion: Any = ..., residual: Any = ...) -> Rounder:
        """The same rounder scoring with another fusion plan or residual (`...`: unchanged);
        everything built from the layers and bounds is shared."""
        out = copy.copy(self)
        if fusion is not ...:
            object.__setattr__(out, "fusion", fusion)
        if residual is not ...:
            object.__setattr__(out, "residual", residual)
        return out

    # ------------------------------------------------------------------ bounds
    def _capacity_kb(self, hw_fields: dict[str, float]) -> np.ndarray:
        """Per-instance capacity of each level on `base_hw` with `hw_fields` changed."""
        hw = dataclasses.replace(self.base_hw, **hw_fields)
        cap = level_arrays(self.template, hw.to_params(), np).capacity_kb.astype(np.float64)
        return np.where(np.isfinite(cap), cap, np.inf)

    def _limit_fields(self, pe: int, limits: dict[str, float] | None = None
                      ) -> dict[str, float]:
        """Largest buffers a design with PE dims `pe` may get (min_hw/free modes), within
        `limits` (KiB per field) too if given."""
        fields: dict[str, float] = {"pe_rows": pe, "pe_cols": pe}
        for key, value in self.max_kb.items():
            fields[key] = _BIG_KB if value is None else float(value)
            if limits and key in limits:
                fields[key] = min(fields[key], float(limits[key]))
        return fields

    def _check_bounds(self) -> None:
        """Refuse bounds that even the smallest tile (every loop at DRAM) cannot meet."""
        for key, value in self.max_kb.items():
            if value is not None and value < self.sram_step_kb:
                raise InfeasibleError(
                    f"codesign.max_{key}: {value:g} KB is below one SRAM step "
                    f"(codesign.sram_step_kb = {self.sram_step_kb:g} KB); raise it")
        if self.hw_mode == "fixed":
            caps = self._capacity_kb({})
            where = f"the fixed hardware ({self.base_hw.name or 'hardware'})"
            fanout = level_arrays(self.template, self.base_hw.to_params(), np).fanout
        else:
            caps = self._capacity_kb(self._limit_fields(1))
            where = "codesign.max_sp_kb / codesign.max_acc_kb"
            fanout = np.ones(self.template.num_levels)
        n = self.template.num_levels
        ones = np.ones((n, NUM_DIMS), np.int64)
        for b, layer in enumerate(self.layers):
            temporal = ones.copy()
            temporal[-1] = self.dims[b]
            need = self.footprint_kb(b, temporal, ones, np.ones(n, np.int64), fanout)
            for l in range(n - 1):
                if need[l] > caps[l] * (1 + 1e-6):
                    raise InfeasibleError(
                        f"layer {b} ({layer.name or layer.config_str()}): its smallest tile needs "
                        f"{need[l]:.4g} KiB at {self.template.levels[l].name} per instance, "
                        f"more than {caps[l]:.4g} KiB allowed by {where}")

    def footprint_kb(self, b: int, temporal: np.ndarray, spatial: np.ndarray,
                     stages: np.ndarray, fanout: np.ndarray) -> np.ndarray:
        """Per-instance KiB each level of layer `b` holds (`accel.mapping.footprint_kb`),
        padded to the array if aware as `perfmodels.aware.pad` pads (`padding`:
        each array axis's spatial factor up to its fan-out, folded into the temporal one)."""
        s = spatial.astype(np.float64)
        log_ts = np.log(temporal * s)
        for level, d in self.axes:
            log_ts[level, d] += aware_model.padding(np.float64(fanout[level]),
                                                     np.log(s[level, d]), np)
        log_ext = np.cumsum(log_ts, axis=0)
        _, stride, dilation = self.geometry[b]
        words = tile_words(log_ext, stride.astype(np.float64), dilation.astype(np.float64))
        return footprint_kb(words, self.keeps, self.bits, stages)

    # ------------------------------------------------------------------ rounding
    def round_factors(self, log_temporal: np.ndarray, log_spatial: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Integer ``(temporal, spatial)`` ``[point, layer, level, dim]`` from log factors."""
        log_t = np.asarray(log_temporal, np.float64)
        log_s = np.asarray(log_spatial, np.float64)
        points, n_layers, n_levels, _ = log_t.shape
        temporal = np.ones(log_t.shape, np.int64)
        spatial = np.ones(log_s.shape, np.int64)
        for p in range(points):
            for b in range(n_layers):
                used = np.ones(n_levels)
                for d in range(NUM_DIMS):
                    rem = int(self.dims[b, d])
                    done, target = 1, 0.0
                    for l in range(n_levels - 1):
                        for kind in ("s", "t"):
                            mask = self.s_mask if kind == "s" else self.t_mask
                            if not mask[l, d]:
                                continue
                            value = (log_s if kind == "s" else log_t)[p, b, l, d]
                            cap = self.fan_cap[l] / used[l] if kind == "s" else math.inf
                            if self.linear:
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

    def fill_array(self, temporal: np.ndarray, spatial: np.ndarray,
                   block: dict[int, float] | None = None, any_loop: bool = False) -> None:
        """Instruction awareness: widen each array axis's spatial factor (in place) to the
        largest divisor of that level's extent of the dim that fits the array.

        The array is DIM x DIM: `block` maps each axis level to its DIM (default: the
        largest spatial factor any layer of the design uses on any axis, or the fixed
        hardware's fan-out). A block with fewer real rows or columns runs padded, so the
        loop at the same level is folded into the fan-out where the dim allows. The level's
        tile, and every other tile, is unchanged. With `any_loop`, the fan-out may instead
        take from the dim's loop at any level (the one that widens it most; the same level on
        ties), that loop keeping the rest and the tiles in between changing: a K96 beside K8
        one level in becomes K128 and K6, which no single prime move reaches without first
        making the design worse.
        """
        n_levels = temporal.shape[2]
        for p in range(temporal.shape[0]):
            for level, d in self.axes:
                if block is not None:
                    dim = block[level]
                elif self.hw_mode == "fixed":
                    dim = self.fan_cap[level]
                else:
                    dim = max(int(spatial[p][:, a_l, a_d].max()) for a_l, a_d in self.axes)
                    dim = min(dim, self.fan_cap[level])
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

    def realize(self, design: Design) -> Design:
        """`design` as DIM x DIM instructions run it (needs ``aware``): each array axis filled
        to the design's own PE dims where the dim allows (`fill_array`), and buffers grown,
        if needed, to hold the padded rows (in ``sram_step_kb`` steps). PE dims, loop orders
        and stages are kept. A common ground to score designs of any search on."""
        if not self.aware:
            raise ConfigError("rounding: realize needs an instruction-aware Rounder")
        hw = design.hw
        fanout = level_arrays(self.template, hw.to_params(), np).fanout
        temporal, spatial = design.temporal.copy(), design.spatial.copy()
        self.fill_array(temporal[None], spatial[None],
                        block={level: float(fanout[level]) for level, _ in self.axes})
        need = np.max([self.footprint_kb(b, temporal[b], spatial[b], design.stages[b], fanout)
                       for b in range(len(self.layers))], axis=0)
        caps = self._capacity_kb({f: getattr(hw, f) for f in ("pe_rows", "pe_cols", "sp_kb",
                                                              "acc_kb")})
        fields: dict[str, float] = {}
        for l, lv in enumerate(self.template.levels[:-1]):
            names = [f for f in ("sp_kb", "acc_kb") if lv.capacity_kb is not None
                     and f in lv.capacity_kb.names]
            if len(names) != 1 or need[l] <= caps[l] * (1 + 1e-6):
                continue
            field = names[0]
            unit = self._capacity_kb({"pe_rows": hw.pe_rows, "pe_cols": hw.pe_cols,
                                      field: 1.0})[l]
            step = self.sram_step_kb
            value = max(step, math.ceil(need[l] / unit / step - 1e-6) * step)
            fields[field] = max(fields.get(field, getattr(hw, field)), value)
        if fields:
            hw = dataclasses.replace(hw, **fields)
        return Design(hw=hw, temporal=temporal, spatial=spatial, order=design.order.copy(),
                      stages=design.stages.copy())

    def round_bandwidth(self, dram_bw_words: Any) -> np.ndarray:
        """DRAM words/cycle ``[point]`` to buildable ones: the nearest power of two (in log),
        from 1 to the largest within ``max_dram_bw_words``."""
        top = max(0, math.floor(math.log2(self.max_dram_bw_words) + 1e-9))
        exp = np.clip(np.rint(np.log2(np.asarray(dram_bw_words, np.float64))), 0, top)
        return np.exp2(exp)

    def round(self, log_temporal: np.ndarray, log_spatial: np.ndarray, orders: np.ndarray,
              stages: np.ndarray, dram_bw_words: Any = None) -> list[Design]:
        """Designs from relaxed factors, orders ``[point, layer, level, 7]`` (innermost first,
        as `perfmodels.relax` stores candidates), continuous stages ``[point, layer, level]``
        and, in ``free`` mode, relaxed DRAM words/cycle ``[point]`` (`round_bandwidth`).
        """
        temporal, spatial = self.round_factors(log_temporal, log_spatial)
        if self.aware:
            self.fill_array(temporal, spatial, any_loop=True)
        stage = np.clip(np.rint(np.asarray(stages, np.float64)), 1, MAX_STAGES).astype(np.int64)
        stage[..., -1] = 1
        order = np.asarray(orders, np.int64)[..., ::-1]
        bw = None if dram_bw_words is None or self.hw_mode != "free" \
            else self.round_bandwidth(dram_bw_words)
        return self.finish(temporal, spatial, order, stage, bw)

    def finish(self, temporal: np.ndarray, spatial: np.ndarray, order: np.ndarray,
               stages: np.ndarray, dram_bw_words: Any = None) -> list[Design]:
        """Designs from integer arrays ``[point, layer, ...]`` (orders outermost first): infer
        (or take) the hardware, repair tiles that overflow a bound, and round the hardware.
        `dram_bw_words` ``[point]`` (or one number) is each design's DRAM bandwidth (default:
        the base hardware's)."""
        temporal, spatial, stages = temporal.copy(), spatial.copy(), stages.copy()
        points = temporal.shape[0]
        bws = np.broadcast_to(np.asarray(self.base_hw.dram_bw_words if dram_bw_words is None
                                         else dram_bw_words, np.float64), (points,))
        hws = self._hardware(temporal, spatial, stages, bws)
        for p in range(points):
            while True:
                try:
                    repaired = self.repair(temporal[p], spatial[p], stages[p], hws[p])
                    break
                except InfeasibleError:
                    # Instruction-aware: padding to a wide array can outgrow a bound that a
                    # narrower array meets; halve the array and try again.
                    dim = max(hws[p].pe_rows, hws[p].pe_cols)
                    if not self.aware or self.hw_mode == "fixed" or dim <= 1:
                        raise
                    self.narrow(temporal[p], spatial[p], dim // 2)
                    hws[p] = self._hardware(temporal[p:p + 1], spatial[p:p + 1],
                                            stages[p:p + 1], bws[p:p + 1])[0]
            if repaired:
                hws[p] = self._hardware(temporal[p:p + 1], spatial[p:p + 1],
                                        stages[p:p + 1], bws[p:p + 1])[0]
            if self.area_budget_mm2 is not None and self.hw_mode != "fixed":
                hws[p] = self._fit_budget(temporal[p], spatial[p], stages[p], hws[p])
        return [Design(hw=hws[p], temporal=temporal[p], spatial=spatial[p], order=order[p],
                       stages=stages[p]) for p in range(points)]

    # ------------------------------------------------------------------ area budget
    def area_mm2(self, hw: HardwareConfig) -> float:
        """The template's area model for `hw` (`perfmodels.energy.config_area_mm2`), with its
        I-GELU unit when a layer applies GELU on chip (as `baco.yardsticks` judges it)."""
        unit = unit_area_mm2(hw, "igelu_unit") if self.gelu_on_chip else None
        return config_area_mm2(hw) + (unit or 0.0)

    def within_budget(self, hw: HardwareConfig) -> bool:
        return (self.area_budget_mm2 is None
                or self.area_mm2(hw) <= self.area_budget_mm2 * (1 + 1e-6))

    def _area_terms(self, hw: HardwareConfig) -> list[tuple[float, str]]:
        """``(mm2, field)`` of every area term a min_hw design can cut: the PE array
        (``"pe"``) and each buffer sized by ``sp_kb``/``acc_kb``, largest first."""
        lv = level_arrays(self.template, hw.to_params(), np)
        terms = [(float(hw.pe_rows * hw.pe_cols * lv.pe_area_mm2), "pe")]
        for l, level in enumerate(self.template.levels[:-1]):
            names = [f for f in ("sp_kb", "acc_kb") if level.capacity_kb is not None
                     and f in level.capacity_kb.names]
            if len(names) == 1:
                terms.append((float(lv.area_mm2[l]), names[0]))
        return sorted(terms, key=lambda t: -t[0])

    def _fit_budget(self, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
                    hw: HardwareConfig) -> HardwareConfig:
        """Cut the area of one design (arrays of one point, in place) until its inferred
        hardware is within ``area_budget_mm2``: the largest term that can shrink first -- the
        array narrowed to the widest dim whose PEs leave room, or a buffer's tiles shrunk to
        the KiB that leave room (`repair` with that limit). Returns the hardware (still over
        the budget if nothing could be cut; `score` then rejects it)."""
        budget = self.area_budget_mm2
        step = self.sram_step_kb
        last = math.inf
        for _ in range(256):
            area = self.area_mm2(hw)
            if area <= budget * (1 + 1e-6) or area >= last:
                return hw          # within the budget, or no cut helped
            last = area
            excess = area - budget
            for term, field in self._area_terms(hw):
                if term <= 0:
                    continue
                if field == "pe":
                    dim = max(hw.pe_rows, hw.pe_cols)
                    if dim <= 1 or not self.pe_axes:
                        continue
                    per_pe = term / (hw.pe_rows * hw.pe_cols)
                    room = max(term - excess, per_pe)
                    new = int(min(dim - 1, max(1, math.floor(math.sqrt(room / per_pe)))))
                    self.narrow(temporal, spatial, new, self.pe_axes)
                else:
                    current = float(getattr(hw, field))
                    if current <= step * (1 + 1e-9):
                        continue
                    per_kb = term / current
                    target = max(step, math.floor((current - excess / per_kb) / step) * step)
                    target = min(target, current - step)
                    try:
                        self.repair(temporal, spatial, stages, hw, limits={field: target})
                    except InfeasibleError:
                        continue
                break
            else:
                return hw          # nothing left to cut
            hw = self._hardware(temporal[None], spatial[None], stages[None],
                                [hw.dram_bw_words])[0]
        return hw

    def _hardware(self, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
                  dram_bw_words: Sequence[float]) -> list[HardwareConfig]:
        points = temporal.shape[0]
        if self.hw_mode == "fixed":
            return [self.base_hw] * points
        maps = MappingArrays(
            log_temporal=np.log(temporal).astype(np.float32),
            log_spatial=np.log(spatial).astype(np.float32),
            rank=np.zeros(temporal.shape[:3] + (1, NUM_DIMS), np.float32),
            order_weights=np.ones(temporal.shape[:3] + (1,), np.float32),
            stages=stages.astype(np.float32))
        hwp = jax.tree_util.tree_map(np.asarray, _infer_many(
            self.template, self.base_hw.to_params(), self.packed, maps, self.aware))
        step = self.sram_step_kb
        out = []
        for p in range(points):
            def kb(x: float) -> float:
                return float(max(step, math.ceil(float(x) / step - 1e-6) * step))
            out.append(dataclasses.replace(
                self.base_hw, pe_rows=max(1, math.ceil(float(hwp.pe_rows[p]) - 1e-4)),
                pe_cols=max(1, math.ceil(float(hwp.pe_cols[p]) - 1e-4)),
                sp_kb=kb(hwp.sp_kb[p]), acc_kb=kb(hwp.acc_kb[p]),
                dram_bw_words=float(dram_bw_words[p]), name="baco"))
        return out

    def repair(self, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
                hw: HardwareConfig, limits: dict[str, float] | None = None) -> bool:
        """Shrink tiles (in place) of layers that overflow their bound (and `limits`, KiB
        per buffer field, if given); True if any did."""
        if self.hw_mode == "fixed":
            caps = self._capacity_kb({})
        else:   # bounded by max_sp_kb/max_acc_kb, and levels of fixed size (the registers)
            caps = self._capacity_kb(self._limit_fields(max(hw.pe_rows, hw.pe_cols), limits))
        fanout = level_arrays(self.template, hw.to_params(), np).fanout
        changed = False
        n = self.template.num_levels
        for b in range(temporal.shape[0]):
            while True:
                need = self.footprint_kb(b, temporal[b], spatial[b], stages[b], fanout)
                over = [l for l in range(n - 1) if need[l] > caps[l] * (1 + 1e-6)]
                if not over:
                    break
                changed = True
                level = over[0]
                fits = int(stages[b, level] * caps[level] / need[level] + 1e-9)
                if 1 <= fits < stages[b, level]:      # fewer buffers first: same tiles
                    stages[b, level] = fits
                    continue
                self._shrink(b, level, temporal[b], spatial[b], stages[b])
        return changed

    def narrow(self, temporal: np.ndarray, spatial: np.ndarray, dim: int,
                axes: tuple[tuple[int, int], ...] | None = None) -> None:
        """Cap every array axis's spatial factor at `dim` (in place), the loop at the same
        level taking the rest: the tiles are unchanged, the array narrower."""
        for level, d in (self.axes if axes is None else axes):
            for b in range(temporal.shape[0]):
                extent = int(temporal[b, level, d] * spatial[b, level, d])
                if spatial[b, level, d] > dim:
                    c = max(x for x in divisors(int(spatial[b, level, d])) if x <= dim)
                    spatial[b, level, d] = c
                    temporal[b, level, d] = extent // c

    def _shrink(self, b: int, level: int, temporal: np.ndarray, spatial: np.ndarray,
                stages: np.ndarray) -> None:
        """Move one prime factor of the largest loop at or below `level` one level out
        (or, with every such loop at 1, drop the stages there to 1)."""
        n = self.template.num_levels
        for arr in (temporal, spatial):
            inner = arr[:level + 1]
            if inner.max() > 1:
                l, d = np.unravel_index(np.argmax(inner[::-1]), inner.shape)
                l = level - l                                  # ties go to the outer level
                p = _smallest_prime(int(arr[l, d]))
                arr[l, d] //= p
                dst = next(j for j in range(level + 1, n) if self.t_mask[j, d])
                temporal[dst, d] *= p
                return
        if stages[:level + 1].max() > 1:
            stages[:level + 1] = 1
            return
        layer = self.layers[b]
        raise InfeasibleError(f"layer {b} ({layer.name or layer.config_str()}): no tile fits "
                              f"level {self.template.levels[level].name}")

    # ------------------------------------------------------------------ scoring
    def score(self, designs: Sequence[Design]) -> Metrics:
        """Exact metrics ``[design, layer]`` (padded if instruction-aware), as numpy; with a
        `fusion` plan, each design's fused chains folded in (`baco.fusion.FusionPlan.fold`)."""
        out = self.layer_score(designs)
        if self.fusion is not None:
            out = self.fusion.fold(out, [d.hw for d in designs])
        return out

    def layer_score(self, designs: Sequence[Design]) -> Metrics:
        """`score` with every layer run on its own (no fusion), its cycles corrected by the
        `residual` if there is one."""
        out = self.analytic_score(designs)
        if self.residual is None:
            return out
        hwps = stack_hw([d.hw for d in designs])
        maps = jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                      *[design_arrays(d) for d in designs])
        residual = self.residual(self.template, self.packed, hwps, maps)
        cycles = out.cycles * np.exp(residual).astype(out.cycles.dtype)
        return out._replace(cycles=cycles, edp=cycles * out.energy_pj)

    def analytic_score(self, designs: Sequence[Design]) -> Metrics:
        """The model's per-layer scores: no residual, no fusion."""
        hwps = stack_hw([d.hw for d in designs])
        maps = jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                      *[design_arrays(d) for d in designs])
        out = _score_many(self.template, self.packed, hwps, maps, self.aware)
        out = jax.tree_util.tree_map(np.asarray, out)
        if self.area_budget_mm2 is not None:
            # a design over the area budget is infeasible: infinite latency and EDP
            over = np.array([not self.within_budget(d.hw) for d in designs])[:, None]
            if over.any():
                out = out._replace(cycles=np.where(over, np.inf, out.cycles).astype(
                    out.cycles.dtype), edp=np.where(over, np.inf, out.edp).astype(out.edp.dtype))
        return out

    def check(self, design: Design) -> list[Mapping]:
        """The design's mappings, each validated on its hardware (and, if instruction-aware,
        with padded tiles that fit, and its hardware within ``area_budget_mm2``); raises
        `InfeasibleError` naming the layer (or the area) otherwise."""
        if not self.within_budget(design.hw):
            raise InfeasibleError(
                f"design area {self.area_mm2(design.hw):.4g} mm2 exceeds "
                f"codesign.area_budget_mm2 = {self.area_budget_mm2:g} mm2")
        mappings = design.mappings()
        fanout = level_arrays(self.template, design.hw.to_params(), np).fanout
        caps = self._capacity_kb({f: getattr(design.hw, f)
                                  for f in ("pe_rows", "pe_cols", "sp_kb", "acc_kb")})
        for b, (layer, m) in enumerate(zip(self.layers, mappings)):
            try:
                m.validate(layer, design.hw)
            except InfeasibleError as exc:
                raise InfeasibleError(f"layer {b} ({layer.name or layer.config_str()}): {exc}"
                                      ) from None
            if self.aware:
                need = self.footprint_kb(b, m.temporal, m.spatial, m.stages, fanout)
                bad = [l for l in range(len(need) - 1) if need[l] > caps[l] * (1 + 1e-6)]
                if bad:
                    raise InfeasibleError(
                        f"layer {b} ({layer.name or layer.config_str()}): padded tile of "
                        f"{need[bad[0]]:.4g} KiB overflows {self.template.levels[bad[0]].name} "
                        f"({caps[bad[0]]:.4g} KiB)")
        return mappings


def argmax_orders(order_weights: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The heaviest candidate order per level: ``[..., level, 7]`` innermost first, from
    decoded weights ``[..., level, cand]`` and ranks ``[..., level, cand, 7]``."""
    pick = np.argmax(np.asarray(order_weights), axis=-1)[..., None, None]
    chosen = np.take_along_axis(np.asarray(rank), pick, axis=-2)[..., 0, :]
    return np.argsort(chosen, axis=-1, kind="stable").astype(np.int32)


class Score(NamedTuple):
    """A design's figures on the common scorer (`common_score`)."""

    edp: float
    latency_cycles: float
    energy_pj: float
    design: Design


def common_score(layers: Sequence[Layer], counts: Sequence[float], design: Design,
                 aware: bool, sram_step_kb: float = 1.0,
                 area_budget_mm2: float | None = None, fusion: Any = None) -> Score:
    """The EDP every search's design is compared on, and the design it is scored as.

    Not aware: the plain analytic model of the design as it is. Aware: the design realized
    on DIM x DIM instructions (`Rounder.realize`: array axes filled where the dims allow,
    padding counted), either with buffers grown to hold the padded rows or with its own
    buffers and the tiles that overflow them shrunk -- whichever scores better, so no
    search is charged for a realization choice it never made. With `area_budget_mm2`, grown
    buffers must stay within it: the grown option is dropped when its area exceeds the budget
    and the design's own is within it (a design already over the budget is scored as it is).
    ``fusion`` (a `baco.fusion.FusionPlan`): its chains scored fused (`Rounder.score`).
    """
    # A mapping may cover more than its layer (padded edge tiles, as gemmini.h's tilers run
    # them): it is scored on the layer it covers, so the padded work is counted.
    # (A dim covered short is left to fail validation.)
    covers = (design.temporal * design.spatial).prod(axis=1)
    layers = [padded_layer(layer, m) if all(c >= layer.dims[d] for c, d in zip(cover, DIMS))
              else layer for layer, m, cover in zip(layers, design.mappings(), covers)]
    options: list[tuple[Rounder, Design]] = []
    if not aware:
        options.append((Rounder(design.hw, layers, hw_mode="fixed", aware=False,
                                sram_step_kb=sram_step_kb, fusion=fusion), design))
    else:
        grow = Rounder(design.hw, layers, hw_mode="min_hw", aware=True, max_pe_dim=max(
            design.hw.pe_rows, design.hw.pe_cols), sram_step_kb=sram_step_kb)
        grown = grow.realize(design)
        options.append((Rounder(grown.hw, layers, hw_mode="fixed", aware=True,
                                sram_step_kb=sram_step_kb, fusion=fusion), grown))
        try:
            keep = Rounder(design.hw, layers, hw_mode="fixed", aware=True,
                           sram_step_kb=sram_step_kb, fusion=fusion)
            T, S, ST = design.temporal.copy(), design.spatial.copy(), design.stages.copy()
            keep.fill_array(T[None], S[None])
            keep.repair(T, S, ST, design.hw)
            options.append((keep, Design(hw=design.hw, temporal=T, spatial=S,
                                         order=design.order.copy(), stages=ST)))
        except InfeasibleError:
            pass
    if area_budget_mm2 is not None and len(options) > 1:
        inside = [(r, d) for r, d in options if r.area_mm2(d.hw) <= area_budget_mm2 * (1 + 1e-6)]
        options = inside or options
    scores = []
    for r, d in options:
        if aware:
            r.check(d)
        edp, cycles, energy_pj = network_edp(r.score([d]), counts)
        scores.append(Score(float(edp[0]), float(cycles[0]), float(energy_pj[0]), d))
    return min(scores, key=lambda x: x.edp)

