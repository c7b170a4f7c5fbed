"""What a run shows while it works: plain timestamped lines off a terminal (throttled to one
per `PLAIN_INTERVAL_S` between events), a rich bar with the time left on one, per-layer
progress while judging; and a co-design history whose best EDP never rises."""

from __future__ import annotations

import io
import re
import time

import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design
from baco.codesign_ledger import Ledger
from baco.codesign_state import LedgerState
from baco.config import CodesignConfig
from baco.progress import PLAIN_INTERVAL_S, Progress, history_yardstick, yardstick_name

T0 = 1_700_000_000.0


class Clock:
    """An injected clock: epoch seconds that move only when told."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _plain(clock: Clock) -> tuple[Progress, io.StringIO]:
    stream = io.StringIO()
    return Progress(stream=stream, terminal=False, clock=clock, heartbeat=False), stream


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_a_plain_line_names_the_clock_the_run_time_the_phase_and_its_progress():
    clock = Clock()
    shown, stream = _plain(clock)
    clock.now += 20
    shown.phase("search baco", 10000, yardstick="instruction-aware model",
                before_update="compiling baco")
    clock.now += 105
    shown.update(1200, 3.1e16)
    first, second = _lines(stream)
    hms = time.strftime("%H:%M:%S", time.localtime(T0 + 125))
    assert first.endswith("] phase: compiling baco  samples 0/10000  elapsed 0 s")
    assert second == (f"[{hms} +2m05s] phase: search baco  samples 1200/10000  best EDP "
                      "3.1e+16 (instruction-aware model)  elapsed 105 s")


def test_plain_lines_come_on_phase_changes_and_at_most_once_an_interval_between():
    clock = Clock()
    shown, stream = _plain(clock)
    shown.phase("search dosa", 100, before_update="compiling dosa")
    shown.update(1, 5.0)                      # the first update ends "compiling": a line
    assert len(_lines(stream)) == 2
    for step in range(1, 30):                 # updates every second: none due before 30 s
        clock.now += 1
        shown.update(1 + step, 5.0)
    shown.tick()
    assert len(_lines(stream)) == 2
    clock.now += 1                            # 30 s since the last line
    shown.update(40, 4.0)
    assert len(_lines(stream)) == 3 and "samples 40/100  best EDP 4" in _lines(stream)[-1]
    clock.now += PLAIN_INTERVAL_S - 0.5
    shown.tick()
    assert len(_lines(stream)) == 3
    clock.now += 0.5                          # no update came: the heartbeat's tick writes one
    shown.tick()
    assert len(_lines(stream)) == 4 and "samples 40/100" in _lines(stream)[-1]
    clock.now += 1
    shown.phase("judging dosa", 3, unit="layers")
    assert len(_lines(stream)) == 5 and _lines(stream)[-1].endswith(
        "phase: judging dosa  [0/3]  elapsed 0 s")


def test_every_layer_simulated_gets_a_line_with_its_place_and_name():
    clock = Clock()
    shown, stream = _plain(clock)
    shown.phase("judging baco", 24, unit="layers")
    for i, name in enumerate(["conv1", "conv2_1"], start=1):
        clock.now += 0.1
        shown.layer(i, 24, name)
    lines = _lines(stream)
    assert len(lines) == 3
    assert "phase: judging baco  [1/24] conv1  elapsed 0 s" in lines[1]
    assert "phase: judging baco  [2/24] conv2_1" in lines[2]


def test_notes_are_timestamped_plain_text_and_a_disabled_display_writes_nothing():
    clock = Clock()
    shown, stream = _plain(clock)
    clock.now += 61
    shown.note("[yellow]warning:[/] something")
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d \+1m01s\] warning: something", _lines(stream)[0])
    quiet_stream = io.StringIO()
    quiet = Progress(enabled=False, stream=quiet_stream, terminal=False, clock=clock)
    quiet.phase("search baco", 10)
    quiet.update(5, 1.0)
    quiet.layer(1, 2, "x")
    quiet.note("hello")
    quiet.tick()
    quiet.close()
    assert quiet_stream.getvalue() == "" and quiet._thread is None


def test_the_heartbeat_thread_stops_on_close():
    shown = Progress(stream=io.StringIO(), terminal=False)
    thread = shown._thread
    assert thread is not None and thread.is_alive()
    shown.close()
    assert not thread.is_alive()
    shown.close()                             # twice is harmless


def test_a_terminal_gets_the_rich_bar_with_the_time_left():
    from rich.progress import TimeRemainingColumn

    stream = io.StringIO()
    shown = Progress(stream=stream, terminal=True)
    assert any(isinstance(c, TimeRemainingColumn) for c in shown.bar.columns)
    shown.phase("judging baco", 24, unit="layers")
    shown.layer(7, 24, "conv3_2")
    shown.close()
    text = stream.getvalue()
    assert "judging baco" in text and "7/24" in text and "conv3_2" in text


def test_the_history_yardstick_is_fixed_for_a_sim_hybrid_run():
    aware = CodesignConfig(instruction_aware=True)
    assert history_yardstick(aware) == yardstick_name(aware) == "instruction-aware model"
    sim = aware.replace(predictor="sim_hybrid")
    assert yardstick_name(sim) == "simulator-trained hybrid instruction-aware model"
    assert history_yardstick(sim) == "instruction-aware model"


class _State:
    """The part of a `SearchState` the ledger touches."""

    def __init__(self, ledger):
        self.ledger, self.sim = ledger, None

    def replace(self, **changes):
        out = _State(self.ledger)
        out.__dict__.update(changes)
        return out


def _design(i: int) -> Design:
    arrays = np.full((1, 3, 7), i, np.int64)
    return Design(hw=HardwareConfig.preset("gemmini_default"), temporal=arrays,
                  spatial=arrays, order=arrays, stages=arrays[..., 0])


def test_a_history_on_a_fixed_yardstick_never_rises_when_the_searchs_model_changes():
    fixed = {i: e for i, e in enumerate([9.0, 7.0, 8.0, 6.0])}   # design i on the fixed one
    ledger = Ledger(history_score=lambda design: fixed[int(design.temporal.flat[0])])
    state = _State(LedgerState.start())
    for i, own in enumerate([5.0, 4.0]):      # the search's model: each better
        state = ledger.note(state.replace(ledger=state.ledger.replace(
            best=_design(i), best_edp=own)))
    # a refit model scores the new best worse than the old best (its own best EDP rises) ...
    state = ledger.note(state.replace(ledger=state.ledger.replace(best=_design(2),
                                                                  best_edp=4.5)))
    state = ledger.note(state.replace(ledger=state.ledger.replace(best=_design(3),
                                                                  best_edp=4.4)))
    # ... the history, on the fixed yardstick, notes only what beats its last point
    assert [e for _, _, e in state.ledger.history] == [9.0, 7.0, 6.0]
