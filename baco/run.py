"""`baco run CONFIG.yaml`: one experiment -- the co-design and its baselines -- to a folder.

`run_experiment` loads and checks the config (`baco.config.ExperimentConfig`), runs
`baco.codesign` with a checkpoint, runs every baseline the config lists (through
`baco.search.BASELINES`, plus the DOSA-style one of `baco.search.dosa`), and writes, each
atomically and only once everything has succeeded:

* ``DIR/config.yaml``: the config as run (defaults filled in);
* ``DIR/results.json``: ``{"edp", "latency_cycles", "energy_pj", "samples", "hardware",
  "layers": [...], "history": [...], "baselines": {NAME: {"edp", "samples", ...}}, ...}``;
* ``DIR/history.csv``: ``method, samples, seconds, best_edp`` -- the best EDP against samples and
  against wall-clock seconds, for the co-design and every baseline.
* with ``emit_kernels``, ``DIR/kernels/NN_LAYER.py``: each unique layer's block-DSL kernel for
  the co-designed hardware and mapping (`baco.dsl.emit`).

Wall-clock times appear only in ``history.csv``: ``results.json`` is a function of the config
alone, so the same seed gives the same file, and a run killed and resumed (``--resume``, from
``DIR/checkpoint/``) gives the same file as one that was not.

Every method's design is scored on one scorer (`baco.rounding.common_score`): when the
co-design is instruction-aware, the design as DIM x DIM instructions run it (array axes filled
where the dims allow, padded rows and columns counted, buffers grown or tiles shrunk to hold
them, whichever is better), else the plain analytic model; ``edp_analytic`` gives the plain
model's figure of every design too, and ``edp_as_reported`` what the search itself reported.
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import math
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import yaml

from baco.config import ExperimentConfig
from baco.result import CodesignResult
from baco.rounding import common_score, design_of
from workloads.errors import ConfigError
from workloads.files import write_atomic

RESULTS = "results.json"
HISTORY = "history.csv"
CONFIG = "config.yaml"
CHECKPOINT_DIR = "checkpoint"
KERNELS_DIR = "kernels"
SAMPLE_MARKS = (1000, 5000)
"""Sample counts at which results.json reports every method's best EDP so far."""


def baselines() -> dict[str, Callable[..., CodesignResult]]:
    """The registered baselines: `baco.search.BASELINES` (if present) and ``dosa``."""
    registry: dict[str, Callable[..., CodesignResult]] = {}
    try:
        from baco.search import BASELINES
        registry.update(BASELINES)
    except ImportError:
        pass
    if "dosa" not in registry:
        from baco.search.dosa import dosa
        registry["dosa"] = dosa
    return registry


def _say(message: str, enabled: bool) -> None:
    if enabled:
        from rich.console import Console
        Console(stderr=True).print(message, highlight=False)


def scored(result: CodesignResult, aware: bool, sram_step_kb: float) -> dict[str, Any]:
    """The comparable figures of any search's result (`baco.rounding.common_score`): its EDP
    on the experiment's scorer, its latency and energy there, and its plain-model EDP."""
    layers = [r.layer for r in result.layers]
    counts = [r.count for r in result.layers]
    design = design_of(result.hardware, [r.mapping for r in result.layers])
    score = common_score(layers, counts, design, aware, sram_step_kb)
    plain = common_score(layers, counts, design, False, sram_step_kb)
    return {"edp": score.edp, "latency_cycles": score.latency_cycles,
            "energy_pj": score.energy_pj, "edp_analytic": plain.edp,
            "hardware": score.design.hw}


def _marks(result: CodesignResult) -> dict[str, float | None]:
    out = {}
    for mark in SAMPLE_MARKS:
        value = result.best_edp_at(mark)
        out[str(mark)] = value if math.isfinite(value) else None
    return out


def _history(result: CodesignResult) -> list[dict[str, float]]:
    return [{"samples": h.samples, "best_edp": h.best_edp} for h in result.history]


def _run_baseline(name: str, fn: Callable[..., CodesignResult], network: Any, options: dict,
                  config: ExperimentConfig) -> CodesignResult:
    kwargs = {"budget_samples": config.codesign.budget_samples, "seed": config.codesign.seed}
    kwargs.update(options)
    params = inspect.signature(fn).parameters
    if "hardware" in params and "hardware" not in kwargs:
        kwargs["hardware"] = config.hardware_config()
    try:
        inspect.signature(fn).bind(network, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{config.source}: baselines: {name}: {exc}") from None
    return fn(network, **kwargs)


def output_dir(config: ExperimentConfig, out_dir: str | os.PathLike | None) -> pathlib.Path:
    """`out_dir`, else the config's ``output``, else ``experiments/results/NAME``."""
    return pathlib.Path(out_dir or config.output or f"experiments/results/{config.name}")


def run_experiment(config_path: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                   resume: bool = False, progress: bool = True,
                   emit_kernels: bool = False) -> dict[str, Any]:
    """Run the experiment of `config_path`; write DIR/config.yaml, results.json, history.csv.

    Args:
      config_path: the experiment YAML (`baco.config.ExperimentConfig`).
      out_dir: output folder; default the config's ``output``, else
        ``experiments/results/NAME``.
      resume: continue from ``DIR/checkpoint/`` (the co-design's state and finished
        baselines) instead of starting over.
      progress: show progress on stderr.
      emit_kernels: also write the design's kernels to ``DIR/kernels/`` (`write_kernels`).

    Returns:
      The results document written to ``results.json``.
    """
    from baco.codesign import codesign
    from baco.networks import load_network

    config = ExperimentConfig.load(config_path)
    registry = baselines()
    for i, spec in enumerate(config.baselines):
        if spec.name not in registry:
            import difflib
            close = difflib.get_close_matches(spec.name, sorted(registry), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{config.source}: baselines[{i}]: unknown baseline "
                              f"{spec.name!r}{hint} (known: {', '.join(sorted(registry))})")
    out = output_dir(config, out_dir)
    network = load_network(config.network_source(), input_shapes=config.input_shapes)
    hardware = config.hardware_config()
    ckpt_dir = out / CHECKPOINT_DIR
    if not resume and ckpt_dir.exists():
        for stale in ckpt_dir.iterdir():
            stale.unlink()
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    _say(f"[bold]baco run[/] {config.name}: {network.name}, {network.unique_layers} unique "
         f"layers, budget {config.codesign.budget_samples} samples -> {out}", progress)
    result = codesign(network, config=config.codesign, hardware=hardware, progress=progress,
                      checkpoint=ckpt_dir / "baco.npz", resume=resume)
    for message in result.extra.get("warnings", []):
        _say(f"[yellow]warning:[/] {message}", progress)
    _say(f"baco: EDP {result.edp:.4g} ({result.samples} samples)", progress)

    found: dict[str, CodesignResult] = {}
    for spec in config.baselines:
        path = ckpt_dir / f"baseline-{spec.name}.json"
        if resume and path.exists():
            found[spec.name] = CodesignResult.from_json(path.read_text(), where=str(path))
            _say(f"{spec.name}: reused from {path}", progress)
            continue
        _say(f"{spec.name}: running", progress)
        found[spec.name] = _run_baseline(spec.name, registry[spec.name], network,
                                         dict(spec.options), config)
        write_atomic(path, found[spec.name].to_json())
        _say(f"{spec.name}: EDP {found[spec.name].edp:.4g} "
             f"({found[spec.name].samples} samples)", progress)

    document = results_document(config, result, found)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / CONFIG, yaml.safe_dump(config.to_dict(), sort_keys=False))
    write_atomic(out / RESULTS, json.dumps(document, indent=2) + "\n")
    write_atomic(out / HISTORY, history_csv(result, found))
    if emit_kernels:
        written, skipped = write_kernels(result, out / KERNELS_DIR)
        _say(f"wrote {len(written)} kernels to {out / KERNELS_DIR}", progress)
        for message in skipped:
            _say(f"[yellow]warning:[/] {message}", progress)
    return document


def write_kernels(result: CodesignResult, directory: pathlib.Path
                  ) -> tuple[list[pathlib.Path], list[str]]:
    """Each unique layer's ``@baco.jit`` kernel (`baco.dsl.emit`) as ``NN_LAYER.py``; returns
    the files written and why the others were skipped (layers the DSL cannot express)."""
    from baco.dsl.emit import emit
    from workloads.errors import DSLError

    directory.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for i, row in enumerate(result.layers):
        label = "".join(c if c.isalnum() else "_" for c in row.layer.name) or row.layer.kind
        try:
            source = emit(row.layer, row.mapping, result.hardware)
        except DSLError as exc:
            skipped.append(f"layer {i} ({label}): no kernel: {exc}")
            continue
        path = directory / f"{i:02d}_{label}.py"
        write_atomic(path, source)
        written.append(path)
    return written, skipped


def results_document(config: ExperimentConfig, result: CodesignResult,
                     found: dict[str, CodesignResult]) -> dict[str, Any]:
    """The results.json content: deterministic given the config (no wall-clock times).

    Every method's ``edp`` is on one scorer (``scorer``: ``instruction_aware`` when the
    co-design is, else ``analytic``; `baco.rounding.common_score`); ``edp_analytic`` is the
    plain model's figure of the same design, ``edp_as_reported`` the search's own, and
    ``edp_ratio`` how many times BACO's EDP is lower on the common scorer.
    """
    aware = config.codesign.instruction_aware
    step = config.codesign.sram_step_kb
    mine = scored(result, aware, step)
    doc = result.to_dict()
    doc["history"] = _history(result)
    doc["name"] = config.name
    doc["scorer"] = "instruction_aware" if aware else "analytic"
    doc["edp_analytic"] = mine["edp_analytic"]
    doc["best_edp_at"] = _marks(result)
    entries = {}
    for name, other in found.items():
        theirs = scored(other, aware, step)
        entries[name] = {
            "method": other.method, "edp": theirs["edp"],
            "edp_analytic": theirs["edp_analytic"], "edp_as_reported": other.edp,
            "edp_ratio": theirs["edp"] / mine["edp"],
            "edp_ratio_analytic": theirs["edp_analytic"] / mine["edp_analytic"],
            "latency_cycles": theirs["latency_cycles"], "energy_pj": theirs["energy_pj"],
            "samples": other.samples, "best_edp_at": _marks(other),
            "hardware": other.hardware.to_dict(),
            "hardware_as_scored": theirs["hardware"].to_dict(),
            "history": _history(other), "seed": other.seed,
            "extra": json.loads(json.dumps(other.extra, default=str)),
        }
    doc["baselines"] = entries
    return json.loads(json.dumps(doc))


def history_csv(result: CodesignResult, found: dict[str, CodesignResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "samples", "seconds", "best_edp"])
    for name, res in [("baco", result), *found.items()]:
        for h in res.history:
            writer.writerow([name, h.samples, f"{h.seconds:.3f}", repr(h.best_edp)])
    return buffer.getvalue()


def main_run(config: str, out: str | None, resume: bool, quiet: bool,
             emit_kernels: bool = False) -> int:
    """The `baco run` command: run, then print a one-screen summary on stdout."""
    document = run_experiment(config, out, resume=resume, progress=not quiet,
                              emit_kernels=emit_kernels)
    out_dir = output_dir(ExperimentConfig.load(config), out)
    print(f"{document['name']}: EDP {document['edp']:.4g} cycles*pJ "
          f"({document['scorer']}), latency {document['latency_cycles']:.4g} cycles, "
          f"energy {document['energy_pj']:.4g} pJ, {document['samples']} samples")
    hw = document["hardware"]
    print(f"  hardware: {hw['pe_rows']}x{hw['pe_cols']} PEs, scratchpad {hw['sp_kb']:g} KB, "
          f"accumulator {hw['acc_kb']:g} KB")
    def versus(ratio: float) -> str:
        return f"{ratio:.2f}x better" if ratio >= 1 else f"{1 / ratio:.2f}x worse"

    for name, entry in document["baselines"].items():
        print(f"  vs {name}: EDP {entry['edp']:.4g} -> {versus(entry['edp_ratio'])} "
              f"({versus(entry['edp_ratio_analytic'])} on the plain model), "
              f"{entry['samples']} samples")
    print(f"  wrote {out_dir / CONFIG}, {out_dir / RESULTS}, {out_dir / HISTORY}")
    sys.stdout.flush()
    return 0


__all__ = ["baselines", "history_csv", "main_run", "output_dir", "results_document",
           "run_experiment", "write_kernels"]
