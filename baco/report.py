"""A run's report: ``report.md`` and a self-contained ``report.html`` (plots embedded), with
the plots as PNG files, in the results folder.

Built from ``results.json`` (and ``history.csv`` beside it, when there) alone, so `baco report`
rebuilds it for any finished run. Both files render one list of sections (`sections`), so they
never disagree: every contestant on every yardstick with its area; BACO's design per layer
(simulated against modelled cycles, utilization) and per memory level (the plain model's
accesses, energy and buffer use beside the simulated energy); the area by component; the
technology, clock and energy table assumed; EDP against samples and seconds; EDP against area.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import html
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from baco.result import CodesignResult
from workloads.errors import ConfigError

__all__ = ["PLOTS", "REPORT_FILES", "Section", "main_report", "sections", "write_report"]

REPORT_FILES = ("report.md", "report.html")
PLOTS = ("edp_area.png", "energy_events.png", "layers.png", "edp_samples.png",
         "edp_seconds.png")
"""The plots a report writes beside it (each section names its own)."""
YARDSTICKS = (("simulated", "simulated"), ("instruction_aware", "instr.-aware"),
              ("plain", "plain"))
"""The yardsticks every contestant is shown on, the judge (the simulator) first."""


@dataclasses.dataclass
class Section:
    """One titled part of the report: paragraphs, then tables, then plots (file names)."""

    title: str
    text: list[str] = dataclasses.field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = dataclasses.field(default_factory=list)
    plots: list[str] = dataclasses.field(default_factory=list)


def _g(x: Any, digits: int = 4) -> str:
    return "-" if x is None else f"{float(x):.{digits}g}"


def _hardware(hw: dict[str, Any]) -> str:
    return (f"{hw['pe_rows']}x{hw['pe_cols']} PEs, {hw['sp_kb']:g} KB scratchpad, "
            f"{hw['acc_kb']:g} KB accumulator, {hw['dram_bw_words']:g} words/cycle")


def contestants(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """BACO's entry then every baseline's, as ``(label, entry)``."""
    return [("baco", doc), *doc.get("baselines", {}).items()]


Curves = dict[str, list[tuple[int, float, float]]]


def _history(doc: dict[str, Any], folder: pathlib.Path) -> tuple[Curves, dict[str, str]]:
    """Each contestant's ``(samples, seconds, best EDP)`` and the yardstick its best is on,
    from ``history.csv`` beside the results, else from the document (without seconds)."""
    path = folder / "history.csv"
    curves: Curves = {}
    named: dict[str, str] = {}
    if path.exists():
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                seconds = float(row["seconds"]) if row.get("seconds") else float("nan")
                curves.setdefault(row["method"], []).append(
                    (int(row["samples"]), seconds, float(row["best_edp"])))
                named[row["method"]] = row.get("yardstick") or ""
        return curves, named
    for label, entry in contestants(doc):
        curves[label] = [(int(h["samples"]), float(h.get("seconds", "nan")),
                          float(h["best_edp"])) for h in entry.get("history", [])]
    return curves, named


def _simulated(entry: dict[str, Any]) -> dict[str, Any]:
    """A contestant's simulated figures (empty where the simulator could not judge it)."""
    return entry.get("yardsticks", {}).get("simulated") or {}


def _events(doc: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """Each simulated contestant's energy by event, as ``(label, {event: pJ})``."""
    out = [(label, _simulated(e).get("energy_pj_by_event")) for label, e in contestants(doc)]
    return [(label, ev) for label, ev in out if ev]


def _contest(doc: dict[str, Any]) -> Section:
    ref = doc["yardsticks"]["simulated"]["edp"] if doc["yardsticks"].get("simulated") else None
    rows = []
    for label, entry in contestants(doc):
        ys = entry.get("yardsticks", {})
        cells = [_g((ys.get(key) or {}).get("edp")) for key, _ in YARDSTICKS]
        sim = _simulated(entry)
        ratio = ("-" if ref is None or not sim.get("edp") else f"{sim['edp'] / ref:.2f}x")
        rows.append([label, *cells, ratio, _g(sim.get("latency_cycles")),
                     _g(sim.get("energy_pj")), f"{entry.get('area_mm2', 0.0):.2f}",
                     _hardware(entry["hardware"]), str(entry.get("samples", "-")),
                     str(entry.get("final_pick", "none"))])
    head = ["contestant", *[f"EDP {title}" for _, title in YARDSTICKS],
            "simulated EDP / BACO's", "simulated cycles", "simulated energy (pJ)", "area (mm2)",
            "hardware", "samples", "final pick"]
    text = ["EDP is cycles x pJ. The simulator (the design's emitted programs on "
            "`accel.sim`) is the judge; the instruction-aware and plain models are the searches'"
            " own yardsticks. A ratio above 1 means BACO's design is better."]
    from baco.verdict import verdict_lines
    for label, entry in contestants(doc)[1:]:
        lines = [line.strip() for line in verdict_lines(entry.get("verdict"))]
        if lines:
            text.append(f"Against {label}: " + "; ".join(lines))
    return Section("Contestants", text, [(head, rows)], ["edp_area.png"])


def _energy_by_event(doc: dict[str, Any]) -> Section:
    entries = _events(doc)
    events = sorted({k for _, ev in entries for k in ev})
    rows = [[event, *[_g(ev.get(event, 0.0)) for _, ev in entries]] for event in events]
    rows.append(["total", *[_g(sum(ev.values())) for _, ev in entries]])
    return Section("Simulated energy by event (pJ)",
                   ["Each event priced by the template's energy table (see Assumptions)."],
                   [(["event", *[label for label, _ in entries]], rows)], ["energy_events.png"])


def _per_layer(doc: dict[str, Any], result: CodesignResult) -> Section:
    sims = {int(s["index"]): s for s in doc.get("simulated_layers", [])}
    shares = {s["name"]: s for s in doc.get("simulated_breakdown", {}).get("layers", [])}
    rows = []
    for i, r in enumerate(result.layers):
        name = r.layer.name or r.layer.config_str()
        sim = sims.get(i, {})
        cycles = sim.get("cycles")
        ratio = "-" if not cycles else f"{r.latency_cycles / cycles:.2f}"
        used = ("-" if not sim.get("array_macs") else
                f"{100.0 * sim['macs'] / sim['array_macs']:.0f}%")
        share = shares.get(name, {})
        rows.append([name, str(r.count), _macs(r.layer.macs), f"`{r.mapping.to_timeloop()}`",
                     _g(cycles), _g(r.latency_cycles), ratio, used, _g(sim.get("energy_pj")),
                     _pct(share.get("latency_share")), _pct(share.get("energy_share"))])
    head = ["layer", "count", "MACs", "mapping", "simulated cycles",
            f"modelled cycles ({doc.get('scorer', 'model')})", "modelled / simulated",
            "PE use", "simulated energy (pJ)", "latency share", "energy share"]
    return Section("BACO's design per layer",
                   ["Per instance of each layer; shares are of the network's simulated totals "
                    "(count included). PE use: useful MACs over the MACs the array ran. The "
                    "mapping string lists levels outside in (L3 DRAM, L2 scratchpad, L1 "
                    "accumulator, L0 registers), the tensors each keeps ([WIO]) and its loop "
                    "factors (X: spatial)."], [(head, rows)], ["layers.png"])


def _macs(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"


def _per_level(doc: dict[str, Any], result: CodesignResult) -> Section:
    from perfmodels import exact_batch
    hw = result.hardware
    template = hw.template_spec
    names = [lv.name for lv in template.levels]
    metrics = exact_batch([r.layer for r in result.layers], hw,
                          [r.mapping for r in result.layers], check=False)
    sims = {int(s["index"]): s for s in doc.get("simulated_layers", [])}
    rows = []
    for i, r in enumerate(result.layers):
        name = r.layer.name or r.layer.config_str()
        sim_pj = sims.get(i, {}).get("level_pj")
        for lv, level in enumerate(names):
            cap = float(metrics.capacity_kb[i, lv])
            use = "-" if not np.isfinite(cap) or cap <= 0 else \
                f"{100.0 * float(metrics.footprint_kb[i, lv]) / cap:.0f}%"
            rows.append([name, level, _g(metrics.level_accesses[i, lv]),
                         _g(metrics.level_pj[i, lv]),
                         "-" if not sim_pj else _g(sim_pj[lv]), use])
    return Section("BACO's design per layer and memory level",
                   ["Accesses (words) and energy per instance of the layer on the plain "
                    "(Timeloop-like) model, beside the simulated energy of the same level; "
                    "buffer use is the mapping's tile footprint over one instance's capacity."],
                   [(["layer", "level", "accesses (plain)", "energy pJ (plain)",
                      "energy pJ (simulated)", "buffer use"], rows)])


def _area(result: CodesignResult) -> Section:
    from accel.arch import level_arrays
    from baco.fusion import fused_chains
    from baco.yardsticks import units_area_mm2
    from perfmodels.energy import config_area_mm2
    hw = result.hardware
    template = hw.template_spec
    hwp = hw.to_params()
    lv = level_arrays(template, hwp, np)
    pes = float(hwp.pe_rows * hwp.pe_cols * lv.pe_area_mm2)
    rows = [[f"PE array ({hw.pe_rows}x{hw.pe_cols})", f"{pes:.3f}"]]
    rows += [[spec.name, f"{float(a):.3f}"] for spec, a in zip(template.levels, lv.area_mm2)]
    layers = [r.layer for r in result.layers]
    units = units_area_mm2(hw, layers, [float(r.count) for r in result.layers],
                           fused_chains(result.extra, layers))
    if units:
        rows.append(["optional units (on-chip path, normalizer, I-GELU) the design uses",
                     f"{units:.3f}"])
    rows.append(["total", f"{config_area_mm2(hw) + units:.3f}"])
    return Section("Area by component (mm2)",
                   ["From the template's area figures (rough estimates; see Assumptions). A "
                    "level's area covers all its instances; DRAM's is its DMA interface."],
                   [(["component", "area (mm2)"], rows)])


def _assumptions(result: CodesignResult) -> Section:
    from accel.arch import level_arrays
    hw = result.hardware
    template = hw.template_spec
    lv = level_arrays(template, hw.to_params(), np)
    env_rows = [["useful MAC", _g(lv.mac_energy_pj, 4), "pJ per MAC"]]
    if template.mac_padded_energy_pj is not None:
        env_rows.append(["MAC on a padded operand", _g(lv.mac_padded_energy_pj, 4),
                         "pJ per MAC"])
    if template.pe_idle_pj_per_cycle is not None:
        env_rows.append(["idle PE", _g(lv.pe_idle_pj_per_cycle, 4), "pJ per PE per cycle"])
    for spec, pj, static in zip(template.levels, lv.energy_pj, lv.static_pj_per_cycle):
        env_rows.append([f"{spec.name} access", _g(pj, 4), "pJ per word"])
        if float(static) > 0:
            env_rows.append([f"{spec.name} leakage", _g(static, 4), "pJ per cycle"])
    text = [f"Template `{template.name}` ({template.description}), technology "
            f"{template.technology or 'not stated by the template'}, clock "
            f"{hw.clock_mhz:g} MHz; the energy table below is this design's (per-access figures"
            " that depend on a buffer's size are at this design's sizes)."]
    return Section("Assumptions", text, [(["event", "energy", "unit"], env_rows)])


def _progress(yardsticks: dict[str, str]) -> Section:
    named = "; ".join(f"{k}: {v}" for k, v in yardsticks.items() if v)
    return Section("Search progress",
                   ["Best EDP so far on each search's own yardstick"
                    + (f" ({named})" if named else "") + ", against samples and against wall "
                    "seconds."], [], ["edp_samples.png", "edp_seconds.png"])


def sections(doc: dict[str, Any], result: CodesignResult,
             yardsticks: dict[str, str] | None = None) -> list[Section]:
    """The report's parts, in order, for a results document and its `CodesignResult`
    (`yardsticks`: what each search's history measures, by contestant)."""
    parts = [_contest(doc)]
    if doc["yardsticks"].get("simulated"):
        parts.append(_energy_by_event(doc))
    parts += [_per_layer(doc, result), _per_level(doc, result), _area(result),
              _assumptions(result), _progress(yardsticks or {})]
    return parts


def _plots(doc: dict[str, Any], history: Curves) -> dict[str, Any]:
    """Every figure the sections name, by file name."""
    from baco import plots
    figs: dict[str, Any] = {}
    judged = [(label, e.get("area_mm2", 0.0), _simulated(e)) for label, e in contestants(doc)]
    figs["edp_area.png"] = plots.edp_area(
        {label: [(area, sim["edp"], True)] for label, area, sim in judged if sim.get("edp")},
        title="simulated EDP against area")
    events = _events(doc)
    names = sorted({k for _, ev in events for k in ev})
    figs["energy_events.png"] = plots.stacked_bars(
        [label for label, _ in events], {n: [ev.get(n, 0.0) for _, ev in events] for n in names},
        xlabel="simulated energy (pJ)", title="energy by event")
    sims = doc.get("simulated_layers", [])
    model = {i: r["latency_cycles"] for i, r in enumerate(doc.get("layers", []))}
    figs["layers.png"] = plots.layer_breakdown(
        {"simulated": [(s["name"], s["cycles"]) for s in sims],
         "modelled": [(s["name"], model.get(int(s["index"]), 0.0)) for s in sims]},
        quantity="cycles per instance", title="BACO's layers: simulated and modelled cycles")
    figs["edp_samples.png"] = plots.convergence(
        {k: [(s, e) for s, _, e in v] for k, v in history.items() if v},
        title="best EDP against samples")
    timed = {k: [(t, e) for _, t, e in v if np.isfinite(t)] for k, v in history.items()}
    figs["edp_seconds.png"] = plots.convergence(
        {k: v for k, v in timed.items() if v}, title="best EDP against wall seconds")
    figs["edp_seconds.png"].axes[0].set_xlabel("seconds")
    return figs


def _markdown(title: str, parts: Sequence[Section]) -> str:
    def row(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"# {title}", ""]
    for part in parts:
        out += [f"## {part.title}", ""]
        for para in part.text:
            out += [para, ""]
        for head, rows in part.tables:
            out += [row(head), row(["---"] * len(head)), *[row(r) for r in rows], ""]
        out += [f"![{name}]({name})" for name in part.plots]
        if part.plots:
            out.append("")
    return "\n".join(out)


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:90em}table{border-collapse:"
          "collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #bbb;padding:2px 6px;"
          "text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:48em;"
          "display:block;margin:1em 0}")
_SHOWN = ("window.addEventListener('load',function(){var n=0;document.querySelectorAll('img')"
          ".forEach(function(i){if(i.complete&&i.naturalWidth>0)n++;});"
          "document.body.setAttribute('data-plots-shown',String(n));});")


def _html(title: str, parts: Sequence[Section], pngs: dict[str, bytes]) -> str:
    def inline(text: str) -> str:   # `code` spans, the one markup the sections use
        pieces = html.escape(text).split("`")
        return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))

    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{html.escape(title)}</title><style>{_STYLE}</style>",
           f"<script>{_SHOWN}</script></head><body>", f"<h1>{html.escape(title)}</h1>"]
    for part in parts:
        out.append(f"<h2>{html.escape(part.title)}</h2>")
        out += [f"<p>{inline(p)}</p>" for p in part.text]
        for head, rows in part.tables:
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                       + "</tr>")
            out += ["<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>"
                    for r in rows]
            out.append("</table>")
        for name in part.plots:
            data = base64.b64encode(pngs[name]).decode()
            out.append(f"<img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(results_path: str | pathlib.Path,
                 out_dir: str | pathlib.Path | None = None) -> list[pathlib.Path]:
    """Write ``report.md``, ``report.html`` and the plots for ``results.json`` at
    `results_path` into `out_dir` (default: its folder); the paths written."""
    import io

    from baco.simulate import load_result
    from workloads.files import write_atomic

    path = pathlib.Path(results_path)
    result = load_result(path)
    doc = json.loads(path.read_text())
    folder = pathlib.Path(out_dir) if out_dir is not None else path.parent
    curves, named = _history(doc, path.parent)
    parts = sections(doc, result, named)
    pngs = {}
    for name, fig in _plots(doc, curves).items():
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        pngs[name] = buffer.getvalue()
    title = f"baco: {doc.get('network', result.network)} (seed {doc.get('seed', '-')})"
    written = []
    for name, data in pngs.items():
        write_atomic(folder / name, data)
        written.append(folder / name)
    write_atomic(folder / REPORT_FILES[0], _markdown(title, parts))
    write_atomic(folder / REPORT_FILES[1], _html(title, parts, pngs))
    return [*written, *(folder / n for n in REPORT_FILES)]


def main_report(results: str, out: str | None) -> int:
    """The `baco report` command."""
    path = pathlib.Path(results)
    if path.is_dir():
        path = path / "results.json"
    if not path.exists():
        raise ConfigError(f"{path}: no such results file (a `baco run` results.json)")
    written = write_report(path, out)
    print(f"wrote {', '.join(str(p) for p in written if p.name in REPORT_FILES)} and "
          f"{len(written) - len(REPORT_FILES)} plots")
    return 0
