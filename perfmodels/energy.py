"""Energy (seed 001 Table 6.2: ``MACs x EPA_PE + sum over levels of accesses x EPA``) and area.

Energy per access comes from the template (DOSA's 40 nm fits for Gemmini, see
`accel.arch`); every read, update and fill of a tensor a level keeps counts one access of one
word. Area is the template's documented per-KiB figure times the capacity of every instance
plus a per-PE figure times the PEs; it is an estimate for comparing designs, not calibrated.
`hardware_area_mm2` is that formula for any hardware (relaxed or discrete); every search's
area budget uses it (`area_excess`, the relaxed penalty; `config_area_mm2`, the hard checks;
`check_area_budget`, the config check against `smallest_area_mm2`). A level's fixed
``area_mm2`` (the DRAM interface's, which grows with its width) is part of the same sum.
`energy_by_event` splits an `Energy` by event class (useful and padded MACs, each level's
accesses and idle time), the one split every yardstick reports.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig, HwParams, LevelArrays, Template, level_arrays
from accel.buildable import smallest_buildable
from perfmodels.accesses import Accesses
from workloads.errors import ConfigError


class Energy(NamedTuple):
    energy_pj: Any          # per group
    level_pj: Any           # [level]
    mac_pj: Any             # the MACs charged: useful ones and those on padded operands
    level_accesses: Any     # [level] words
    pe_idle_pj: Any = 0.0   # the PEs' cycles without a MAC while the array runs


def energy(template: Template, acc: Accesses, lv: LevelArrays, cycles: Any = None,
           useful_macs: Any = None, array_pes: Any = None) -> Energy:
    """Energy of the counted accesses and MACs; with `cycles` (the instruction-aware model and
    the simulated yardstick), each level's idle energy ``static_pj_per_cycle`` for as long as
    the work runs, in that level's share.

    ``acc.macs`` are the MACs the array spends; of them, those beyond `useful_macs` (padded
    array rows and columns) cost the template's padded-MAC energy (all useful when None).
    With `cycles` and `array_pes`, every PE cycle of the run without a MAC costs the PE's idle
    energy (``array_pes x cycles - acc.macs``)."""
    keeps = jnp.asarray(template.keeps_mask)
    per_level = (jnp.where(keeps, acc.reads + acc.updates + acc.fills, 0.0)).sum(-1)
    level_pj = per_level * lv.energy_pj
    if cycles is not None:
        level_pj = level_pj + cycles * lv.static_pj_per_cycle
    xp = jnp if any(isinstance(x, jax.Array) for x in (acc.macs, cycles, useful_macs)) else np
    if useful_macs is None:
        mac_pj = acc.macs * lv.mac_energy_pj
    else:
        useful = xp.minimum(useful_macs, acc.macs)
        mac_pj = useful * lv.mac_energy_pj + (acc.macs - useful) * lv.mac_padded_energy_pj
    idle_pj = 0.0
    if cycles is not None and array_pes is not None:
        idle_pj = xp.maximum(array_pes * cycles - acc.macs, 0.0) * lv.pe_idle_pj_per_cycle
    return Energy(energy_pj=mac_pj + idle_pj + level_pj.sum(), level_pj=level_pj,
                  mac_pj=mac_pj, level_accesses=per_level, pe_idle_pj=idle_pj)


def idle_levels(template: Template) -> tuple[bool, ...]:
    """Which levels the template gives an idle energy (a ``static_pj_per_cycle`` not 0)."""
    out = []
    for level in template.levels:
        text = level.static_pj_per_cycle.text
        try:
            out.append(float(text) != 0.0)
        except ValueError:          # an expression of the hardware's parameters
            out.append(True)
    return tuple(out)


def event_names(template: Template) -> tuple[str, ...]:
    """The event classes `energy_by_event` reports on `template`: ``mac_useful``,
    ``mac_padded``, ``pe_idle`` where the template gives a PE idle energy, then per level
    (innermost first) its lowercased name (its accesses) and, where the template gives one,
    ``<name>_idle`` (its idle energy)."""
    names = ["mac_useful", "mac_padded"] + (["pe_idle"] if _pe_idles(template) else [])
    for level, idle in zip(template.levels, idle_levels(template)):
        names += [level.name.lower()] + ([f"{level.name.lower()}_idle"] if idle else [])
    return tuple(names)


def _pe_idles(template: Template) -> bool:
    expr = template.pe_idle_pj_per_cycle
    if expr is None:
        return False
    try:
        return float(expr.text) != 0.0
    except ValueError:          # an expression of the hardware's parameters
        return True


def energy_by_event(template: Template, en: Energy, lv: LevelArrays, useful_macs: float,
                    cycles: Any = None) -> dict[str, float]:
    """`en` split by event class (`event_names`), in pJ, summing to ``en.energy_pj``.

    ``mac_useful`` is `useful_macs` (the layer's own MACs) x the MAC energy and
    ``mac_padded`` the rest of ``en.mac_pj`` (the MACs charged beyond them: padded array rows
    and columns, edge tiles, at the padded-MAC energy where the model counted them as such);
    a rest within a part in a million of ``en.mac_pj``, the float32 models' rounding, is none.
    ``pe_idle`` is ``en.pe_idle_pj``. A level's idle energy is ``static_pj_per_cycle`` x
    `cycles` (0 without `cycles`, as `energy` charges it) and its accesses the rest of its
    ``level_pj``. Totals of many layers: `perfmodels.score.network_energy_by_event`.
    """
    mac_pj = float(en.mac_pj)
    useful_pj = min(float(useful_macs) * float(lv.mac_energy_pj), mac_pj)
    padded_pj = mac_pj - useful_pj
    if abs(padded_pj) <= 1e-6 * abs(mac_pj):
        padded_pj = 0.0
    out = {"mac_useful": useful_pj, "mac_padded": padded_pj}
    if _pe_idles(template):
        out["pe_idle"] = float(en.pe_idle_pj)
    level_pj = np.asarray(en.level_pj, np.float64)
    static = np.asarray(lv.static_pj_per_cycle, np.float64)
    for l, (level, idle) in enumerate(zip(template.levels, idle_levels(template))):
        name = level.name.lower()
        idle_pj = float(cycles) * float(static[l]) if idle and cycles is not None else 0.0
        out[name] = float(level_pj[l]) - idle_pj
        if idle:
            out[f"{name}_idle"] = idle_pj
    return out


def area_mm2(hwp: HwParams, lv: LevelArrays) -> Any:
    """Buffers (per-KiB figure x capacity x instances) plus PEs (per-PE figure)."""
    return lv.area_mm2.sum() + hwp.pe_rows * hwp.pe_cols * lv.pe_area_mm2


def hardware_area_mm2(template: Template, hwp: HwParams, xp: Any = jnp) -> Any:
    """`area_mm2` of hardware `hwp` on `template` (relaxed or discrete; jit- and grad-safe
    with ``xp=jnp``, plain numpy with ``xp=np``): the one area formula every search uses."""
    return area_mm2(hwp, level_arrays(template, hwp, xp))


def config_area_mm2(hw: HardwareConfig) -> float:
    """The template's area model for one `HardwareConfig`, as a float (numpy, no tracing)."""
    return float(hardware_area_mm2(hw.template_spec, hw.to_params(), np))


def areas_mm2(hw: HardwareConfig, pe_rows: Any, pe_cols: Any, sp_kb: Any, acc_kb: Any) -> Any:
    """Areas of many variants of `hw` (the four sizes as arrays of one shape; its other fields
    kept), vectorized: ``[n]`` numpy float64. Used to screen hardware grids and draws."""
    arrays = [np.asarray(x, np.float32).reshape(-1) for x in (pe_rows, pe_cols, sp_kb, acc_kb)]
    if arrays[0].size == 0:
        return np.zeros(0)
    return np.asarray(_areas(hw.template_spec, hw.to_params(), *arrays), np.float64)


@functools.partial(jax.jit, static_argnums=(0,))
def _areas(template: Template, base: HwParams, rows: Any, cols: Any, sp: Any, acc: Any) -> Any:
    return jax.vmap(lambda r, c, s, a: hardware_area_mm2(
        template, base._replace(pe_rows=r, pe_cols=c, sp_kb=s, acc_kb=a)))(rows, cols, sp, acc)


def smallest_area_mm2(hw: HardwareConfig, sram_step_kb: float = 1.0) -> float:
    """The smallest area a search of `hw`'s template may reach: its smallest buildable design
    (`accel.buildable.smallest_buildable`: on Gemmini a 2 x 2 array and the least buffers its
    generator builds; elsewhere a 1 x 1 array and every sized buffer at one ``sram_step_kb``,
    the least rounding gives a buffer)."""
    return config_area_mm2(smallest_buildable(hw, sram_step_kb))


def area_excess(template: Template, hwp: HwParams, area_budget_mm2: Any) -> Any:
    """The area penalty of relaxed hardware: ``relu(log(area / budget))`` -- 0 within the
    budget, about ``area / budget - 1`` just above it, its gradient pushing every term of the
    area (PEs, buffers) down. A budget of ``inf`` (no budget) gives 0 everywhere."""
    area = hardware_area_mm2(template, hwp)
    return jnp.maximum(jnp.log(jnp.maximum(area, 1e-30)) - jnp.log(area_budget_mm2), 0.0)


def check_area_budget(area_budget_mm2: float | None, hw: HardwareConfig,
                      sram_step_kb: float = 1.0, field: str = "codesign.area_budget_mm2",
                      fixed: bool = False) -> None:
    """A `ConfigError` (one line, naming `field` and the smallest feasible area) if the
    budget is not a positive number at least the template's smallest design
    (`smallest_area_mm2`), or, with `fixed` hardware, below that hardware's own area."""
    if area_budget_mm2 is None:
        return
    smallest = smallest_area_mm2(hw, sram_step_kb)
    least = smallest_buildable(hw, sram_step_kb)
    value = area_budget_mm2
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ConfigError(f"{field} must be a positive number of mm2 (the smallest feasible "
                          f"area on template {hw.template!r} is {smallest:.4g} mm2), got {value!r}")
    if value < smallest * (1 - 1e-6):
        raise ConfigError(f"{field} = {value:g} mm2 is below the smallest feasible area "
                          f"{smallest:.4g} mm2 (template {hw.template!r}: a "
                          f"{least.pe_rows}x{least.pe_cols} PE array, {least.sp_kb:g} and "
                          f"{least.acc_kb:g} KiB buffers); raise it")
    if fixed:
        own = config_area_mm2(hw)
        if value < own * (1 - 1e-6):
            raise ConfigError(f"{field} = {value:g} mm2 is below the area of the fixed hardware "
                              f"{hw.name or hw.template!r} ({own:.4g} mm2; the smallest feasible "
                              f"area with hw_mode fixed); raise it or use hw_mode min_hw/free")
