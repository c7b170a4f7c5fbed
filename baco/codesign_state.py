"""Everything a BACO co-design run (`baco.codesign_loop`) knows between two rounds, as one
frozen pytree: each round is a function from one `SearchState` to the next, and the
checkpoint (`baco.checkpoint`) saves the state as it is."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from flax import struct

from accel.design import Design
from baco.importance import SchedulerState

if TYPE_CHECKING:
    from baco.sim_hybrid import LearnerState

__all__ = ["LedgerState", "RefineState", "SearchState", "SimRoundsState", "SlotsState"]


@struct.dataclass
class LedgerState:
    """What the run has spent and found: samples, the best design (checked by the rounder when
    taken) and its EDP, the history of (samples, seconds, best EDP), the seconds run up to the
    last round, the warnings, and the best few distinct checked designs by the search's own
    score (`baco.topk`: ``(edp, key, design)``, best first), for the final pick."""

    samples: int
    best: Design | None
    best_edp: float
    history: tuple[tuple[int, float, float], ...]
    seconds: float
    warnings: tuple[str, ...]
    top: tuple[tuple[float, str, Design], ...]

    @classmethod
    def start(cls) -> LedgerState:
        return cls(samples=0, best=None, best_edp=math.inf, history=(), seconds=0.0,
                   warnings=(), top=())


@struct.dataclass
class SlotsState:
    """The descent's ``starts`` slots: the next start's number, each slot's start (-1: none),
    its steps taken and its learning-rate factor, its importance scheduler (with
    ``importance.mask_descent``), and the relaxed points and Adam states, stacked ``[slot]``
    (None before the first start)."""

    next_start: int
    slot_start: np.ndarray
    slot_steps: np.ndarray
    scales: np.ndarray
    schedulers: tuple[SchedulerState | None, ...]
    thetas: Any
    opt_states: Any

    @classmethod
    def start(cls, starts: int) -> SlotsState:
        return cls(next_start=0, slot_start=np.full(starts, -1, np.int64),
                   slot_steps=np.zeros(starts, np.int64), scales=np.ones(starts, np.float32),
                   schedulers=(None,) * starts, thetas=None, opt_states=None)


@struct.dataclass
class RefineState:
    """The refinement's importance scheduler (None until its first round, or without
    importance) and its round-robin cursor."""

    refiner: SchedulerState | None
    cursor: int


@struct.dataclass
class SimRoundsState:
    """With ``sim_hybrid``: the simulator in the loop's state, and the simulation rounds
    done."""

    learner: LearnerState
    done: int


@struct.dataclass
class SearchState:
    """One run between two rounds: its round, phase (``descent``, ``refine``, ``final``),
    whether it is done, and each part's state."""

    round: int
    phase: str
    done: bool
    ledger: LedgerState
    slots: SlotsState
    refine: RefineState
    sim: SimRoundsState | None
