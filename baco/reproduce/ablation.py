"""Table 6.7 (kind ``ablation``): which search components buy how much EDP."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from baco.reproduce.methods import MethodSpec, check_methods, method_case
from baco.reproduce.runner_io import (
    cached_network,
    infeasible_notes,
    infeasible_of,
    method_of,
    missing_note,
    save_plot,
    write_outputs,
)
from baco.reproduce.spec import to_plain
from baco.reproduce.store import Case, safe_id
from baco.reproduce.tables import fmt, geomean, ratio
from workloads.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class AblationRow:
    """One column of Table 6.7: which components are on, and the method that has them.
    ``requires``: `CodesignConfig` fields the row needs (the row is "not available" when the
    installed code lacks one)."""

    id: str
    method: MethodSpec
    components: list[str] = dataclasses.field(default_factory=list)
    requires: list[str] = dataclasses.field(default_factory=list)
    seed_improvement: float | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class AblationParams:
    rows: list[AblationRow]
    network: str = "resnet50"
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    baseline: str = "a"
    components: list[str] = dataclasses.field(default_factory=lambda: [
        "Block Partition", "Infer HW Config", "Analytical Perf. Model", "Learned Perf. Model",
        "Importance Estimation"])


def missing_fields(required: list[str]) -> list[str]:
    from baco.config import CodesignConfig
    names = {f.name for f in dataclasses.fields(CodesignConfig)}
    return [r for r in required if r not in names]


def unavailable(row: AblationRow) -> str | None:
    """Why the installed code cannot run `row` (a `CodesignConfig` field it needs is missing,
    or the surrogate folder its options name does not exist), or None."""
    from baco.reproduce.methods import resolve_path
    missing = missing_fields(row.requires)
    if missing:
        return f"CodesignConfig has no field {', '.join(repr(m) for m in missing)}"
    model = row.method.options.get("model")
    if isinstance(model, str) and not resolve_path(model).exists():
        return (f"no surrogate at {model} (train it: baco surrogate train --data "
                f"data/gemmini_rtl_train.csv --out {model} ...)")
    return None


def _per_seed_geomean(results: dict[str, dict], ids: list[str], key: str) -> float | None:
    values = [results[i].get(key) for i in ids if i in results]
    values = [v for v in values if v is not None]
    return geomean(values) if values else None


class Ablation:
    kind = "ablation"
    Params = AblationParams

    def check(self, params: AblationParams, where: str) -> None:
        ids = [r.id for r in params.rows]
        if params.baseline not in ids:
            raise ConfigError(f"{where}: params.baseline {params.baseline!r} is not a row id")
        for r in params.rows:
            for comp in r.components:
                if comp not in params.components:
                    raise ConfigError(f"{where}: row {r.id!r}: unknown component {comp!r} "
                                      f"(known: {', '.join(params.components)})")
        check_methods([r.method for r in params.rows if not unavailable(r)], where)

    def cases(self, params: AblationParams) -> list[Case]:
        return [Case(safe_id(params.network, f"row-{r.id}", f"s{seed}"),
                     {"network": params.network, "row": r.id, "method": to_plain(r.method),
                      "seed": seed})
                for r in params.rows if not unavailable(r) for seed in params.seeds]

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        out = method_case(method_of(p["method"]), cached_network(p["network"]), p["seed"])
        out["row"] = p["row"]
        return out

    def reduce(self, params: AblationParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        # The three yardsticks (`baco.yardsticks`), simulated first: geomean EDP over seeds
        # per row, and the improvement over the baseline row on each.
        sticks = (("simulated", "edp_sim"), ("instr.-aware", "edp"), ("plain model", "edp_plain"))
        edps: dict[str, dict[str, float | None]] = {}
        for r in params.rows:
            ids = [safe_id(params.network, f"row-{r.id}", f"s{s}") for s in params.seeds]
            edps[r.id] = {key: _per_seed_geomean(results, ids, key) for _, key in sticks}
        gains: dict[str, list[float | None]] = {key: [] for _, key in sticks}
        status = []
        for r in params.rows:
            why = unavailable(r)
            if why:
                status.append(f"({r.id}) not available: {why}")
            for _, key in sticks:
                base, e = edps[params.baseline][key], edps[r.id][key]
                gains[key].append(base / e if base and e and not why else None)
        header = ["Setting", *[f"({r.id})" for r in params.rows]]
        rows = [[comp, *["✓" if comp in r.components else "" for r in params.rows]]
                for comp in params.components]
        for name, key in sticks:
            rows.append([f"EDP {name} (cycles x pJ, geomean over seeds)",
                         *[fmt(edps[r.id][key]) if edps[r.id][key] else
                           ("n/a" if unavailable(r) else "-") for r in params.rows]])
        for name, key in sticks:
            rows.append([f"Improvement ({name})",
                         *[ratio(v) if v else ("n/a" if unavailable(r) else "-")
                           for v, r in zip(gains[key], params.rows)]])
        rows.append(["Improvement (seed)", *[ratio(r.seed_improvement) for r in params.rows]])
        notes = [(f"Network {params.network}; seeds {params.seeds}; improvement = EDP of "
                 f"({params.baseline}) / EDP of the row, every design judged by "
                 "`baco.yardsticks`: simulated (its programs on the simulator), "
                 "instr.-aware (as DIM x DIM instructions run it, padding counted) and on the "
                 "plain analytic model."),
                 *[f"({r.id}) {r.method.search} on {r.method.hardware}, budget "
                   f"{r.method.budget}, options {json.dumps(r.method.options)}"
                   + (f" -- {r.note}" if r.note else "") for r in params.rows],
                 *status, *infeasible_notes(infeasible_of(results)),
                 *missing_note(n_cases, len(results))]
        csv_rows = [[r.id, "+".join(r.components), *[edps[r.id][k] for _, k in sticks],
                     *[gains[k][i] for _, k in sticks], r.seed_improvement,
                     "not available" if unavailable(r) else ""]
                    for i, r in enumerate(params.rows)]
        text = write_outputs(out, f"Table 6.7: ablation on {params.network}", notes, header,
                             rows, ["row", "components", "edp_sim", "edp", "edp_plain",
                                    "improvement_sim", "improvement", "improvement_plain",
                                    "seed_improvement", "status"],
                             csv_rows)
        improvement = gains["edp_sim"]
        from baco.plots import grouped_bars
        avail = [r for r, v in zip(params.rows, improvement) if v]
        if avail:
            save_plot(grouped_bars([f"({r.id})" for r in avail],
                                    {"ours (simulated)": [v for v in improvement if v]},
                                   reference={"ours (simulated)":
                                               [r.seed_improvement for r in avail]},
                                   ylabel=f"EDP improvement over ({params.baseline})",
                                   title="Table 6.7: ablation", log=False),
                      out / "improvement.png")
        return text
