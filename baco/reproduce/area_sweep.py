"""``baco sweep`` over area budgets (kind ``area_sweep``): the EDP-area Pareto front."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np

from baco.reproduce.end_to_end import EndToEnd
from baco.reproduce.methods import MethodSpec, method_case
from baco.reproduce.runner_io import (
    budgets_note,
    cached_network,
    infeasible_notes,
    infeasible_of,
    method_of,
    missing_note,
    save_plot,
    write_outputs,
)
from baco.reproduce.spec import to_plain
from baco.reproduce.store import Case, safe_id, write_atomic
from baco.reproduce.tables import csv_text, fmt, geomean, pareto_front
from workloads.errors import ConfigError


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
        net = cached_network(p["network"])
        budget = p["area_budget_mm2"]
        out = method_case(method_of(p["method"]), net, p["seed"], area_budget_mm2=budget)
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
            budgets_note(params.methods),
            *params.seed_notes, *infeasible_notes(infeasible_of(results)),
            *missing_note(n_cases, len(results))]
        text = write_outputs(out, params.title, notes, header, table, PARETO_HEADER, csv_rows)
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
        save_plot(fig, out / "pareto.png")
