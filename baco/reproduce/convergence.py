"""Fig. 6.11 (kind ``convergence``): best EDP against samples for each search, and the final
designs judged on one yardstick."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from baco.reproduce.end_to_end import EndToEnd
from baco.reproduce.methods import MethodSpec
from baco.reproduce.runner_io import (
    budgets_note,
    infeasible_notes,
    infeasible_of,
    missing_note,
    save_plot,
    write_outputs,
)
from baco.reproduce.spec import to_plain
from baco.reproduce.store import Case, safe_id, write_atomic
from baco.reproduce.tables import csv_text, fmt, geomean, markdown, ratio
from workloads.errors import ConfigError


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
                save_plot(convergence(curves, title=f"{net}: best EDP against samples",
                                      log_x=True),
                          out / f"convergence_{safe_id(net)}.png")
            points = [(label, r["cycles"], r["energy_pj"]) for label in labels
                      for r in (cells.get((net, label)) or {}).get("runs", [])]
            if points:
                mine = [i for i, p in enumerate(points) if p[0] == params.reference]
                best = min(mine, key=lambda i: points[i][1] * points[i][2]) if mine else None
                save_plot(energy_latency(points, chosen=best,
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
            budgets_note(params.methods),
            *params.seed_notes, *infeasible_notes(infeasible_of(results)),
            *missing_note(n_cases, len(results))]
        more, judged_rows = self.judged(params, results, cells) if params.judged_at else ("", [])
        if judged_rows:
            write_atomic(out / "judged.csv", csv_text(
                ["network", "samples", "method", "ratio_sim", "ratio", "ratio_plain"],
                judged_rows))
        return write_outputs(out, self.title, notes, header, rows,
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
