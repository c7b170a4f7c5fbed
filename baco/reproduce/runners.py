"""The experiment kinds: how each expands into cases, runs one, and reduces the results.

A runner has a parameter dataclass (``Params``, read strictly from the experiment file), and

* ``cases(params) -> [Case]``: independent jobs, each a JSON-able parameter dict;
* ``run_case(case_params) -> dict``: one job, a pure function of its parameters (any process
  or Ray worker can run it);
* ``reduce(params, results, out) -> str``: the markdown table (also written, with the CSV and the
  plots, to ``out``); ``results`` maps case ids to their results and holds only finished ones.

Kinds: ``operators`` (Table 6.6), ``ablation`` (Table 6.7), ``end_to_end`` (Fig. 6.10 and
``baco sweep``), ``area_sweep`` (``baco sweep`` over area budgets: the EDP-area Pareto front),
``convergence`` (Fig. 6.11), ``rtl_accuracy`` (Fig. 6.12).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from baco.reproduce.methods import MethodSpec, check_methods, method_case
from baco.reproduce.spec import PROJECT_ROOT, parse, to_plain
from baco.reproduce.store import Case, safe_id, write_atomic
from baco.reproduce.tables import csv_text, fmt, geomean, markdown, pareto_front, ratio
from workloads.errors import ConfigError

# ----------------------------------------------------------------------------- shared helpers


@functools.cache
def _suite(name: str, seed: int) -> tuple:
    import workloads
    return tuple(workloads.suite(name, seed))


@functools.cache
def _network(name: str) -> Any:
    from baco.networks import load_network
    return load_network(name)


def spread(n_total: int, n: int | None) -> list[int]:
    """`n` indices spread evenly over ``range(n_total)`` (all of them if `n` is None).

    >>> spread(10, 3)
    [0, 4, 9]
    """
    if n is None or n >= n_total:
        return list(range(n_total))
    return sorted({round(float(x)) for x in np.linspace(0, n_total - 1, n)})


def _method(data: dict[str, Any]) -> MethodSpec:
    return MethodSpec(**data)


def _per_seed_geomean(results: dict[str, dict], ids: list[str], key: str) -> float | None:
    values = [results[i].get(key) for i in ids if i in results]
    values = [v for v in values if v is not None]
    return geomean(values) if values else None


def _write_outputs(out: pathlib.Path, title: str, notes: list[str], header: list[str],
                   rows: list[list[Any]], csv_header: list[str] | None = None,
                   csv_rows: list[list[Any]] | None = None, more: str = "") -> str:
    text = f"# {title}\n\n" + markdown(header, rows) + "\n"
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    text += more
    write_atomic(out / "table.md", text)
    write_atomic(out / "table.csv", csv_text(csv_header or header, csv_rows or rows))
    return text


def _save_plot(fig: Any, path: pathlib.Path) -> None:
    from baco.plots import save
    save(fig, path)


def _infeasible_of(results: dict[str, dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for cid, res in sorted(results.items()):
        if "infeasible" in res:
            out.setdefault(cid.split("__")[1], []).append(res["infeasible"])
    return out


def _infeasible_notes(infeasible: dict[str, list[str]]) -> list[str]:
    return [f"{label}: {len(msgs)} case(s) it cannot run, left out (first: {msgs[0]})"
            for label, msgs in sorted(infeasible.items())]


def _missing_note(expected: int, have: int, what: str = "cases") -> list[str]:
    if have < expected:
        return [(f"PARTIAL: {have} of {expected} {what} finished; rerun the same command to "
                "finish the rest.")]
    return []


# ----------------------------------------------------------------------------- Table 6.6
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
        return {s: spread(len(_suite(s, params.suite_seed)), params.cases_per_suite)
                for s in params.suites}

    def cases(self, params: OperatorParams) -> list[Case]:
        out = []
        for suite, indices in self.selected(params).items():
            nets = _suite(suite, params.suite_seed)
            for i in indices:
                for m in params.methods:
                    for seed in params.seeds:
                        out.append(Case(safe_id(nets[i].name, m.label, f"s{seed}"),
                                        {"suite": suite, "suite_seed": params.suite_seed,
                                         "index": i, "method": to_plain(m), "seed": seed}))
        return out

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        net = _suite(p["suite"], p["suite_seed"])[p["index"]]
        out = method_case(_method(p["method"]), net, p["seed"])
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
            + _budgets_note(params.methods, prefix=""),
        ]
        notes += _infeasible_notes(infeasible)
        notes += _missing_note(n_cases, len(results))
        text = _write_outputs(out, "Table 6.6: single-operator benchmark", notes, header, rows,
                              ["suite", "method", "cases", "cycles_geomean",
                               "energy_pj_geomean", "edp_ratio", "edp_ratio_plain",
                               "edp_ratio_sim", "seed_cycles", "seed_energy",
                               "seed_edp_ratio"], csv_rows)
        write_atomic(out / "cases.csv", csv_text(
            ["suite", "case", "method", "seed", "scorer", "cycles", "energy_pj", "edp",
             "edp_plain", "edp_sim", "samples", "pe_dim", "sp_kb", "acc_kb"],
            sorted(case_rows, key=lambda row: [str(x) for x in row])))
        from baco.plots import grouped_bars
        _save_plot(grouped_bars([s.upper() for s in params.suites], bars, reference=seed_bars,
                                title="Table 6.6: EDP relative to " + params.reference),
                   out / "edp_ratio.png")
        return text


def _budgets_note(methods: Sequence[MethodSpec], prefix: str = "Budgets: ") -> str:
    return prefix + ", ".join(f"{m.label} {m.search} {m.budget}" for m in methods) + "."


def _sim_ratio(mine: dict[str, dict[str, float]], ref: dict[str, dict[str, float]],
               cases: Sequence[str]) -> float | None:
    """Geomean simulated-EDP ratio over the cases both designs were simulated on."""
    both = [c for c in cases if "edp_sim" in mine[c] and "edp_sim" in ref[c]]
    return geomean(mine[c]["edp_sim"] / ref[c]["edp_sim"] for c in both) if both else None


# ----------------------------------------------------------------------------- Fig. 6.10 / sweep
@dataclasses.dataclass(frozen=True)
class EndToEndParams:
    """Fig. 6.10 (and ``baco sweep``): every method on every network, per seed."""

    methods: list[MethodSpec]
    networks: list[str] = dataclasses.field(default_factory=lambda: ["resnet50"])
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    reference: str = "Gemmini-BACO"
    seed_notes: list[str] = dataclasses.field(default_factory=list)
    title: str = "Fig. 6.10: end-to-end EDP"


class EndToEnd:
    kind = "end_to_end"
    Params = EndToEndParams
    history = False
    title = "Fig. 6.10: end-to-end EDP"

    def check(self, params: EndToEndParams, where: str) -> None:
        check_methods(params.methods, where, params.reference)
        from baco.networks import load_network
        for name in params.networks:
            try:
                load_network(name)
            except Exception as exc:  # noqa: BLE001 - reported with the field
                raise ConfigError(f"{where}: params.networks: {name!r}: {exc}") from None

    def cases(self, params: EndToEndParams) -> list[Case]:
        return [Case(safe_id(net, m.label, f"s{seed}"),
                     {"network": net, "method": to_plain(m), "seed": seed,
                      "history": self.history})
                for net in params.networks for m in params.methods for seed in params.seeds]

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        net = _network(p["network"])
        out = method_case(_method(p["method"]), net, p["seed"], history=p["history"],
                          layers=True)
        out["network"] = p["network"]
        return out

    def _table(self, params: EndToEndParams, results: dict[str, dict], tag: str | None = None
               ) -> tuple[dict[tuple[str, str], dict[str, Any]], list[str]]:
        """Per (network, label): the geomeans over seeds of the cases ``tag`` marks (none:
        the plain cases)."""
        labels = [m.label for m in params.methods]
        cells: dict[tuple[str, str], dict[str, Any]] = {}
        for net in params.networks:
            for label in labels:
                ids = [safe_id(net, label, f"s{s}", *([tag] if tag else []))
                       for s in params.seeds]
                found = [results[i] for i in ids if i in results and "infeasible" not in results[i]]
                if not found:
                    continue
                cells[(net, label)] = {
                    "edp": geomean(r["edp"] for r in found),
                    "edp_plain": geomean(r["edp_plain"] for r in found),
                    "edp_sim": (geomean(r["edp_sim"] for r in found)
                                if all(r.get("edp_sim") is not None for r in found) else None),
                    "cycles": geomean(r["cycles"] for r in found),
                    "energy_pj": geomean(r["energy_pj"] for r in found),
                    "seeds": len(found), "runs": found}
        return cells, labels

    def reduce(self, params: EndToEndParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        cells, labels = self._table(params, results)
        header = ["Network", "Method", "Seeds", "Cycles", "Energy (pJ)", "EDP (cycles x pJ)",
                  f"simulated EDP / {params.reference}", f"EDP / {params.reference}",
                  "plain-model EDP ratio"]
        rows, csv_rows = [], []
        bars: dict[str, list[float | None]] = {lb: [] for lb in labels}
        for net in params.networks:
            ref = cells.get((net, params.reference))
            for label in labels:
                c = cells.get((net, label))
                r = c["edp"] / ref["edp"] if c and ref else None
                rp = c["edp_plain"] / ref["edp_plain"] if c and ref else None
                rs = (c["edp_sim"] / ref["edp_sim"]
                      if c and ref and c["edp_sim"] and ref["edp_sim"] else None)
                bars[label].append(r)
                rows.append([net, label, c["seeds"] if c else 0,
                             fmt(c["cycles"]) if c else "-", fmt(c["energy_pj"]) if c else "-",
                             fmt(c["edp"]) if c else "-", ratio(rs), ratio(r), ratio(rp)])
                csv_rows.append([net, label, c["seeds"] if c else 0,
                                 *(c[k] if c else None for k in ("cycles", "energy_pj", "edp")),
                                 r, rp, rs])
        geo = ["all networks", "geomean", "", "", "", "", "", "", ""]
        rows.append(geo)
        for label in labels:
            vals = [v for v in bars[label] if v]
            rows.append(["", label, "", "", "", "", "",
                         ratio(geomean(vals) if len(vals) == len(params.networks) else None),
                         ""])
        notes = [
            (f"EDP: geometric mean over seeds {params.seeds} of each run's final design; "
            "Gemmini designs scored as DIM x DIM instructions run them (padding counted), "
            "Eyeriss/NVDLA on their own analytic templates; the last column puts every design "
            "on the plain analytic model, the simulated column runs each Gemmini design's "
            "emitted programs on the simulator (`baco.yardsticks`; '-' off Gemmini)."),
            _budgets_note(params.methods),
            *params.seed_notes, *_infeasible_notes(_infeasible_of(results)),
            *_missing_note(n_cases, len(results))]
        text = _write_outputs(out, params.title, notes, header, rows,
                              ["network", "method", "seeds", "cycles", "energy_pj", "edp",
                               "edp_ratio", "edp_ratio_plain", "edp_ratio_sim"], csv_rows)
        self._plots(params, cells, labels, bars, out)
        return text

    def _plots(self, params: EndToEndParams, cells: dict, labels: list[str], bars: dict,
               out: pathlib.Path) -> None:
        from baco.plots import energy_latency, grouped_bars, layer_breakdown
        _save_plot(grouped_bars(params.networks, bars, ylabel=f"EDP / {params.reference}",
                                title=getattr(params, "title", self.title)),
                   out / "edp_ratio.png")
        for net in params.networks:
            points = [(label, r["cycles"], r["energy_pj"]) for label in labels
                      for r in (cells.get((net, label)) or {}).get("runs", [])]
            ref_points = [i for i, p in enumerate(points) if p[0] == params.reference]
            if points:
                best = min(ref_points, key=lambda i: points[i][1] * points[i][2]) \
                    if ref_points else None
                _save_plot(energy_latency(points, chosen=best, title=f"{net}: designs found"),
                           out / f"tradeoff_{safe_id(net)}.png")
            breakdown = {}
            for label in labels:
                c = cells.get((net, label))
                if c and c["runs"][0].get("layers"):
                    run = min(c["runs"], key=lambda r: r["edp"])
                    breakdown[label] = [(x["name"], x["count"] * x["cycles"])
                                        for x in run["layers"]]
            if breakdown:
                _save_plot(layer_breakdown(breakdown, quantity="count x latency (cycles)",
                                           title=f"{net}: per-layer latency"),
                           out / f"layers_{safe_id(net)}.png")


# ----------------------------------------------------------------------------- area sweep
@dataclasses.dataclass(frozen=True)
class AreaSweepParams:
    """``baco sweep`` over area budgets: every method on every network, per budget and seed.

    ``area_budgets_mm2`` are the budgets (mm2, the template's area model; ``null``: none) each
    search is held to (`baco.config.CodesignConfig.area_budget_mm2`, the baselines'
    ``area_budget_mm2``). Fixed-hardware methods (``gemmini_default``, ``random_pruned``) give
    the same design at every budget and record whether it is within.
    """

    methods: list[MethodSpec]
    area_budgets_mm2: list[float | None]
    networks: list[str] = dataclasses.field(default_factory=lambda: ["resnet50"])
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    reference: str = "Gemmini-BACO"
    seed_notes: list[str] = dataclasses.field(default_factory=list)
    title: str = "EDP against area under area budgets"


def _budget_tag(budget: float | None) -> str:
    return "a-none" if budget is None else f"a{budget:g}"


PARETO_HEADER = ["network", "method", "area_budget_mm2", "seeds", "area_mm2", "edp",
                 "pareto", "area_mm2_plain", "edp_plain", "pareto_plain", "within_budget"]
"""Columns of ``pareto.csv``: per network, method and budget, the geometric-mean EDP over the
seeds on the main yardstick (instruction-aware on Gemmini) with the mean area of the hardware
it scored, the same on the plain model (the design's own hardware), and whether each point is
on its method's Pareto front (EDP and area both minimized)."""


class AreaSweep(EndToEnd):
    kind = "area_sweep"
    Params = AreaSweepParams
    title = "EDP against area under area budgets"

    def check(self, params: AreaSweepParams, where: str) -> None:
        super().check(params, where)
        from accel.arch import HardwareConfig
        from perfmodels.energy import check_area_budget
        if not params.area_budgets_mm2:
            raise ConfigError(f"{where}: params.area_budgets_mm2 is empty")
        for i, budget in enumerate(params.area_budgets_mm2):
            for m in params.methods:
                if m.search in ("gemmini_default", "random_pruned"):
                    continue        # fixed hardware: recorded as over the budget, not an error
                try:
                    step = float(m.options.get("sram_step_kb", 1.0))
                    check_area_budget(budget, HardwareConfig.preset(m.hardware), step,
                                      field=f"params.area_budgets_mm2[{i}]")
                except ConfigError as exc:
                    raise ConfigError(f"{where}: method {m.label!r}: {exc}") from None
        tags = [_budget_tag(b) for b in params.area_budgets_mm2]
        if len(set(tags)) != len(tags):
            raise ConfigError(f"{where}: params.area_budgets_mm2 lists a budget twice")

    def cases(self, params: AreaSweepParams) -> list[Case]:
        return [Case(safe_id(net, m.label, _budget_tag(b), f"s{seed}"),
                     {"network": net, "method": to_plain(m), "seed": seed,
                      "area_budget_mm2": b})
                for net in params.networks for m in params.methods
                for b in params.area_budgets_mm2 for seed in params.seeds]

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        net = _network(p["network"])
        budget = p["area_budget_mm2"]
        out = method_case(_method(p["method"]), net, p["seed"], area_budget_mm2=budget)
        out["network"] = p["network"]
        out["area_budget_mm2"] = budget
        out["summary"] += f", area {out['area_mm2']:.4g} mm2 (budget " + (
            "none)" if budget is None else f"{budget:g} mm2)")
        return out

    def points(self, params: AreaSweepParams, results: dict[str, dict]
               ) -> list[dict[str, Any]]:
        """One row per network, method and budget with a finished feasible seed (geometric
        mean EDP, mean areas over the seeds) and its Pareto flags (`PARETO_HEADER`)."""
        rows = []
        for net in params.networks:
            for m in params.methods:
                mine = []
                for b in params.area_budgets_mm2:
                    ids = [safe_id(net, m.label, _budget_tag(b), f"s{s}") for s in params.seeds]
                    found = [results[i] for i in ids
                             if i in results and "infeasible" not in results[i]]
                    if not found:
                        continue
                    area = float(np.mean([r["area_mm2_scored"] for r in found]))
                    area_plain = float(np.mean([r["area_mm2"] for r in found]))
                    mine.append({
                        "network": net, "method": m.label, "area_budget_mm2": b,
                        "seeds": len(found), "area_mm2": area,
                        "edp": geomean(r["edp"] for r in found),
                        "area_mm2_plain": area_plain,
                        "edp_plain": geomean(r["edp_plain"] for r in found),
                        "within_budget": b is None or area_plain <= b * (1 + 1e-6)})
                for key, a_key, e_key in (("pareto", "area_mm2", "edp"),
                                          ("pareto_plain", "area_mm2_plain", "edp_plain")):
                    flags = pareto_front([r[a_key] for r in mine], [r[e_key] for r in mine])
                    for r, f in zip(mine, flags):
                        r[key] = f
                rows += mine
        return rows

    def reduce(self, params: AreaSweepParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        rows = self.points(params, results)
        header = ["Network", "Method", "Budget (mm2)", "Seeds", "Area (mm2)", "EDP",
                  "front", "Area, plain (mm2)", "EDP, plain", "front (plain)", "within budget"]
        table = [[r["network"], r["method"],
                  "none" if r["area_budget_mm2"] is None else fmt(r["area_budget_mm2"]),
                  r["seeds"], fmt(r["area_mm2"]), fmt(r["edp"]), r["pareto"],
                  fmt(r["area_mm2_plain"]), fmt(r["edp_plain"]), r["pareto_plain"],
                  r["within_budget"]] for r in rows]
        csv_rows = [[r[k] for k in PARETO_HEADER] for r in rows]
        notes = [
            ("EDP: geometric mean over seeds " + str(params.seeds) + "; on Gemmini the design "
             "as DIM x DIM instructions run it (padding counted; buffers grown only within the "
             "budget), with the area of the hardware so scored; 'plain': the plain analytic "
             "model on the design's own hardware. 'front': on the method's EDP-area Pareto "
             "front (pareto.csv, pareto.png)."),
            _budgets_note(params.methods),
            *params.seed_notes, *_infeasible_notes(_infeasible_of(results)),
            *_missing_note(n_cases, len(results))]
        text = _write_outputs(out, params.title, notes, header, table, PARETO_HEADER, csv_rows)
        write_atomic(out / "pareto.csv", csv_text(PARETO_HEADER, csv_rows))
        self._pareto_plot(params, rows, out)
        return text

    def _pareto_plot(self, params: AreaSweepParams, rows: list[dict[str, Any]],
                     out: pathlib.Path) -> None:
        from matplotlib.figure import Figure

        from baco.plots import edp_area
        nets = params.networks
        fig = Figure(figsize=(11.0, 4.2 * len(nets)))
        axes = fig.subplots(len(nets), 2, squeeze=False)
        fig.subplots_adjust(wspace=0.3, hspace=0.35)
        budgets = [b for b in params.area_budgets_mm2 if b is not None]
        for i, net in enumerate(nets):
            for j, (a_key, e_key, f_key, what) in enumerate((
                    ("area_mm2", "edp", "pareto", "instruction-aware"),
                    ("area_mm2_plain", "edp_plain", "pareto_plain", "plain model"))):
                series = {m.label: [(r[a_key], r[e_key], r[f_key]) for r in rows
                                    if r["network"] == net and r["method"] == m.label]
                          for m in params.methods}
                edp_area(series, budgets=budgets, ax=axes[i][j],
                         title=f"{net}: EDP-area front ({what})", ylabel=f"EDP ({what})")
        _save_plot(fig, out / "pareto.png")


# ----------------------------------------------------------------------------- Fig. 6.11
@dataclasses.dataclass(frozen=True)
class ConvergenceParams:
    """Fig. 6.11: best EDP against samples for each search, per network and seed."""

    methods: list[MethodSpec]
    networks: list[str] = dataclasses.field(default_factory=lambda: ["resnet50"])
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    marks: list[int] = dataclasses.field(default_factory=lambda: [100, 500, 1000, 2000, 5000])
    reference: str = "BACO"
    seed_notes: list[str] = dataclasses.field(default_factory=list)
    judged_at: list[int] = dataclasses.field(default_factory=list)
    """Smaller budgets at which every search also runs anew, its final design judged on the
    three yardsticks: the @N columns compare each search on its own scorer, these on one."""


class Convergence(EndToEnd):
    kind = "convergence"
    Params = ConvergenceParams
    history = True
    title = "Fig. 6.11: best EDP against samples"

    def check(self, params: ConvergenceParams, where: str) -> None:
        super().check(params, where)
        bad = [b for b in params.judged_at if isinstance(b, bool) or b < 1]
        if bad:
            raise ConfigError(f"{where}: params.judged_at: budgets must be positive sample "
                              f"counts, got {bad[0]!r}")

    def cases(self, params: ConvergenceParams) -> list[Case]:
        return super().cases(params) + [
            Case(safe_id(net, m.label, f"s{seed}", f"b{b}"),
                 {"network": net, "method": to_plain(dataclasses.replace(m, budget=b)),
                  "seed": seed, "history": False})
            for b in params.judged_at for net in params.networks for m in params.methods
            for seed in params.seeds if b < m.budget]

    def judged(self, params: ConvergenceParams, results: dict[str, dict],
               cells: dict[tuple[str, str], dict[str, Any]]) -> tuple[str, list[list[Any]]]:
        """The table of each search's final design at every judged budget (its own budget
        included) relative to the reference's at the same budget, on the three yardsticks."""
        by_budget = {b: self._table(params, results, f"b{b}")[0] for b in params.judged_at}
        rows = []
        for net in params.networks:
            for b in sorted({*params.judged_at, *(m.budget for m in params.methods)}):
                got = {m.label: (by_budget.get(b, {}) if b < m.budget else cells)
                       .get((net, m.label)) for m in params.methods if b <= m.budget}
                ref = got.get(params.reference)
                for label, c in got.items():
                    if label == params.reference:
                        continue
                    rows.append([net, b, label, *[
                        c[k] / ref[k] if c and ref and c.get(k) and ref.get(k) else None
                        for k in ("edp_sim", "edp", "edp_plain")]])
        header = ["Network", "Samples", "Method", f"simulated / {params.reference}",
                  f"instr.-aware / {params.reference}", f"plain / {params.reference}"]
        text = ("\n## Final designs at each budget, on one yardstick\n\n"
                + markdown(header, [[*r[:3], *map(ratio, r[3:])] for r in rows]) + "\n\n"
                f"- Each search given N samples from the start (a search with a larger budget "
                f"plans differently: BACO's refinement takes the last 30%), its final design "
                f"judged by `baco.yardsticks`, relative to {params.reference}'s given the same "
                f"N; above 1: {params.reference} better.\n")
        return text, rows

    @staticmethod
    def best_at(history: list[list[float]], samples: int) -> float | None:
        vals = [e for s, e in history if s <= samples]
        return min(vals) if vals else None

    def reduce(self, params: ConvergenceParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        from baco.plots import convergence, energy_latency
        cells, labels = self._table(params, results)
        header = ["Network", "Method", "Seeds", *[f"best EDP @{m}" for m in params.marks],
                  *[f"/ {params.reference} @{m}" for m in params.marks],
                  "final EDP (instr.-aware)", f"final simulated / {params.reference}",
                  f"final instr.-aware / {params.reference}",
                  f"final plain / {params.reference}"]
        rows, csv_rows = [], []
        for net in params.networks:
            at: dict[str, list[float | None]] = {}
            for label in labels:
                c = cells.get((net, label))
                vals = []
                for mark in params.marks:
                    got = [self.best_at(r["history"], mark) for r in (c or {}).get("runs", [])]
                    vals.append(geomean(got) if got and all(g for g in got) else None)
                at[label] = vals
            ref = at.get(params.reference, [None] * len(params.marks))
            ref_cell = cells.get((net, params.reference)) or {}
            for label in labels:
                c = cells.get((net, label))
                ratios = [a / b if a and b else None for a, b in zip(at[label], ref)]
                finals = [c[k] / ref_cell[k] if c and c.get(k) and ref_cell.get(k) else None
                          for k in ("edp_sim", "edp", "edp_plain")]
                rows.append([net, label, c["seeds"] if c else 0, *map(fmt, at[label]),
                             *map(ratio, ratios), fmt(c["edp"]) if c else "-",
                             *map(ratio, finals)])
                csv_rows.append([net, label, c["seeds"] if c else 0, *at[label], *ratios,
                                 c["edp"] if c else None, *finals])
            curves = {}
            for label in labels:
                c = cells.get((net, label))
                if c:
                    curve = _geomean_curve([r["history"] for r in c["runs"]])
                    end = max(r["samples"] for r in c["runs"])
                    if curve and end > curve[-1][0]:
                        curve.append((end, curve[-1][1]))     # flat to the end of the budget
                    curves[label] = curve
            if curves:
                _save_plot(convergence(curves, title=f"{net}: best EDP against samples",
                                       log_x=True),
                           out / f"convergence_{safe_id(net)}.png")
            points = [(label, r["cycles"], r["energy_pj"]) for label in labels
                      for r in (cells.get((net, label)) or {}).get("runs", [])]
            if points:
                mine = [i for i, p in enumerate(points) if p[0] == params.reference]
                best = min(mine, key=lambda i: points[i][1] * points[i][2]) if mine else None
                _save_plot(energy_latency(points, chosen=best,
                                          title=f"{net}: final designs (common scorer)"),
                           out / f"tradeoff_{safe_id(net)}.png")
        notes = [
            ("best EDP @N: the best EDP the search had found within N samples (one sample = one "
            "whole-network point, `baco.result`), as the search scored it: BACO "
            "instruction-aware (padding counted), the baselines on the plain analytic model, "
            "which can only flatter them; geometric mean over seeds "
            f"{params.seeds} (a seed that had found nothing yet leaves the cell empty)."),
            ("final: each search's final design judged by `baco.yardsticks`: its EDP on the "
             "instruction-aware model, and its EDP relative to the reference's on the simulator "
             "(its programs run), the instruction-aware and the plain model."),
            _budgets_note(params.methods),
            *params.seed_notes, *_infeasible_notes(_infeasible_of(results)),
            *_missing_note(n_cases, len(results))]
        more, judged_rows = self.judged(params, results, cells) if params.judged_at else ("", [])
        if judged_rows:
            write_atomic(out / "judged.csv", csv_text(
                ["network", "samples", "method", "ratio_sim", "ratio", "ratio_plain"],
                judged_rows))
        return _write_outputs(out, self.title, notes, header, rows,
                              ["network", "method", "seeds",
                               *[f"best_edp_at_{m}" for m in params.marks],
                               *[f"ratio_at_{m}" for m in params.marks], "final_edp",
                               "final_ratio_sim", "final_ratio", "final_ratio_plain"],
                              csv_rows, more)


def _geomean_curve(histories: list[list[list[float]]]) -> list[tuple[float, float]]:
    """The geometric mean over runs of the best EDP so far, at every sample count where any
    run improved (from the first count where every run has a value)."""
    marks = sorted({int(s) for h in histories for s, _ in h})
    out = []
    for mark in marks:
        vals = [Convergence.best_at(h, mark) for h in histories]
        if all(v is not None for v in vals):
            out.append((mark, geomean(vals)))
    return out


# ----------------------------------------------------------------------------- Table 6.7
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
        out = method_case(_method(p["method"]), _network(p["network"]), p["seed"])
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
                 *status, *_infeasible_notes(_infeasible_of(results)),
                 *_missing_note(n_cases, len(results))]
        csv_rows = [[r.id, "+".join(r.components), *[edps[r.id][k] for _, k in sticks],
                     *[gains[k][i] for _, k in sticks], r.seed_improvement,
                     "not available" if unavailable(r) else ""]
                    for i, r in enumerate(params.rows)]
        text = _write_outputs(out, f"Table 6.7: ablation on {params.network}", notes, header,
                              rows, ["row", "components", "edp_sim", "edp", "edp_plain",
                                     "improvement_sim", "improvement", "improvement_plain",
                                     "seed_improvement", "status"],
                              csv_rows)
        improvement = gains["edp_sim"]
        from baco.plots import grouped_bars
        avail = [r for r, v in zip(params.rows, improvement) if v]
        if avail:
            _save_plot(grouped_bars([f"({r.id})" for r in avail],
                                    {"ours (simulated)": [v for v in improvement if v]},
                                    reference={"ours (simulated)":
                                               [r.seed_improvement for r in avail]},
                                    ylabel=f"EDP improvement over ({params.baseline})",
                                    title="Table 6.7: ablation", log=False),
                       out / "improvement.png")
        return text


# ----------------------------------------------------------------------------- Fig. 6.12
PREDICTORS = ("analytic", "sim", "hybrid")


@dataclasses.dataclass(frozen=True)
class RtlParams:
    """Fig. 6.12: predicted against measured cycles on DOSA's Gemmini RTL rows.

    ``data`` is relative to the project root. Held out (``split``): ``rows``, every
    ``held_out_every``-th row (the split the simulator's constants were fitted around,
    `accel.sim.rtl`), or ``layers``, every row of a seeded ``held_out_fraction`` of the
    distinct layers (`perfmodels.atformer.train.split_by_group`, ``split_seed``): no row of a
    held-out layer is seen in training. The hybrid trains on the rest. ``hybrid`` holds
    `perfmodels.atformer.TrainConfig` keys.
    """

    data: str = "data/gemmini_rtl_train.csv"
    limit: int | None = None
    predictors: list[str] = dataclasses.field(default_factory=lambda: list(PREDICTORS))
    chunk_rows: int = 200
    split: str = "rows"
    held_out_every: int = 5
    held_out_fraction: float = 0.2
    split_seed: int = 0
    hybrid: dict[str, Any] = dataclasses.field(default_factory=dict)
    hybrid_array_dim: int | None = None
    seed_correlation: dict[str, float] = dataclasses.field(default_factory=dict)


def hybrid_unavailable() -> str | None:
    """Why the hybrid (analytic + ATFormer) predictor cannot run here, or None."""
    if importlib.util.find_spec("perfmodels.atformer") is None:
        return "perfmodels.atformer is not installed (issue 7)"
    try:
        mod = importlib.import_module("perfmodels.atformer")
    except Exception as exc:  # noqa: BLE001 - any import failure makes it unavailable
        return f"perfmodels.atformer does not import ({type(exc).__name__}: {exc})"
    missing = [n for n in ("read_dataset", "TrainConfig") if not hasattr(mod, n)]
    if _trainer() is None:
        missing.append("train_surrogate")
    if missing:
        return f"perfmodels.atformer has no {', '.join(missing)}"
    return None


def _trainer() -> Any:
    """The surrogate's training function (``perfmodels.atformer.train_surrogate``, or the
    ``train`` function of ``perfmodels.atformer.train``), or None."""
    import perfmodels.atformer as at
    fn = getattr(at, "train_surrogate", None)
    if callable(fn):
        return fn
    try:
        fn = getattr(importlib.import_module("perfmodels.atformer.train"), "train", None)
    except ImportError:
        return None
    return fn if callable(fn) else None


def _split_of(params: RtlParams) -> dict[str, Any]:
    if params.split == "rows":
        return {"held_out_every": params.held_out_every}
    return {"split": "layers", "held_out_fraction": params.held_out_fraction,
            "split_seed": params.split_seed}


def held_out(p: dict[str, Any], index: np.ndarray) -> np.ndarray:
    """Which of the rows `index` (row numbers of ``p["data"]``) are held out by the split
    ``p`` describes (`RtlParams`)."""
    index = np.asarray(index)
    if p.get("split", "rows") == "rows":
        return index % p["held_out_every"] == 0
    held = _held_out_rows(str((PROJECT_ROOT / p["data"]).resolve()), p.get("limit"),
                          float(p["held_out_fraction"]), int(p["split_seed"]))
    return np.isin(index, held)


@functools.lru_cache(maxsize=8)
def _held_out_rows(path: str, limit: int | None, fraction: float, seed: int) -> np.ndarray:
    """Row numbers of the held-out layers' rows (the groups are `layer_key`s over all rows,
    so every predictor's cases share one split)."""
    from perfmodels.atformer.train import layer_key, split_by_group
    from perfmodels.validate import read_rows
    rows = read_rows(path, limit=limit, strict=False, cycles_key="target.gemmini_cycle")
    keys: dict[tuple, int] = {}
    group = np.array([keys.setdefault(layer_key(r.layer), len(keys)) for r in rows])
    return np.array([r.index for r in rows])[split_by_group(group, fraction, seed)]


class RtlAccuracy:
    kind = "rtl_accuracy"
    Params = RtlParams

    def check(self, params: RtlParams, where: str) -> None:
        for p in params.predictors:
            if p not in PREDICTORS:
                raise ConfigError(f"{where}: params.predictors: unknown predictor {p!r} "
                                  f"(known: {', '.join(PREDICTORS)})")
        if not self.path(params).exists():
            raise ConfigError(f"{where}: params.data: {self.path(params)} does not exist")
        if params.chunk_rows < 1 or params.held_out_every < 2:
            raise ConfigError(f"{where}: params.chunk_rows must be >= 1 and "
                              "params.held_out_every >= 2")
        if params.split not in ("rows", "layers"):
            raise ConfigError(f"{where}: params.split must be 'rows' or 'layers', got "
                              f"{params.split!r}")
        if not 0.0 < params.held_out_fraction < 1.0:
            raise ConfigError(f"{where}: params.held_out_fraction must be in (0, 1), got "
                              f"{params.held_out_fraction}")

    @staticmethod
    def path(params: RtlParams) -> pathlib.Path:
        return (PROJECT_ROOT / params.data).resolve()

    def n_rows(self, params: RtlParams) -> int:
        with self.path(params).open() as fh:
            n = sum(1 for _ in fh) - 1
        return n if params.limit is None else min(n, params.limit)

    def cases(self, params: RtlParams) -> list[Case]:
        base = {"data": params.data, "limit": params.limit,
                "held_out_every": params.held_out_every}
        out = []
        for p in params.predictors:
            if p == "sim":
                n = self.n_rows(params)
                for start in range(0, n, params.chunk_rows):
                    stop = min(n, start + params.chunk_rows)
                    out.append(Case(f"sim__rows-{start:05d}-{stop:05d}",
                                    {**base, "predictor": p, "start": start, "stop": stop}))
            elif p == "hybrid" and hybrid_unavailable():
                continue
            else:
                extra = ({"train": params.hybrid, "array_dim": params.hybrid_array_dim,
                          **_split_of(params)} if p == "hybrid" else {})
                out.append(Case(p, {**base, "predictor": p, **extra}))
        return out

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        p = {**p, "data": str((PROJECT_ROOT / p["data"]).resolve())}
        pred = p["predictor"]
        if pred == "sim":
            from accel.sim.rtl import read_rtl_csv, simulate_rows
            rows = read_rtl_csv(p["data"], limit=p["stop"])[p["start"]:p["stop"]]
            cycles = simulate_rows(rows)
            return {"predictor": pred, "index": [r.index for r in rows],
                    "predicted": [float(c) for c in cycles],
                    "measured": [r.cycles for r in rows],
                    "summary": f"rows {p['start']}-{p['stop']} simulated"}
        if pred == "analytic":
            from perfmodels.validate import evaluate_rows, read_rows
            rows = read_rows(p["data"], limit=p["limit"], strict=False,
                             cycles_key="target.gemmini_cycle")
            cycles = np.asarray(evaluate_rows(rows).cycles, np.float64)
            return {"predictor": pred, "index": [r.index for r in rows],
                    "predicted": [float(c) for c in cycles],
                    "measured": [r.cycles for r in rows],
                    "summary": f"{len(rows)} rows scored"}
        # hybrid: train the residual on the training split, predict every row
        reason = hybrid_unavailable()
        if reason:
            raise ConfigError(f"hybrid predictor: {reason}")
        import perfmodels.atformer as at
        rows, data = at.read_dataset(p["data"], limit=p["limit"], array_dim=p["array_dim"])
        index = np.array([r.index for r in rows])
        train_rows = np.flatnonzero(~held_out(p, index))
        surrogate = _trainer()(data.take(train_rows), at.TrainConfig.from_dict(p["train"]))
        cycles = surrogate.predict_tokens(data.tokens)
        return {"predictor": pred, "index": index.tolist(),
                "predicted": [float(c) for c in cycles], "measured": [r.cycles for r in rows],
                "summary": f"trained on {len(train_rows)} rows, MAPE calibration "
                           f"x{getattr(surrogate, 'scale', 1.0):.3f}",
                "train_info": json.loads(json.dumps(surrogate.info, default=str))}

    def reduce(self, params: RtlParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        from accel.sim.rtl import metrics
        from baco.plots import predicted_vs_measured
        series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for pred in params.predictors:
            parts = sorted((r for r in results.values() if r.get("predictor") == pred),
                           key=lambda r: r["index"][0])
            if parts:
                idx = np.concatenate([r["index"] for r in parts])
                series[pred] = (idx, np.concatenate([r["predicted"] for r in parts]),
                                np.concatenate([r["measured"] for r in parts]))
        header = ["Predictor", "Rows", "split", "Pearson", "Pearson (log)", "Spearman", "MAPE",
                  "seed correlation (test)"]
        rows, csv_rows = [], []
        for pred in params.predictors:
            if pred not in series:
                why = hybrid_unavailable() if pred == "hybrid" else "not run yet"
                rows.append([pred, 0, "-", "-", "-", "-", "-",
                             fmt(params.seed_correlation.get(pred))])
                csv_rows.append([pred, 0, "", None, None, None, None,
                                 params.seed_correlation.get(pred), f"not available: {why}"])
                continue
            idx, p, m = series[pred]
            held = held_out({"data": params.data, "limit": params.limit, **_split_of(params)},
                            idx)
            for split, mask in (("held-out", held), ("all", np.ones_like(held))):
                if mask.sum() < 2:
                    continue
                f = metrics(p[mask], m[mask])
                rows.append([pred, f["rows"], split, f"{f['pearson']:.3f}",
                             f"{f['pearson_log']:.3f}", f"{f['spearman']:.3f}",
                             f"{100 * f['mape']:.1f}%",
                             fmt(params.seed_correlation.get(pred)) if split == "held-out"
                             else ""])
                csv_rows.append([pred, f["rows"], split, f["pearson"], f["pearson_log"],
                                 f["spearman"], f["mape"], params.seed_correlation.get(pred),
                                 ""])
        split = (f"every {params.held_out_every}th row (by index)" if params.split == "rows"
                 else f"all rows of {params.held_out_fraction:.0%} of the distinct layers "
                      f"(seed {params.split_seed}; no row of a held-out layer in training)")
        notes = [(f"Data: {params.data} ({'first ' + str(params.limit) if params.limit else 'all'}"
                 f" rows); held-out split: {split}, the hybrid trains on the rest."),
                 ("analytic: the exact analytical model on each row's architecture columns "
                 "(the Timeloop model that drew the mapping); sim: the lowered trace on the "
                 "RTL chip model, each row on the array it ran on "
                 "(`accel.sim.rtl.simulate_rows`); hybrid: analytic x exp(ATFormer residual) "
                 "x a MAPE calibration factor fitted on the training rows' own validation "
                 "layers (`perfmodels.atformer`).")]
        if "hybrid" in params.predictors and hybrid_unavailable():
            notes.append(f"hybrid not available: {hybrid_unavailable()}")
        notes += _missing_note(n_cases, len(results))
        text = _write_outputs(out, "Fig. 6.12: predicted against measured cycles (Gemmini RTL)",
                              notes, header, rows,
                              ["predictor", "rows", "split", "pearson", "pearson_log",
                               "spearman", "mape", "seed_correlation", "status"], csv_rows)
        if series:
            any_idx = next(iter(series.values()))[0]
            same = all(np.array_equal(s[0], any_idx) for s in series.values())
            mask = held_out({"data": params.data, "limit": params.limit, **_split_of(params)},
                            any_idx)
            _save_plot(predicted_vs_measured(
                {k: (v[1], v[2]) for k, v in series.items()},
                highlight=mask if same else None,
                title="Fig. 6.12: predicted vs measured (held-out filled)"),
                out / "predicted_vs_measured.png")
        return text


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


__all__ = ["PREDICTORS", "RUNNERS", "hybrid_unavailable", "missing_fields", "parse_params",
           "spread"]
