"""Random search over hardware and mappings, DOSA's random baseline (reference §A.8).

DOSA's protocol (``mapping_driven_hw_search``, ``GemminiConfig.gen_random_hw_config`` and
``random_baseline(hw_config, 1000)``): draw a random Gemmini configuration with
``pe_dim = 2**randrange(1, 8)``, ``sp_KB = 2**randrange(0, 12)`` and
``acc_KB = 2**randrange(0, 12)``, score 1,000 random valid mappings of every layer on it, keep
each layer's best-EDP mapping, and repeat with the next random configuration.

Sample accounting (`baco.result`): sample j on a configuration is the whole-network point made
of the j-th random mapping of every unique layer, so 1,000 mappings per layer on one
configuration are 1,000 samples; a budget of B samples visits ``ceil(B / mappings_per_hw)``
configurations, the last one with the remainder. A configuration on which some layer has no
fitting mapping within the sampler's draw limit is redrawn without spending samples (counted in
``extra["rejected_hardware"]``). With ``area_budget_mm2``, a configuration whose area (the
template's model, `perfmodels.energy`) exceeds the budget is redrawn before any mapping is
drawn, spending nothing (counted in ``extra["over_budget_hardware"]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.buildable import buildable_hardware
from baco.errors import ConfigError, InfeasibleError
from baco.result import CodesignResult
from baco.search._space import (
    MappingSampler,
    Tracker,
    budget_check,
    check_budget,
    check_network,
    interpolate_seconds,
    make_result,
    score_layers,
)
from baco.search.starts import draw_array_and_buffers
from baco.topk import DEFAULT_TOP_K
from perfmodels.energy import config_area_mm2
from workloads.network import Network

MAX_HARDWARE_REDRAWS = 1000
MAX_BUDGET_REDRAWS = 200_000
"""Hardware draws over the area budget tolerated before the search gives up (the smallest
draw is 1 in ~1000 of DOSA's distribution)."""


def random_gemmini_hardware(rng: np.random.Generator, index: int = 0,
                            pe_exponents: tuple[int, int] = (1, 8),
                            kb_exponents: tuple[int, int] = (0, 12)) -> HardwareConfig:
    """DOSA's ``gen_random_hw_config``: square array of ``2**randrange(*pe_exponents)`` PEs a
    side, scratchpad and accumulator of ``2**randrange(*kb_exponents)`` KiB each, snapped up
    to the sizes Gemmini's generator builds (`accel.buildable.buildable_hardware`).

    >>> hw = random_gemmini_hardware(np.random.default_rng(0))
    >>> hw.pe_rows in (2, 4, 8, 16, 32, 64, 128), hw.template
    (True, 'gemmini')
    """
    pe, sp_kb, acc_kb = draw_array_and_buffers(rng, pe_exponents, kb_exponents)
    return buildable_hardware(HardwareConfig(template="gemmini", pe_rows=pe, pe_cols=pe,
                                             sp_kb=sp_kb, acc_kb=acc_kb, name=f"random-{index}"))


def random_search(network: Network | str, *, budget_samples: int, seed: int,
                  mappings_per_hw: int = 1000, stages: int | None = None,
                  pe_exponents: tuple[int, int] = (1, 8),
                  kb_exponents: tuple[int, int] = (0, 12),
                  max_draws_per_layer: int = 500_000,
                  progress: Callable[[int, float], Any] | None = None,
                  area_budget_mm2: float | None = None,
                  top_k: int = DEFAULT_TOP_K) -> CodesignResult:
    """Random hardware, random valid mappings; the best whole-network point found.

    Args:
      network: the layers to map (each unique layer once, with its repeat count).
      budget_samples: whole-network points to score (see the module docstring).
      seed: seeds the one `numpy.random.Generator` every draw comes from.
      mappings_per_hw: samples per hardware configuration (DOSA: 1,000).
      stages: fix every level's pipeline stages; None draws 1 or 2 per level, as
        `accel.mapping.Mapping.random` does.
      pe_exponents, kb_exponents: ``randrange`` bounds of the hardware draw (DOSA's).
      max_draws_per_layer: rejection-sampling limit before a configuration is given up.
      progress: called with ``(samples, best_edp)`` as the search goes (a progress bar).
      area_budget_mm2: reject hardware draws whose area exceeds it (mm2); None: no budget.
      top_k: the best distinct network points kept as the result's ``candidates`` for the
        final pick (`baco.final_pick`).

    Returns:
      A `CodesignResult` with ``method="random"``, ``samples == budget_samples``.
    """
    network = check_network(network, "random")
    budget = check_budget(budget_samples, "random")
    if not isinstance(mappings_per_hw, int) or mappings_per_hw < 1:
        raise ConfigError(f"random: mappings_per_hw must be a positive integer, "
                          f"got {mappings_per_hw!r}")
    area_budget = budget_check(area_budget_mm2, "random")
    if area_budget is not None:
        smallest = buildable_hardware(HardwareConfig(
            template="gemmini", pe_rows=2 ** pe_exponents[0], pe_cols=2 ** pe_exponents[0],
            sp_kb=2.0 ** kb_exponents[0], acc_kb=2.0 ** kb_exponents[0]))
        if config_area_mm2(smallest) > area_budget:
            raise InfeasibleError(
                f"random: no hardware the draw allows is within area_budget_mm2 = "
                f"{area_budget:g} mm2 (the smallest, {smallest.pe_rows}x{smallest.pe_cols} PEs "
                f"and {smallest.sp_kb:g} KiB buffers, has {config_area_mm2(smallest):.4g} mm2); "
                "raise the budget or lower pe_exponents/kb_exponents")
    rng = np.random.default_rng(seed)
    tracker = Tracker(network, progress, top_k)
    layers = list(network.layers)
    rejected = over_budget = 0
    configs = []
    while tracker.samples < budget:
        m = min(mappings_per_hw, budget - tracker.samples)
        hw = random_gemmini_hardware(rng, len(configs) + rejected, pe_exponents, kb_exponents)
        if area_budget is not None and config_area_mm2(hw) > area_budget:
            over_budget += 1
            if over_budget > MAX_BUDGET_REDRAWS:
                raise InfeasibleError(f"random: {over_budget} random hardware configurations "
                                      f"were over area_budget_mm2 = {area_budget:g} mm2")
            continue
        try:
            batches = [MappingSampler(layer, hw).sample(m, rng, stages,
                                                        max_draws=max_draws_per_layer)
                       for layer in layers]
        except InfeasibleError:
            rejected += 1
            if rejected > MAX_HARDWARE_REDRAWS:
                raise InfeasibleError(f"random: {rejected} random hardware configurations in a "
                                      "row had a layer with no fitting mapping") from None
            continue
        start = tracker.seconds()
        cycles, energy = score_layers(layers, hw, batches)
        seconds = interpolate_seconds(start, tracker.seconds(), m)
        best = tracker.add_block(hw, batches, cycles, energy, seconds)
        configs.append({"pe": hw.pe_rows, "sp_kb": hw.sp_kb, "acc_kb": hw.acc_kb,
                        "samples": m, "best_edp": best})
    return make_result("random", network, tracker, seed,
                       extra={"mappings_per_hw": mappings_per_hw, "hardware": configs,
                              "rejected_hardware": rejected,
                              **({} if area_budget is None else {
                                  "over_budget_hardware": over_budget,
                                  "area_budget_mm2": area_budget})})


__all__ = ["random_gemmini_hardware", "random_search"]
