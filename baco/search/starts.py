"""Where every gradient search starts: random hardware within the bounds (DOSA's
``gen_random_hw_config``) and, per layer, the best of a few mappings that fit it (a stand-in for
DOSA's CoSA start points). BACO's search (`baco.codesign`) and the DOSA-style one
(`baco.search.dosa`) share them."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.buildable import buildable_hardware, has_rules, smallest_buildable
from accel.design import design_of
from accel.mapping import Mapping
from baco.rounding import Rounder
from baco.search.gemmini_tiler import gemmini_mapping
from baco.search.random_pruned import pruned_mappings
from perfmodels.energy import config_area_mm2
from workloads.errors import ConfigError, InfeasibleError
from workloads.network import Network


def draw_array_and_buffers(rng: np.random.Generator, pe_exponents: tuple[int, int] = (1, 8),
                           kb_exponents: tuple[int, int] = (0, 12)) -> tuple[int, float, float]:
    """DOSA's ``gen_random_hw_config`` draw: a square array of ``2**randrange(*pe_exponents)``
    PEs a side, scratchpad and accumulator of ``2**randrange(*kb_exponents)`` KiB each, drawn in
    that order."""
    pe = 2 ** int(rng.integers(*pe_exponents))
    sp_kb = 2.0 ** int(rng.integers(*kb_exponents))
    acc_kb = 2.0 ** int(rng.integers(*kb_exponents))
    return pe, sp_kb, acc_kb


def random_hardware(rng: np.random.Generator, base: HardwareConfig, max_pe_dim: int,
                    max_sp_kb: float | None, max_acc_kb: float | None) -> HardwareConfig:
    """DOSA's ``gen_random_hw_config`` within the bounds: PE dim 2^U{1..7}, buffers
    2^U{0..11} KiB (seed 001 §6.6.1: random hardware starts, PE <= 128x128, 1 KB steps). The
    DRAM bandwidth is the base's: in ``free`` mode descent and refinement move it. On a
    template with a generator's rules the draw is snapped up to what it builds
    (`accel.buildable.buildable_hardware`)."""
    top = max(1, math.floor(math.log2(max_pe_dim)))
    pe, sp_kb, acc_kb = draw_array_and_buffers(rng, (1, top + 1))

    def within(value: float, limit: float | None) -> float:
        return value if limit is None else min(value, float(limit))

    hw = dataclasses.replace(base, pe_rows=min(pe, max_pe_dim), pe_cols=min(pe, max_pe_dim),
                             sp_kb=within(sp_kb, max_sp_kb), acc_kb=within(acc_kb, max_acc_kb),
                             name="random_start")
    return buildable_hardware(hw) if has_rules(hw) else hw


START_HW_DRAWS = 1000
"""Random hardware draws `random_hardware_within` tries before the smallest hardware."""


def random_hardware_within(rng: np.random.Generator, base: HardwareConfig, max_pe_dim: int,
                           max_sp_kb: float | None, max_acc_kb: float | None,
                           area_budget_mm2: float | None, sram_step_kb: float = 1.0
                           ) -> HardwareConfig:
    """`random_hardware`, redrawn until its area is within `area_budget_mm2` (so that a
    start's mappings, which fit it, make a design within the budget); after
    `START_HW_DRAWS` misses, the smallest hardware (`accel.buildable.smallest_buildable`).
    Without a budget, exactly one `random_hardware` draw."""
    hw = random_hardware(rng, base, max_pe_dim, max_sp_kb, max_acc_kb)
    if area_budget_mm2 is None:
        return hw
    for _ in range(START_HW_DRAWS):
        if config_area_mm2(hw) <= area_budget_mm2:
            return hw
        hw = random_hardware(rng, base, max_pe_dim, max_sp_kb, max_acc_kb)
    return dataclasses.replace(smallest_buildable(base, sram_step_kb), name="random_start")


def start_mappings(rounder: Rounder, hw: HardwareConfig, rng: np.random.Generator,
                   candidates: int, stages: int | None = None) -> tuple[list[Mapping], int]:
    """Per layer, the best (by layer EDP) of `candidates` mappings that fit `hw`: Gemmini's
    library tiling (`baco.search.gemmini_tiler`, on a Gemmini template) and draws of the
    Timeloop-like random-pruned mapper (`baco.search.random_pruned`).

    A stand-in for DOSA's CoSA start points, shared by BACO and the DOSA-style baseline.
    Candidate i of every layer forms one whole-network point, so this costs `candidates`
    samples (returned with the mappings).
    """
    tags = hw.template_spec.tags
    per_layer: list[list[Mapping]] = []
    for layer in rounder.layers:
        options: list[Mapping] = []
        if hw.template == "gemmini":
            try:
                m, _ = gemmini_mapping(layer, hw)
                options.append(m if stages is None else m.with_stages(stages))
            except (InfeasibleError, ConfigError):   # hardware too small for the tiler
                pass
        want = candidates - len(options)
        if want > 0:
            try:
                batch, _ = pruned_mappings(layer, hw, want, rng, stages=stages)
                options += [batch.mapping(i, tags) for i in range(batch.size)]
            except (InfeasibleError, ValueError):
                # ValueError: `MappingBatch.keys` cannot reshape an empty batch (nothing drawn
                # fits a tiny random start); the tiler's mapping or the fallback remains.
                pass
        if not options:
            options = [outermost_mapping(layer, hw, stages or 1)]
        per_layer.append([options[i % len(options)] for i in range(candidates)])
    per_layer = _exact_candidates(rounder, per_layer)
    designs = [design_of(hw, [opts[i] for opts in per_layer]) for i in range(candidates)]
    metrics = rounder.score(designs)                                   # [cand, layer]
    edp = np.where(np.isfinite(metrics.edp) & (metrics.overflow <= 1e-6), metrics.edp, np.inf)
    pick = np.argmin(edp, axis=0)
    return [per_layer[b][int(pick[b])] for b in range(len(per_layer))], candidates


def _exact_candidates(rounder: Rounder, per_layer: list[list[Mapping]]
                      ) -> list[list[Mapping]]:
    """The candidates with factors that multiply to each layer's dims exactly, as the search
    space has them: Gemmini's tiler covers a dim with padded edge tiles (more than the dim),
    which is rounded to the nearest exact tiling (`Rounder.round_factors`); an exact mapping
    is its own rounding."""
    dims = np.asarray(rounder.dims)
    out = [list(options) for options in per_layer]
    for i in range(len(per_layer[0]) if per_layer else 0):
        maps = [options[i] for options in per_layer]
        if all(((m.temporal * m.spatial).prod(axis=0) == d).all() for m, d in zip(maps, dims)):
            continue
        temporal, spatial = rounder.round_factors(
            np.log(np.stack([m.temporal for m in maps]).astype(np.float64))[None],
            np.log(np.stack([m.spatial for m in maps]).astype(np.float64))[None])
        for b, m in enumerate(maps):
            out[b][i] = dataclasses.replace(m, temporal=temporal[0, b], spatial=spatial[0, b])
    return out


def outermost_mapping(layer: Any, hw: HardwareConfig, stages: int) -> Mapping:
    """Every loop at the outermost level: the smallest tiles there are."""
    template = hw.template_spec
    n = template.num_levels
    temporal = np.ones((n, 7), np.int64)
    temporal[-1] = [layer.dims[d] for d in layer.dims]
    return Mapping.create(temporal, tags=template.tags).with_stages(stages)


def resolve_network(network: Network | str) -> Network:
    if isinstance(network, Network):
        return network
    from baco.networks import load_network
    return load_network(network)


def base_hardware(template: str, hardware: HardwareConfig | None) -> HardwareConfig:
    if hardware is not None:
        if hardware.template != template and template != "gemmini":
            raise ConfigError(f"hardware uses template {hardware.template!r}, not {template!r}")
        return hardware
    return HardwareConfig(template=template)


__all__ = ["START_HW_DRAWS", "base_hardware", "draw_array_and_buffers", "outermost_mapping",
           "random_hardware", "random_hardware_within", "resolve_network", "start_mappings"]
