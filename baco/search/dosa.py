"""DOSA-style one-loop descent (Hong et al., MICRO 2023), instruction-agnostic, as a baseline.

What DOSA does (reference dosa-gemmini-isa.md §A.3-A.8) and how it is reproduced here:

* **Variables**: raw positive tiling factors (no log space, no softmax) for every level below
  DRAM, max-normalized (here by the largest size of each dim in the network, the analogue of
  DOSA's dataset statistics); the DRAM factors are derived, ``D / prod(inner)``, and may fall
  below 1. Validity is a penalty, ``loss = EDP + |EDP| * Σ relu(1 - f)^2``.
* **Hardware**: DOSA's ``min_hw`` with a hard max over layers, on the plain analytic model --
  no DIM x DIM instructions, no padding (`perfmodels.relax.infer_hw` with tau 0). PE dims
  above ``max_pe_dim`` are penalized like DOSA's FireSim runs (``10 * relu(pe - max)^2``).
* **Loop orders** are not differentiable: each level keeps its start order, except DRAM whose
  order is chosen at every rounding among DOSA's three (weight-, input-, output-stationary) by
  exact evaluation (4 samples: the three orders and the per-layer mix of them). **Stages** are fixed at 2 (the overlap DOSA's and Timeloop's
  roofline latency assumes).
* **Optimizer**: Adam, ``learning_rate`` 7.5e-5 (DOSA's for ResNet-50 and RetinaNet), 1490
  iterations per start, rounding every 500 and at the last iteration (DOSA's
  ``round_mapping``: level by level from L0 out, ``max(1, round(f))`` then the nearest divisor),
  after which descent continues from the rounded mapping with Adam's moments kept. The best
  rounded design by exact EDP is kept.
* **Starts**: a random hardware config (``gen_random_hw_config``) with, per layer, the best of
  ``start_mappings_per_layer`` mappings fitting it -- Gemmini's library tiling and draws of the
  Timeloop-like random-pruned mapper (`baco.codesign.start_mappings`, shared with BACO) -- a
  stand-in for DOSA's CoSA start points (CoSA needs Gurobi); a start whose EDP exceeds 10x the
  best start seen is redrawn, as DOSA does.

Sample accounting (`baco.result`): each GD iteration of a start is one sample, each exact score
one sample (4 per rounding, 1 per start), each start candidate one sample.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from accel.arch import HardwareConfig
from baco.codesign import base_hardware, random_hardware, resolve_network, start_mappings
from baco.result import CodesignResult, HistoryPoint, LayerResult
from baco.rounding import Design, Rounder, network_edp
from perfmodels import relax
from perfmodels.accesses import LayerArrays, MappingArrays, order_rank
from perfmodels.analytic import evaluate as model_evaluate
from perfmodels.analytic import fast_jit, stack_layers
from workloads.errors import ConfigError, InfeasibleError
from workloads.network import Network

__all__ = ["DRAM_ORDERS", "dosa"]

_ROUNDING_SAMPLES = 4
"""Exact scores per rounding: the three DRAM orders, and the per-layer mix of them."""

DRAM_ORDERS = tuple(relax.CANDIDATE_ORDERS.values())
"""DOSA's three DRAM orders (innermost first): weight, input and output stationary."""


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


@fast_jit
def _factors(params: Any, orders: Any, stages: Any, prob: _Problem) -> Any:
    maps, _ = jax.vmap(_decode, in_axes=(0, 0, 0, None))(params, orders, stages, prob)
    return maps


def dosa(network: Network | str, *, budget_samples: int, seed: int = 0,
         hardware: HardwareConfig | None = None, template: str = "gemmini", starts: int = 7,
         gd_iters: int = 1490, round_steps: int = 500, learning_rate: float = 7.5e-5,
         start_mappings_per_layer: int = 8, max_pe_dim: int = 128, sram_step_kb: float = 1.0,
         stages: int = 2, penalty: float = 10.0, parallel: int | None = None,
         progress: bool = False) -> CodesignResult:
    """DOSA-style search of `network` within `budget_samples` samples (see the module doc).

    Args:
      network: a `workloads.Network`, zoo name or ONNX path.
      budget_samples: total samples (`baco.result` accounting).
      seed: seeds the random hardware and start mappings.
      hardware: base hardware whose template and fixed fields are kept (default: the
        template's defaults).
      starts: starts descending side by side (DOSA's ``num_starts`` = 7); more are drawn
        while budget remains. ``parallel`` overrides how many run at once.
      gd_iters, round_steps, learning_rate: DOSA's ``base_gd_iters``, ``round_steps`` and Adam
        learning rate.
      start_mappings_per_layer: random mappings per layer behind each start point.
      stages: the fixed pipeline stages of every level below DRAM.

    Returns:
      A `CodesignResult` with method ``"dosa"``, scored by the plain analytic model
      (``extra["scorer"] == "analytic"``).
    """
    for name, value in (("budget_samples", budget_samples), ("starts", starts),
                        ("gd_iters", gd_iters), ("round_steps", round_steps),
                        ("start_mappings_per_layer", start_mappings_per_layer)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"dosa: {name} must be a positive integer, got {value!r}")
    if not learning_rate > 0:
        raise ConfigError(f"dosa: learning_rate must be positive, got {learning_rate!r}")
    net = resolve_network(network)
    hw = base_hardware(template, hardware)
    template_spec = hw.template_spec
    layers = list(net.layers)
    counts = np.asarray(net.counts, np.float64)
    rounder = Rounder(hw, layers, hw_mode="min_hw", aware=False, max_pe_dim=max_pe_dim,
                      sram_step_kb=sram_step_kb, nearest="linear")
    n_levels = template_spec.num_levels
    dims = np.array([[getattr(x, d) for d in ("R", "S", "P", "Q", "C", "K", "N")]
                     for x in layers], np.float64)
    prob = _Problem(layers=stack_layers(layers), counts=counts.astype(np.float32),
                    norm=np.maximum(dims.max(0), 1.0).astype(np.float32),
                    t_mask=template_spec.temporal_mask[:-1], s_mask=template_spec.spatial_mask[:-1],
                    base=hw.to_params())
    static = _Static(template=template_spec, penalty=float(penalty), max_pe_dim=float(max_pe_dim),
                     learning_rate=float(learning_rate), round_steps=int(min(round_steps, gd_iters)))
    S = int(parallel or starts)
    stage_row = np.full(n_levels, stages, np.int64)
    stage_row[-1] = 1
    stage_arr = np.tile(stage_row, (len(layers), 1))
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
        """A new start in `slot` (redrawn while it is 10x worse than the best start), if the
        budget left after the `planned` samples affords it and one step and rounding."""
        nonlocal samples, next_start, best_first, opt_state
        while (budget_samples - samples - planned
               >= start_mappings_per_layer + 2 + _ROUNDING_SAMPLES):
            key = jax.random.fold_in(root, next_start)
            next_start += 1
            rng = np.random.default_rng(np.asarray(
                jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max)).astype(np.uint64))
            start_hw = random_hardware(rng, hw, max_pe_dim, None, None)
            maps, cost = start_mappings(rounder, start_hw, rng, start_mappings_per_layer,
                                        stages=stages)
            samples += cost
            design = rounder.finish(np.stack([m.temporal for m in maps])[None],
                                    np.stack([m.spatial for m in maps])[None],
                                    np.stack([m.order for m in maps])[None], stage_arr[None])
            edp = float(network_edp(rounder.score(design), counts)[0][0])
            samples += 1
            consider(design, np.array([edp]))
            if edp > 10.0 * best_first:
                continue
            best_first = min(best_first, edp)
            t = np.stack([m.temporal for m in maps])[:, :-1].astype(np.float64)
            s = np.stack([m.spatial for m in maps])[:, :-1].astype(np.float64)
            params["t"][slot] = t / prob.norm
            params["s"][slot] = s / prob.norm
            orders[slot] = np.stack([m.order for m in maps])
            refs[slot] = edp
            row = opt.init({k: jnp.asarray(v[slot]) for k, v in params.items()})
            opt_state = jax.tree_util.tree_map(lambda a, v: a.at[slot].set(v), opt_state, row)
            slot_steps[slot] = 0
            return True
        return False

    bar = _bar(budget_samples, progress)
    try:
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
            # DOSA's rounding, then the best of the three DRAM orders per layer.
            idx = np.flatnonzero(n_steps > 0)
            maps = jax.tree_util.tree_map(np.asarray, _factors(
                p_new, jnp.asarray(ranks), jnp.asarray(np.tile(stage_arr, (S, 1, 1))
                                                        .astype(np.float32)), prob))
            temporal, spatial = rounder.round_factors(maps.log_temporal[idx],
                                                      maps.log_spatial[idx])
            for j, s in enumerate(idx):
                candidates = []
                for dram in DRAM_ORDERS:
                    order = orders[s].copy()
                    order[-1] = np.asarray(dram)[::-1]
                    candidates.append(order)
                designs = rounder.finish(np.stack([temporal[j]] * 3), np.stack([spatial[j]] * 3),
                                         np.stack(candidates), np.stack([stage_arr] * 3))
                metrics = rounder.score(designs)
                _, cyc, en = network_edp(metrics, counts)
                # per layer, the order with the least first-order increase of the network EDP
                marginal = (metrics.energy_pj * cyc[:, None] + metrics.cycles * en[:, None])
                pick = np.argmin(marginal, axis=0)
                order = orders[s].copy()
                order[:, -1] = np.stack(candidates)[pick, np.arange(len(layers)), -1]
                orders[s] = order
                chosen = rounder.finish(temporal[j][None], spatial[j][None], order[None],
                                        stage_arr[None])
                edps = network_edp(rounder.score(chosen), counts)[0]
                samples += _ROUNDING_SAMPLES
                consider(designs + chosen, np.concatenate([network_edp(metrics, counts)[0], edps]))
                # continue from the rounded mapping (Adam moments kept)
                params["t"][s] = temporal[j][:, :-1] / prob.norm
                params["s"][s] = spatial[j][:, :-1] / prob.norm
            if bar is not None:
                bar.update(samples, best_edp)
    finally:
        if bar is not None:
            bar.close()
    if best is None:
        raise InfeasibleError("dosa: the budget ended before any design was scored; raise "
                              "budget_samples")
    mappings = rounder.check(best)
    metrics = rounder.score([best])
    result_layers = tuple(
        LayerResult(layer=layer, count=int(c), mapping=m,
                    latency_cycles=float(metrics.cycles[0, b]),
                    energy_pj=float(metrics.energy_pj[0, b]))
        for b, (layer, c, m) in enumerate(zip(layers, net.counts, mappings)))
    return CodesignResult(
        method="dosa", network=net.name, hardware=dataclasses.replace(best.hw, name="dosa"),
        layers=result_layers, samples=samples, history=tuple(history), seed=seed,
        extra={"scorer": "analytic", "starts_drawn": next_start,
               "settings": {"starts": starts, "gd_iters": gd_iters, "round_steps": round_steps,
                            "learning_rate": learning_rate, "stages": stages,
                            "start_mappings_per_layer": start_mappings_per_layer,
                            "max_pe_dim": max_pe_dim}})


def _bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from baco.codesign import Progress
    return Progress(total, enabled=True)
