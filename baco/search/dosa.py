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
  (`baco.search.starts.start_mappings`, shared with BACO). A start mapping that pads a dim (Gemmini's
  tiler runs padded edge tiles) is first brought to exact factors by DOSA's rounding; an exact
  one is left as it is.
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
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from accel.arch import HardwareConfig
from accel.design import Design
from baco.padding import PAD_FRACTION, search_layer
from baco.result import CodesignResult, HistoryPoint, LayerResult
from baco.rounding import Rounder, divisors
from baco.search.starts import (
    base_hardware,
    random_hardware_within,
    resolve_network,
    start_mappings,
)
from perfmodels import relax
from perfmodels.accesses import LayerArrays, MappingArrays, order_rank
from perfmodels.analytic import evaluate as model_evaluate
from perfmodels.analytic import fast_jit, stack_layers
from perfmodels.energy import area_excess, check_area_budget
from perfmodels.score import network_edp
from workloads.errors import ConfigError, InfeasibleError
from workloads.network import Network

__all__ = ["DOSA_LEARNING_RATES", "DRAM_ORDERS", "dosa", "dosa_learning_rate",
           "greedy_dram_orders", "round_mapping"]

_ROUNDING_SAMPLES = 4
"""The most exact scores one rounding takes: the three DRAM orders, and the current orders
when some layer's is none of them."""

DRAM_ORDERS = tuple(relax.CANDIDATE_ORDERS.values())
"""DOSA's three DRAM orders (innermost first): weight, input and output stationary."""

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


def _nearest_choice(value: float, choices: Sequence[int]) -> int:
    """DOSA's ``utils.get_nearest_choice``: the nearest of sorted `choices`, ties upward."""
    for i, choice in enumerate(choices):
        if value < choice:
            if i == 0:
                return choice
            return choices[i - 1] if choice - value > value - choices[i - 1] else choice
    return choices[-1]


def round_mapping(dims: np.ndarray, temporal: np.ndarray, spatial: np.ndarray,
                  fan_cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DOSA's ``round_mapping`` (``round_perms=False``) of raw factors ``[layer, level, dim]``
    (innermost level first; the DRAM row is ignored) for layer sizes ``dims [layer, dim]``.

    Per layer and dim: the spatial factors of every level from the innermost out, then the
    temporal ones, each ``max(1, round(f))`` if it divides what is left of the dim (and, spatial,
    fits ``fan_cap[level]`` over the level's other spatial factors -- our PE bound), else the
    nearest such divisor (to the raw value if spatial, to the rounded one if temporal; ties
    upward); the DRAM temporal factor is the remainder.

    >>> t = np.array([[[1, 1], [2.5, 5.2], [1, 1]]]); s = np.array([[[1, 1], [4.6, 1], [1, 1]]])
    >>> T, S = round_mapping(np.array([[12, 10]]), t, s, np.array([np.inf, 16, np.inf]))
    >>> S[0, 1].tolist(), T[0, :, 0].tolist(), T[0, :, 1].tolist()
    ([4, 1], [1, 3, 1], [1, 5, 2])
    """
    dims = np.asarray(dims, np.int64)
    n_layers, n_levels, n_dims = np.shape(temporal)
    out_t = np.ones((n_layers, n_levels, n_dims), np.int64)
    out_s = np.ones((n_layers, n_levels, n_dims), np.int64)
    for b in range(n_layers):
        used = np.ones(n_levels)
        for d in range(n_dims):
            total = 1
            size = int(dims[b, d])
            for kind, raw, out in (("s", spatial, out_s), ("t", temporal, out_t)):
                for l in range(n_levels - 1):
                    value = float(raw[b, l, d])
                    left = size // total
                    f = max(1, round(value))
                    cap = fan_cap[l] / used[l] if kind == "s" else math.inf
                    choices = [x for x in divisors(left) if x <= cap + 1e-9]
                    if f not in choices:
                        f = _nearest_choice(value if kind == "s" else f, choices)
                    out[b, l, d] = f
                    total *= f
                    if kind == "s":
                        used[l] *= f
            out_t[b, -1, d] = size // total
    return out_t, out_s


def greedy_dram_orders(cycles: np.ndarray, energy_pj: np.ndarray, counts: Sequence[float],
                       start: np.ndarray) -> tuple[np.ndarray, float]:
    """DOSA's DRAM loop-order choice: per-layer metrics ``[candidate, layer]`` of each candidate
    order, and each layer's current candidate `start` ``[layer]``. Layers in turn, each tries
    every candidate with the other layers as they stand and keeps the first that lowers the
    network EDP ``(Σ count·cycles)(Σ count·pJ)`` most -- its current one unless one is strictly
    better. Returns the pick per layer and the network EDP.

    >>> cyc = np.array([[1.0, 4.0], [4.0, 1.0]]); en = np.array([[1.0, 4.0], [4.0, 1.0]])
    >>> pick, edp = greedy_dram_orders(cyc, en, [1, 1], np.array([1, 0]))
    >>> pick.tolist(), edp
    ([0, 1], 4.0)
    """
    counts = np.asarray(counts, np.float64)
    cyc = np.asarray(cycles, np.float64) * counts
    en = np.asarray(energy_pj, np.float64) * counts
    pick = np.asarray(start, np.int64).copy()
    layers = np.arange(cyc.shape[1])
    total_c = cyc[pick, layers].sum()
    total_e = en[pick, layers].sum()
    for b in layers:
        base_c = total_c - cyc[pick[b], b]
        base_e = total_e - en[pick[b], b]
        best = (base_c + cyc[pick[b], b]) * (base_e + en[pick[b], b])
        for k in range(cyc.shape[0]):
            edp = (base_c + cyc[k, b]) * (base_e + en[k, b])
            if edp < best:
                best, pick[b] = edp, k
        total_c = base_c + cyc[pick[b], b]
        total_e = base_e + en[pick[b], b]
    return pick, float(total_c * total_e)
class _Problem(NamedTuple):
    """The network as arrays (a pytree; the template rides along as a static argument)."""

    layers: LayerArrays
    counts: Any          # [B]
    norm: Any            # [7] max-normalization of the factors
    t_mask: Any          # [L-1, 7] temporal slots below DRAM
    s_mask: Any          # [L-1, 7] spatial slots below DRAM
    base: Any            # HwParams


class _Static(NamedTuple):
    template: Any
    penalty: float
    max_pe_dim: float
    learning_rate: float
    round_steps: int
    area_budget_mm2: float | None = None


def _decode(params: Any, orders: Any, stages: Any, prob: _Problem) -> tuple[MappingArrays, Any]:
    """Model inputs from raw factors; and the validity penalty Σ relu(1 - f)^2."""
    ft = jnp.where(prob.t_mask, params["t"] * prob.norm, 1.0)            # [B, L-1, 7]
    fs = jnp.where(prob.s_mask, params["s"] * prob.norm, 1.0)
    inner = jnp.prod(ft * fs, axis=1)                                      # [B, 7]
    top = prob.layers.dims / inner
    temporal = jnp.concatenate([ft, top[:, None]], axis=1)
    spatial = jnp.concatenate([fs, jnp.ones_like(top)[:, None]], axis=1)
    invalid = (jnp.square(jnp.maximum(1.0 - temporal, 0.0)).sum()
               + jnp.square(jnp.maximum(1.0 - spatial, 0.0)).sum())
    maps = MappingArrays(
        log_temporal=jnp.log(jnp.maximum(temporal, 1e-6)),
        log_spatial=jnp.log(jnp.maximum(spatial, 1e-6)),
        rank=orders, order_weights=jnp.ones(orders.shape[:-1], jnp.float32), stages=stages)
    return maps, invalid


def _loss(params: Any, orders: Any, stages: Any, ref: Any, prob: _Problem, static: _Static
          ) -> Any:
    maps, invalid = _decode(params, orders, stages, prob)
    template = static.template
    hwp = relax.infer_hw(template, prob.base, prob.layers, maps, 0.0)
    metrics = jax.vmap(lambda layer, m: model_evaluate(template, layer, hwp, m))(
        prob.layers, maps)
    edp = ((metrics.cycles * prob.counts).sum() * (metrics.energy_pj * prob.counts).sum()) / ref
    pe_excess = (jnp.square(jnp.maximum(hwp.pe_rows - static.max_pe_dim, 0.0))
                 + jnp.square(jnp.maximum(hwp.pe_cols - static.max_pe_dim, 0.0)))
    if static.area_budget_mm2 is not None:
        pe_excess = pe_excess + area_excess(template, hwp, static.area_budget_mm2)
    return edp + jax.lax.stop_gradient(jnp.abs(edp)) * (invalid + static.penalty * pe_excess)


@functools.partial(fast_jit, static_argnames=("static",))
def _descend(params: Any, opt_state: Any, orders: Any, stages: Any, refs: Any, n_steps: Any,
             prob: _Problem, static: _Static) -> tuple[Any, Any, Any]:
    """Up to ``static.round_steps`` Adam steps of every start (vmapped; ``n_steps`` each).
    A start whose loss turns non-finite keeps its last good point (finite flag returned)."""
    opt = optax.adam(static.learning_rate)
    grad_fn = jax.value_and_grad(_loss)

    def one(p: Any, st: Any, order: Any, stage: Any, ref: Any, active: Any) -> tuple[Any, ...]:
        loss, g = grad_fn(p, order, stage, ref, prob, static)
        updates, new_st = opt.update(g, st, p)
        new_p = optax.apply_updates(p, updates)
        ok = jnp.isfinite(loss) & jnp.all(jnp.stack(
            [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(new_p)]))
        go = active & ok
        keep = lambda a, b: jax.tree_util.tree_map(lambda x, y: jnp.where(go, x, y), a, b)
        return keep(new_p, p), keep(new_st, st), ok | ~active

    def body(carry: Any, i: Any) -> tuple[Any, None]:
        p, st, finite = carry
        active = (i < n_steps) & finite
        p, st, ok = jax.vmap(one)(p, st, orders, stages, refs, active)
        return (p, st, finite & ok), None

    (params, opt_state, finite), _ = jax.lax.scan(
        body, (params, opt_state, jnp.ones(n_steps.shape, bool)), jnp.arange(static.round_steps))
    return params, opt_state, finite


def dosa(network: Network | str, *, budget_samples: int, seed: int = 0,
         hardware: HardwareConfig | None = None, template: str = "gemmini", starts: int = 7,
         gd_iters: int = 1490, round_steps: int = 500, learning_rate: float | None = None,
         start_mappings_per_layer: int = 8, max_pe_dim: int = 128, sram_step_kb: float = 1.0,
         stages: int = 2, penalty: float = 10.0, parallel: int | None = None,
         progress: Callable[[int, float], Any] | None = None,
         area_budget_mm2: float | None = None, pad_fraction: float = PAD_FRACTION
         ) -> CodesignResult:
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

    Returns:
      A `CodesignResult` with method ``"dosa"``, scored by the plain analytic model
      (``extra["scorer"] == "analytic"``).
    """
    for name, value in (("budget_samples", budget_samples), ("starts", starts),
                        ("gd_iters", gd_iters), ("round_steps", round_steps),
                        ("start_mappings_per_layer", start_mappings_per_layer)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"dosa: {name} must be a positive integer, got {value!r}")
    if not 0.0 <= pad_fraction < 1.0:
        raise ConfigError(f"dosa: pad_fraction must be in [0, 1), got {pad_fraction!r}")
    if learning_rate is not None and not learning_rate > 0:
        raise ConfigError(f"dosa: learning_rate must be positive, got {learning_rate!r}")
    net = resolve_network(network)
    if learning_rate is None:
        learning_rate = dosa_learning_rate(net.name)
    hw = base_hardware(template, hardware)
    check_area_budget(area_budget_mm2, hw, sram_step_kb)
    template_spec = hw.template_spec
    layers = [search_layer(x, pad_fraction) for x in net.layers]
    counts = np.asarray(net.counts, np.float64)
    rounder = Rounder(hw, layers, hw_mode="min_hw", aware=False, max_pe_dim=max_pe_dim,
                      sram_step_kb=sram_step_kb, nearest="linear",
                      area_budget_mm2=area_budget_mm2)
    n_levels = template_spec.num_levels
    dims = np.array([[getattr(x, d) for d in ("R", "S", "P", "Q", "C", "K", "N")]
                     for x in layers], np.float64)
    prob = _Problem(layers=stack_layers(layers), counts=counts.astype(np.float32),
                    norm=np.maximum(dims.max(0), 1.0).astype(np.float32),
                    t_mask=template_spec.temporal_mask[:-1], s_mask=template_spec.spatial_mask[:-1],
                    base=hw.to_params())
    static = _Static(template=template_spec, penalty=float(penalty), max_pe_dim=float(max_pe_dim),
                     learning_rate=float(learning_rate),
                     round_steps=int(min(round_steps, gd_iters)),
                     area_budget_mm2=None if area_budget_mm2 is None else float(area_budget_mm2))
    S = int(parallel or starts)
    stage_row = np.full(n_levels, stages, np.int64)
    stage_row[-1] = 1
    stage_arr = np.tile(stage_row, (len(layers), 1))
    dram_orders = np.stack([np.asarray(o)[::-1] for o in DRAM_ORDERS])      # outermost first
    opt = optax.adam(learning_rate)
    root = jax.random.PRNGKey(seed)
    clock = time.perf_counter()

    samples = 0
    next_start = 0
    best_first = math.inf
    best: Design | None = None
    best_edp = math.inf
    history: list[HistoryPoint] = []
    slot_steps = np.full(S, gd_iters, np.int64)          # "finished": draw on the first round
    slot_live = np.zeros(S, bool)
    orders = np.zeros((S, len(layers), n_levels, 7), np.int64)   # outermost first
    params = {"t": np.ones((S, len(layers), n_levels - 1, 7), np.float32),
              "s": np.ones((S, len(layers), n_levels - 1, 7), np.float32)}
    refs = np.ones(S, np.float32)
    opt_state = jax.vmap(opt.init)(jax.tree_util.tree_map(jnp.asarray, params))

    def consider(designs: list[Design], edps: np.ndarray) -> None:
        nonlocal best, best_edp
        for design, edp in zip(designs, edps):
            if np.isfinite(edp) and edp < best_edp:
                rounder.check(design)
                best, best_edp = design, float(edp)
                history.append(HistoryPoint(samples=samples, seconds=time.perf_counter() - clock,
                                            best_edp=best_edp))

    def draw(slot: int, planned: int) -> bool:
        """A new start in `slot` (skipped while it is 10x worse than the best start), if the
        budget left after the `planned` samples affords it and one step and rounding."""
        nonlocal samples, next_start, best_first, opt_state
        while (budget_samples - samples - planned
               >= start_mappings_per_layer + 2 + _ROUNDING_SAMPLES):
            key = jax.random.fold_in(root, next_start)
            next_start += 1
            rng = np.random.default_rng(np.asarray(
                jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max)).astype(np.uint64))
            start_hw = random_hardware_within(rng, hw, max_pe_dim, None, None, area_budget_mm2,
                                              sram_step_kb)
            maps, cost = start_mappings(rounder, start_hw, rng, start_mappings_per_layer,
                                        stages=stages)
            samples += cost
            # exact factors: a start mapping that pads a dim (Gemmini's tiler runs padded edge
            # tiles) is rounded as DOSA rounds; an exact one is left as it is
            t_start, s_start = round_mapping(dims, np.stack([m.temporal for m in maps]),
                                             np.stack([m.spatial for m in maps]),
                                             rounder.fan_cap)
            design = rounder.finish(t_start[None], s_start[None],
                                    np.stack([m.order for m in maps])[None], stage_arr[None])
            edp = float(network_edp(rounder.score(design), counts)[0][0])
            samples += 1
            consider(design, np.array([edp]))
            if not math.isfinite(edp) or edp > 10.0 * best_first:
                continue          # (infinite: over the area budget)
            best_first = min(best_first, edp)
            params["t"][slot] = design[0].temporal[:, :-1] / prob.norm
            params["s"][slot] = design[0].spatial[:, :-1] / prob.norm
            orders[slot] = np.stack([m.order for m in maps])
            refs[slot] = edp
            row = opt.init({k: jnp.asarray(v[slot]) for k, v in params.items()})
            opt_state = jax.tree_util.tree_map(lambda a, v: a.at[slot].set(v), opt_state, row)
            slot_steps[slot] = 0
            return True
        return False

    def round_slot(s: int) -> None:
        """DOSA's rounding of slot `s`, its greedy per-layer DRAM orders; descent goes on from
        the rounded design."""
        nonlocal samples
        raw = {}
        for k, mask in (("t", prob.t_mask), ("s", prob.s_mask)):
            inner = np.where(mask, params[k][s].astype(np.float64) * prob.norm, 1.0)
            raw[k] = np.concatenate([inner, np.ones_like(inner[:, :1])], axis=1)
        temporal, spatial = round_mapping(dims, raw["t"], raw["s"], rounder.fan_cap)
        current = orders[s]
        match = (current[:, -1][:, None, :] == dram_orders[None]).all(-1)        # [B, 3]
        candidates = [current.copy() for _ in range(len(DRAM_ORDERS))]
        for k, cand in enumerate(candidates):
            cand[:, -1] = dram_orders[k]
        if match.any(-1).all():        # every layer's DRAM order is one of the three
            start = match.argmax(-1)
        else:                          # the start mapping's own orders compete too
            candidates.append(current.copy())
            start = np.full(len(layers), len(DRAM_ORDERS))
        K = len(candidates)
        designs = rounder.finish(np.stack([temporal] * K), np.stack([spatial] * K),
                                 np.stack(candidates), np.stack([stage_arr] * K))
        metrics = rounder.score(designs)
        samples += K
        pick, edp = greedy_dram_orders(metrics.cycles, metrics.energy_pj, counts, start)
        order = np.stack(candidates)[pick, np.arange(len(layers))]
        orders[s] = order
        first = designs[0]         # a DRAM order changes neither the hardware nor the tiles
        chosen = Design(hw=first.hw, temporal=first.temporal.copy(),
                        spatial=first.spatial.copy(), order=order.copy(),
                        stages=first.stages.copy())
        consider([chosen], np.array([edp]))
        # continue from the rounded mapping (Adam moments kept)
        params["t"][s] = first.temporal[:, :-1] / prob.norm
        params["s"][s] = first.spatial[:, :-1] / prob.norm

    while True:
        n_steps = np.zeros(S, np.int32)
        planned = 0
        for s in range(S):
            if slot_steps[s] >= gd_iters:
                slot_live[s] = draw(s, planned)
            if not slot_live[s]:
                continue
            steps = min(static.round_steps, gd_iters - int(slot_steps[s]),
                        budget_samples - samples - planned - _ROUNDING_SAMPLES)
            if steps > 0:
                n_steps[s] = steps
                planned += steps + _ROUNDING_SAMPLES
        if not n_steps.any():
            break
        ranks = order_rank(orders[..., ::-1])[:, :, :, None, :]
        p_new, opt_state, _ = _descend(
            jax.tree_util.tree_map(jnp.asarray, params), opt_state, jnp.asarray(ranks),
            jnp.asarray(np.tile(stage_arr, (S, 1, 1)).astype(np.float32)),
            jnp.asarray(refs), jnp.asarray(n_steps), prob, static)
        samples += int(n_steps.sum())
        slot_steps += n_steps
        for k in params:
            params[k] = np.array(p_new[k])
        for s in np.flatnonzero(n_steps > 0):
            round_slot(int(s))
        if progress is not None:
            progress(samples, best_edp)
    if best is None:
        raise InfeasibleError("dosa: the budget ended before any design was scored; raise "
                              "budget_samples")
    mappings = rounder.check(best)
    metrics = rounder.score([best])
    result_layers = tuple(
        LayerResult(layer=layer, count=int(c), mapping=m,
                    latency_cycles=float(metrics.cycles[0, b]),
                    energy_pj=float(metrics.energy_pj[0, b]))
        for b, (layer, c, m) in enumerate(zip(net.layers, net.counts, mappings)))
    return CodesignResult(
        method="dosa", network=net.name, hardware=dataclasses.replace(best.hw, name="dosa"),
        layers=result_layers, samples=samples, history=tuple(history), seed=seed,
        extra={"scorer": "analytic", "starts_drawn": next_start,
               "settings": {"starts": starts, "gd_iters": gd_iters, "round_steps": round_steps,
                            "learning_rate": learning_rate, "stages": stages,
                            "start_mappings_per_layer": start_mappings_per_layer,
                            "max_pe_dim": max_pe_dim, "area_budget_mm2": area_budget_mm2}})

