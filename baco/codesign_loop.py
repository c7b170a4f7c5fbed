"""`baco.codesign`: Algorithm 6 of seed 001 -- multi-start gradient descent on the network's EDP,
then exact refinement where the importance estimator says it pays.

**Descent** (the first ``1 - refine_fraction`` of the budget). Each *start* draws a random
accelerator (PE dim a power of two up to ``max_pe_dim``, buffers a power of two KiB, as DOSA's
``gen_random_hw_config``), takes per layer the best of ``start_mappings`` mappings that fit it
(`start_mappings`), and relaxes them (`perfmodels.relax`: tiling factors as softmax shares of
each dim's log, soft loop orders, continuous stages). ``starts`` of them descend side by side
(vmapped) with Adam (optax) on

    log(Σ count·latency) + log(Σ count·energy)  +  penalty · (infeasibility)

(the log of seed 001's Eq. 6.5 EDP: same optimum, better conditioned), on the minimal hardware
inferred from the tiles (``hw_mode: min_hw``), on free hardware (``free``: PE dims, buffers
and the DRAM bandwidth are variables, the first three grown smoothly to hold the tiles, so
that a start's array widens when its tiles want it) or on fixed hardware, counting padded
DIM x DIM blocks when instruction-aware (`perfmodels.aware`). Every ``round_every`` steps
each start is rounded to a valid design (`baco.rounding`: nearest divisors, argmax loop
orders, rounded stages, the array filled, minimal hardware in 1 KB steps, a power-of-two
bandwidth) and scored exactly, and so is that design with its array narrowed to the power of
two below (`baco.refine.narrow_moves`); the best design is kept. A start whose steps are
used up makes way for a new random one.

**Refinement** (the rest). Rounding loses part of what descent found; exact local moves around
the best design (`baco.refine`; in free mode also the bandwidth halved and doubled) win some
of it back. The importance scheduler (`baco.importance`, §6.5, Eq. 6.7-6.9) picks the layers
each round explores and abandons those that stop improving; without it the layers take turns.
With ``importance.mask_descent`` it also chooses which layers take each descent round's steps
(the others' updates masked).

Sample accounting (`baco.result`): a gradient step of one start, the exact score of one
rounded design or neighbour, each whole-network start candidate and each start's own design
count one sample each.

A run checkpoints (``checkpoint=PATH``) every few rounds into one ``.npz`` written atomically;
``resume=True`` continues from it bit-identically (same final design, EDP and history).
A non-finite loss or gradient sends the start back to its last point with a finite loss, with
half the learning rate and a `CodesignWarning`.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design, design_of
from accel.mapping import Mapping
from baco.checkpoint import load_checkpoint, save_checkpoint
from baco.config import CodesignConfig
from baco.importance import ImportanceConfig, ImportanceScheduler
from baco.objective import (
    FusionTerm,
    HybridObjective,
    Settings,
    exact_residual,
    load_predictor,
    objective,
)
from baco.padding import search_layer
from baco.progress import Progress, yardstick_name
from baco.refine import GLOBAL_MOVES, narrow_moves, round_moves
from baco.result import CodesignResult, HistoryPoint, LayerResult
from baco.rounding import Rounder, argmax_orders
from baco.search import (
    base_hardware,
    decode_many,
    make_optimizer,
    outermost_mapping,
    random_hardware_within,
    resolve_network,
    run_round,
    start_mappings,
)
from perfmodels import relax
from perfmodels.energy import check_area_budget
from perfmodels.score import network_edp, plain_edp
from workloads.errors import ConfigError, InfeasibleError
from workloads.network import Network

__all__ = ["CodesignWarning", "RoundInfo", "codesign"]

CHECKPOINT_VERSION = 4        # 2: learned loop orders; 3: free-mode DRAM bandwidth;
#                               4: free hardware grown by the tiles, narrowed arrays scored
ROUNDED_PER_START = 2
"""Designs scored per start and round: the rounded one and its array narrowed."""
OWN_ORDER_LOGIT = 2.0
"""A start's own loop orders' logit over the fixed candidates' 0 (weight 0.71 of 4): kept
unless the gradient prefers another (ResNet-50 and BERT at 3,000 samples: 10% and 1.3% lower
simulated EDP than equal weights)."""
TWO_STAGES_LOGIT = float(np.log(1.0 / 3.0) - np.log(2.0 / 3.0))
"""A start's stage logits: they decode to 2 stages."""


class CodesignWarning(UserWarning):
    """Something the search recovered from (a non-finite loss) that the user should know."""


class RoundInfo(NamedTuple):
    """Progress after a round, passed to ``on_round``."""

    round: int
    samples: int
    budget_samples: int
    best_edp: float
    seconds: float


# --------------------------------------------------------------------------- the search
def _stack(items: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *items)


def _set_row(tree: Any, row: int, value: Any) -> Any:
    return jax.tree_util.tree_map(lambda a, v: a.at[row].set(v), tree, value)


def _row(tree: Any, row: int) -> Any:
    return jax.tree_util.tree_map(lambda a: a[row], tree)


class _Search:
    """The state of one run and the steps that advance it; see the module docstring."""

    def __init__(self, net: Network, hw: HardwareConfig, config: CodesignConfig) -> None:
        self.net = net
        self.config = config
        # The dims searched (`baco.padding`); results carry the network's own layers.
        self.layers = list(net.layers) if config.fusion else [
            search_layer(layer, config.pad_fraction) for layer in net.layers]
        self.counts = np.asarray(net.counts, np.float64)
        self.base_hw = hw
        check_area_budget(config.area_budget_mm2, hw, config.sram_step_kb,
                          fixed=config.hw_mode == "fixed")
        self.hybrid = load_predictor(config, hw.template_spec)
        self.learner: Any = None          # a baco.sim_hybrid.SimLearner with sim_hybrid
        self.reserve = 0                  # samples kept for the last simulation (sim_hybrid)
        if config.predictor == "sim_hybrid":
            from baco.sim_hybrid import SimLearner
            self.learner = SimLearner(
                net.layers, net.counts, top_k=config.sim_top_k,
                sram_step_kb=config.sram_step_kb, seed=config.seed,
                init=None if self.hybrid is None else self.hybrid.surrogate,
                template=hw.template)
            self.reserve = (config.sim_top_k + config.sim_polish + 1) * len(net.layers)
            if self.reserve >= config.budget_samples // 2:
                raise ConfigError(
                    f"codesign.budget_samples {config.budget_samples} is too small for "
                    f"sim_hybrid: its last simulation alone may cost {self.reserve} samples "
                    f"((sim_top_k + sim_polish + 1) x {len(net.layers)} layers); raise the "
                    "budget or lower codesign.sim_top_k and codesign.sim_polish")
        rounder_args = {"hw_mode": config.hw_mode, "aware": config.instruction_aware,
                        "max_pe_dim": config.max_pe_dim, "sram_step_kb": config.sram_step_kb,
                        "max_sp_kb": config.max_sp_kb, "max_acc_kb": config.max_acc_kb,
                        "nearest": config.nearest, "area_budget_mm2": config.area_budget_mm2,
                        "max_dram_bw_words": config.max_dram_bw_words}
        if config.fusion:
            from baco.fusion import FusionPlan
            rounder_args["fusion"] = FusionPlan.of(net, aware=config.instruction_aware,
                                                   area_budget_mm2=config.area_budget_mm2)
        self.rounder = Rounder(hw, self.layers, residual=exact_residual(self.hybrid),
                               **rounder_args)
        self.space = relax.RelaxSpace.create(hw, self.layers, counts=list(net.counts),
                                             hw_mode=config.hw_mode, tau=config.tau)
        big = math.log(1e12)
        self.settings = Settings(
            aware=config.instruction_aware, penalty=config.penalty,
            log_max_pe=math.log(config.max_pe_dim),
            log_max_sp_kb=big if config.max_sp_kb is None else math.log(config.max_sp_kb),
            log_max_acc_kb=big if config.max_acc_kb is None else math.log(config.max_acc_kb),
            log_max_dram_bw=math.log(config.max_dram_bw_words),
            learning_rate=config.learning_rate, decay_steps=config.steps_per_start,
            lr_final_fraction=config.lr_final_fraction,
            round_steps=min(config.round_every, config.steps_per_start),
            objective=objective if self.hybrid is None else HybridObjective(self.hybrid),
            area_budget_mm2=config.area_budget_mm2,
            fusion=self._fusion_terms())
        self.key = jax.random.PRNGKey(config.seed)
        imp = config.importance
        self.importance_config = ImportanceConfig(alpha=imp.alpha, beta=imp.beta,
                                                  window=imp.window, patience=imp.patience)
        S = config.starts
        self.samples = 0
        self.round = 0
        self.next_start = 0
        self.slot_start = np.full(S, -1, np.int64)      # id of the start in each slot (-1: none)
        self.slot_steps = np.zeros(S, np.int64)
        self.scales = np.ones(S, np.float32)
        self.schedulers: list[ImportanceScheduler | None] = [None] * S
        self.best: Design | None = None
        self.best_edp = math.inf
        self.history: list[tuple[int, float, float]] = []   # (samples, seconds, best_edp)
        self.seconds_before = 0.0
        self.started = time.perf_counter()
        self.warnings: list[str] = []
        self.thetas: Any = None
        self.opt_states: Any = None
        self.done = False
        self.phase = "descent"
        self.budget = config.budget_samples - self.reserve
        self.descent_budget = round(self.budget * (1.0 - config.refine_fraction))
        self.sims_done = 0                # simulation rounds finished (sim_hybrid)
        self.refiner: ImportanceScheduler | None = None
        self.cursor = 0                                   # round-robin refinement order

    def _relaxed(self, mappings: Sequence[Mapping], softness: float, hw: HardwareConfig | None
                 ) -> relax.RelaxedPoint:
        """A start near `mappings` (`perfmodels.relax.from_mappings`): logits soft enough that
        gradients still move every slot, stages 2, the mappings' own orders ahead of the fixed
        candidates by `OWN_ORDER_LOGIT`."""
        return relax.from_mappings(self.space, mappings, softness=softness,
                                   order_logit=OWN_ORDER_LOGIT, stage_logit=TWO_STAGES_LOGIT,
                                   hw=hw or self.space.base_config)

    def _fusion_terms(self) -> tuple[FusionTerm, ...]:
        """The relaxed objective's fusion terms (none without fusion, or without the
        template's on-chip path)."""
        plan = self.rounder.fusion
        if plan is None or self.base_hw.template_spec.path_area_mm2 is None:
            return ()
        return tuple(FusionTerm(tuple(g.uses.items()), g.instances, tuple(g.dims), g.softmax)
                     for g in plan.groups)

    # ------------------------------------------------------------------ bookkeeping
    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    def _consider(self, designs: list[Design], edps: np.ndarray) -> None:
        if self.learner is not None:
            self.learner.offer(designs, edps)
        for design, edp in zip(designs, edps):
            if np.isfinite(edp) and edp < self.best_edp:
                self.rounder.check(design)
                self.best, self.best_edp = design, float(edp)
                self.history.append((self.samples, self.seconds(), self.best_edp))

    def _draw_start(self) -> tuple[HardwareConfig, list[Mapping]]:
        """Start number `self.next_start`: random hardware and the best start mapping of each
        layer on it, scored exactly (kept if best); charges its samples."""
        cfg = self.config
        start_id = self.next_start
        self.next_start += 1
        key = jax.random.fold_in(self.key, start_id)
        seed = np.asarray(jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max))
        rng = np.random.default_rng(seed.astype(np.uint64))
        if cfg.hw_mode == "fixed":
            hw = self.base_hw
        else:
            hw = random_hardware_within(rng, self.base_hw, cfg.max_pe_dim, cfg.max_sp_kb,
                                        cfg.max_acc_kb, cfg.area_budget_mm2, cfg.sram_step_kb)
        mappings, cost = start_mappings(self.rounder, hw, rng, cfg.start_mappings)
        self.samples += cost
        # The start itself is a design: its mappings on the hardware they infer (min_hw and
        # free: the smallest that holds them, padded rows included when instruction-aware,
        # as every rounded design's), else on the random one; score it, keep it if best.
        design = design_of(hw, mappings)
        if cfg.hw_mode != "fixed":
            try:
                design = self.rounder.finish(*(np.stack([getattr(m, k) for m in mappings])[None]
                                               for k in ("temporal", "spatial", "order",
                                                         "stages")), hw.dram_bw_words)[0]
            except InfeasibleError:
                pass                # scored on its random hardware (rejected if it overflows)
        edp = network_edp(self.rounder.score([design]), self.counts)[0]
        self.samples += 1
        try:
            self._consider([design], edp)
        except InfeasibleError:     # a layer with no fitting candidate: descent will fix it
            pass
        return hw, mappings

    def _new_start(self, slot: int) -> tuple[relax.RelaxedPoint, Any]:
        """Draw a start (`_draw_start`) into `slot`, as the relaxed point descent moves."""
        cfg = self.config
        start_id = self.next_start
        hw, mappings = self._draw_start()
        theta = self._relaxed(mappings, cfg.init_softness, hw)
        theta = jax.tree_util.tree_map(jnp.asarray, theta)
        state = make_optimizer(self.settings).init(theta)
        self.slot_start[slot] = start_id
        self.slot_steps[slot] = 0
        self.scales[slot] = 1.0
        self.schedulers[slot] = ImportanceScheduler(self.layers, list(self.net.counts),
                                                    self.importance_config)
        return theta, state

    def _slot_finished(self, slot: int) -> bool:
        if self.slot_start[slot] < 0:
            return True
        sched = self.schedulers[slot]
        return (self.slot_steps[slot] >= self.config.steps_per_start
                or (self._masking and sched is not None and sched.finished))

    @property
    def _masking(self) -> bool:
        return self.config.importance.enabled and self.config.importance.mask_descent

    # ------------------------------------------------------------------ one round
    def step_round(self) -> bool:
        """One round of the current phase; False when the budget is spent."""
        if self.phase == "descent":
            if self._descent_round() if self.config.descent else self._starts_round():
                self.round += 1
                self._simulate_if_due()
                return True
            self.phase = "refine"
        if self.best is None or not self._refine_round():
            if self.learner is not None and self.phase != "final":
                self.phase = "final"
                self._simulation_round(final=True)
            return False
        self.round += 1
        self._simulate_if_due()
        return True

    # ------------------------------------------------------------------ sim_hybrid
    def _simulate_if_due(self) -> None:
        """``sim_hybrid``: a simulation round every ``budget / sim_rounds`` samples (the last
        one comes when the budget is spent)."""
        if self.learner is None:
            return
        due = self.budget * (self.sims_done + 1) / self.config.sim_rounds
        if self.sims_done + 1 < self.config.sim_rounds and self.samples >= due:
            self._simulation_round(final=False)

    def _use_hybrid(self, hybrid: Any) -> None:
        """Descend and score with `hybrid` from now on (a new static jit argument: the next
        round compiles again)."""
        if hybrid is not None and hybrid is not self.hybrid:
            self.hybrid = hybrid
            self.rounder = self.rounder.replace(residual=exact_residual(hybrid))
            self.settings = self.settings._replace(objective=HybridObjective(hybrid))

    def _simulation_round(self, final: bool) -> None:
        """Simulate the pool, fine-tune the residual (`baco.sim_hybrid`); the best simulated
        design so far becomes the best design (refinement explores around it; after the last
        round, it is the result, each of its layers' programs first chosen by simulation
        among ``sim_polish`` neighbours: `SimLearner.polish`), scored again on the updated
        model."""
        learner = self.learner
        pool = [d for _, _, d in learner.pool]
        if pool:
            analytic = self.rounder.analytic_score(pool)
            self.samples += learner.simulate_pool(np.asarray(analytic.cycles, np.float64))
        self._use_hybrid(learner.fine_tune())
        self.sims_done += 1
        record = learner.best()
        if final and record is not None and self.config.sim_polish > 0:
            before = len(learner.records)
            self.samples += learner.polish(self.rounder, record,
                                           np.asarray(self.space.orders[0, 0]),
                                           self.config.sim_polish)
            if len(learner.records) > before:      # the composed design: learn it too
                self._use_hybrid(learner.fine_tune())
            record = learner.best()
        if record is not None:
            self.best = record.design
        if self.best is not None:
            self.best_edp = float(network_edp(self.rounder.score([self.best]), self.counts)[0][0])
            self.history.append((self.samples, self.seconds(), self.best_edp))

    def _starts_round(self) -> bool:
        """``descent: false``: one round of ``starts`` exactly scored starts and no gradient
        steps; False when the descent's share of the budget is spent."""
        cost = self.config.start_mappings + 1
        drawn = 0
        while drawn < self.config.starts and self.descent_budget - self.samples >= cost:
            self._draw_start()
            drawn += 1
        return drawn > 0

    def _descent_round(self) -> bool:
        """Plan, descend, round and score one round of every start; False when the descent's
        share of the budget is spent."""
        cfg = self.config
        S = cfg.starts
        budget = self.descent_budget
        n_steps = np.zeros(S, np.int32)
        fresh: dict[int, tuple[Any, Any]] = {}
        remaining = budget - self.samples
        for s in range(S):
            if self._slot_finished(s):
                # the start's candidates and design, a step, and its rounded designs
                if remaining < cfg.start_mappings + 2 + ROUNDED_PER_START:
                    self.slot_start[s] = -1
                    continue
                fresh[s] = self._new_start(s)
                remaining -= cfg.start_mappings + 1
            steps = min(self.settings.round_steps, cfg.steps_per_start - self.slot_steps[s],
                        remaining - ROUNDED_PER_START)
            if steps <= 0:
                continue
            n_steps[s] = steps
            remaining -= steps + ROUNDED_PER_START
        if fresh:
            if self.thetas is None:
                rows = [fresh[s] if s in fresh else next(iter(fresh.values())) for s in range(S)]
                self.thetas = _stack([r[0] for r in rows])
                self.opt_states = _stack([r[1] for r in rows])
            else:
                for s, (theta, state) in fresh.items():
                    self.thetas = _set_row(self.thetas, s, theta)
                    self.opt_states = _set_row(self.opt_states, s, state)
        active = n_steps > 0
        if not active.any():
            return False

        masks = np.ones((S, len(self.layers)), np.float32)
        chosen: dict[int, np.ndarray] = {}
        if self._masking:
            for s in np.flatnonzero(active):
                pick = self.schedulers[s].select(cfg.importance.layers_per_round)
                masks[s] = 0.0
                masks[s, pick] = 1.0
                chosen[int(s)] = pick
        thetas, opt_states, _, finite = run_round(
            self.thetas, self.opt_states, jnp.asarray(masks), jnp.asarray(self.scales),
            jnp.asarray(n_steps), self.space, settings=self.settings)
        finite = np.asarray(finite)
        self.thetas, self.opt_states = thetas, opt_states
        self.samples += int(n_steps.sum())
        self.slot_steps += n_steps
        for s in np.flatnonzero(active & ~finite):
            self.scales[s] *= 0.5
            message = (f"start {int(self.slot_start[s])}: non-finite loss or gradient in round "
                       f"{self.round}; restored its last good point and halved its learning "
                       f"rate (x{self.scales[s]:g})")
            self.warnings.append(message)
            warnings.warn(message, CodesignWarning, stacklevel=3)

        # Round every start (a fixed batch: one compilation), score exactly, keep the
        # active starts' designs. The relaxed array sits between two buildable ones: each
        # design is scored with its array narrowed to the power of two below, too
        # (`baco.refine.narrow_moves`; a design with none is scored twice, charged once).
        idx = np.flatnonzero(active)
        maps, dram_bw = jax.tree_util.tree_map(np.asarray, decode_many(self.thetas, self.space))
        orders = argmax_orders(maps.order_weights, maps.rank)
        designs = self.rounder.round(maps.log_temporal, maps.log_spatial, orders, maps.stages,
                                     dram_bw)
        narrowed = [narrow_moves(self.rounder, d) for d in designs]
        arrays = [n[0] if n else (d.temporal, d.spatial, d.order, d.stages)
                  for d, n in zip(designs, narrowed)]
        designs += self.rounder.finish(*(np.stack([a[i] for a in arrays]) for i in range(4)),
                                       [d.hw.dram_bw_words for d in designs])
        metrics = self.rounder.score(designs)
        edps, _, _ = network_edp(metrics, self.counts)
        keep = np.concatenate([idx, np.array([S + s for s in idx if narrowed[s]], np.int64)])
        self.samples += len(keep)
        self._consider([designs[s] for s in keep], edps[keep])
        for s in idx:
            if self._masking and int(s) in chosen:
                pick = chosen[int(s)]
                self.schedulers[s].record(pick, metrics.energy_pj[s, pick],
                                          metrics.cycles[s, pick])
            if cfg.snap_to_rounded:
                snapped = self._relaxed(designs[s].mappings(), cfg.init_softness,
                                        designs[s].hw)
                theta_s = _row(self.thetas, int(s))
                theta_s = theta_s._replace(mappings=theta_s.mappings._replace(
                    temporal_logits=jnp.asarray(snapped.mappings.temporal_logits),
                    spatial_logits=jnp.asarray(snapped.mappings.spatial_logits)))
                self.thetas = _set_row(self.thetas, int(s), theta_s)
        return True

    def _refine_round(self) -> bool:
        """Exact local moves on the chosen layers of the best design (`baco.refine`)."""
        cfg = self.config
        remaining = self.budget - self.samples
        if remaining <= 0:
            return False
        k = min(cfg.importance.layers_per_round, len(self.layers))
        if cfg.importance.enabled:
            if self.refiner is None or self.refiner.finished:
                # The descent was every layer's first round (the scheduler's warm-up, t = 1):
                # start from each layer's exact (energy, latency) in the best design.
                self.refiner = ImportanceScheduler(self.layers, list(self.net.counts),
                                                   self.importance_config)
                now = self.rounder.score([self.best])
                every = np.arange(len(self.layers))
                self.refiner.record(every, np.asarray(now.energy_pj[0], np.float64),
                                    np.asarray(now.cycles[0], np.float64))
            pick = self.refiner.select(k)
        else:
            pick = np.sort((self.cursor + np.arange(k)) % len(self.layers))
            self.cursor = (self.cursor + k) % len(self.layers)
        key = jax.random.fold_in(jax.random.fold_in(self.key, 1 << 20), self.round)
        rng = np.random.default_rng(np.asarray(
            jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max)).astype(np.uint64))
        best = self.best
        bw = best.hw.dram_bw_words
        owners, (T, S, O, ST), bws = round_moves(
            self.rounder, best, pick, cfg.refine_moves, rng, np.asarray(self.space.orders[0, 0]),
            free_bandwidth=cfg.hw_mode == "free")
        owners = owners[:remaining]
        n = len(owners)
        if n == 0:
            return False
        # fixed batch size: one compilation
        batch = k * cfg.refine_moves + GLOBAL_MOVES + 2 * (cfg.hw_mode == "free")
        pad = batch - n

        def padded(x: np.ndarray, base: Any) -> np.ndarray:
            return np.concatenate([x[:n], np.repeat(np.asarray(base)[None], pad, axis=0)])

        designs = self.rounder.finish(padded(T, best.temporal), padded(S, best.spatial),
                                      padded(O, best.order), padded(ST, best.stages),
                                      padded(bws, bw))[:n]
        metrics = self.rounder.score(designs + [designs[0]] * pad)
        self.samples += n
        edps, _, _ = network_edp(metrics, self.counts)
        edps = edps[:n]
        current = self.best_edp
        # Per layer, its best improving move; then all of them together (one more sample).
        improving = {}
        for j in np.argsort(edps, kind="stable"):
            b = owners[j]
            if edps[j] < current and b >= 0 and b not in improving:
                improving[b] = int(j)
        self._consider(designs, edps)
        if len(improving) > 1 and self.samples < self.budget:
            T2, S2, O2, ST2 = (best.temporal.copy(), best.spatial.copy(), best.order.copy(),
                               best.stages.copy())
            for b, j in improving.items():
                T2[b], S2[b], O2[b], ST2[b] = T[j, b], S[j, b], O[j, b], ST[j, b]
            combined = self.rounder.finish(T2[None], S2[None], O2[None], ST2[None], bw)
            edp_c = network_edp(self.rounder.score(combined), self.counts)[0]
            self.samples += 1
            self._consider(combined, edp_c)
        if self.refiner is not None and cfg.importance.enabled:
            # each chosen layer's (energy, latency) in the best design after its round
            now = self.rounder.score([self.best])
            self.refiner.record(pick, np.asarray(now.energy_pj[0, pick], np.float64),
                                np.asarray(now.cycles[0, pick], np.float64))
        return True

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically, as numpy arrays and JSON."""
        arrays: dict[str, np.ndarray] = {}
        if self.thetas is not None:
            for i, leaf in enumerate(jax.tree_util.tree_leaves(self.thetas)):
                arrays[f"theta_{i}"] = np.asarray(leaf)
            for i, leaf in enumerate(jax.tree_util.tree_leaves(self.opt_states)):
                arrays[f"opt_{i}"] = np.asarray(leaf)
        if self.best is not None:
            for name in ("temporal", "spatial", "order", "stages"):
                arrays[f"best_{name}"] = getattr(self.best, name)
        meta = {
            "version": CHECKPOINT_VERSION,
            "config": self.config.to_dict(),
            "network": self.net.to_dict()["layers"],
            "hardware": self.base_hw.to_dict(),
            "samples": self.samples, "round": self.round, "next_start": self.next_start,
            "slot_start": self.slot_start.tolist(), "slot_steps": self.slot_steps.tolist(),
            "scales": self.scales.tolist(),
            "schedulers": [None if s is None else s.state_dict() for s in self.schedulers],
            "best_hw": None if self.best is None else self.best.hw.to_dict(),
            "best_edp": self.best_edp, "history": self.history,
            "seconds": self.seconds(), "warnings": self.warnings, "done": self.done,
            "has_theta": self.thetas is not None, "phase": self.phase,
            "refiner": None if self.refiner is None else self.refiner.state_dict(),
            "cursor": self.cursor, "sims_done": self.sims_done,
        }
        if self.learner is not None:
            sim_arrays, meta["sim"] = self.learner.state_dict()
            arrays.update(sim_arrays)
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        return arrays

    def load_state_dict(self, arrays: dict[str, np.ndarray], where: str) -> None:
        meta = json.loads(arrays["meta"].tobytes().decode())
        if meta.get("version") != CHECKPOINT_VERSION:
            raise ConfigError(f"checkpoint {where}: version {meta.get('version')} is not "
                              f"{CHECKPOINT_VERSION}; delete it to start over")
        mine_config = self.config.to_dict()
        defaults = CodesignConfig().to_dict()
        for key in [k for k in mine_config if k not in meta["config"]]:
            if mine_config[key] == defaults[key]:  # a checkpoint from before that option
                mine_config.pop(key)
        for key, mine in (("config", mine_config),
                          ("network", self.net.to_dict()["layers"]),
                          ("hardware", self.base_hw.to_dict())):
            if json.loads(json.dumps(mine)) != meta[key]:
                raise ConfigError(f"checkpoint {where}: it was written for a different {key}; "
                                  "resume with the same config, or delete it to start over")
        self.samples, self.round = meta["samples"], meta["round"]
        self.next_start = meta["next_start"]
        self.slot_start = np.asarray(meta["slot_start"], np.int64)
        self.slot_steps = np.asarray(meta["slot_steps"], np.int64)
        self.scales = np.asarray(meta["scales"], np.float32)
        self.schedulers = []
        for state in meta["schedulers"]:
            if state is None:
                self.schedulers.append(None)
                continue
            sched = ImportanceScheduler(self.layers, list(self.net.counts),
                                        self.importance_config)
            sched.load_state_dict(state)
            self.schedulers.append(sched)
        self.best_edp = float(meta["best_edp"])
        self.history = [tuple(h) for h in meta["history"]]
        self.seconds_before = float(meta["seconds"])
        self.started = time.perf_counter()
        self.warnings = list(meta["warnings"])
        self.done = bool(meta["done"])
        self.phase = meta["phase"]
        self.cursor = int(meta["cursor"])
        self.sims_done = int(meta.get("sims_done", 0))
        if self.learner is not None:
            self.learner.load_state_dict(arrays, meta["sim"])
            self._use_hybrid(self.learner.hybrid)
        if meta["refiner"] is not None:
            self.refiner = ImportanceScheduler(self.layers, list(self.net.counts),
                                               self.importance_config)
            self.refiner.load_state_dict(meta["refiner"])
        if meta["best_hw"] is not None:
            self.best = Design(hw=HardwareConfig.from_dict(meta["best_hw"]),
                               temporal=arrays["best_temporal"], spatial=arrays["best_spatial"],
                               order=arrays["best_order"], stages=arrays["best_stages"])
        if meta["has_theta"]:
            probe_theta = self._relaxed(
                [outermost_mapping(x, self.base_hw, 1) for x in self.layers], 0.5, self.base_hw)
            probe_theta = jax.tree_util.tree_map(jnp.asarray, probe_theta)
            probe_state = make_optimizer(self.settings).init(probe_theta)
            theta_def = jax.tree_util.tree_structure(probe_theta)
            state_def = jax.tree_util.tree_structure(probe_state)
            self.thetas = jax.tree_util.tree_unflatten(
                theta_def, [jnp.asarray(arrays[f"theta_{i}"])
                            for i in range(theta_def.num_leaves)])
            self.opt_states = jax.tree_util.tree_unflatten(
                state_def, [jnp.asarray(arrays[f"opt_{i}"]) for i in range(state_def.num_leaves)])

    # ------------------------------------------------------------------ result
    def result(self) -> CodesignResult:
        if self.best is None:
            raise InfeasibleError("codesign: the budget ended before any design was rounded; "
                                  "raise codesign.budget_samples")
        mappings = self.rounder.check(self.best)
        metrics = self.rounder.score([self.best])
        plain = (plain_edp(self.best, self.layers, self.counts)
                 if self.config.instruction_aware else None)
        fused_with: dict[int, list[str]] = {}
        fusion = None
        if self.rounder.fusion is not None:
            alone = self.rounder.layer_score([self.best])
            chains = self.rounder.fusion.describe(np.asarray(alone.cycles[0], np.float64),
                                                  np.asarray(alone.energy_pj[0], np.float64),
                                                  self.best.hw)
            fused_with, fusion = self.rounder.fusion.summary(chains, self.best.hw)
        layers = tuple(
            LayerResult(layer=layer, count=int(count), mapping=m,
                        latency_cycles=float(metrics.cycles[0, b]),
                        energy_pj=float(metrics.energy_pj[0, b]),
                        fused_with=tuple(fused_with.get(b, ())))
            for b, (layer, count, m) in enumerate(zip(self.net.layers, self.net.counts,
                                                      mappings)))
        history = tuple(HistoryPoint(samples=int(s), seconds=float(t), best_edp=float(e))
                        for s, t, e in self.history)
        extra = {
            "scorer": "instruction_aware" if self.config.instruction_aware else "analytic",
            "predictor": self.config.predictor,
            "rounds": self.round, "starts_drawn": self.next_start,
            "config": self.config.to_dict(), "warnings": list(self.warnings),
        }
        if plain is not None:
            extra["edp_analytic"] = plain
        if fusion is not None:
            extra["fusion"] = fusion
        if self.learner is not None:
            extra["sim_hybrid"] = self.learner.summary(self.best)
        return CodesignResult(method="baco", network=self.net.name, hardware=self.best.hw,
                              layers=layers, samples=self.samples, history=history,
                              seed=self.config.seed, extra=extra)


def codesign(network: Network | str, template: str = "gemmini",
             config: CodesignConfig | None = None, *, hardware: HardwareConfig | None = None,
             progress: bool = False, checkpoint: str | os.PathLike | None = None,
             resume: bool = False, on_round: Callable[[RoundInfo], None] | None = None
             ) -> CodesignResult:
    """Co-design an accelerator of `template` and every layer's program for `network`.

    Args:
      network: a `workloads.Network`, a zoo name (``"resnet50"``) or an ONNX path.
      template: the accelerator template (``"gemmini"``); ignored if `hardware` is given.
      config: the search's hyperparameters (`CodesignConfig`).
      hardware: base hardware; its template and fixed fields (word widths; DRAM bandwidth
        unless ``free``) are kept, and in ``fixed`` mode it is the hardware.
      progress: show a progress bar (rich) on stderr.
      checkpoint: ``.npz`` path written every ``config.checkpoint_every`` rounds and at the end.
      resume: continue from `checkpoint` if it exists (same config required).
      on_round: called after every round with a `RoundInfo`.

    Returns:
      A `CodesignResult` (method ``"baco"``): the best rounded design, scored exactly.

    >>> import workloads
    >>> from workloads.layer import Layer
    >>> net = workloads.Network.from_layers("tiny", [Layer.gemm(M=64, K_red=64, N_out=64)])
    >>> cfg = CodesignConfig(budget_samples=60, starts=2, steps_per_start=20, round_every=10)
    >>> result = codesign(net, config=cfg)
    >>> result.samples <= 60 and result.edp > 0
    True
    """
    config = config or CodesignConfig()
    net = resolve_network(network)
    hw = base_hardware(template, hardware)
    search = _Search(net, hw, config)
    ckpt = pathlib.Path(checkpoint) if checkpoint is not None else None
    resumed = resume and ckpt is not None and ckpt.exists()
    if resumed:
        search.load_state_dict(load_checkpoint(ckpt), str(ckpt))
    yardstick = yardstick_name(config)
    bar = Progress(config.budget_samples, enabled=progress, label="baco", yardstick=yardstick,
                   completed=search.samples, best_edp=search.best_edp)
    if resumed:
        bar.note(f"baco: resuming from {ckpt}: round {search.round}, {search.samples} of "
                 f"{config.budget_samples} samples done, best EDP {search.best_edp:.4g} "
                 f"({yardstick})" if search.samples else f"baco: resuming from {ckpt}")
    try:
        while not search.done:
            if not search.step_round():
                search.done = True
            bar.update(search.samples, search.best_edp)
            if ckpt is not None and (search.done or search.round % config.checkpoint_every == 0):
                save_checkpoint(ckpt, search.state_dict())
            if on_round is not None:
                on_round(RoundInfo(search.round, search.samples, config.budget_samples,
                                   search.best_edp, search.seconds()))
    finally:
        bar.close()
    return search.result()
