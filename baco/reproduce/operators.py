"""Table 6.6 (kind ``operators``): every method on every selected case of the operator
suites."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

from baco.reproduce.methods import MethodSpec, check_methods, method_case
from baco.reproduce.runner_io import (
    budgets_note,
    cached_suite,
    infeasible_notes,
    method_of,
    missing_note,
    save_plot,
    spread,
    write_outputs,
)
from baco.reproduce.spec import to_plain
from baco.reproduce.store import Case, safe_id, write_atomic
from baco.reproduce.tables import csv_text, fmt, geomean, ratio
from workloads.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class OperatorParams:
    """Table 6.6: every method on every selected case of the operator suites.

    ``cases_per_suite`` picks that many cases spread evenly over each suite's evaluated subset
    (null: all of them). ``seed_table`` holds the seed's printed values, per suite and method
    label: ``[cycles, energy, edp_ratio]``, shown beside ours.
    """

    methods: list[MethodSpec]
    suites: list[str] = dataclasses.field(
        default_factory=lambda: ["gemm", "gemv", "conv1d", "conv2d"])
    suite_seed: int = 0
    cases_per_suite: int | None = None
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    reference: str = "Gemmini-BACO"
    seed_table: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)


class Operators:
    kind = "operators"
    Params = OperatorParams

    def check(self, params: OperatorParams, where: str) -> None:
        import workloads
        check_methods(params.methods, where, params.reference)
        for s in params.suites:
            if s not in workloads.suite_names():
                raise ConfigError(f"{where}: params.suites: unknown suite {s!r} (known: "
                                  f"{', '.join(workloads.suite_names())})")

    def selected(self, params: OperatorParams) -> dict[str, list[int]]:
        return {s: spread(len(cached_suite(s, params.suite_seed)), params.cases_per_suite)
                for s in params.suites}

    def cases(self, params: OperatorParams) -> list[Case]:
        out = []
        for suite, indices in self.selected(params).items():
            nets = cached_suite(suite, params.suite_seed)
            for i in indices:
                for m in params.methods:
                    for seed in params.seeds:
                        out.append(Case(safe_id(nets[i].name, m.label, f"s{seed}"),
                                        {"suite": suite, "suite_seed": params.suite_seed,
                                         "index": i, "method": to_plain(m), "seed": seed}))
        return out

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        net = cached_suite(p["suite"], p["suite_seed"])[p["index"]]
        out = method_case(method_of(p["method"]), net, p["seed"])
        out.update({"case": net.name, "suite": p["suite"], "macs": net.total_macs})
        return out

    def reduce(self, params: OperatorParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        labels = [m.label for m in params.methods]
        per: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
        infeasible: dict[str, list[str]] = {}
        case_rows = []
        for res in results.values():
            if "infeasible" in res:
                continue
            per.setdefault((res["suite"], res["method"]), {}).setdefault(res["case"], {})
            slot = per[(res["suite"], res["method"])][res["case"]]
            for key in ("cycles", "energy_pj", "edp", "edp_plain", "edp_sim"):
                if res.get(key) is not None:      # no edp_sim off Gemmini (or in older cases)
                    slot.setdefault(key, []).append(res[key])
            case_rows.append([res["suite"], res["case"], res["method"], res["seed"],
                              res["scorer"], res["cycles"], res["energy_pj"], res["edp"],
                              res["edp_plain"], res.get("edp_sim"), res["samples"],
                              res["hardware"]["pe_rows"],
                              res["hardware"]["sp_kb"], res["hardware"]["acc_kb"]])
        for cid, res in sorted(results.items()):
            if "infeasible" in res:
                infeasible.setdefault(cid.split("__")[1], []).append(res["infeasible"])

        def agg(suite: str, label: str) -> dict[str, dict[str, float]]:
            return {case: {k: geomean(v) for k, v in vals.items()}
                    for case, vals in per.get((suite, label), {}).items()}

        header = ["Benchmark", "Accelerator", "#Cases", "Cycles", "Energy (pJ)",
                  "EDP (simulated)", "EDP (instr.-aware)", "EDP (plain model)", "seed Cycles",
                  "seed Energy", "seed EDP"]
        rows, csv_rows, bars, seed_bars = [], [], {lb: [] for lb in labels}, {}
        overall: dict[str, list[float]] = {lb: [] for lb in labels}
        for suite in params.suites:
            ref = agg(suite, params.reference)
            for label in labels:
                mine = agg(suite, label)
                common = sorted(set(mine) & set(ref))
                cyc = geomean(mine[c]["cycles"] for c in common) if common else None
                en = geomean(mine[c]["energy_pj"] for c in common) if common else None
                edp = (geomean(mine[c]["edp"] / ref[c]["edp"] for c in common)
                       if common else None)
                plain = (geomean(mine[c]["edp_plain"] / ref[c]["edp_plain"] for c in common)
                         if common else None)
                sim = _sim_ratio(mine, ref, common)
                if common:
                    overall[label] += [mine[c]["edp"] / ref[c]["edp"] for c in common]
                seed = params.seed_table.get(suite, {}).get(label, [None, None, None])
                rows.append([suite.upper() if len(suite) <= 4 else suite, label, len(common),
                             fmt(cyc), fmt(en), ratio(sim), ratio(edp), ratio(plain),
                             fmt(seed[0]), fmt(seed[1]), ratio(seed[2])])
                csv_rows.append([suite, label, len(common), cyc, en, edp, plain, sim, *seed])
                bars[label].append(edp)
                seed_bars.setdefault(label, []).append(seed[2])
        rows.append(["all four", "geomean EDP", "", "", "", "", "", "", "", "", ""])
        for label in labels:
            seed_vals = [v for v in seed_bars.get(label, []) if v]
            seed_geo = geomean(seed_vals) if len(seed_vals) == len(params.suites) else None
            rows.append(["", label, len(overall[label]), "", "", "",
                         ratio(geomean(overall[label]) if overall[label] else None), "", "",
                         "", ratio(seed_geo)])
        notes = [
            ("Cycles and Energy: geometric means over the cases both this method and "
            f"{params.reference} could map; EDP: geometric mean of the per-case EDP ratio to "
            f"{params.reference} (= the ratio of the geomean cycles x energy, as the seed's)."),
            ("Yardsticks (`baco.yardsticks`): 'EDP (simulated)': each Gemmini design's "
            "emitted programs on the simulator (cases where both designs simulate; none off "
            "Gemmini); 'EDP (instr.-aware)': Gemmini designs as DIM x DIM instructions run "
            "them (padding counted), Eyeriss/NVDLA on their own analytic templates; 'EDP "
            "(plain model)': every design on the plain analytic model."),
            f"Cases per suite: {params.cases_per_suite or 'all'} (suite seed "
            f"{params.suite_seed}); search seeds {params.seeds}; budgets: "
            + budgets_note(params.methods, prefix=""),
        ]
        notes += infeasible_notes(infeasible)
        notes += missing_note(n_cases, len(results))
        text = write_outputs(out, "Table 6.6: single-operator benchmark", notes, header, rows,
                              ["suite", "method", "cases", "cycles_geomean",
                               "energy_pj_geomean", "edp_ratio", "edp_ratio_plain",
                               "edp_ratio_sim", "seed_cycles", "seed_energy",
                               "seed_edp_ratio"], csv_rows)
        write_atomic(out / "cases.csv", csv_text(
            ["suite", "case", "method", "seed", "scorer", "cycles", "energy_pj", "edp",
             "edp_plain", "edp_sim", "samples", "pe_dim", "sp_kb", "acc_kb"],
            sorted(case_rows, key=lambda row: [str(x) for x in row])))
        from baco.plots import grouped_bars
        save_plot(grouped_bars([s.upper() for s in params.suites], bars, reference=seed_bars,
                               title="Table 6.6: EDP relative to " + params.reference),
                  out / "edp_ratio.png")
        return text


def _sim_ratio(mine: dict[str, dict[str, float]], ref: dict[str, dict[str, float]],
               cases: Sequence[str]) -> float | None:
    """Geomean simulated-EDP ratio over the cases both designs were simulated on."""
    both = [c for c in cases if "edp_sim" in mine[c] and "edp_sim" in ref[c]]
    return geomean(mine[c]["edp_sim"] / ref[c]["edp_sim"] for c in both) if both else None
