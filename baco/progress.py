"""What a run shows on stderr while it works, phase by phase: compiling, each search (BACO's
and every baseline's), the final pick, and judging (simulating layer i of N of a design).

On a terminal it is one rich display, a bar per phase with the time elapsed and an estimate
of the time left. Anywhere else (``baco run ... 2>&1 | cat``, stderr to a file) a live
display cannot redraw and rich would print only its last frame when the run ends, so it
writes plain timestamped lines instead: one on every phase change and every layer simulated,
and one at least every `PLAIN_INTERVAL_S` while a phase goes on (a heartbeat thread keeps
them coming through long compilations and simulations that report nothing), e.g.

    [14:03:27 +2m05s] phase: search baco  samples 1200/10000  best EDP 3.1e+16
    (instruction-aware model)  elapsed 95 s

(one line): the clock, the time since the run began, the phase, its progress, the best EDP
so far on the named yardstick, and the seconds the phase has run.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from baco.config import CodesignConfig

__all__ = ["HEARTBEAT_POLL_S", "PLAIN_INTERVAL_S", "Progress", "history_yardstick",
           "plain_line", "yardstick_name"]

PLAIN_INTERVAL_S = 30.0
"""The longest a run writing plain lines stays silent while a phase goes on."""
HEARTBEAT_POLL_S = 1.0
"""How often the heartbeat thread looks whether a plain line is due."""


def yardstick_name(config: CodesignConfig) -> str:
    """What the search's own EDPs are measured on, as progress lines name it."""
    name = "instruction-aware model" if config.instruction_aware else "plain model"
    prefix = {"hybrid": "hybrid ", "sim_hybrid": "simulator-trained hybrid "}
    return prefix.get(config.predictor, "") + name


def history_yardstick(config: CodesignConfig) -> str:
    """What the co-design's history (and the best EDP its progress shows) is measured on: its
    own yardstick, except with ``sim_hybrid``, whose model changes at every simulation round
    (`baco.codesign_ledger.Ledger`): there the analytic model its residual corrects."""
    if config.predictor == "sim_hybrid":
        return "instruction-aware model" if config.instruction_aware else "plain model"
    return yardstick_name(config)


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _clock(epoch_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch_s))


@dataclasses.dataclass
class _Phase:
    """The phase under way: its name (``before_update`` until its first update), its
    progress, the best EDP it found and on what, and when it began."""

    name: str
    started_s: float
    total: int | None = None
    unit: str = "samples"
    done: int = 0
    best_edp: float = math.inf
    yardstick: str = ""
    detail: str = ""
    before_update: str | None = None

    @property
    def title(self) -> str:
        return self.before_update or self.name

    def best(self) -> str:
        if not math.isfinite(self.best_edp):
            return ""
        return f"best EDP {self.best_edp:.4g}" + (f" ({self.yardstick})" if self.yardstick
                                                  else "")


def plain_line(now_s: float, run_s: float, phase: _Phase) -> str:
    """One plain progress line (see the module docstring): `now_s` the epoch seconds,
    `run_s` the seconds since the run began."""
    parts = [f"[{_clock(now_s)} +{_duration(run_s)}] phase: {phase.title}"]
    if phase.total is not None and phase.unit == "layers":
        parts.append(f"[{phase.done}/{phase.total}] {phase.detail}".rstrip())
    elif phase.total is not None:
        parts.append(f"{phase.unit} {phase.done}/{phase.total}")
    if phase.best():
        parts.append(phase.best())
    parts.append(f"elapsed {now_s - phase.started_s:.0f} s")
    return "  ".join(parts)


class Progress:
    """A run's progress on stderr (see the module docstring); does nothing when disabled.

    `terminal` (default: whether `stream` is one) picks the rich display over plain lines;
    `clock` gives epoch seconds (tests pass their own: nothing here sleeps or reads the wall
    clock otherwise); `heartbeat` starts the thread that writes a due plain line when no
    update comes. `close` ends it all; a phase lasts until the next one begins."""

    def __init__(self, enabled: bool = True, *, stream: TextIO | None = None,
                 terminal: bool | None = None, clock: Callable[[], float] = time.time,
                 interval_s: float = PLAIN_INTERVAL_S, heartbeat: bool = True) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.interval_s = interval_s
        self.started_s = clock()
        self.current: _Phase | None = None
        self._last_line_s = -math.inf
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bar: Any = None
        self._task: Any = None
        if not enabled:
            return
        if terminal is None:
            terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        if terminal:
            self.bar = self._rich_bar()
            self.bar.start()
        elif heartbeat:
            self._thread = threading.Thread(target=self._beat, name="baco-progress",
                                            daemon=True)
            self._thread.start()

    def _rich_bar(self) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        return Progress(TextColumn("[bold]{task.fields[title]}[/]"), BarColumn(bar_width=24),
                        MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
                        TimeElapsedColumn(), TimeRemainingColumn(),
                        TextColumn("{task.description}"),
                        console=Console(file=self.stream, force_terminal=True))

    # ------------------------------------------------------------------ phases
    def phase(self, name: str, total: int | None = None, *, unit: str = "samples",
              completed: int = 0, best_edp: float = math.inf, yardstick: str = "",
              before_update: str | None = None) -> None:
        """A new phase begins (the one before it ends): `name`, shown as `before_update`
        (e.g. ``compiling baco``) until its first `update`, with `total` `unit` to do."""
        if not self.enabled:
            return
        with self._lock:
            self.current = _Phase(name=name, started_s=self.clock(), total=total, unit=unit,
                                  done=completed, best_edp=best_edp, yardstick=yardstick,
                                  before_update=before_update)
            if self.bar is not None:
                if self._task is not None:
                    self.bar.remove_task(self._task)
                self._task = self.bar.add_task(self._describe(), total=total,
                                               completed=completed, title=name, unit=unit)
            else:
                self._line()

    def update(self, done: int, best_edp: float | None = None) -> None:
        """The phase's progress (a search's samples and best EDP so far); a plain line only
        when one is due, or when this first update ends the phase's `before_update`."""
        phase = self.current
        if phase is None:
            return
        with self._lock:
            phase.done = int(done)
            if best_edp is not None:
                phase.best_edp = float(best_edp)
            changed = phase.before_update is not None
            phase.before_update = None
            if self.bar is not None:
                self.bar.update(self._task, completed=phase.done, description=self._describe())
            elif changed:
                self._line()
            else:
                self.tick()

    def layer(self, done: int, total: int, name: str) -> None:
        """``[done/total] name``: a layer simulated (`baco.yardsticks.simulate_design`'s
        ``progress``); a plain line for each."""
        phase = self.current
        if phase is None:
            return
        with self._lock:
            phase.done, phase.total, phase.detail = int(done), int(total), name
            phase.before_update = None
            if self.bar is not None:
                self.bar.update(self._task, completed=phase.done, total=phase.total,
                                description=name)
            else:
                self._line()

    def note(self, message: str) -> None:
        """A message (rich markup allowed): above the bars, or as a timestamped line."""
        if not self.enabled:
            return
        with self._lock:
            if self.bar is not None:
                self.bar.console.print(message, highlight=False)
                return
            from rich.text import Text
            now = self.clock()
            self._write(f"[{_clock(now)} +{_duration(now - self.started_s)}] "
                        f"{Text.from_markup(message).plain}")

    def tick(self) -> None:
        """Write a plain line if none came for `interval_s` (the heartbeat calls it)."""
        with self._lock:
            if (self.bar is None and self.current is not None
                    and self.clock() - self._last_line_s >= self.interval_s):
                self._line()

    def close(self) -> None:
        """Stop the display and the heartbeat (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    # ------------------------------------------------------------------ output
    def _describe(self) -> str:
        phase = self.current
        if phase.before_update is not None:
            return phase.before_update.split(" ")[0]
        return phase.best() or phase.detail or "-"

    def _line(self) -> None:
        now = self.clock()
        self._last_line_s = now
        self._write(plain_line(now, now - self.started_s, self.current))

    def _write(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_POLL_S):
            self.tick()
