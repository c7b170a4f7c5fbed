"""A Timeloop-like random-pruned mapper on fixed hardware (Eyeriss, NVDLA, Gemmini presets).

Timeloop's ``random-pruned`` algorithm samples a random index factorization, prunes the
superfluous permutations of its unit-factor loops, and visits random permutations of what is
left (up to ``max-permutations-per-if-visit``, 16) before drawing the next factorization
(NVlabs/timeloop ``configs/mapper/README.md``). The seed thesis runs it for 5,000 valid
mappings per operator and 10,000 per layer end to end (seed 001 §4.13-4.14), keeping the best
EDP; DOSA's Fig. 8 baselines do the same on Eyeriss and NVDLA (reference §A.8).

Here, for each unique layer:

* **spatial pruning**: only spatial assignments that keep the most PEs busy are drawn (all
  assignments reaching the largest fan-out the layer admits on this array,
  `MappingSampler.fullest_spatial`); a mapping that leaves the array emptier than a fuller
  one exists is never generated;
* **factorizations**: the temporal factors are split at random over the template's slots as in
  the other random baselines; each factorization gets up to ``perms_per_factorization``
  random loop orders (and random 1-2 stages per level: pipeline depth is part of this
  project's mapspace; Timeloop has none);
* **permutation pruning**: loops of factor 1 are moved outermost in a fixed order before
  de-duplication, so mappings that differ only there are one mapping;
* **valid**: tiles fit every buffer; duplicates (after pruning) are dropped.

N distinct valid mappings per layer are scored with the exact model and the best EDP per layer
is kept. Sample j is the whole-network point of the j-th mapping of every layer (`baco.result`),
so ``budget_samples`` is N. A layer whose pruned mapspace holds fewer than N distinct valid
mappings is scored on all of them and its later samples repeat its earlier mappings
(``extra["distinct_mappings"]`` has the counts).

Bounds (what keeps memory independent of the budget and the network): mappings are drawn in
rounds of twice the number still wanted, at most `MAX_ROUND_ROWS` rows a round; a layer stops
drawing after `STALL_ROUNDS` rounds in a row without a new distinct valid mapping (its pruned
mapspace counts as exhausted) or after ``max_draws`` rows (2,000,000); only the distinct valid
mappings found are kept. Scoring (`baco.search._space.score_layers`) packs and evaluates one
chunk of at most 4,096 rows at a time, gathered from the per-layer batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from baco.errors import ConfigError, InfeasibleError
from baco.result import CodesignResult
from baco.search._space import (
    MappingBatch,
    MappingSampler,
    Tracker,
    canonical_orders,
    check_budget,
    check_network,
    fixed_hardware_budget,
    interpolate_seconds,
    make_result,
    resolve_hardware,
    score_layers,
)
from baco.topk import DEFAULT_TOP_K
from workloads.layer import Layer
from workloads.network import Network

STALL_ROUNDS = 8
"""Rounds without a new distinct mapping after which a layer's mapspace counts as exhausted."""

MAX_ROUND_ROWS = 65_536
"""Most candidate rows (factorizations x permutations) drawn in one round of `pruned_mappings`;
rounds draw twice the mappings still wanted, up to this, so a round's memory is bounded
whatever the budget."""


def pruned_mappings(layer: Layer, hw: HardwareConfig, n: int, rng: np.random.Generator,
                    perms_per_factorization: int = 16, stages: int | None = None,
                    max_draws: int = 2_000_000) -> tuple[MappingBatch, int]:
    """`n` mappings of the pruned mapspace and how many of them are distinct.

    Returns ``(batch, distinct)``: the first ``distinct`` rows are distinct valid mappings in
    the order found; if the pruned mapspace ran out, the rest repeat them cyclically.
    """
    sampler = MappingSampler(layer, hw)
    options = sampler.fullest_spatial()
    seen: set[bytes] = set()
    kept: list[MappingBatch] = []
    have = drawn = stall = 0
    perms = max(1, int(perms_per_factorization))
    while have < n and stall < STALL_ROUNDS and drawn < max_draws:
        factorizations = min(max(16, -(-2 * (n - have) // perms)),
                             max(1, MAX_ROUND_ROWS // perms))
        base = sampler.draw(factorizations, rng, stages, spatial_options=options)
        # Each factorization with `perms` random orders and stage draws.
        rows = np.repeat(np.arange(factorizations), perms)
        order, st = sampler.orders_and_stages(rows.size, rng, stages)
        batch = canonical_orders(MappingBatch(base.temporal[rows], base.spatial[rows],
                                              order, st))
        drawn += rows.size
        batch = batch.take(np.flatnonzero(sampler.fits(batch)))
        new = []
        for i, key in enumerate(batch.keys()):
            if key not in seen:
                seen.add(key)
                new.append(i)
        new = new[:n - have]
        stall = 0 if new else stall + 1
        if new:
            kept.append(batch.take(np.array(new)))
            have += len(new)
    if have == 0:
        raise InfeasibleError(f"random_pruned: no valid mapping of layer {layer.config_str()} "
                              f"on {hw.name or hw.template} after {drawn} draws")
    found = MappingBatch.concat(kept)
    if have < n:
        found = found.take(np.arange(n) % have)
    return found, have


def random_pruned(network: Network | str, *, budget_samples: int, seed: int,
                  hardware: HardwareConfig | str = "eyeriss",
                  perms_per_factorization: int = 16, stages: int | None = None,
                  progress: Callable[[int, float], Any] | None = None,
                  area_budget_mm2: float | None = None,
                  top_k: int = DEFAULT_TOP_K) -> CodesignResult:
    """Best-EDP mappings from `budget_samples` pruned random mappings per layer, on fixed
    hardware (a preset name or a `HardwareConfig`); `progress` is called with ``(samples,
    best_edp)`` once they are scored; its best `top_k` distinct network points are the
    result's ``candidates`` for the final pick (`baco.final_pick`).

    The hardware is fixed, so ``area_budget_mm2`` does not constrain the search: hardware over
    it still runs, with an `AreaBudgetWarning`, and ``extra`` records ``area_mm2``,
    ``area_budget_mm2`` and ``within_area_budget`` (`fixed_hardware_budget`).

    Returns:
      A `CodesignResult` with ``method="random_pruned"``, ``samples == budget_samples`` and
      ``hardware`` the given configuration.
    """
    network = check_network(network, "random_pruned")
    budget = check_budget(budget_samples, "random_pruned")
    hw = resolve_hardware(hardware, "random_pruned")
    if perms_per_factorization < 1:
        raise ConfigError(f"random_pruned: perms_per_factorization must be >= 1, "
                          f"got {perms_per_factorization}")
    budget_info = fixed_hardware_budget(hw, area_budget_mm2, "random_pruned")
    rng = np.random.default_rng(seed)
    tracker = Tracker(network, progress, top_k)
    layers = list(network.layers)
    batches, distinct = [], {}
    for layer in layers:
        batch, count = pruned_mappings(layer, hw, budget, rng, perms_per_factorization, stages)
        batches.append(batch)
        distinct[layer.name or layer.config_str()] = count
    start = tracker.seconds()
    cycles, energy = score_layers(layers, hw, batches)
    tracker.add_block(hw, batches, cycles, energy,
                      interpolate_seconds(start, tracker.seconds(), budget))
    return make_result("random_pruned", network, tracker, seed,
                       extra={"hardware_name": hw.name,
                              "perms_per_factorization": perms_per_factorization,
                              "distinct_mappings": distinct, **budget_info})


__all__ = ["pruned_mappings", "random_pruned"]
