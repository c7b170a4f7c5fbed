"""The state of a DOSA search (`baco.search.dosa`): its start slots descending side by side,
the samples spent, and the best design found; drawing starts, descending one round and
rounding the slots that descended."""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from accel.arch import HardwareConfig
from accel.design import Design
from baco.profile import timed
from baco.result import HistoryPoint
from baco.rounding import Rounder
from baco.search.dosa_descent import Problem, Static, descend
from baco.search.dosa_rounding import DRAM_ORDERS, greedy_dram_orders, round_mapping
from baco.search.starts import random_hardware_within, start_mappings
from baco.topk import DEFAULT_TOP_K, Entry, design_key, offer, would_enter
from perfmodels.accesses import order_rank
from perfmodels.score import network_edp
from workloads.errors import InfeasibleError

__all__ = ["ROUNDING_SAMPLES", "Incumbent", "SlotSettings", "StartSlots"]

ROUNDING_SAMPLES = 4
"""The most exact scores one rounding takes: the three DRAM orders, and the current orders
when some layer's is none of them."""


class SlotSettings(NamedTuple):
    """What the slots need of `dosa`'s arguments."""

    budget_samples: int
    seed: int
    slots: int
    gd_iters: int
    start_mappings_per_layer: int
    max_pe_dim: int
    sram_step_kb: float
    stages: int
    area_budget_mm2: float | None


class Incumbent:
    """The best design scored so far (checked by the rounder when taken), the history of
    best EDPs, and the `top_k` best distinct checked designs (`baco.topk`) for the final
    pick."""

    def __init__(self, rounder: Rounder, top_k: int = DEFAULT_TOP_K) -> None:
        self.rounder = rounder
        self.top_k = top_k
        self.top: tuple[Entry, ...] = ()
        self.design: Design | None = None
        self.edp = math.inf
        self.history: list[HistoryPoint] = []
        self.clock = time.perf_counter()

    def consider(self, designs: list[Design], edps: np.ndarray, samples: int) -> None:
        for design, edp in zip(designs, edps):
            if would_enter(self.top, float(edp), self.top_k):
                try:
                    self.rounder.check(design)
                    self.top = offer(self.top, [(float(edp), design_key(design), design)],
                                     self.top_k)
                except InfeasibleError:
                    pass
            if np.isfinite(edp) and edp < self.edp:
                self.rounder.check(design)
                self.design, self.edp = design, float(edp)
                self.history.append(HistoryPoint(samples=samples,
                                                 seconds=time.perf_counter() - self.clock,
                                                 best_edp=self.edp))


class StartSlots:
    """``settings.slots`` starts descending side by side; a slot whose start finished its
    ``gd_iters`` draws the next start while the budget affords one."""

    def __init__(self, settings: SlotSettings, hw: HardwareConfig, rounder: Rounder,
                 prob: Problem, static: Static, dims: np.ndarray, counts: np.ndarray,
                 top_k: int = DEFAULT_TOP_K) -> None:
        self.settings, self.hw, self.rounder = settings, hw, rounder
        self.prob, self.static, self.dims, self.counts = prob, static, dims, counts
        n_slots, n_layers = settings.slots, len(dims)
        n_levels = static.template.num_levels
        stage_row = np.full(n_levels, settings.stages, np.int64)
        stage_row[-1] = 1
        self.stage_arr = np.tile(stage_row, (n_layers, 1))
        self.dram_orders = np.stack([np.asarray(o)[::-1] for o in DRAM_ORDERS])  # outermost first
        self.opt = optax.adam(static.learning_rate)
        self.root = jax.random.PRNGKey(settings.seed)
        self.best = Incumbent(rounder, top_k)

        self.samples = 0
        self.next_start = 0
        self.best_first = math.inf
        self.steps = np.full(n_slots, settings.gd_iters, np.int64)  # "finished": draw first
        self.live = np.zeros(n_slots, bool)
        self.orders = np.zeros((n_slots, n_layers, n_levels, 7), np.int64)   # outermost first
        self.params = {"t": np.ones((n_slots, n_layers, n_levels - 1, 7), np.float32),
                       "s": np.ones((n_slots, n_layers, n_levels - 1, 7), np.float32)}
        self.refs = np.ones(n_slots, np.float32)
        self.opt_state = jax.vmap(self.opt.init)(jax.tree_util.tree_map(jnp.asarray, self.params))

    def consider(self, designs: list[Design], edps: np.ndarray) -> None:
        self.best.consider(designs, edps, self.samples)

    def plan_round(self) -> np.ndarray:
        """The steps each slot descends this round (drawing starts into finished slots), within
        the budget left for the steps and a rounding after them."""
        settings = self.settings
        n_steps = np.zeros(settings.slots, np.int32)
        planned = 0
        for s in range(settings.slots):
            if self.steps[s] >= settings.gd_iters:
                self.live[s] = self.draw(s, planned)
            if not self.live[s]:
                continue
            steps = min(self.static.round_steps, settings.gd_iters - int(self.steps[s]),
                        settings.budget_samples - self.samples - planned - ROUNDING_SAMPLES)
            if steps > 0:
                n_steps[s] = steps
                planned += steps + ROUNDING_SAMPLES
        return n_steps

    def descend(self, n_steps: np.ndarray) -> None:
        """`n_steps` Adam steps of every slot, side by side; then each slot that moved rounds."""
        ranks = order_rank(self.orders[..., ::-1])[:, :, :, None, :]
        with timed("gradient steps"):
            p_new, self.opt_state, _ = descend(
                jax.tree_util.tree_map(jnp.asarray, self.params), self.opt_state,
                jnp.asarray(ranks), jnp.asarray(np.tile(self.stage_arr, (
                    self.settings.slots, 1, 1)).astype(np.float32)),
                jnp.asarray(self.refs), jnp.asarray(n_steps), self.prob, self.static)
            for k in self.params:
                self.params[k] = np.array(p_new[k])       # waits for the steps
        self.samples += int(n_steps.sum())
        self.steps += n_steps
        for s in np.flatnonzero(n_steps > 0):
            self.round_slot(int(s))

    def draw(self, slot: int, planned: int) -> bool:
        """A new start in `slot` (skipped while it is 10x worse than the best start), if the
        budget left after the `planned` samples affords it and one step and rounding."""
        settings = self.settings
        while (settings.budget_samples - self.samples - planned
               >= settings.start_mappings_per_layer + 2 + ROUNDING_SAMPLES):
            design, order, edp = self._start_point()
            if not math.isfinite(edp) or edp > 10.0 * self.best_first:
                continue          # (infinite: over the area budget)
            self.best_first = min(self.best_first, edp)
            self.params["t"][slot] = design.temporal[:, :-1] / self.prob.norm
            self.params["s"][slot] = design.spatial[:, :-1] / self.prob.norm
            self.orders[slot] = order
            self.refs[slot] = edp
            row = self.opt.init({k: jnp.asarray(v[slot]) for k, v in self.params.items()})
            self.opt_state = jax.tree_util.tree_map(lambda a, v: a.at[slot].set(v),
                                                    self.opt_state, row)
            self.steps[slot] = 0
            return True
        return False

    def _start_point(self) -> tuple[Design, np.ndarray, float]:
        """The next start: random hardware, its start mappings brought to exact factors, and
        their design, loop orders and EDP (a candidate too)."""
        settings, rounder = self.settings, self.rounder
        key = jax.random.fold_in(self.root, self.next_start)
        self.next_start += 1
        rng = np.random.default_rng(np.asarray(
            jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max)).astype(np.uint64))
        start_hw = random_hardware_within(rng, self.hw, settings.max_pe_dim, None, None,
                                          settings.area_budget_mm2, settings.sram_step_kb)
        maps, cost = start_mappings(rounder, start_hw, rng, settings.start_mappings_per_layer,
                                    stages=settings.stages)
        self.samples += cost
        # exact factors: a start mapping that pads a dim (Gemmini's tiler runs padded edge
        # tiles) is rounded as DOSA rounds; an exact one is left as it is
        t_start, s_start = round_mapping(self.dims, np.stack([m.temporal for m in maps]),
                                         np.stack([m.spatial for m in maps]), rounder.fan_cap)
        design = rounder.finish(t_start[None], s_start[None],
                                np.stack([m.order for m in maps])[None], self.stage_arr[None])
        edp = float(network_edp(rounder.score(design), self.counts)[0][0])
        self.samples += 1
        self.consider(design, np.array([edp]))
        return design[0], np.stack([m.order for m in maps]), edp

    def round_slot(self, s: int) -> None:
        """DOSA's rounding of slot `s`, its greedy per-layer DRAM orders; descent goes on from
        the rounded design."""
        prob, params = self.prob, self.params
        raw = {}
        for k, mask in (("t", prob.t_mask), ("s", prob.s_mask)):
            inner = np.where(mask, params[k][s].astype(np.float64) * prob.norm, 1.0)
            raw[k] = np.concatenate([inner, np.ones_like(inner[:, :1])], axis=1)
        temporal, spatial = round_mapping(self.dims, raw["t"], raw["s"], self.rounder.fan_cap)
        candidates, start = self._order_candidates(self.orders[s])
        K = len(candidates)
        designs = self.rounder.finish(np.stack([temporal] * K), np.stack([spatial] * K),
                                      np.stack(candidates), np.stack([self.stage_arr] * K))
        metrics = self.rounder.score(designs)
        self.samples += K
        pick, edp = greedy_dram_orders(metrics.cycles, metrics.energy_pj, self.counts, start)
        order = np.stack(candidates)[pick, np.arange(len(self.dims))]
        self.orders[s] = order
        first = designs[0]         # a DRAM order changes neither the hardware nor the tiles
        chosen = Design(hw=first.hw, temporal=first.temporal.copy(),
                        spatial=first.spatial.copy(), order=order.copy(),
                        stages=first.stages.copy())
        self.consider([chosen], np.array([edp]))
        # continue from the rounded mapping (Adam moments kept)
        params["t"][s] = first.temporal[:, :-1] / prob.norm
        params["s"][s] = first.spatial[:, :-1] / prob.norm

    def _order_candidates(self, current: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The loop orders ``[layer, level, 7]`` a rounding scores -- `current` with each of
        DOSA's DRAM orders, and `current` itself when some layer's DRAM order is none of
        them -- and each layer's current candidate."""
        match = (current[:, -1][:, None, :] == self.dram_orders[None]).all(-1)        # [B, 3]
        candidates = [current.copy() for _ in range(len(DRAM_ORDERS))]
        for k, cand in enumerate(candidates):
            cand[:, -1] = self.dram_orders[k]
        if match.any(-1).all():        # every layer's DRAM order is one of the three
            start = match.argmax(-1)
        else:                          # the start mapping's own orders compete too
            candidates.append(current.copy())
            start = np.full(len(current), len(DRAM_ORDERS))
        return candidates, start
