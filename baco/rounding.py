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
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from accel.arch import MAX_STAGES, HardwareConfig, level_arrays, tensor_bits
from accel.design import Design
from accel.lower import gelu_on_chip, padded_layer
from accel.mapping import Mapping, layer_geometry
from baco import (
    rounding_area,
    rounding_factors,
    rounding_hardware,
    rounding_repair,
    rounding_score,
)
from baco.profile import timed
from baco.rounding_factors import argmax_orders, divisors, nearest_divisor
from perfmodels import aware as aware_model
from perfmodels.analytic import Metrics, stack_layers
from perfmodels.score import metrics_by_event, network_edp, network_energy_by_event
from workloads.errors import ConfigError, InfeasibleError
from workloads.layer import DIMS, Layer

__all__ = ["Rounder", "Score", "argmax_orders", "common_score", "divisors", "nearest_divisor"]

_HW_MODES = ("min_hw", "free", "fixed")


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

    The steps live in modules named for them (`baco.rounding_factors`,
    `baco.rounding_hardware`, `baco.rounding_repair`, `baco.rounding_area`,
    `baco.rounding_score`), each taking the rounder's settings.
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
        self.sram_step_kb = float(sram_step_kb)
        self.max_kb = {"sp_kb": max_sp_kb, "acc_kb": max_acc_kb}
        self.max_pe_dim = rounding_hardware.bounded_pe_dim(base_hw, max_pe_dim, self.max_kb)
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
        rounding_hardware.check_bounds(self)
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

    # ------------------------------------------------------------------ rounding
    def round_factors(self, log_temporal: np.ndarray, log_spatial: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Integer ``(temporal, spatial)`` ``[point, layer, level, dim]`` from log factors."""
        return rounding_factors.round_factors(self.dims, self.s_mask, self.t_mask, self.fan_cap,
                                              self.linear, log_temporal, log_spatial)

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
        rounding_factors.fill_array(self.axes, self.fan_cap, self.hw_mode == "fixed",
                                    temporal, spatial, block, any_loop)

    def round_bandwidth(self, dram_bw_words: Any) -> np.ndarray:
        """DRAM words/cycle ``[point]`` to buildable ones: the nearest power of two (in log),
        from 1 to the largest within ``max_dram_bw_words``."""
        return rounding_factors.round_bandwidth(self.max_dram_bw_words, dram_bw_words)

    def round(self, log_temporal: np.ndarray, log_spatial: np.ndarray, orders: np.ndarray,
              stages: np.ndarray, dram_bw_words: Any = None) -> list[Design]:
        """Designs from relaxed factors, orders ``[point, layer, level, 7]`` (innermost first,
        as `perfmodels.relax` stores candidates), continuous stages ``[point, layer, level]``
        and, in ``free`` mode, relaxed DRAM words/cycle ``[point]`` (`round_bandwidth`).
        """
        with timed("rounding"):
            temporal, spatial = self.round_factors(log_temporal, log_spatial)
            if self.aware:
                self.fill_array(temporal, spatial, any_loop=True)
            stage = np.clip(np.rint(np.asarray(stages, np.float64)), 1,
                            MAX_STAGES).astype(np.int64)
            stage[..., -1] = 1
            order = np.asarray(orders, np.int64)[..., ::-1]
            bw = None if dram_bw_words is None or self.hw_mode != "free" \
                else self.round_bandwidth(dram_bw_words)
            return self._finish(temporal, spatial, order, stage, bw)

    def finish(self, temporal: np.ndarray, spatial: np.ndarray, order: np.ndarray,
               stages: np.ndarray, dram_bw_words: Any = None) -> list[Design]:
        """Designs from integer arrays ``[point, layer, ...]`` (orders outermost first): infer
        (or take) the hardware, repair tiles that overflow a bound, and round the hardware.
        `dram_bw_words` ``[point]`` (or one number) is each design's DRAM bandwidth (default:
        the base hardware's)."""
        with timed("rounding"):
            return self._finish(temporal, spatial, order, stages, dram_bw_words)

    def _finish(self, temporal: np.ndarray, spatial: np.ndarray, order: np.ndarray,
                stages: np.ndarray, dram_bw_words: Any) -> list[Design]:
        temporal, spatial, stages = temporal.copy(), spatial.copy(), stages.copy()
        points = temporal.shape[0]
        bws = np.broadcast_to(np.asarray(self.base_hw.dram_bw_words if dram_bw_words is None
                                         else dram_bw_words, np.float64), (points,))
        infer = rounding_hardware.infer_hardware
        hws = infer(self, temporal, spatial, stages, bws)
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
                    hws[p] = infer(self, temporal[p:p + 1], spatial[p:p + 1],
                                   stages[p:p + 1], bws[p:p + 1])[0]
            if repaired:
                hws[p] = infer(self, temporal[p:p + 1], spatial[p:p + 1],
                               stages[p:p + 1], bws[p:p + 1])[0]
            if self.area_budget_mm2 is not None and self.hw_mode != "fixed":
                hws[p] = rounding_area.fit_budget(self, temporal[p], spatial[p], stages[p],
                                                  hws[p])
        return [Design(hw=hws[p], temporal=temporal[p], spatial=spatial[p], order=order[p],
                       stages=stages[p]) for p in range(points)]

    # ------------------------------------------------------------------ hardware
    def footprint_kb(self, b: int, temporal: np.ndarray, spatial: np.ndarray,
                     stages: np.ndarray, fanout: np.ndarray) -> np.ndarray:
        """Per-instance KiB each level of layer `b` holds (`accel.mapping.footprint_kb`),
        padded to the array if aware as `perfmodels.aware.pad` pads (`padding`:
        each array axis's spatial factor up to its fan-out, folded into the temporal one)."""
        return rounding_hardware.footprint_kb(self, b, temporal, spatial, stages, fanout)

    def realize(self, design: Design) -> Design:
        """`design` as DIM x DIM instructions run it (needs ``aware``): each array axis filled
        to the design's own PE dims where the dim allows (`fill_array`), and buffers grown,
        if needed, to hold the padded rows (in ``sram_step_kb`` steps). PE dims, loop orders
        and stages are kept. A common ground to score designs of any search on."""
        return rounding_hardware.realize(self, design)

    # ------------------------------------------------------------------ repair
    def repair(self, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
               hw: HardwareConfig, limits: dict[str, float] | None = None) -> bool:
        """Shrink tiles (in place) of layers that overflow their bound (and `limits`, KiB
        per buffer field, if given); True if any did."""
        return rounding_repair.repair(self, temporal, spatial, stages, hw, limits)

    def narrow(self, temporal: np.ndarray, spatial: np.ndarray, dim: int,
               axes: tuple[tuple[int, int], ...] | None = None) -> None:
        """Cap every array axis's spatial factor at `dim` (in place), the loop at the same
        level taking the rest: the tiles are unchanged, the array narrower."""
        rounding_repair.narrow(self.axes if axes is None else axes, temporal, spatial, dim)

    # ------------------------------------------------------------------ area budget
    def area_mm2(self, hw: HardwareConfig) -> float:
        """The template's area model for `hw` (`perfmodels.energy.config_area_mm2`), with its
        I-GELU unit when a layer applies GELU on chip (as `baco.yardsticks` judges it)."""
        return rounding_area.area_mm2(hw, self.gelu_on_chip)

    def within_budget(self, hw: HardwareConfig) -> bool:
        return rounding_area.within_budget(hw, self.gelu_on_chip, self.area_budget_mm2)

    # ------------------------------------------------------------------ scoring
    def score(self, designs: Sequence[Design]) -> Metrics:
        """Exact metrics ``[design, layer]`` (padded if instruction-aware), as numpy; with a
        `fusion` plan, each design's fused chains folded in (`baco.fusion.FusionPlan.fold`)."""
        with timed("exact scoring"):
            out = rounding_score.layer_score(self, designs)
            if self.fusion is not None:
                out = self.fusion.fold(out, [d.hw for d in designs])
        return out

    def layer_score(self, designs: Sequence[Design]) -> Metrics:
        """`score` with every layer run on its own (no fusion), its cycles corrected by the
        `residual` if there is one."""
        with timed("exact scoring"):
            return rounding_score.layer_score(self, designs)

    def analytic_score(self, designs: Sequence[Design]) -> Metrics:
        """The model's per-layer scores: no residual, no fusion."""
        with timed("exact scoring"):
            return rounding_score.analytic_score(self, designs)

    def check(self, design: Design) -> list[Mapping]:
        """The design's mappings, each validated on its hardware (and, if instruction-aware,
        with padded tiles that fit, and its hardware within ``area_budget_mm2``); raises
        `InfeasibleError` naming the layer (or the area) otherwise."""
        return rounding_score.check(self, design)


class Score(NamedTuple):
    """A design's figures on the common scorer (`common_score`)."""

    edp: float
    latency_cycles: float
    energy_pj: float
    design: Design
    energy_pj_by_event: dict[str, float]


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
    useful_macs = [layer.macs for layer in layers]
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
    scored = []
    for r, d in options:
        if aware:
            r.check(d)
        edp, cycles, energy_pj = network_edp(r.score([d]), counts)
        scored.append((float(edp[0]), float(cycles[0]), float(energy_pj[0]), d, r))
    edp, cycles, energy_pj, d, r = min(scored, key=lambda x: x[0])
    return Score(edp, cycles, energy_pj, d, _energy_by_event(r, d, useful_macs, counts))


def _energy_by_event(rounder: Rounder, design: Design, useful_macs: Sequence[float],
                     counts: Sequence[float]) -> dict[str, float]:
    """The network's energy of `design` on `rounder`'s model by event class: each layer's
    split (`perfmodels.score.metrics_by_event`; the useful MACs are the layers' own, before
    padding) weighted by `counts` as ``energy_pj`` is, fused chains as the score fused them
    (`baco.fusion.FusionPlan.energy_by_event`)."""
    metrics = jax.tree_util.tree_map(lambda x: x[0], rounder.layer_score([design]))
    events = metrics_by_event(design, metrics, useful_macs, rounder.aware)
    if rounder.fusion is None:
        return network_energy_by_event(events, counts)
    return rounder.fusion.energy_by_event(events, design.hw, metrics)

