"""What a search shows while it runs: a progress bar over its samples, naming the yardstick
of the best EDP it shows."""

from __future__ import annotations

import math

from baco.config import CodesignConfig

__all__ = ["Progress", "yardstick_name"]


def yardstick_name(config: CodesignConfig) -> str:
    """What the search's own EDPs are measured on, as progress lines name it."""
    name = "instruction-aware model" if config.instruction_aware else "plain model"
    prefix = {"hybrid": "hybrid ", "sim_hybrid": "simulator-trained hybrid "}
    return prefix.get(config.predictor, "") + name


class Progress:
    """A rich progress bar over a search's samples, naming the search and the yardstick of
    the best EDP it shows (a no-op when disabled). Until the first update it says
    "compiling": the first round traces and compiles the model, which takes seconds."""

    def __init__(self, total: int, enabled: bool, label: str = "baco", yardstick: str = "",
                 completed: int = 0, best_edp: float = math.inf) -> None:
        self.bar = None
        self.yardstick = yardstick
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
        self.bar = Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(bar_width=24),
                            MofNCompleteColumn(), TextColumn("samples"), TimeElapsedColumn(),
                            TextColumn("{task.description}"), console=Console(stderr=True))
        self.task = self.bar.add_task(self._describe(best_edp, "compiling"), total=total,
                                      completed=completed)
        self.bar.start()

    def _describe(self, best_edp: float, otherwise: str) -> str:
        if not math.isfinite(best_edp):
            return otherwise
        return f"best EDP {best_edp:.4g}" + (f" ({self.yardstick})" if self.yardstick else "")

    def update(self, samples: int, best_edp: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=samples,
                            description=self._describe(best_edp, "best EDP -"))

    def note(self, message: str) -> None:
        """A line printed above the bar."""
        if self.bar is not None:
            self.bar.console.print(message, highlight=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
