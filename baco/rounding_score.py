"""Exact scores of rounded designs, many at once, and the check every kept design passes.

Each function takes the `baco.rounding.Rounder` whose settings (template, layers,
instruction awareness, area budget, residual) it scores with."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from accel.arch import level_arrays, stack_hw
from accel.design import Design
from accel.mapping import Mapping
from baco.rounding_area import area_mm2, within_budget
from baco.rounding_hardware import capacity_kb, footprint_kb
from perfmodels import aware as aware_model
from perfmodels.accesses import MappingArrays
from perfmodels.analytic import Metrics, fast_jit
from perfmodels.score import design_arrays
from workloads.errors import InfeasibleError

if TYPE_CHECKING:
    from baco.rounding import Rounder


@functools.partial(fast_jit, static_argnums=(0, 4))
def _score_many(template: Any, layers: Any, hwps: Any, maps: MappingArrays, aware: bool
                ) -> Metrics:
    """Exact metrics ``[design, layer]`` of many designs, each on its own hardware."""
    per_layer = jax.vmap(lambda hwp, layer, m: aware_model.evaluate(template, layer, hwp, m,
                                                                     aware),
                         in_axes=(None, 0, 0))
    return jax.vmap(per_layer, in_axes=(0, None, 0))(hwps, layers, maps)


def layer_score(r: Rounder, designs: Sequence[Design]) -> Metrics:
    """`analytic_score` with its cycles corrected by `r.residual` if there is one."""
    out = analytic_score(r, designs)
    if r.residual is None:
        return out
    hwps = stack_hw([d.hw for d in designs])
    maps = jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                  *[design_arrays(d) for d in designs])
    residual = r.residual(r.template, r.packed, hwps, maps)
    cycles = out.cycles * np.exp(residual).astype(out.cycles.dtype)
    return out._replace(cycles=cycles, edp=cycles * out.energy_pj)


def analytic_score(r: Rounder, designs: Sequence[Design]) -> Metrics:
    """The model's per-layer scores: no residual, no fusion; infinite over the budget."""
    hwps = stack_hw([d.hw for d in designs])
    maps = jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                  *[design_arrays(d) for d in designs])
    out = _score_many(r.template, r.packed, hwps, maps, r.aware)
    out = jax.tree_util.tree_map(np.asarray, out)
    if r.area_budget_mm2 is not None:
        # a design over the area budget is infeasible: infinite latency and EDP
        over = np.array([not within_budget(d.hw, r.gelu_on_chip, r.area_budget_mm2)
                         for d in designs])[:, None]
        if over.any():
            out = out._replace(cycles=np.where(over, np.inf, out.cycles).astype(
                out.cycles.dtype), edp=np.where(over, np.inf, out.edp).astype(out.edp.dtype))
    return out


def check(r: Rounder, design: Design) -> list[Mapping]:
    """The design's mappings, each validated (`baco.rounding.Rounder.check`)."""
    if not within_budget(design.hw, r.gelu_on_chip, r.area_budget_mm2):
        raise InfeasibleError(
            f"design area {area_mm2(design.hw, r.gelu_on_chip):.4g} mm2 exceeds "
            f"codesign.area_budget_mm2 = {r.area_budget_mm2:g} mm2")
    mappings = design.mappings()
    fanout = level_arrays(r.template, design.hw.to_params(), np).fanout
    caps = capacity_kb(r, {f: getattr(design.hw, f)
                           for f in ("pe_rows", "pe_cols", "sp_kb", "acc_kb")})
    for b, (layer, m) in enumerate(zip(r.layers, mappings)):
        try:
            m.validate(layer, design.hw)
        except InfeasibleError as exc:
            raise InfeasibleError(f"layer {b} ({layer.name or layer.config_str()}): {exc}"
                                  ) from None
        if r.aware:
            need = footprint_kb(r, b, m.temporal, m.spatial, m.stages, fanout)
            bad = [l for l in range(len(need) - 1) if need[l] > caps[l] * (1 + 1e-6)]
            if bad:
                raise InfeasibleError(
                    f"layer {b} ({layer.name or layer.config_str()}): padded tile of "
                    f"{need[bad[0]]:.4g} KiB overflows {r.template.levels[bad[0]].name} "
                    f"({caps[bad[0]]:.4g} KiB)")
    return mappings
