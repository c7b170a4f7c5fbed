"""Fig. 6.10 and ``baco sweep`` (kind ``end_to_end``): every method on every network, per
seed; the base of the area sweep and the convergence runners."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from baco.reproduce.methods import MethodSpec, check_methods, method_case
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
from baco.reproduce.store import Case, safe_id
from baco.reproduce.tables import fmt, geomean, ratio
from workloads.errors import ConfigError


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
        net = cached_network(p["network"])
        out = method_case(method_of(p["method"]), net, p["seed"], history=p["history"],
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
            budgets_note(params.methods),
            *params.seed_notes, *infeasible_notes(infeasible_of(results)),
            *missing_note(n_cases, len(results))]
        text = write_outputs(out, params.title, notes, header, rows,
                              ["network", "method", "seeds", "cycles", "energy_pj", "edp",
                               "edp_ratio", "edp_ratio_plain", "edp_ratio_sim"], csv_rows)
        self._plots(params, cells, labels, bars, out)
        return text

    def _plots(self, params: EndToEndParams, cells: dict, labels: list[str], bars: dict,
               out: pathlib.Path) -> None:
        from baco.plots import energy_latency, grouped_bars, layer_breakdown
        save_plot(grouped_bars(params.networks, bars, ylabel=f"EDP / {params.reference}",
                               title=getattr(params, "title", self.title)),
                  out / "edp_ratio.png")
        for net in params.networks:
            points = [(label, r["cycles"], r["energy_pj"]) for label in labels
                      for r in (cells.get((net, label)) or {}).get("runs", [])]
            ref_points = [i for i, p in enumerate(points) if p[0] == params.reference]
            if points:
                best = min(ref_points, key=lambda i: points[i][1] * points[i][2]) \
                    if ref_points else None
                save_plot(energy_latency(points, chosen=best, title=f"{net}: designs found"),
                          out / f"tradeoff_{safe_id(net)}.png")
            breakdown = {}
            for label in labels:
                c = cells.get((net, label))
                if c and c["runs"][0].get("layers"):
                    run = min(c["runs"], key=lambda r: r["edp"])
                    breakdown[label] = [(x["name"], x["count"] * x["cycles"])
                                        for x in run["layers"]]
            if breakdown:
                save_plot(layer_breakdown(breakdown, quantity="count x latency (cycles)",
                                          title=f"{net}: per-layer latency"),
                          out / f"layers_{safe_id(net)}.png")
