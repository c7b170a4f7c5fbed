"""`reproduce`: expand an experiment into cases, run the unfinished ones, reduce them.

The output folder (default ``experiments/results/reproduce/NAME`` or ``NAME-quick``) holds

* ``experiment.json``: the experiment as run (kind, effective parameters, quick or not);
* ``cases/ID.json``: one file per finished case (`baco.reproduce.store`);
* ``table.md``, ``table.csv`` and PNG plots, rewritten (atomically) after every run from all
  the finished cases -- so a partial run still yields a table, marked PARTIAL;
* ``run.json``: the last run's bookkeeping (cases run, reused, failed; wall seconds).

Rerunning the same command resumes: finished cases are loaded, not run again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import time
from typing import Any

from baco.reproduce.executor import BACKENDS, run_cases
from baco.reproduce.runners import RUNNERS, parse_params
from baco.reproduce.spec import RESULTS_DIR, ExperimentFile, find_experiment, to_plain
from baco.reproduce.store import CaseStore, write_atomic
from workloads.errors import BacoError, ConfigError


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a `reproduce` call did: where, the table's markdown, and the run's bookkeeping."""

    out: pathlib.Path
    table: str
    cases: int
    ran: int
    reused: int
    failed: tuple[tuple[str, str], ...]
    seconds: float
    files: tuple[str, ...]


def default_out(exp: ExperimentFile, quick: bool) -> pathlib.Path:
    return RESULTS_DIR / (exp.name + ("-quick" if quick else ""))


def plan(name: str, quick: bool = False) -> tuple[ExperimentFile, Any, list]:
    """The experiment `name` (or file), its checked parameters and its cases (nothing runs)."""
    exp = find_experiment(name)
    params = parse_params(exp.kind, exp.effective(quick), exp.source)
    cases = RUNNERS[exp.kind].cases(params)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dupe = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"{exp.source}: two cases share the id {dupe!r} (duplicate entries "
                          "in a list of the experiment?)")
    return exp, params, cases


def reproduce(name: str, *, quick: bool = False, out: str | os.PathLike | None = None,
              backend: str = "local", workers: int = 1, progress: bool = True) -> Outcome:
    """Run experiment `name` (``experiments/configs/NAME.yaml``, or a path to an experiment
    file) into `out`, resuming from the cases already there.

    Raises:
      ConfigError: the experiment file is wrong (named with its file and field).
      BacoError: some cases failed; the others are saved and the table is written from them.
    """
    start = time.perf_counter()
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    exp, params, cases = plan(name, quick)
    out_dir = pathlib.Path(out) if out is not None else default_out(exp, quick)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "experiment.json", json.dumps(
        {"name": exp.name, "kind": exp.kind, "source": exp.source, "quick": quick,
         "description": exp.description, "params": to_plain(params)}, indent=1) + "\n")
    store = CaseStore(out_dir)
    if progress:
        print(f"baco reproduce {exp.name}{' --quick' if quick else ''}: {len(cases)} cases "
              f"-> {out_dir} (backend {backend}, {workers} worker(s))", file=sys.stderr,
              flush=True)
    status = run_cases(exp.kind, cases, store, backend=backend, workers=workers,
                       progress=progress, label=exp.name)
    results = {c.id: store.load(c) for c in cases if store.finished(c)}
    table = RUNNERS[exp.kind].reduce(params, results, out_dir, len(cases))
    seconds = time.perf_counter() - start
    write_atomic(out_dir / "run.json", json.dumps(
        {"cases": len(cases), "ran": status["ran"], "reused": status["reused"],
         "failed": status["failed"], "seconds": round(seconds, 1), "backend": backend,
         "workers": workers}, indent=1) + "\n")
    files = tuple(sorted(p.name for p in out_dir.iterdir() if p.is_file()
                         and not p.name.startswith(".")))
    outcome = Outcome(out_dir, table, len(cases), status["ran"], status["reused"],
                      tuple(status["failed"]), seconds, files)
    if status["failed"]:
        first_id, first = status["failed"][0]
        raise BacoError(f"{exp.name}: {len(status['failed'])} of {len(cases)} cases failed "
                        f"(first: {first_id}: {first}); the finished ones are saved in "
                        f"{store.dir} and the table in {out_dir} is partial; rerun to retry")
    return outcome


__all__ = ["Outcome", "default_out", "plan", "reproduce"]
