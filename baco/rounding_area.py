"""The area budget of rounded designs (step 5 of `baco.rounding`): a design's area by the
template's model, and the cuts -- the array narrowed, a buffer's tiles shrunk -- that bring
a design over the budget within it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from accel.arch import HardwareConfig, level_arrays, unit_area_mm2
from accel.buildable import buildable_below_kb, buildable_dim_below, has_rules
from baco.rounding_hardware import infer_hardware
from baco.rounding_repair import narrow, repair
from perfmodels.energy import config_area_mm2
from workloads.errors import InfeasibleError

if TYPE_CHECKING:
    from baco.rounding import Rounder


def area_mm2(hw: HardwareConfig, gelu_on_chip: bool) -> float:
    """The template's area model for `hw` (`perfmodels.energy.config_area_mm2`), with its
    I-GELU unit when a layer applies GELU on chip (as `baco.yardsticks` judges it)."""
    unit = unit_area_mm2(hw, "igelu_unit") if gelu_on_chip else None
    return config_area_mm2(hw) + (unit or 0.0)


def within_budget(hw: HardwareConfig, gelu_on_chip: bool, budget_mm2: float | None) -> bool:
    return budget_mm2 is None or area_mm2(hw, gelu_on_chip) <= budget_mm2 * (1 + 1e-6)


def _area_terms(r: Rounder, hw: HardwareConfig) -> list[tuple[float, str]]:
    """``(mm2, field)`` of every area term a min_hw design can cut: the PE array
    (``"pe"``) and each buffer sized by ``sp_kb``/``acc_kb``, largest first."""
    lv = level_arrays(r.template, hw.to_params(), np)
    terms = [(float(hw.pe_rows * hw.pe_cols * lv.pe_area_mm2), "pe")]
    for l, level in enumerate(r.template.levels[:-1]):
        names = [f for f in ("sp_kb", "acc_kb") if level.capacity_kb is not None
                 and f in level.capacity_kb.names]
        if len(names) == 1:
            terms.append((float(lv.area_mm2[l]), names[0]))
    return sorted(terms, key=lambda t: -t[0])


def fit_budget(r: Rounder, temporal: np.ndarray, spatial: np.ndarray, stages: np.ndarray,
               hw: HardwareConfig) -> HardwareConfig:
    """Cut the area of one design (arrays of one point, in place) until its inferred
    hardware is within ``area_budget_mm2``: the largest term that can shrink first -- the
    array narrowed to the widest dim whose PEs leave room, or a buffer's tiles shrunk to
    the KiB that leave room (`repair` with that limit). Returns the hardware (still over
    the budget if nothing could be cut; `Rounder.score` then rejects it)."""
    budget = r.area_budget_mm2
    step = r.sram_step_kb
    rules = has_rules(hw)
    last = math.inf
    for _ in range(256):
        area = area_mm2(hw, r.gelu_on_chip)
        if area <= budget * (1 + 1e-6) or area >= last:
            return hw          # within the budget, or no cut helped
        last = area
        excess = area - budget
        for term, field in _area_terms(r, hw):
            if term <= 0:
                continue
            if field == "pe":
                dim = max(hw.pe_rows, hw.pe_cols)
                if dim <= 1 or not r.pe_axes:
                    continue
                per_pe = term / (hw.pe_rows * hw.pe_cols)
                room = max(term - excess, per_pe)
                new = int(min(dim - 1, max(1, math.floor(math.sqrt(room / per_pe)))))
                if rules:     # a narrower array the generator builds, or none
                    new = buildable_dim_below(new)
                    if new >= dim:
                        continue
                narrow(r.pe_axes, temporal, spatial, new)
            else:
                current = float(getattr(hw, field))
                per_kb = term / current
                if rules:     # the buildable size that leaves room, at most the one below
                    below = buildable_below_kb(hw, field, min(current - excess / per_kb,
                                                              current * (1 - 1e-6)))
                    if below is None:
                        continue
                    target = below
                else:
                    if current <= step * (1 + 1e-9):
                        continue
                    target = max(step, math.floor((current - excess / per_kb) / step) * step)
                    target = min(target, current - step)
                try:
                    repair(r, temporal, spatial, stages, hw, limits={field: target})
                except InfeasibleError:
                    continue
            break
        else:
            return hw          # nothing left to cut
        hw = infer_hardware(r, temporal[None], spatial[None], stages[None],
                            [hw.dram_bw_words])[0]
    return hw
