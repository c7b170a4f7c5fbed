"""BACO's descent (`baco.codesign_loop`): ``starts`` relaxed starts descending side by side,
each rounded and scored every round; drawing the starts."""

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
from baco.codesign_state import SearchState, SlotsState
from baco.profile import timed
from baco.refine import narrow_moves
from baco.rounding import Rounder, argmax_orders
from baco.search import (
    decode_many,
    make_optimizer,
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


def _with(values: Any, index: int, value: Any) -> Any:
    """A copy of the array or tuple `values` with `values[index]` = `value`."""
    if isinstance(values, tuple):
        return values[:index] + (value,) + values[index + 1:]
    out = values.copy()
    out[index] = value
    return out


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
    """Functions of a `SearchState`'s ``config.starts`` slots (`SlotsState`), each descending
    one start with Adam (vmapped side by side); a slot whose start used up its steps (or,
    masking, whose scheduler abandoned every layer) draws a new one while the descent's share
    of the budget affords it."""

    def __init__(self, problem: CodesignProblem, ledger: Ledger, budget: int) -> None:
        self.problem, self.ledger, self.budget = problem, ledger, budget

    @property
    def masking(self) -> bool:
        imp = self.problem.config.importance
        return imp.enabled and imp.mask_descent

    def draw_start(self, state: SearchState
                   ) -> tuple[SearchState, HardwareConfig, list[Mapping]]:
        """Start number ``next_start``: random hardware and the best start mapping of each
        layer on it, scored exactly (kept if best); charges its samples."""
        problem, cfg, ledger = self.problem, self.problem.config, self.ledger
        start_id = state.slots.next_start
        state = state.replace(slots=state.slots.replace(next_start=start_id + 1))
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
        state = ledger.charge(state, cost)
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
        state = ledger.charge(state, 1)
        try:
            state = ledger.consider(state, rounder, [design], edp)
        except InfeasibleError:     # a layer with no fitting candidate: descent will fix it
            pass
        return state, hw, mappings

    def new_start(self, state: SearchState, slot: int
                  ) -> tuple[SearchState, relax.RelaxedPoint, Any]:
        """Draw a start (`draw_start`) into `slot`, as the relaxed point descent moves."""
        problem = self.problem
        start_id = state.slots.next_start
        state, hw, mappings = self.draw_start(state)
        theta = problem.relaxed(mappings, problem.config.init_softness, hw)
        theta = jax.tree_util.tree_map(jnp.asarray, theta)
        opt_state = make_optimizer(problem.settings).init(theta)
        slots = state.slots
        state = state.replace(slots=slots.replace(
            slot_start=_with(slots.slot_start, slot, start_id),
            slot_steps=_with(slots.slot_steps, slot, 0),
            scales=_with(slots.scales, slot, 1.0),
            schedulers=_with(slots.schedulers, slot, problem.importance.start())))
        return state, theta, opt_state

    def _finished(self, slots: SlotsState, slot: int) -> bool:
        if slots.slot_start[slot] < 0:
            return True
        sched = slots.schedulers[slot]
        return (slots.slot_steps[slot] >= self.problem.config.steps_per_start
                or (self.masking and sched is not None and sched.finished))

    def starts_round(self, state: SearchState) -> tuple[SearchState, bool]:
        """``descent: false``: one round of ``starts`` exactly scored starts and no gradient
        steps; False when the descent's share of the budget is spent."""
        cfg = self.problem.config
        cost = cfg.start_mappings + 1
        drawn = 0
        while drawn < cfg.starts and self.budget - state.ledger.samples >= cost:
            state, _, _ = self.draw_start(state)
            drawn += 1
        return state, drawn > 0

    def descent_round(self, state: SearchState, round_no: int) -> tuple[SearchState, bool]:
        """Plan, descend, round and score one round of every start; False when the descent's
        share of the budget is spent."""
        state, n_steps = self._plan(state)
        active = n_steps > 0
        if not active.any():
            return state, False
        state, chosen = self._descend(state, n_steps, round_no)
        return self._round(state, np.flatnonzero(active), chosen), True

    def _plan(self, state: SearchState) -> tuple[SearchState, np.ndarray]:
        """The steps each slot descends this round, drawing starts into finished slots within
        the budget left for their candidates and design, a step and their rounded designs."""
        cfg = self.problem.config
        S = cfg.starts
        n_steps = np.zeros(S, np.int32)
        fresh: dict[int, tuple[Any, Any]] = {}
        remaining = self.budget - state.ledger.samples
        for s in range(S):
            if self._finished(state.slots, s):
                # the start's candidates and design, a step, and its rounded designs
                if remaining < cfg.start_mappings + 2 + ROUNDED_PER_START:
                    state = state.replace(slots=state.slots.replace(
                        slot_start=_with(state.slots.slot_start, s, -1)))
                    continue
                with timed("drawing starts"):
                    state, theta, opt_state = self.new_start(state, s)
                fresh[s] = theta, opt_state
                remaining -= cfg.start_mappings + 1
            steps = min(self.problem.settings.round_steps,
                        cfg.steps_per_start - state.slots.slot_steps[s],
                        remaining - ROUNDED_PER_START)
            if steps <= 0:
                continue
            n_steps[s] = steps
            remaining -= steps + ROUNDED_PER_START
        if fresh:
            thetas, opt_states = state.slots.thetas, state.slots.opt_states
            if thetas is None:
                rows = [fresh[s] if s in fresh else next(iter(fresh.values())) for s in range(S)]
                thetas = _stack([r[0] for r in rows])
                opt_states = _stack([r[1] for r in rows])
            else:
                for s, (theta, opt_state) in fresh.items():
                    thetas = _set_row(thetas, s, theta)
                    opt_states = _set_row(opt_states, s, opt_state)
            state = state.replace(slots=state.slots.replace(thetas=thetas,
                                                            opt_states=opt_states))
        return state, n_steps

    def _descend(self, state: SearchState, n_steps: np.ndarray, round_no: int
                 ) -> tuple[SearchState, dict[int, np.ndarray]]:
        """`n_steps` Adam steps of every slot (masking: on the layers each slot's scheduler
        chose, returned); a start whose loss or gradient went non-finite was sent back to its
        last good point and has its learning rate halved."""
        problem = self.problem
        cfg = problem.config
        slots = state.slots
        active = n_steps > 0
        masks = np.ones((cfg.starts, len(problem.layers)), np.float32)
        chosen: dict[int, np.ndarray] = {}
        if self.masking:
            for s in np.flatnonzero(active):
                pick = problem.importance.select(slots.schedulers[s],
                                                 cfg.importance.layers_per_round)
                masks[s] = 0.0
                masks[s, pick] = 1.0
                chosen[int(s)] = pick
        with timed("gradient steps"):
            thetas, opt_states, _, finite = run_round(
                slots.thetas, slots.opt_states, jnp.asarray(masks), jnp.asarray(slots.scales),
                jnp.asarray(n_steps), problem.space, settings=problem.settings,
                predictor=problem.hybrid)
            finite = np.asarray(finite)       # waits for the steps
        scales = slots.scales.copy()
        failed = np.flatnonzero(active & ~finite)
        scales[failed] *= 0.5
        state = self.ledger.charge(state, int(n_steps.sum()))
        state = state.replace(slots=slots.replace(
            thetas=thetas, opt_states=opt_states, slot_steps=slots.slot_steps + n_steps,
            scales=scales))
        for s in failed:
            message = (f"start {int(slots.slot_start[s])}: non-finite loss or gradient in round "
                       f"{round_no}; restored its last good point and halved its learning "
                       f"rate (x{scales[s]:g})")
            state = self.ledger.warn(state, message, stacklevel=4)   # where `codesign` steps
        return state, chosen

    def _round(self, state: SearchState, idx: np.ndarray, chosen: dict[int, np.ndarray]
               ) -> SearchState:
        """Round every start, score exactly and keep the designs of the starts that moved
        (`idx`) and of their narrowed arrays (a design with none is scored twice, charged
        once); masking, each scheduler records its layers' scores."""
        problem, ledger = self.problem, self.ledger
        cfg = problem.config
        S = cfg.starts
        # The relaxed array sits between two buildable ones: each design is scored with its
        # array narrowed to the power of two below, too.
        designs, narrowed, metrics = round_starts(problem.rounder, state.slots.thetas,
                                                  problem.space)
        edps, _, _ = network_edp(metrics, problem.counts)
        keep = np.concatenate([idx, np.array([S + s for s in idx if narrowed[s]], np.int64)])
        state = ledger.charge(state, len(keep))
        state = ledger.consider(state, problem.rounder, [designs[s] for s in keep], edps[keep])
        schedulers, thetas = list(state.slots.schedulers), state.slots.thetas
        for s in idx:
            if self.masking and int(s) in chosen:
                pick = chosen[int(s)]
                schedulers[s] = problem.importance.record(
                    schedulers[s], pick, metrics.energy_pj[s, pick], metrics.cycles[s, pick])
            if cfg.snap_to_rounded:
                snapped = problem.relaxed(designs[s].mappings(), cfg.init_softness,
                                          designs[s].hw)
                theta_s = _row(thetas, int(s))
                theta_s = theta_s._replace(mappings=theta_s.mappings._replace(
                    temporal_logits=jnp.asarray(snapped.mappings.temporal_logits),
                    spatial_logits=jnp.asarray(snapped.mappings.spatial_logits)))
                thetas = _set_row(thetas, int(s), theta_s)
        return state.replace(slots=state.slots.replace(schedulers=tuple(schedulers),
                                                       thetas=thetas))
