"""What a BACO co-design run (`baco.codesign_loop`) has spent and found: the samples, the best
design and its EDP, the history of best EDPs, the warnings and the seconds run; and its part of
the checkpoint."""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design
from baco.rounding import Rounder

__all__ = ["DESIGN_FIELDS", "CodesignWarning", "Ledger"]

DESIGN_FIELDS = ("temporal", "spatial", "order", "stages")
"""A design's arrays, as the checkpoint holds them."""


class CodesignWarning(UserWarning):
    """Something the search recovered from (a non-finite loss) that the user should know."""


class Ledger:
    """The samples spent, the best design (checked by the rounder when taken, and offered to
    the ``sim_hybrid`` learner with every design scored), its history and the warnings."""

    def __init__(self, learner: Any = None) -> None:
        self.learner = learner            # a baco.sim_hybrid.SimLearner with sim_hybrid
        self.samples = 0
        self.best: Design | None = None
        self.best_edp = math.inf
        self.history: list[tuple[int, float, float]] = []   # (samples, seconds, best_edp)
        self.seconds_before = 0.0
        self.started = time.perf_counter()
        self.warnings: list[str] = []

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    def consider(self, rounder: Rounder, designs: list[Design], edps: np.ndarray) -> None:
        """Keep the best of `designs` if it beats the best so far."""
        if self.learner is not None:
            self.learner.offer(designs, edps)
        for design, edp in zip(designs, edps):
            if np.isfinite(edp) and edp < self.best_edp:
                rounder.check(design)
                self.best, self.best_edp = design, float(edp)
                self.note()

    def note(self) -> None:
        """Record the best EDP now in the history."""
        self.history.append((self.samples, self.seconds(), self.best_edp))

    def warn(self, message: str, stacklevel: int) -> None:
        self.warnings.append(message)
        warnings.warn(message, CodesignWarning, stacklevel=stacklevel + 1)

    def save(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Add this ledger to a checkpoint's `arrays` and `meta`."""
        if self.best is not None:
            for name in DESIGN_FIELDS:
                arrays[f"best_{name}"] = getattr(self.best, name)
        meta.update({
            "samples": self.samples,
            "best_hw": None if self.best is None else self.best.hw.to_dict(),
            "best_edp": self.best_edp, "history": self.history,
            "seconds": self.seconds(), "warnings": self.warnings,
        })

    def load(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Continue from what `save` wrote."""
        self.samples = meta["samples"]
        self.best_edp = float(meta["best_edp"])
        self.history = [tuple(h) for h in meta["history"]]
        self.seconds_before = float(meta["seconds"])
        self.started = time.perf_counter()
        self.warnings = list(meta["warnings"])
        if meta["best_hw"] is not None:
            self.best = Design(hw=HardwareConfig.from_dict(meta["best_hw"]),
                               **{name: arrays[f"best_{name}"] for name in DESIGN_FIELDS})
