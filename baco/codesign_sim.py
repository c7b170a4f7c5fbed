"""BACO's simulation rounds with ``predictor: sim_hybrid`` (`baco.codesign_loop`): the
designs scored so far simulated, the hybrid model's residual fine-tuned on them
(`baco.sim_hybrid`), the best simulated design made the best."""

from __future__ import annotations

from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from baco.codesign_ledger import Ledger
from baco.codesign_problem import CodesignProblem
from baco.codesign_state import SearchState, SimRoundsState
from baco.config import CodesignConfig
from baco.profile import timed
from perfmodels.score import network_edp
from workloads.errors import ConfigError
from workloads.network import Network

__all__ = ["SimRounds", "sim_learner"]


def sim_learner(net: Network, hw: HardwareConfig, config: CodesignConfig, hybrid: Any
                ) -> tuple[Any, int]:
    """With ``sim_hybrid``, the `baco.sim_hybrid.SimLearner` and the samples kept for the last
    simulation; else (None, 0)."""
    if config.predictor != "sim_hybrid":
        return None, 0
    from baco.sim_hybrid import SimLearner
    learner = SimLearner(
        net.layers, net.counts, top_k=config.sim_top_k,
        sram_step_kb=config.sram_step_kb, seed=config.seed,
        init=None if hybrid is None else hybrid.surrogate,
        template=hw.template)
    reserve = (config.sim_top_k + config.sim_polish + 1) * len(net.layers)
    if reserve >= config.budget_samples // 2:
        raise ConfigError(
            f"codesign.budget_samples {config.budget_samples} is too small for "
            f"sim_hybrid: its last simulation alone may cost {reserve} samples "
            f"((sim_top_k + sim_polish + 1) x {len(net.layers)} layers); raise the "
            "budget or lower codesign.sim_top_k and codesign.sim_polish")
    return learner, reserve


class SimRounds:
    """Functions of a `SearchState`'s simulation rounds (`SimRoundsState`): ``sim_rounds`` of
    them, one every ``budget / sim_rounds`` samples, the last when the budget is spent."""

    def __init__(self, learner: Any, problem: CodesignProblem, ledger: Ledger,
                 budget: int) -> None:
        self.learner, self.problem, self.ledger, self.budget = learner, problem, ledger, budget

    def start(self) -> SimRoundsState:
        return SimRoundsState(learner=self.learner.start(), done=0)

    def follow(self, state: SearchState) -> None:
        """Descend and score on the model of `state`'s residual from now on."""
        self.problem.use_hybrid(self.learner.hybrid(state.sim.learner))

    def if_due(self, state: SearchState) -> SearchState:
        """A simulation round if the samples spent call for one."""
        done = state.sim.done
        due = self.budget * (done + 1) / self.problem.config.sim_rounds
        if done + 1 < self.problem.config.sim_rounds and state.ledger.samples >= due:
            return self.round(state, final=False)
        return state

    def _with_learner(self, state: SearchState, learner: Any, samples: int = 0
                      ) -> SearchState:
        return self.ledger.charge(state.replace(sim=state.sim.replace(learner=learner)),
                                  samples)

    def round(self, state: SearchState, final: bool) -> SearchState:
        """Simulate the pool, fine-tune the residual (`baco.sim_hybrid`); the best simulated
        design so far becomes the best design (refinement explores around it; after the last
        round, it is the result, each of its layers' programs first chosen by simulation
        among ``sim_polish`` neighbours: `SimLearner.polish`), scored again on the updated
        model."""
        with timed("sim_hybrid round"):
            return self._round(state, final)

    def _round(self, state: SearchState, final: bool) -> SearchState:
        learner, problem = self.learner, self.problem
        lstate = state.sim.learner
        pool = [d for _, _, d in lstate.pool]
        if pool:
            analytic = problem.rounder.analytic_score(pool)
            with timed("simulating designs"):
                lstate, cost = learner.simulate_pool(lstate,
                                                     np.asarray(analytic.cycles, np.float64))
            state = self._with_learner(state, lstate, cost)
        state = self._with_learner(state, learner.fine_tune(lstate))
        self.follow(state)
        state = state.replace(sim=state.sim.replace(done=state.sim.done + 1))
        record = learner.best(state.sim.learner)
        if final and record is not None and problem.config.sim_polish > 0:
            before = len(state.sim.learner.records)
            with timed("polish"):
                lstate, cost = learner.polish(state.sim.learner, problem.rounder, record,
                                              np.asarray(problem.space.orders[0, 0]),
                                              problem.config.sim_polish)
            state = self._with_learner(state, lstate, cost)
            if len(lstate.records) > before:      # the composed design: learn it too
                state = self._with_learner(state, learner.fine_tune(lstate))
                self.follow(state)
            record = learner.best(state.sim.learner)
        ledger = state.ledger
        if record is not None:
            ledger = ledger.replace(best=record.design)
        if ledger.best is not None:
            ledger = ledger.replace(best_edp=float(network_edp(
                problem.rounder.score([ledger.best]), problem.counts)[0][0]))
            state = self.ledger.note(state.replace(ledger=ledger))
        return state
