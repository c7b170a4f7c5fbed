"""BACO's simulation rounds with ``predictor: sim_hybrid`` (`baco.codesign_loop`): the
designs scored so far simulated, the hybrid model's residual fine-tuned on them
(`baco.sim_hybrid`), the best simulated design made the best; their part of the checkpoint."""

from __future__ import annotations

from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from baco.codesign_ledger import Ledger
from baco.codesign_problem import CodesignProblem
from baco.config import CodesignConfig
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
    """``sim_rounds`` simulation rounds: one every ``budget / sim_rounds`` samples, the last
    when the budget is spent."""

    def __init__(self, learner: Any, problem: CodesignProblem, ledger: Ledger,
                 budget: int) -> None:
        self.learner, self.problem, self.ledger, self.budget = learner, problem, ledger, budget
        self.done = 0                     # simulation rounds finished

    def if_due(self) -> None:
        """A simulation round if the samples spent call for one."""
        due = self.budget * (self.done + 1) / self.problem.config.sim_rounds
        if self.done + 1 < self.problem.config.sim_rounds and self.ledger.samples >= due:
            self.round(final=False)

    def round(self, final: bool) -> None:
        """Simulate the pool, fine-tune the residual (`baco.sim_hybrid`); the best simulated
        design so far becomes the best design (refinement explores around it; after the last
        round, it is the result, each of its layers' programs first chosen by simulation
        among ``sim_polish`` neighbours: `SimLearner.polish`), scored again on the updated
        model."""
        learner, problem, ledger = self.learner, self.problem, self.ledger
        pool = [d for _, _, d in learner.pool]
        if pool:
            analytic = problem.rounder.analytic_score(pool)
            ledger.samples += learner.simulate_pool(np.asarray(analytic.cycles, np.float64))
        problem.use_hybrid(learner.fine_tune())
        self.done += 1
        record = learner.best()
        if final and record is not None and problem.config.sim_polish > 0:
            before = len(learner.records)
            ledger.samples += learner.polish(problem.rounder, record,
                                             np.asarray(problem.space.orders[0, 0]),
                                             problem.config.sim_polish)
            if len(learner.records) > before:      # the composed design: learn it too
                problem.use_hybrid(learner.fine_tune())
            record = learner.best()
        if record is not None:
            ledger.best = record.design
        if ledger.best is not None:
            ledger.best_edp = float(network_edp(problem.rounder.score([ledger.best]),
                                                problem.counts)[0][0])
            ledger.note()

    def save(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Add the learner and the rounds done to a checkpoint's `arrays` and `meta`."""
        sim_arrays, meta["sim"] = self.learner.state_dict()
        arrays.update(sim_arrays)
        meta["sims_done"] = self.done

    def load(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Continue from what `save` wrote: the learner, and descent and scores on its model."""
        self.done = int(meta.get("sims_done", 0))
        self.learner.load_state_dict(arrays, meta["sim"])
        self.problem.use_hybrid(self.learner.hybrid)
