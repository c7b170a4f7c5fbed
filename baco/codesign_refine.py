"""BACO's refinement (`baco.codesign_loop`): rounds of exact local moves around the best design
(`baco.refine`) on the layers the importance scheduler chooses, or in turn."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from baco.codesign_ledger import Ledger
from baco.codesign_problem import CodesignProblem
from baco.codesign_state import SearchState
from baco.refine import GLOBAL_MOVES, round_moves
from perfmodels.score import network_edp

__all__ = ["Refinement"]


class Refinement:
    """Functions of a `SearchState`'s refinement (`RefineState`): the layers each round
    explores are the importance scheduler's choice (a new scheduler once it abandoned every
    layer), or without it the next in round-robin order."""

    def __init__(self, problem: CodesignProblem, ledger: Ledger) -> None:
        self.problem, self.ledger = problem, ledger

    def _pick(self, state: SearchState, k: int) -> tuple[SearchState, np.ndarray]:
        """The `k` layers this round explores."""
        problem = self.problem
        n_layers = len(problem.layers)
        refine = state.refine
        if problem.config.importance.enabled:
            refiner = refine.refiner
            if refiner is None or refiner.finished:
                # The descent was every layer's first round (the scheduler's warm-up, t = 1):
                # start from each layer's exact (energy, latency) in the best design.
                now = problem.rounder.score([state.ledger.best])
                refiner = problem.importance.record(
                    problem.importance.start(), np.arange(n_layers),
                    np.asarray(now.energy_pj[0], np.float64), np.asarray(now.cycles[0], np.float64))
                state = state.replace(refine=refine.replace(refiner=refiner))
            return state, problem.importance.select(refiner, k)
        pick = np.sort((refine.cursor + np.arange(k)) % n_layers)
        return state.replace(refine=refine.replace(cursor=(refine.cursor + k) % n_layers)), pick

    def round(self, state: SearchState, budget: int, round_no: int
              ) -> tuple[SearchState, bool]:
        """Exact local moves on the chosen layers of the best design (`baco.refine`), within
        `budget` samples in all; False when it is spent or no move is left."""
        problem, ledger = self.problem, self.ledger
        cfg = problem.config
        remaining = budget - state.ledger.samples
        if remaining <= 0:
            return state, False
        k = min(cfg.importance.layers_per_round, len(problem.layers))
        state, pick = self._pick(state, k)
        key = jax.random.fold_in(jax.random.fold_in(problem.key, 1 << 20), round_no)
        rng = np.random.default_rng(np.asarray(
            jax.random.randint(key, (4,), 0, np.iinfo(np.int32).max)).astype(np.uint64))
        rounder = problem.rounder
        best = state.ledger.best
        bw = best.hw.dram_bw_words
        owners, (T, S, O, ST), bws = round_moves(
            rounder, best, pick, cfg.refine_moves, rng, np.asarray(problem.space.orders[0, 0]),
            free_bandwidth=cfg.hw_mode == "free")
        owners = owners[:remaining]
        n = len(owners)
        if n == 0:
            return state, False
        # fixed batch size: one compilation
        batch = k * cfg.refine_moves + GLOBAL_MOVES + 2 * (cfg.hw_mode == "free")
        pad = batch - n

        def padded(x: np.ndarray, base: Any) -> np.ndarray:
            return np.concatenate([x[:n], np.repeat(np.asarray(base)[None], pad, axis=0)])

        designs = rounder.finish(padded(T, best.temporal), padded(S, best.spatial),
                                 padded(O, best.order), padded(ST, best.stages),
                                 padded(bws, bw))[:n]
        metrics = rounder.score(designs + [designs[0]] * pad)
        state = ledger.charge(state, n)
        edps, _, _ = network_edp(metrics, problem.counts)
        edps = edps[:n]
        current = state.ledger.best_edp
        # Per layer, its best improving move; then all of them together (one more sample).
        improving = {}
        for j in np.argsort(edps, kind="stable"):
            b = owners[j]
            if edps[j] < current and b >= 0 and b not in improving:
                improving[b] = int(j)
        state = ledger.consider(state, rounder, designs, edps)
        if len(improving) > 1 and state.ledger.samples < budget:
            T2, S2, O2, ST2 = (best.temporal.copy(), best.spatial.copy(), best.order.copy(),
                               best.stages.copy())
            for b, j in improving.items():
                T2[b], S2[b], O2[b], ST2[b] = T[j, b], S[j, b], O[j, b], ST[j, b]
            combined = rounder.finish(T2[None], S2[None], O2[None], ST2[None], bw)
            edp_c = network_edp(rounder.score(combined), problem.counts)[0]
            state = ledger.charge(state, 1)
            state = ledger.consider(state, rounder, combined, edp_c)
        refiner = state.refine.refiner
        if refiner is not None and cfg.importance.enabled:
            # each chosen layer's (energy, latency) in the best design after its round
            now = rounder.score([state.ledger.best])
            refiner = problem.importance.record(
                refiner, pick, np.asarray(now.energy_pj[0, pick], np.float64),
                np.asarray(now.cycles[0, pick], np.float64))
            state = state.replace(refine=state.refine.replace(refiner=refiner))
        return state, True
