"""BACO's descent (`baco.codesign_loop`): ``starts`` relaxed starts descending side by side,
each rounded and scored every round; drawing the starts; their part of the checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design, design_of
from accel.mapping import Mapping
from baco.codesign_ledger import Ledger
from baco.codesign_problem import CodesignProblem
from baco.importance import ImportanceScheduler
from baco.refine import narrow_moves
from baco.rounding import Rounder, argmax_orders
from baco.search import (
    decode_many,
    make_optimizer,
    outermost_mapping,
    random_hardware_within,
    run_round,
    start_mappings,
)
from perfmodels import relax
from perfmodels.analytic import Metrics
from perfmodels.score import network_edp
from workloads.errors import InfeasibleError

__all__ = ["ROUNDED_PER_START", "StartSlots", "round_starts"]

ROUNDED_PER_START = 2
"""Designs scored per start and round: the rounded one and its array narrowed."""


def _stack(items: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *items)


def _set_row(tree: Any, row: int, value: Any) -> Any:
    return jax.tree_util.tree_map(lambda a, v: a.at[row].set(v), tree, value)


def _row(tree: Any, row: int) -> Any:
    return jax.tree_util.tree_map(lambda a: a[row], tree)


def round_starts(rounder: Rounder, thetas: Any, space: relax.RelaxSpace
                 ) -> tuple[list[Design], list[list[Any]], Metrics]:
    """Every start rounded (a fixed batch: one compilation), then each with its array narrowed
    to the power of two below (`baco.refine.narrow_moves`; a design with none is repeated),
    all scored exactly: the designs (the narrowed after the rounded), the narrowing moves of
    each rounded design and the metrics."""
    maps, dram_bw = jax.tree_util.tree_map(np.asarray, decode_many(thetas, space))
    orders = argmax_orders(maps.order_weights, maps.rank)
    designs = rounder.round(maps.log_temporal, maps.log_spatial, orders, maps.stages, dram_bw)
    narrowed = [narrow_moves(rounder, d) for d in designs]
    arrays = [n[0] if n else (d.temporal, d.spatial, d.order, d.stages)
              for d, n in zip(designs, narrowed)]
    designs += rounder.finish(*(np.stack([a[i] for a in arrays]) for i in range(4)),
                              [d.hw.dram_bw_words for d in designs])
    return designs, narrowed, rounder.score(designs)


class StartSlots:
    """``config.starts`` slots, each descending one start with Adam (vmapped side by side); a
    slot whose start used up its steps (or, masking, whose scheduler abandoned every layer)
    draws a new one while the descent's share of the budget affords it."""

    def __init__(self, problem: CodesignProblem, ledger: Ledger, budget: int) -> None:
        self.problem, self.ledger, self.budget = problem, ledger, budget
        S = problem.config.starts
        self.next_start = 0
        self.slot_start = np.full(S, -1, np.int64)      # id of the start in each slot (-1: none)
        self.slot_steps = np.zeros(S, np.int64)
        self.scales = np.ones(S, np.float32)
        self.schedulers: list[ImportanceScheduler | None] = [None] * S
        self.thetas: Any = None
        self.opt_states: Any = None

    @property
    def masking(self) -> bool:
        imp = self.problem.config.importance
        return imp.enabled and imp.mask_descent

    def draw_start(self) -> tuple[HardwareConfig, list[Mapping]]:
        """Start number `self.next_start`: random hardware and the best start mapping of each
        layer on it, scored exactly (kept if best); charges its samples."""
        problem, cfg, ledger = self.problem, self.problem.config, self.ledger
        start_id = self.next_start
        self.next_start += 1
        key = jax.random.fold_in(problem.key, start_id)
        seed = np.asarray(jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max))
        rng = np.random.default_rng(seed.astype(np.uint64))
        if cfg.hw_mode == "fixed":
            hw = problem.base_hw
        else:
            hw = random_hardware_within(rng, problem.base_hw, cfg.max_pe_dim, cfg.max_sp_kb,
                                        cfg.max_acc_kb, cfg.area_budget_mm2, cfg.sram_step_kb)
        rounder = problem.rounder
        mappings, cost = start_mappings(rounder, hw, rng, cfg.start_mappings)
        ledger.samples += cost
        # The start itself is a design: its mappings on the hardware they infer (min_hw and
        # free: the smallest that holds them, padded rows included when instruction-aware,
        # as every rounded design's), else on the random one; score it, keep it if best.
        design = design_of(hw, mappings)
        if cfg.hw_mode != "fixed":
            try:
                design = rounder.finish(*(np.stack([getattr(m, k) for m in mappings])[None]
                                          for k in ("temporal", "spatial", "order",
                                                    "stages")), hw.dram_bw_words)[0]
            except InfeasibleError:
                pass                # scored on its random hardware (rejected if it overflows)
        edp = network_edp(rounder.score([design]), problem.counts)[0]
        ledger.samples += 1
        try:
            ledger.consider(rounder, [design], edp)
        except InfeasibleError:     # a layer with no fitting candidate: descent will fix it
            pass
        return hw, mappings

    def new_start(self, slot: int) -> tuple[relax.RelaxedPoint, Any]:
        """Draw a start (`draw_start`) into `slot`, as the relaxed point descent moves."""
        problem = self.problem
        start_id = self.next_start
        hw, mappings = self.draw_start()
        theta = problem.relaxed(mappings, problem.config.init_softness, hw)
        theta = jax.tree_util.tree_map(jnp.asarray, theta)
        state = make_optimizer(problem.settings).init(theta)
        self.slot_start[slot] = start_id
        self.slot_steps[slot] = 0
        self.scales[slot] = 1.0
        self.schedulers[slot] = problem.scheduler()
        return theta, state

    def _finished(self, slot: int) -> bool:
        if self.slot_start[slot] < 0:
            return True
        sched = self.schedulers[slot]
        return (self.slot_steps[slot] >= self.problem.config.steps_per_start
                or (self.masking and sched is not None and sched.finished))

    def starts_round(self) -> bool:
        """``descent: false``: one round of ``starts`` exactly scored starts and no gradient
        steps; False when the descent's share of the budget is spent."""
        cfg = self.problem.config
        cost = cfg.start_mappings + 1
        drawn = 0
        while drawn < cfg.starts and self.budget - self.ledger.samples >= cost:
            self.draw_start()
            drawn += 1
        return drawn > 0

    def descent_round(self, round_no: int) -> bool:
        """Plan, descend, round and score one round of every start; False when the descent's
        share of the budget is spent."""
        n_steps = self._plan()
        active = n_steps > 0
        if not active.any():
            return False
        chosen = self._descend(n_steps, round_no)
        self._round(np.flatnonzero(active), chosen)
        return True

    def _plan(self) -> np.ndarray:
        """The steps each slot descends this round, drawing starts into finished slots within
        the budget left for their candidates and design, a step and their rounded designs."""
        cfg = self.problem.config
        S = cfg.starts
        n_steps = np.zeros(S, np.int32)
        fresh: dict[int, tuple[Any, Any]] = {}
        remaining = self.budget - self.ledger.samples
        for s in range(S):
            if self._finished(s):
                # the start's candidates and design, a step, and its rounded designs
                if remaining < cfg.start_mappings + 2 + ROUNDED_PER_START:
                    self.slot_start[s] = -1
                    continue
                fresh[s] = self.new_start(s)
                remaining -= cfg.start_mappings + 1
            steps = min(self.problem.settings.round_steps,
                        cfg.steps_per_start - self.slot_steps[s], remaining - ROUNDED_PER_START)
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
        return n_steps

    def _descend(self, n_steps: np.ndarray, round_no: int) -> dict[int, np.ndarray]:
        """`n_steps` Adam steps of every slot (masking: on the layers each slot's scheduler
        chose, returned); a start whose loss or gradient went non-finite was sent back to its
        last good point and has its learning rate halved."""
        problem = self.problem
        cfg = problem.config
        active = n_steps > 0
        masks = np.ones((cfg.starts, len(problem.layers)), np.float32)
        chosen: dict[int, np.ndarray] = {}
        if self.masking:
            for s in np.flatnonzero(active):
                pick = self.schedulers[s].select(cfg.importance.layers_per_round)
                masks[s] = 0.0
                masks[s, pick] = 1.0
                chosen[int(s)] = pick
        thetas, opt_states, _, finite = run_round(
            self.thetas, self.opt_states, jnp.asarray(masks), jnp.asarray(self.scales),
            jnp.asarray(n_steps), problem.space, settings=problem.settings)
        finite = np.asarray(finite)
        self.thetas, self.opt_states = thetas, opt_states
        self.ledger.samples += int(n_steps.sum())
        self.slot_steps += n_steps
        for s in np.flatnonzero(active & ~finite):
            self.scales[s] *= 0.5
            message = (f"start {int(self.slot_start[s])}: non-finite loss or gradient in round "
                       f"{round_no}; restored its last good point and halved its learning "
                       f"rate (x{self.scales[s]:g})")
            self.ledger.warn(message, stacklevel=4)   # where `codesign` steps the round
        return chosen

    def _round(self, idx: np.ndarray, chosen: dict[int, np.ndarray]) -> None:
        """Round every start, score exactly and keep the designs of the starts that moved
        (`idx`) and of their narrowed arrays (a design with none is scored twice, charged
        once); masking, each scheduler records its layers' scores."""
        problem, ledger = self.problem, self.ledger
        cfg = problem.config
        S = cfg.starts
        # The relaxed array sits between two buildable ones: each design is scored with its
        # array narrowed to the power of two below, too.
        designs, narrowed, metrics = round_starts(problem.rounder, self.thetas, problem.space)
        edps, _, _ = network_edp(metrics, problem.counts)
        keep = np.concatenate([idx, np.array([S + s for s in idx if narrowed[s]], np.int64)])
        ledger.samples += len(keep)
        ledger.consider(problem.rounder, [designs[s] for s in keep], edps[keep])
        for s in idx:
            if self.masking and int(s) in chosen:
                pick = chosen[int(s)]
                self.schedulers[s].record(pick, metrics.energy_pj[s, pick],
                                          metrics.cycles[s, pick])
            if cfg.snap_to_rounded:
                snapped = problem.relaxed(designs[s].mappings(), cfg.init_softness,
                                          designs[s].hw)
                theta_s = _row(self.thetas, int(s))
                theta_s = theta_s._replace(mappings=theta_s.mappings._replace(
                    temporal_logits=jnp.asarray(snapped.mappings.temporal_logits),
                    spatial_logits=jnp.asarray(snapped.mappings.spatial_logits)))
                self.thetas = _set_row(self.thetas, int(s), theta_s)

    # ------------------------------------------------------------------ checkpoints
    def save(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Add the slots to a checkpoint's `arrays` and `meta`."""
        if self.thetas is not None:
            for i, leaf in enumerate(jax.tree_util.tree_leaves(self.thetas)):
                arrays[f"theta_{i}"] = np.asarray(leaf)
            for i, leaf in enumerate(jax.tree_util.tree_leaves(self.opt_states)):
                arrays[f"opt_{i}"] = np.asarray(leaf)
        meta.update({
            "next_start": self.next_start,
            "slot_start": self.slot_start.tolist(), "slot_steps": self.slot_steps.tolist(),
            "scales": self.scales.tolist(),
            "schedulers": [None if s is None else s.state_dict() for s in self.schedulers],
            "has_theta": self.thetas is not None,
        })

    def load(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Continue from what `save` wrote."""
        problem = self.problem
        self.next_start = meta["next_start"]
        self.slot_start = np.asarray(meta["slot_start"], np.int64)
        self.slot_steps = np.asarray(meta["slot_steps"], np.int64)
        self.scales = np.asarray(meta["scales"], np.float32)
        self.schedulers = []
        for state in meta["schedulers"]:
            if state is None:
                self.schedulers.append(None)
                continue
            sched = problem.scheduler()
            sched.load_state_dict(state)
            self.schedulers.append(sched)
        if meta["has_theta"]:
            # the trees' structure, from a probe start
            probe_theta = problem.relaxed(
                [outermost_mapping(x, problem.base_hw, 1) for x in problem.layers], 0.5,
                problem.base_hw)
            probe_theta = jax.tree_util.tree_map(jnp.asarray, probe_theta)
            probe_state = make_optimizer(problem.settings).init(probe_theta)
            theta_def = jax.tree_util.tree_structure(probe_theta)
            state_def = jax.tree_util.tree_structure(probe_state)
            self.thetas = jax.tree_util.tree_unflatten(
                theta_def, [jnp.asarray(arrays[f"theta_{i}"])
                            for i in range(theta_def.num_leaves)])
            self.opt_states = jax.tree_util.tree_unflatten(
                state_def, [jnp.asarray(arrays[f"opt_{i}"]) for i in range(state_def.num_leaves)])
