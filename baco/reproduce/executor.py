"""Run the unfinished cases of an experiment: in this process, in local worker processes, or
on a Ray cluster.

A case runs as ``run_case(kind, params) -> dict`` (`baco.reproduce.runners`), a pure function of
its parameters, so any backend can run it. Results come back to this process, which writes each
case's file (`CaseStore.save`) as soon as it arrives: an interrupted run loses at most the cases
that were running.

Backends:

* ``local`` with ``workers=1``: one after another in this process;
* ``local`` with ``workers=N>1``: a `concurrent.futures.ProcessPoolExecutor` of N spawned
  processes (each compiles the model once and reuses it for the cases it gets);
* ``ray``: one Ray task per case (``num_cpus=1``), at most ``workers`` in flight (default: the
  cluster's CPUs); connects to ``RAY_ADDRESS`` if set, else starts a local Ray.

Each process keeps JAX's persistent compilation cache (`baco.compile_cache`: ``~/.cache/baco/jax``
by default; ``BACO_JAX_CACHE=off`` disables it), so a rerun or a second worker does not
recompile.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

from baco.reproduce.store import Case, CaseStore
from workloads.errors import BacoError, ConfigError, InfeasibleError

BACKENDS = ("local", "ray")


def setup_process() -> None:
    """Per-process setup: JAX's persistent compilation cache (`baco.compile_cache`) and the
    store of simulated layers (`baco.sim_cache`)."""
    from baco.compile_cache import enable
    from baco.sim_cache import enable_store
    enable()
    enable_store()


def _setup_worker() -> None:
    """A pool worker: `setup_process`, and Ctrl-C left to the parent, which stops the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup_process()


def execute(kind: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Run one case (in whatever process this is); ``(result, seconds)``.

    A case the method cannot do at all (`InfeasibleError`: no valid mapping) is a result, not a
    failure: ``{"infeasible": message}``; the reducers leave it out and say so."""
    from baco.reproduce.runners import RUNNERS

    start = time.perf_counter()
    try:
        result = RUNNERS[kind].run_case(params)
    except InfeasibleError as exc:
        result = {"infeasible": " ".join(str(exc).split())}
    return result, time.perf_counter() - start


def _remote_execute(kind: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
    setup_process()
    return execute(kind, params)


class Reporter:
    """One line per finished case on stderr: ``[k/n] ID: summary (seconds)``."""

    def __init__(self, total: int, done: int, enabled: bool, label: str) -> None:
        self.total, self.done, self.enabled, self.label = total, done, enabled, label
        self.start = time.perf_counter()

    def say(self, text: str) -> None:
        if self.enabled:
            print(text, file=sys.stderr, flush=True)

    def finished(self, case: Case, result: dict[str, Any], seconds: float) -> None:
        self.done += 1
        summary = result.get("summary") or ("infeasible" if "infeasible" in result else "done")
        elapsed = time.perf_counter() - self.start
        self.say(f"[{self.done}/{self.total}] {self.label} {case.id}: {summary} "
                 f"({seconds:.1f} s; {elapsed:.0f} s elapsed)")


def run_cases(kind: str, cases: Sequence[Case], store: CaseStore, *, backend: str = "local",
              workers: int = 1, progress: bool = True, label: str = "",
              on_result: Callable[[Case, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the cases of `cases` that `store` does not hold yet; save each as it finishes.

    Returns ``{"ran": n, "reused": n, "failed": [(id, message)...]}``. A case that raises is
    not saved (a rerun retries it); the others still run, and the caller reports the failures.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    todo = [c for c in cases if not store.finished(c)]
    reused = len(cases) - len(todo)
    report = Reporter(len(cases), reused, progress, label)
    if reused:
        report.say(f"{label}: {reused} of {len(cases)} cases already finished in "
                   f"{store.dir}; running {len(todo)}")
    failed: list[tuple[str, str]] = []

    def done(case: Case, result: dict[str, Any], seconds: float) -> None:
        store.save(case, result, seconds, ran_with={"backend": backend, "workers": workers})
        report.finished(case, result, seconds)
        if on_result is not None:
            on_result(case, result)

    def fail(case: Case, exc: BaseException) -> None:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if not isinstance(exc, BacoError):
            message = f"{type(exc).__name__}: {message}"
            if progress:
                traceback.print_exception(exc, file=sys.stderr)
        failed.append((case.id, message))
        report.say(f"[failed] {label} {case.id}: {message}")

    if todo:
        if backend == "ray":
            _run_ray(kind, todo, workers, done, fail)
        elif workers == 1:
            setup_process()
            for case in todo:
                try:
                    result, seconds = execute(kind, case.params)
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    fail(case, exc)
                    continue
                done(case, result, seconds)
        else:
            _run_pool(kind, todo, workers, done, fail)
    return {"ran": len(todo) - len(failed), "reused": reused, "failed": failed}


def _run_pool(kind: str, todo: Sequence[Case], workers: int, done: Callable, fail: Callable
              ) -> None:
    context = multiprocessing.get_context("spawn")  # JAX is not fork-safe
    pool = futures.ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context,
                                       initializer=_setup_worker)
    try:
        pending = {pool.submit(execute, kind, case.params): case for case in todo}
        for future in futures.as_completed(pending):
            case = pending[future]
            try:
                result, seconds = future.result()
            except Exception as exc:  # noqa: BLE001
                fail(case, exc)
                continue
            done(case, result, seconds)
    except BaseException:
        workers_running = list(getattr(pool, "_processes", {}).values())  # no public handle
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers_running:
            process.terminate()
        for process in workers_running:
            process.join(timeout=10)
        pool.shutdown(wait=True)        # the pool's queues and locks released, not leaked
        raise
    pool.shutdown(wait=True)


def _run_ray(kind: str, todo: Sequence[Case], workers: int, done: Callable, fail: Callable
             ) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'baco[ray]' (or 'ray>=2.9')"
                          ) from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 log_to_driver=False)
    remote = ray.remote(num_cpus=1)(_remote_execute)
    limit = workers if workers > 1 else max(1, int(ray.cluster_resources().get("CPU", 1)))
    queue = list(todo)
    running: dict[Any, Case] = {}
    while queue or running:
        while queue and len(running) < limit:
            case = queue.pop(0)
            running[remote.remote(kind, case.params)] = case
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            case = running.pop(ref)
            try:
                result, seconds = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - RayTaskError wraps the case's error
                cause = getattr(exc, "cause", None)
                fail(case, cause if isinstance(cause, BaseException) else exc)
                continue
            done(case, result, seconds)


__all__ = ["BACKENDS", "execute", "run_cases", "setup_process"]
