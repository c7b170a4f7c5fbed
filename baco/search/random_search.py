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
``extra["rejected_hardware"]``).
"""

from __future__ import annotations

import numpy as np

from accel.arch import HardwareConfig
from baco.errors import ConfigError, InfeasibleError
from baco.result import CodesignResult
from baco.search._space import (
    MappingSampler,
    Tracker,
    check_budget,
    check_network,
    interpolate_seconds,
    make_result,
    score_layers,
)
from workloads.network import Network

MAX_HARDWARE_REDRAWS = 1000


def random_gemmini_hardware(rng: np.random.Generator, index: int = 0,
                            pe_exponents: tuple[int, int] = (1, 8),
                            kb_exponents: tuple[int, int] = (0, 12)) -> HardwareConfig:
    """DOSA's ``gen_random_hw_config``: square array of ``2**randrange(*pe_exponents)`` PEs a
    side, scratchpad and accumulator of ``2**randrange(*kb_exponents)`` KiB each.

    >>> hw = random_gemmini_hardware(np.random.default_rng(0))
    >>> hw.pe_rows in (2, 4, 8, 16, 32, 64, 128), hw.template
    (True, 'gemmini')
    """
    pe = 2 ** int(rng.integers(*pe_exponents))
    sp_kb = 2.0 ** int(rng.integers(*kb_exponents))
    acc_kb = 2.0 ** int(rng.integers(*kb_exponents))
    return HardwareConfig(template="gemmini", pe_rows=pe, pe_cols=pe, sp_kb=sp_kb,
                          acc_kb=acc_kb, name=f"random-{index}")


def random_search(network: Network | str, *, budget_samples: int, seed: int,
                  mappings_per_hw: int = 1000, stages: int | None = None,
                  pe_exponents: tuple[int, int] = (1, 8),
                  kb_exponents: tuple[int, int] = (0, 12),
                  max_draws_per_layer: int = 500_000) -> CodesignResult:
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

    Returns:
      A `CodesignResult` with ``method="random"``, ``samples == budget_samples``.
    """
    network = check_network(network, "random")
    budget = check_budget(budget_samples, "random")
    if not isinstance(mappings_per_hw, int) or mappings_per_hw < 1:
        raise ConfigError(f"random: mappings_per_hw must be a positive integer, "
                          f"got {mappings_per_hw!r}")
    rng = np.random.default_rng(seed)
    tracker = Tracker(network)
    layers = list(network.layers)
    rejected = 0
    configs = []
    while tracker.samples < budget:
        m = min(mappings_per_hw, budget - tracker.samples)
        hw = random_gemmini_hardware(rng, len(configs) + rejected, pe_exponents, kb_exponents)
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
                              "rejected_hardware": rejected})


__all__ = ["random_gemmini_hardware", "random_search"]
