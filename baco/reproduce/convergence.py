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
from baco.reproduce.store import Case, CaseStore, safe_id, write_atomic
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
    time_marks: list[float] = dataclasses.field(default_factory=lambda: [60.0, 300.0])
    """Wall-clock seconds at which the table also gives each search's best (the @Ns columns):
    a search that costs more per sample is compared at equal time, not only equal samples."""


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
        bad = [t for t in params.time_marks if isinstance(t, bool) or not t > 0]
        if bad:
            raise ConfigError(f"{where}: params.time_marks: marks must be positive seconds, "
                              f"got {bad[0]!r}")

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
    def best_at(history: list[list[float]], at: float) -> float | None:
        """The best EDP of `history` (``[x, best_edp]`` pairs: samples or seconds) by `at`."""
        vals = [e for s, e in history if s <= at]
        return min(vals) if vals else None

    def reduce(self, params: ConvergenceParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        cells, labels = self._table(params, results)
        ref, n = params.reference, len(params.marks)
        secs = [_seconds_mark(t) for t in params.time_marks]
        header = ["Network", "Method", "Seeds", *[f"best EDP @{m}" for m in params.marks],
                  *[f"/ {ref} @{m}" for m in params.marks],
                  *[f"best EDP @{t}" for t in secs], *[f"/ {ref} @{t}" for t in secs],
                  "final EDP (instr.-aware)", f"final simulated / {ref}",
                  f"final instr.-aware / {ref}", f"final plain / {ref}"]
        rows, csv_rows = [], []
        for net in params.networks:
            at = {}
            for label in labels:
                runs = (cells.get((net, label)) or {}).get("runs", [])
                at[label] = [*_at_marks(runs, "history", params.marks),
                             *_at_marks(runs, "history_seconds", params.time_marks)]
            ref_at = at.get(ref, [None] * (n + len(secs)))
            ref_cell = cells.get((net, ref)) or {}
            for label in labels:
                c = cells.get((net, label))
                ratios = [a / b if a and b else None for a, b in zip(at[label], ref_at)]
                finals = [c[k] / ref_cell[k] if c and c.get(k) and ref_cell.get(k) else None
                          for k in ("edp_sim", "edp", "edp_plain")]
                seeds = c["seeds"] if c else 0
                rows.append([net, label, seeds, *map(fmt, at[label][:n]),
                             *map(ratio, ratios[:n]), *map(fmt, at[label][n:]),
                             *map(ratio, ratios[n:]), fmt(c["edp"]) if c else "-",
                             *map(ratio, finals)])
                csv_rows.append([net, label, seeds, *at[label][:n], *ratios[:n],
                                 *at[label][n:], *ratios[n:], c["edp"] if c else None, *finals])
            self._plots(params, cells, labels, net, out)
        notes = [
            ("best EDP @N: the best EDP the search had found within N samples (one sample = one "
            "whole-network point, `baco.result`), as the search scored it: BACO "
            "instruction-aware (padding counted), the baselines on the plain analytic model, "
            "which can only flatter them; geometric mean over seeds "
            f"{params.seeds} (a seed that had found nothing yet leaves the cell empty)."),
            *self._time_notes(params, results, out),
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
                               *[f"ratio_at_{m}" for m in params.marks],
                               *[f"best_edp_at_{t}" for t in secs],
                               *[f"ratio_at_{t}" for t in secs], "final_edp",
                               "final_ratio_sim", "final_ratio", "final_ratio_plain"],
                             csv_rows, more)

    @staticmethod
    def _time_notes(params: ConvergenceParams, results: dict[str, dict], out: pathlib.Path
                    ) -> list[str]:
        """What the @Ns columns are, how the cases shared the machine, and which runs have no
        wall-clock series (stored before it was recorded)."""
        if not params.time_marks:
            return []
        ids = [cid for cid in (safe_id(net, m.label, f"s{seed}") for net in params.networks
                               for m in params.methods for seed in params.seeds)
               if cid in results and "infeasible" not in results[cid]]
        runs = [results[cid] for cid in ids]
        store = CaseStore(out)
        ran = {_ran_with_text(store.ran_with(cid)) for cid in ids}
        notes = [
            ("best EDP @Ns: the best EDP the search had found within N wall-clock seconds on "
             "its own clock (`baco.result.HistoryPoint.seconds`, from the search's setup, JAX "
             "compilation included, the final pick's simulation not; a search that ended "
             "sooner keeps its last best), on the machine the cases ran on, "
             f"{'; '.join(sorted(ran)) or 'how many at once not recorded'}; each search "
             "scored on its own scorer, as the @N columns; geometric mean over seeds (a "
             "search with nothing found by N seconds leaves its cell and ratios empty).")]
        old = sum("history_seconds" not in r for r in runs)
        if old:
            notes.append(f"{old} of {len(runs)} run(s) stored no wall-clock series (run before "
                         "it was recorded): the @Ns cells they enter are empty; delete their "
                         "case files and rerun to fill them.")
        return notes

    def _plots(self, params: ConvergenceParams, cells: dict, labels: list[str], net: str,
               out: pathlib.Path) -> None:
        """Best EDP against samples and against wall seconds (both log x), and the final
        designs' energy against latency."""
        from baco.plots import convergence, energy_latency
        for key, xlabel, name in (("history", "samples", "convergence"),
                                  ("history_seconds", "wall seconds", "convergence_time")):
            curves = {}
            for label in labels:
                runs = (cells.get((net, label)) or {}).get("runs", [])
                if not runs or any(key not in r for r in runs):
                    continue
                curve = _geomean_curve([r[key] for r in runs], integer=key == "history")
                # flat to the end of the budget; against seconds it ends at the last gain
                # (`search_seconds` also counts the final pick, which can take far longer)
                end = max(r["samples"] for r in runs) if key == "history" else 0
                if curve and end > curve[-1][0]:
                    curve.append((end, curve[-1][1]))
                curves[label] = curve
            if curves:
                save_plot(convergence(curves, title=f"{net}: best EDP against {xlabel}",
                                      log_x=True, xlabel=xlabel),
                          out / f"{name}_{safe_id(net)}.png")
        points = [(label, r["cycles"], r["energy_pj"]) for label in labels
                  for r in (cells.get((net, label)) or {}).get("runs", [])]
        if points:
            mine = [i for i, p in enumerate(points) if p[0] == params.reference]
            best = min(mine, key=lambda i: points[i][1] * points[i][2]) if mine else None
            save_plot(energy_latency(points, chosen=best,
                                     title=f"{net}: final designs (common scorer)"),
                      out / f"tradeoff_{safe_id(net)}.png")


def _seconds_mark(t: float) -> str:
    """A time mark as a column label: ``60s``, ``2.5s``."""
    return f"{t:g}s"


def _at_marks(runs: list[dict], key: str, marks: list) -> list[float | None]:
    """The geometric mean over `runs` of the best EDP of series `key` by each mark (None where
    a run lacks the series or had found nothing yet)."""
    out = []
    for mark in marks:
        got = [Convergence.best_at(r[key], mark) if key in r else None for r in runs]
        out.append(geomean(got) if got and all(g for g in got) else None)
    return out


def _ran_with_text(ran: dict | None) -> str:
    if not ran:
        return "how many at once not recorded for some cases"
    workers, backend = ran.get("workers"), ran.get("backend", "local")
    if backend == "local" and workers == 1:
        return "the cases one at a time (--workers 1)"
    return f"up to {workers} cases at once ({backend} backend, --workers {workers})"


def _geomean_curve(histories: list[list[list[float]]], integer: bool = True
                   ) -> list[tuple[float, float]]:
    """The geometric mean over runs of the best EDP so far, at every sample count (`integer`;
    else every second) where any run improved (from the first where every run has a value)."""
    marks = sorted({int(s) if integer else float(s) for h in histories for s, _ in h})
    out = []
    for mark in marks:
        vals = [Convergence.best_at(h, mark) for h in histories]
        if all(v is not None for v in vals):
            out.append((mark, geomean(vals)))
    return out
