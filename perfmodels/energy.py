"""Energy (seed 001 Table 6.2: ``MACs x EPA_PE + sum over levels of accesses x EPA``) and area.

Energy per access comes from the template (DOSA's 40 nm fits for Gemmini, see
`accel.arch`); every read, update and fill of a tensor a level keeps counts one access of one
word. Area is the template's documented per-KiB figure times the capacity of every instance
plus a per-PE figure times the PEs; it is an estimate for comparing designs, not calibrated.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from accel.arch import HwParams, LevelArrays, Template
from perfmodels.accesses import Accesses


class Energy(NamedTuple):
    energy_pj: Any          # per group
    level_pj: Any           # [level]
    mac_pj: Any
    level_accesses: Any     # [level] words


def energy(template: Template, acc: Accesses, lv: LevelArrays) -> Energy:
    keeps = jnp.asarray(template.keeps_mask)
    per_level = (jnp.where(keeps, acc.reads + acc.updates + acc.fills, 0.0)).sum(-1)
    level_pj = per_level * lv.energy_pj
    mac_pj = acc.macs * lv.mac_energy_pj
    return Energy(energy_pj=mac_pj + level_pj.sum(), level_pj=level_pj, mac_pj=mac_pj,
                  level_accesses=per_level)


def area_mm2(hwp: HwParams, lv: LevelArrays) -> Any:
    """Buffers (per-KiB figure x capacity x instances) plus PEs (per-PE figure)."""
    return lv.area_mm2.sum() + hwp.pe_rows * hwp.pe_cols * lv.pe_area_mm2
