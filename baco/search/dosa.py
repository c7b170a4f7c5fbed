"""DOSA-style one-loop descent (Hong et al., MICRO 2023), instruction-agnostic, as a baseline.

It follows DOSA's own code, ``dataset/dse/mapping_driven_hw_search.py`` of ucb-bar/dosa
(``MappingDrivenNetworkSearcher.search_gd`` and ``search_network``; rounding in
``dataset/common/mapping_utils.py::round_mapping``; random hardware in
``dataset/hw/gemmini/gemmini_config.py::gen_random_hw_config``), reference dosa-gemmini-isa.md
§A.3-A.8. What DOSA does, and how it is reproduced here:

* **Variables**: raw positive tiling factors (no log space, no softmax) for every level below
  DRAM, max-normalized (here by the largest size of each dim in the network, the analogue of
  DOSA's dataset statistics, ``mapfeat_norm: max``); the DRAM factors are derived,
  ``D / prod(inner)`` (``get_dram_factors``), and may fall below 1. Validity is a penalty,
  ``loss = EDP + |EDP| * Σ relu(1 - f)^2``.
* **Hardware**: DOSA's ``min_hw`` with a hard max over layers, on the plain analytic model --
  no DIM x DIM instructions, no padding (`perfmodels.relax.infer_hw` with tau 0).
* **Optimizer**: Adam, 1490 iterations per start (``base_gd_iters``), rounding every 500
  (``round_steps``) and at the last iteration -- after 500, 1000 and 1490 steps -- after which
  descent continues from the rounded mapping with Adam's moments kept (DOSA saves and reloads
  the optimizer state). Every rounded design and the start point are candidates; the best by
  exact EDP is kept.
* **Learning rate per workload** (`DOSA_LEARNING_RATES`, ``search_network``: EDP target):
  U-Net and RNN-T 5e-5, ResNet-50 and RetinaNet 7.5e-5, every other workload (BERT, ...) 1e-5.
  ``learning_rate=None`` (the default) looks the network's name up there (`dosa_learning_rate`).
* **Rounding** (``round_mapping(..., round_perms=False)``), per layer and dim: first the spatial
  factors of every level from L0 out, then the temporal ones; each is ``max(1, round(f))``
  kept if it divides what is left of the dim, else the divisor of what is left nearest to the
  value (the raw value for a spatial factor, the rounded one for a temporal one; ties go to the
  larger divisor, as ``utils.get_nearest_choice``); DRAM takes the remainder.
* **Loop orders** are not differentiable and below DRAM keep the start mapping's. The DRAM order
  is chosen at every rounding (``ordering != "none"``; ``run_search.py`` defaults to
  ``shuffle``) greedily per layer: layers in turn, each tries DOSA's three orders
  (``gen_all_perms``: weight-stationary PQNRSCK, input-stationary KRSPQCN, output-stationary
  RSCKPQN, innermost first; `DRAM_ORDERS`) with the other layers as they stand, and keeps the
  one that lowers the network EDP, or its current order if none does (`greedy_dram_orders`).
  **Stages** are fixed at 2 (the overlap DOSA's and Timeloop's roofline latency assumes).
* **Starts**: DOSA draws random hardware (``gen_random_hw_config``: PE dim 2^U{1..7}, scratchpad
  and accumulator 2^U{0..11} KiB; here `baco.search.starts.random_hardware`), maps every layer onto
  it with CoSA, and descends from those mappings; a start whose first EDP exceeds 10x the best
  first EDP seen is skipped and the next random hardware tried. It runs ``num_starts`` = 7
  starts one after another (``starts`` here, run side by side).

Deviations that remain, and why:

* **Start mappings**: CoSA needs the Gurobi MIP solver, which we cannot ship. The stand-in is,
  per layer, the best (by layer EDP) of ``start_mappings_per_layer`` mappings fitting the random
  hardware -- Gemmini's library tiling and draws of the Timeloop-like random-pruned mapper
  (`baco.search.starts.start_mappings`, shared with BACO). A start mapping that pads a dim
  (Gemmini's tiler runs padded edge tiles) is first brought to exact factors by DOSA's
  rounding; an exact one is left as it is.
* **Padded dims**: a dim that is mostly one large prime is searched grown to a nearby 7-smooth
  size (``pad_fraction``, `baco.padding`), as BACO searches it, so that both search one space
  (DOSA's code searches the exact dims, and ends on a 1-wide array for a prime K).
* **Normalization** by the network's largest dims rather than DOSA's training-set maxima (we
  have no Timeloop dataset at search time); it scales Adam's step like DOSA's does.
* **PE bound**: DOSA's Timeloop runs do not bound the array (its FireSim runs penalize PE dims
  above 16, ``10 * relu(pe - 16)^2``). The project's bound is 128x128 (seed §6.6.1), so the
  same penalty is applied above ``max_pe_dim`` and spatial factors are rounded to divisors
  that fit it (`baco.rounding.Rounder`'s repair then keeps every tile valid).
* **Budget**: DOSA stops after 7 starts (its plots count 1,500 samples a start); here the search
  stops when ``budget_samples`` is spent -- about 6.6 starts at 10,000 -- drawing further starts
  while budget remains, so every search of an experiment gets the same budget.
* **Parallel starts**: the ``starts`` run side by side (vmapped) instead of one after another;
  the 10x skip test still sees the starts in the order they are drawn.
* **Area budget** (``area_budget_mm2``; DOSA has none): the same kind of penalty as its PE
  bound, ``|EDP| * penalty * relu(log(area / budget))`` of the ``min_hw`` hardware
  (`perfmodels.energy.area_excess`, the template's area model), random start hardware drawn
  within the budget, and the rounding's hard check (`baco.rounding.Rounder`: a design over
  the budget is cut to fit or rejected), exactly as BACO's search is held to it.
* **Scoring**: DOSA ranks a start's rounded points by its differentiable model and the starts by
  Timeloop; here both are the exact plain analytic model (``extra["scorer"] == "analytic"``).

Sample accounting (`baco.result`): each GD iteration of a start is one sample; each start
candidate one sample (``start_mappings_per_layer``) and its score one; each rounding scores the
three DRAM orders as whole networks (3 samples; 4 when some layer's current order is none of
them), which gives every per-layer trial of the greedy choice exactly, since a layer's DRAM
order changes neither the hardware nor the other layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design
from baco.padding import PAD_FRACTION, search_layer
from baco.result import CodesignResult, LayerResult
from baco.rounding import Rounder
from baco.search.dosa_descent import Static, build_problem
from baco.search.dosa_rounding import DRAM_ORDERS, greedy_dram_orders, round_mapping
from baco.search.dosa_slots import SlotSettings, StartSlots
from baco.search.starts import base_hardware, resolve_network
from baco.topk import DEFAULT_TOP_K, design_key
from perfmodels.energy import check_area_budget
from workloads.errors import ConfigError, InfeasibleError
from workloads.network import Network

__all__ = ["DOSA_LEARNING_RATES", "DRAM_ORDERS", "dosa", "dosa_learning_rate",
           "greedy_dram_orders", "round_mapping"]

DOSA_LEARNING_RATES = {"unet": 5e-5, "rnnt": 5e-5, "resnet50": 7.5e-5, "retinanet": 7.5e-5}
"""DOSA's Adam learning rate per workload for the EDP target (``search_network``)."""

DOSA_DEFAULT_LEARNING_RATE = 1e-5
"""DOSA's rate for every other workload (BERT, DeepBench, ...)."""


def dosa_learning_rate(network: str) -> float:
    """DOSA's learning rate for a network name: `DOSA_LEARNING_RATES` by the name without its
    options (``"bert:seq=16"`` is ``bert``), case, ``-`` and ``_`` ignored; else 1e-5.

    >>> dosa_learning_rate("resnet50"), dosa_learning_rate("U-Net"), dosa_learning_rate("bert")
    (7.5e-05, 5e-05, 1e-05)
    """
    key = str(network).split(":", 1)[0].strip().lower().replace("-", "").replace("_", "")
    return DOSA_LEARNING_RATES.get(key, DOSA_DEFAULT_LEARNING_RATE)


def dosa(network: Network | str, *, budget_samples: int, seed: int = 0,
         hardware: HardwareConfig | None = None, template: str = "gemmini", starts: int = 7,
         gd_iters: int = 1490, round_steps: int = 500, learning_rate: float | None = None,
         start_mappings_per_layer: int = 8, max_pe_dim: int = 128, sram_step_kb: float = 1.0,
         stages: int = 2, penalty: float = 10.0, parallel: int | None = None,
         progress: Callable[[int, float], Any] | None = None,
         area_budget_mm2: float | None = None, pad_fraction: float = PAD_FRACTION,
         top_k: int = DEFAULT_TOP_K) -> CodesignResult:
    """DOSA-style search of `network` within `budget_samples` samples (see the module doc).

    Args:
      network: a `workloads.Network`, zoo name or ONNX path.
      budget_samples: total samples (`baco.result` accounting).
      seed: seeds the random hardware and start mappings.
      hardware: base hardware whose template and fixed fields are kept (default: the
        template's defaults).
      starts: starts descending side by side (DOSA's ``num_starts`` = 7); more are drawn
        while budget remains. ``parallel`` overrides how many run at once.
      gd_iters, round_steps: DOSA's ``base_gd_iters`` (1490) and ``round_steps`` (500).
      learning_rate: Adam's learning rate; None (default) takes DOSA's for the network's name
        (`dosa_learning_rate`: ResNet-50 and RetinaNet 7.5e-5, U-Net and RNN-T 5e-5, else 1e-5).
      start_mappings_per_layer: candidate mappings per layer behind each start point.
      max_pe_dim: the PE bound (penalized in descent, kept by rounding).
      stages: the fixed pipeline stages of every level below DRAM.
      progress: called with ``(samples, best_edp)`` after every round (a progress bar).
      area_budget_mm2: hold the search to this area (mm2, the template's area model): a
        penalty in descent and a hard check at rounding; None: no budget. Below the
        template's smallest design, a `ConfigError` naming ``codesign.area_budget_mm2``.
      pad_fraction: the dims searched, as BACO's ``codesign.pad_fraction`` (`baco.padding`),
        so that the two searches share one space; 0: the exact dims, as DOSA's own code.
      top_k: the best distinct designs kept as the result's ``candidates`` for the final
        pick (`baco.final_pick`).

    Returns:
      A `CodesignResult` with method ``"dosa"``, scored by the plain analytic model
      (``extra["scorer"] == "analytic"``).
    """
    _check_options(budget_samples=budget_samples, starts=starts, gd_iters=gd_iters,
                   round_steps=round_steps, start_mappings_per_layer=start_mappings_per_layer,
                   pad_fraction=pad_fraction, learning_rate=learning_rate)
    net = resolve_network(network)
    if learning_rate is None:
        learning_rate = dosa_learning_rate(net.name)
    hw = base_hardware(template, hardware)
    check_area_budget(area_budget_mm2, hw, sram_step_kb)
    layers = [search_layer(x, pad_fraction) for x in net.layers]
    counts = np.asarray(net.counts, np.float64)
    rounder = Rounder(hw, layers, hw_mode="min_hw", aware=False, max_pe_dim=max_pe_dim,
                      sram_step_kb=sram_step_kb, nearest="linear",
                      area_budget_mm2=area_budget_mm2)
    prob, dims = build_problem(hw, layers, counts)
    static = Static(template=hw.template_spec, penalty=float(penalty),
                    max_pe_dim=float(max_pe_dim), learning_rate=float(learning_rate),
                    round_steps=int(min(round_steps, gd_iters)),
                    area_budget_mm2=None if area_budget_mm2 is None else float(area_budget_mm2))
    slots = StartSlots(
        SlotSettings(budget_samples=budget_samples, seed=seed, slots=int(parallel or starts),
                     gd_iters=gd_iters, start_mappings_per_layer=start_mappings_per_layer,
                     max_pe_dim=max_pe_dim, sram_step_kb=sram_step_kb, stages=stages,
                     area_budget_mm2=area_budget_mm2),
        hw, rounder, prob, static, dims, counts, top_k)
    while True:
        n_steps = slots.plan_round()
        if not n_steps.any():
            break
        slots.descend(n_steps)
        if progress is not None:
            progress(slots.samples, slots.best.edp)
    settings = {"starts": starts, "gd_iters": gd_iters, "round_steps": round_steps,
                "learning_rate": learning_rate, "stages": stages,
                "start_mappings_per_layer": start_mappings_per_layer,
                "max_pe_dim": max_pe_dim, "area_budget_mm2": area_budget_mm2}
    return _result(net, rounder, slots, seed, settings)


def _check_options(*, pad_fraction: float, learning_rate: float | None,
                   **positive_ints: Any) -> None:
    """`ConfigError` for a count (`positive_ints`) that is not a positive integer, a
    `pad_fraction` outside [0, 1) or a learning rate that is not positive."""
    for name, value in positive_ints.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"dosa: {name} must be a positive integer, got {value!r}")
    if not 0.0 <= pad_fraction < 1.0:
        raise ConfigError(f"dosa: pad_fraction must be in [0, 1), got {pad_fraction!r}")
    if learning_rate is not None and not learning_rate > 0:
        raise ConfigError(f"dosa: learning_rate must be positive, got {learning_rate!r}")


def _result(net: Network, rounder: Rounder, slots: StartSlots, seed: int,
            settings: dict[str, Any]) -> CodesignResult:
    """The search's `CodesignResult`: its best design, per layer scored by the plain model,
    with its top designs as ``candidates`` (the best first) for `baco.final_pick`."""
    best = slots.best.design
    if best is None:
        raise InfeasibleError("dosa: the budget ended before any design was scored; raise "
                              "budget_samples")
    key = design_key(best)
    result = _scored(net, rounder, slots, seed, settings, best)
    others = [_scored(net, rounder, slots, seed, settings, d)
              for _, k, d in slots.best.top if k != key]
    return dataclasses.replace(result, candidates=(result, *others[:slots.best.top_k - 1]))


def _scored(net: Network, rounder: Rounder, slots: StartSlots, seed: int,
            settings: dict[str, Any], design: Design) -> CodesignResult:
    """`design` as a result, per layer scored by the plain model."""
    mappings = rounder.check(design)
    metrics = rounder.score([design])
    result_layers = tuple(
        LayerResult(layer=layer, count=int(c), mapping=m,
                    latency_cycles=float(metrics.cycles[0, b]),
                    energy_pj=float(metrics.energy_pj[0, b]))
        for b, (layer, c, m) in enumerate(zip(net.layers, net.counts, mappings)))
    return CodesignResult(
        method="dosa", network=net.name, hardware=dataclasses.replace(design.hw, name="dosa"),
        layers=result_layers, samples=slots.samples, history=tuple(slots.best.history),
        seed=seed, extra={"scorer": "analytic", "starts_drawn": slots.next_start,
                          "settings": settings})
