"""What a BACO co-design run (`baco.codesign_loop`) spends and finds: the samples, the best
design and its EDP, the history of best EDPs and the warnings, kept in the run's
`SearchState` (its `LedgerState`)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from accel.design import Design
from baco.codesign_state import SearchState
from baco.rounding import Rounder
from baco.topk import DEFAULT_TOP_K, design_key, offer, would_enter
from workloads.errors import InfeasibleError

__all__ = ["CodesignWarning", "Ledger"]


class CodesignWarning(UserWarning):
    """Something the search recovered from (a non-finite loss) that the user should know."""


class Ledger:
    """Functions of a `SearchState`'s ledger: charge samples, take a better design (offering
    every scored design to the ``sim_hybrid`` learner), keep the `top_k` best for the final
    pick, note the history, warn. It holds the learner and the run's clock: the seconds run
    before this process (a resumed run's), plus this process's.

    The history's best EDP never rises: each point is on one yardstick for the whole run. The
    search's own EDPs are, except with ``sim_hybrid``, whose model is refit at every
    simulation round, so that the best design rescored on the new model can score worse
    than the old best did on the old one. There `history_score` (the analytic model, which
    the residual corrects and which does not change) scores each new best, and a point is
    noted only when it beats the history's last: the history is the best, on that fixed
    yardstick, of the designs the search held as its best (`baco.progress.history_yardstick`
    names it). One fixed yardstick, rather than a yardstick per point, keeps every reader of
    the history (``best_edp_at``, the convergence plots) a plain running minimum."""

    def __init__(self, learner: Any = None, seconds_before: float = 0.0,
                 top_k: int = DEFAULT_TOP_K,
                 history_score: Callable[[Design], float] | None = None) -> None:
        self.learner = learner            # a baco.sim_hybrid.SimLearner with sim_hybrid
        self.seconds_before = seconds_before
        self.top_k = top_k
        self.history_score = history_score
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    @staticmethod
    def charge(state: SearchState, samples: int) -> SearchState:
        """`samples` more spent."""
        ledger = state.ledger
        return state.replace(ledger=ledger.replace(samples=ledger.samples + int(samples)))

    def consider(self, state: SearchState, rounder: Rounder, designs: list[Design],
                 edps: np.ndarray) -> SearchState:
        """Keep the best of `designs` if it beats the best so far, and the `top_k` best
        distinct ones that the rounder passes."""
        if self.learner is not None:
            learner = self.learner.offer(state.sim.learner, designs, edps)
            state = state.replace(sim=state.sim.replace(learner=learner))
        top = state.ledger.top
        for design, edp in zip(designs, edps):
            if would_enter(top, float(edp), self.top_k):
                try:
                    rounder.check(design)
                except InfeasibleError:
                    continue
                top = offer(top, [(float(edp), design_key(design), design)], self.top_k)
        if top is not state.ledger.top:
            state = state.replace(ledger=state.ledger.replace(top=top))
        for design, edp in zip(designs, edps):
            if np.isfinite(edp) and edp < state.ledger.best_edp:
                rounder.check(design)
                state = self.note(state.replace(ledger=state.ledger.replace(
                    best=design, best_edp=float(edp))))
        return state

    def note(self, state: SearchState) -> SearchState:
        """Record the best EDP now in the history (on its fixed yardstick, if lower there)."""
        ledger = state.ledger
        edp = (ledger.best_edp if self.history_score is None
               else self.history_score(ledger.best))
        if ledger.history and not edp < ledger.history[-1][2]:
            return state
        point = (ledger.samples, self.seconds(), float(edp))
        return state.replace(ledger=ledger.replace(history=ledger.history + (point,)))

    @staticmethod
    def warn(state: SearchState, message: str, stacklevel: int) -> SearchState:
        warnings.warn(message, CodesignWarning, stacklevel=stacklevel + 1)
        ledger = state.ledger
        return state.replace(ledger=ledger.replace(warnings=ledger.warnings + (message,)))
