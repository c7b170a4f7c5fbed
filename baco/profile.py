"""Where a run's wall-clock time goes: seconds and calls per named phase, and the seconds JAX
spends compiling (`baco run --profile`; ``experiments/bench/codesign_profile.py``).

Call sites mark their work with ``with timed("lowering"):``. Phases nest: a timer opened inside
another is a sub-row of it (``search baco / final pick / lowering``), and a row's seconds are
*inclusive*: they hold its sub-rows' seconds. So only the top-level rows add up, with
``(untimed)`` the rest of the total, and a sub-row says what its parent's time was "of which".
`Profile.by_name` sums a name over every place it appears (``lowering`` under the search, the
final pick and the judging), a name nested in itself counted once.

JAX's compilations are counted through `jax.monitoring` (one set of listeners, registered the
first time a profile starts): tracing, lowering to MLIR and the backend compile (which holds
a persistent-cache lookup; JAX 0.10's events, `jax._src.dispatch`, `jax._src.compiler`).
Their wall time (the union of their spans: a function traced inside another's trace counts
once) is a ``jax compile`` sub-row of the phase it happened in, and `Profile.compile` gives the
totals with the persistent cache's requests, hits and writes.

Off (the default), `timed` returns one shared do-nothing context after a global lookup, and
the listeners return at once; a profile only reads clocks, so no result depends on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from workloads.files import write_atomic

__all__ = ["COMPILE", "PROFILE_JSON", "PROFILE_MD", "Profile", "profiling", "timed"]

PROFILE_JSON = "profile.json"
PROFILE_MD = "profile.md"
COMPILE = "jax compile"
"""The sub-row of a phase that holds the JAX compilations made during it."""
UNTIMED = "(untimed)"

SPAN_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_to_mlir",
    "/jax/core/compile/backend_compile_duration": "backend_compile",
}
"""JAX's compile steps, timed by `jax._src.dispatch.log_elapsed_time` (start and end times)."""
CACHE_EVENTS = {
    "/jax/compilation_cache/compile_requests_use_cache": "requests",
    "/jax/compilation_cache/cache_hits": "hits",
    "/jax/compilation_cache/cache_misses": "written",      # recorded on writing an entry
}
CACHE_SECONDS = {
    "/jax/compilation_cache/compile_time_saved_sec": "saved_seconds",
    "/jax/compilation_cache/cache_retrieval_time_sec": "retrieval_seconds",
}

Path = tuple[str, ...]


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of `spans` (``(start, end)`` seconds)."""
    total, reach = 0.0, -float("inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


class Profile:
    """Seconds and calls per phase path, compile spans per phase path, JAX's cache events.

    `clock` (default `time.perf_counter`) times the phases; JAX's spans come in its own
    epoch seconds and are only measured against each other."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.rows: dict[Path, list[float]] = {}       # path -> [seconds, calls], first-entered
        self.spans: dict[Path, dict[str, list[tuple[float, float]]]] = {}
        self.cache: dict[str, float] = {name: 0 for name in (*CACHE_EVENTS.values(),
                                                              *CACHE_SECONDS.values())}
        self._local = threading.local()
        self.load_average = {"start": _load_average(), "end": None}
        self.started = clock()
        self.ended: float | None = None

    def _stack(self) -> list[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Count the wall seconds of the block to `name` within the phases open around it."""
        stack = self._stack()
        stack.append(name)
        path = tuple(stack)
        row = self.rows.setdefault(path, [0.0, 0])
        start = self.clock()
        try:
            yield
        finally:
            row[0] += self.clock() - start
            row[1] += 1
            stack.pop()

    def stop(self) -> None:
        """End the total (the first call only) and read the load average again."""
        if self.ended is None:
            self.ended = self.clock()
            self.load_average["end"] = _load_average()

    # ------------------------------------------------------------------ JAX's events
    def add_span(self, event: str, start_s: float, end_s: float) -> None:
        """One compile step (`SPAN_EVENTS`) of the phase open now."""
        path = tuple(self._stack())
        self.spans.setdefault(path, {}).setdefault(SPAN_EVENTS[event], []).append(
            (start_s, end_s))

    def add_event(self, event: str, seconds: float | None = None) -> None:
        if event in CACHE_EVENTS:
            self.cache[CACHE_EVENTS[event]] += 1
        elif event in CACHE_SECONDS and seconds is not None:
            self.cache[CACHE_SECONDS[event]] += seconds

    # ------------------------------------------------------------------ figures
    @property
    def total_seconds(self) -> float:
        return (self.ended if self.ended is not None else self.clock()) - self.started

    def phases(self) -> dict[Path, tuple[float, int]]:
        """Every phase path's ``(seconds, calls)``, each parent before its sub-rows, with a
        ``jax compile`` sub-row (seconds: the union of its steps' spans; calls: backend
        compiles) where compilations happened; at the top for those outside every phase."""
        out: dict[Path, tuple[float, int]] = {}
        for path, (seconds, calls) in self.rows.items():
            out[path] = (seconds, int(calls))
            if path in self.spans:
                out[path + (COMPILE,)] = self._compiled(self.spans[path])
        if () in self.spans:
            out[(COMPILE,)] = self._compiled(self.spans[()])
        order = {path: i for i, path in enumerate(out)}
        return dict(sorted(out.items(), key=lambda kv: [order[kv[0][:n]]
                                                         for n in range(1, len(kv[0]) + 1)]))

    @staticmethod
    def _compiled(steps: dict[str, list[tuple[float, float]]]) -> tuple[float, int]:
        spans = [s for kind in steps.values() for s in kind]
        return _union_seconds(spans), len(steps.get("backend_compile", ()))

    def by_name(self) -> dict[str, tuple[float, int]]:
        """Each phase name's seconds and calls over every path it ends (not counting it again
        where it is nested in itself)."""
        out: dict[str, list[float]] = {}
        for path, (seconds, calls) in self.phases().items():
            if path[-1] in path[:-1]:
                continue
            entry = out.setdefault(path[-1], [0.0, 0])
            entry[0] += seconds
            entry[1] += calls
        return {name: (s, int(c)) for name, (s, c) in out.items()}

    def compile(self) -> dict[str, Any]:
        """JAX's compile totals: wall seconds in any step (``seconds``), each step's seconds
        and count (traces may nest, so ``trace_seconds`` is their union), and the persistent
        cache's ``requests``, ``hits``, ``misses`` (requests less hits), ``written``,
        ``saved_seconds`` and ``retrieval_seconds``."""
        steps: dict[str, list[tuple[float, float]]] = {kind: [] for kind in SPAN_EVENTS.values()}
        for per_phase in self.spans.values():
            for kind, spans in per_phase.items():
                steps[kind] += spans
        out: dict[str, Any] = {"seconds": _union_seconds([s for v in steps.values() for s in v])}
        for kind, spans in steps.items():
            out[f"{kind}_seconds"] = (_union_seconds(spans) if kind == "trace"
                                      else sum(end - start for start, end in spans))
            out[f"{kind}s"] = len(spans)
        cache = dict(self.cache)
        cache["misses"] = cache["requests"] - cache["hits"]
        out["persistent_cache"] = {k: (int(v) if k not in CACHE_SECONDS.values() else v)
                                   for k, v in cache.items()}
        return out

    def to_dict(self) -> dict[str, Any]:
        """What ``profile.json`` holds (see `table` for the same as text)."""
        phases = self.phases()
        top = sum(seconds for path, (seconds, _) in phases.items() if len(path) == 1)
        return {
            "total_seconds": self.total_seconds,
            "untimed_seconds": max(0.0, self.total_seconds - top),
            "phases": {" / ".join(path): {"seconds": s, "calls": c, "depth": len(path) - 1}
                       for path, (s, c) in phases.items()},
            "by_name": {name: {"seconds": s, "calls": c}
                        for name, (s, c) in self.by_name().items()},
            "compile": self.compile(),
            "jax": _jax_facts(),
            "load_average": self.load_average,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        }

    def table(self) -> str:
        """`to_dict` as Markdown: the phase tree (sub-rows marked ``·`` per level: their time
        is part of the row above), the untimed rest and the total; then the names that appear
        in several phases, summed; then JAX's compile totals and the machine."""
        return table(self.to_dict())

    def write(self, folder: str | os.PathLike) -> tuple[pathlib.Path, pathlib.Path]:
        """``FOLDER/profile.json`` and ``FOLDER/profile.md``, atomically; their paths."""
        folder = pathlib.Path(folder)
        self.stop()
        doc = self.to_dict()
        write_atomic(folder / PROFILE_JSON, json.dumps(doc, indent=2) + "\n")
        write_atomic(folder / PROFILE_MD, table(doc) + "\n")
        return folder / PROFILE_JSON, folder / PROFILE_MD


def table(doc: dict[str, Any]) -> str:
    """A ``profile.json`` document as Markdown (`Profile.table`)."""
    total = doc["total_seconds"] or 1e-12

    def row(label: str, seconds: float, calls: Any) -> str:
        return f"| {label} | {seconds:.2f} | {100 * seconds / total:.1f}% | {calls} |"

    lines = ["| phase (· of which) | seconds | % of total | calls |", "|---|---:|---:|---:|"]
    for name, entry in doc["phases"].items():
        label = "· " * entry["depth"] + name.split(" / ")[-1]
        lines.append(row(label, entry["seconds"], entry["calls"]))
    lines.append(row(UNTIMED, doc["untimed_seconds"], ""))
    lines.append(row("**total**", doc["total_seconds"], ""))
    counts: dict[str, int] = {}
    for name in doc["phases"]:
        counts[name.split(" / ")[-1]] = counts.get(name.split(" / ")[-1], 0) + 1
    shared = [n for n, k in counts.items() if k > 1]
    if shared:
        lines += ["", "| in all phases | seconds | % of total | calls |", "|---|---:|---:|---:|"]
        lines += [row(n, doc["by_name"][n]["seconds"], doc["by_name"][n]["calls"])
                  for n in sorted(shared, key=lambda n: -doc["by_name"][n]["seconds"])]
    c, cache, jx = doc["compile"], doc["compile"]["persistent_cache"], doc["jax"]
    load = doc["load_average"]
    lines += ["", f"JAX compile: {c['seconds']:.2f} s in all ({c['backend_compiles']} backend "
              f"compiles {c['backend_compile_seconds']:.2f} s, {c['lower_to_mlirs']} lowerings "
              f"to MLIR {c['lower_to_mlir_seconds']:.2f} s, {c['traces']} traces "
              f"{c['trace_seconds']:.2f} s); persistent cache: {cache['hits']} hits of "
              f"{cache['requests']} requests ({cache['saved_seconds']:.2f} s saved), "
              f"{cache['written']} written.",
              f"JAX {jx['version']} on {jx['backend']} ({', '.join(jx['devices'])}); "
              f"{doc['cpus']} CPUs, load average {_loads(load['start'])} at the start, "
              f"{_loads(load['end'])} at the end."]
    return "\n".join(lines)


def _loads(values: list[float] | None) -> str:
    return "-" if values is None else "/".join(f"{v:.2f}" for v in values)


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:                 # not offered on this system
        return None


def _jax_facts() -> dict[str, Any]:
    """The JAX version, backend and devices the run used (JAX is loaded by then)."""
    import jax

    return {"version": jax.__version__, "backend": jax.default_backend(),
            "devices": [f"{d.device_kind} ({d})" for d in jax.devices()]}


# ---------------------------------------------------------------------- the one profile
_active: Profile | None = None
_NOTHING = contextlib.nullcontext()
_listening = False


def timed(name: str) -> contextlib.AbstractContextManager[None]:
    """``with timed(name):`` counts the block to `name` in the profile being recorded
    (`profiling`); without one, a shared context that does nothing."""
    profile = _active
    return _NOTHING if profile is None else profile.timed(name)


@contextlib.contextmanager
def profiling(profile: Profile | None) -> Iterator[Profile | None]:
    """Record `profile` (the one `timed` and JAX's events go to) for the block, then stop
    it; `None` records nothing."""
    global _active
    if profile is None:
        yield None
        return
    _listen()
    previous, _active = _active, profile
    try:
        yield profile
    finally:
        _active = previous
        profile.stop()


def _on_span(event: str, start_s: float, end_s: float, **_: Any) -> None:
    if _active is not None and event in SPAN_EVENTS:
        _active.add_span(event, start_s, end_s)


def _on_event(event: str, **_: Any) -> None:
    if _active is not None:
        _active.add_event(event)


def _on_duration(event: str, duration_secs: float, **_: Any) -> None:
    if _active is not None:
        _active.add_event(event, duration_secs)


def _listen() -> None:
    """Register the listeners with `jax.monitoring`, once per process."""
    global _listening
    if _listening:
        return
    from jax import monitoring

    monitoring.register_event_time_span_listener(_on_span)
    monitoring.register_event_listener(_on_event)
    monitoring.register_event_duration_secs_listener(_on_duration)
    _listening = True
