"""The experiment kinds: how each expands into cases, runs one, and reduces the results.

A runner has a parameter dataclass (``Params``, read strictly from the experiment file), and

* ``cases(params) -> [Case]``: independent jobs, each a JSON-able parameter dict;
* ``run_case(case_params) -> dict``: one job, a pure function of its parameters (any process
  or Ray worker can run it);
* ``reduce(params, results, out) -> str``: the markdown table (also written, with the CSV and the
  plots, to ``out``); ``results`` maps case ids to their results and holds only finished ones.

Kinds: ``operators`` (Table 6.6, `baco.reproduce.operators`), ``ablation`` (Table 6.7,
`baco.reproduce.ablation`), ``end_to_end`` (Fig. 6.10 and ``baco sweep``,
`baco.reproduce.end_to_end`), ``area_sweep`` (``baco sweep`` over area budgets: the EDP-area
Pareto front, `baco.reproduce.area_sweep`), ``convergence`` (Fig. 6.11,
`baco.reproduce.convergence`), ``rtl_accuracy`` (Fig. 6.12, `baco.reproduce.rtl_accuracy`).
What they share to read and write is in `baco.reproduce.runner_io`; this module maps each
kind to its runner.
"""

from __future__ import annotations

from typing import Any

from baco.reproduce.ablation import Ablation
from baco.reproduce.area_sweep import AreaSweep
from baco.reproduce.convergence import Convergence
from baco.reproduce.end_to_end import EndToEnd
from baco.reproduce.operators import Operators
from baco.reproduce.rtl_accuracy import RtlAccuracy
from baco.reproduce.spec import parse
from workloads.errors import ConfigError

RUNNERS: dict[str, Any] = {r.kind: r for r in (Operators(), EndToEnd(), AreaSweep(),
                                               Convergence(), Ablation(), RtlAccuracy())}
"""Kind -> runner."""


def parse_params(kind: str, data: dict[str, Any], where: str) -> Any:
    if kind not in RUNNERS:
        raise ConfigError(f"{where}: unknown kind {kind!r} (known: {', '.join(RUNNERS)})")
    runner = RUNNERS[kind]
    params = parse(runner.Params, data, "params", where)
    runner.check(params, where)
    return params


__all__ = ["RUNNERS", "parse_params"]
