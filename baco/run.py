"""`baco run CONFIG.yaml`: one experiment -- the co-design and its baselines -- to a folder.

`run_experiment` loads and checks the config (`baco.config.ExperimentConfig`), runs
`baco.codesign` with a checkpoint, runs every baseline the config lists (through
`baco.search.BASELINES`, plus the DOSA-style one of `baco.search.dosa`), and writes, each
atomically and only once everything has succeeded:

* ``DIR/config.yaml``: the config as run (defaults filled in);
* ``DIR/results.json``: ``{"edp", "latency_cycles", "energy_pj", "samples", "hardware",
  "layers": [...], "history": [...], "final_pick", "final_pick_candidates",
  "baselines": {LABEL: {"edp", "samples", "final_pick", "final_pick_candidates", ...}}, ...}``;
* ``DIR/history.csv``: ``method, samples, seconds, best_edp, yardstick`` -- the best EDP
  against samples and against wall-clock seconds since the search began, for the co-design and
  every baseline, each on the yardstick named (fixed for a method's whole history, so its best
  EDP never rises: `baco.codesign_ledger.Ledger`).
* with ``emit_kernels``, ``DIR/kernels/NN_LAYER.py``: each unique layer's block-DSL kernel for
  the co-designed hardware and mapping (`baco.dsl.emit`).

Wall-clock times appear only in ``history.csv``: ``results.json`` is a function of the config
alone, so the same seed gives the same file, and a run killed and resumed (``--resume``, from
``DIR/checkpoint/``) gives the same file as one that was not.

With ``hw_mode: free`` the co-design picks the DRAM bandwidth; every baseline then runs with
the bandwidth BACO's design has (`baseline_hardware`), so the ratios compare searches, not
memory systems (each method's hardware and area are in the results). A baseline that takes
an area budget can be held to the area of BACO's design (``area_budget_mm2: match``), so that
a gain is not bought with area; its ``label`` keeps it apart from the same search unbounded.

Every search ends the same way (``final_pick``, `baco.final_pick`): its ``top_k`` best
distinct designs by its own objective are simulated and the one of lowest simulated EDP is
the design it returns (``final_pick: {mode: none}`` returns its own best instead); the
simulated layers count in its ``samples``, and ``final_pick`` (``simulated`` or ``none``)
and ``final_pick_candidates`` (the designs compared) say how each method's was picked.

Every method's design is scored on one scorer (`baco.rounding.common_score`): when the
co-design is instruction-aware, the design as DIM x DIM instructions run it (array axes filled
where the dims allow, padded rows and columns counted, buffers grown or tiles shrunk to hold
them, whichever is better), else the plain analytic model; ``edp_analytic`` gives the plain
model's figure of every design too, and ``edp_as_reported`` what the search itself reported.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import inspect
import io
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from accel.arch import HardwareConfig
from baco import verdict
from baco.config import ExperimentConfig
from baco.final_pick import final_pick, judge_result
from baco.profile import PROFILE_JSON, PROFILE_MD, Profile, profiling, timed
from baco.progress import Progress, history_yardstick, yardstick_name
from baco.report import PLOTS, REPORT_FILES, write_report
from baco.result import CodesignResult
from baco.sim_cache import DEFAULT_CACHE
from baco.yardsticks import YARDSTICKS, Yardsticks
from perfmodels.energy import config_area_mm2
from workloads.errors import BacoError, ConfigError
from workloads.files import write_atomic

RESULTS = "results.json"
HISTORY = "history.csv"
CONFIG = "config.yaml"
CHECKPOINT_DIR = "checkpoint"
SIM_CACHE = "sim_cache.pkl"
"""In the checkpoint folder: every layer the run simulated (`baco.sim_cache`), so a resumed
run judges without simulating again."""
KERNELS_DIR = "kernels"
SAMPLE_MARKS = (1000, 5000)
"""Sample counts at which results.json reports every method's best EDP so far."""


def baselines() -> dict[str, Callable[..., CodesignResult]]:
    """The registered baselines (`baco.search.BASELINES`), by name."""
    from baco.search import BASELINES

    return dict(BASELINES)


def _say(message: str, shown: Progress) -> None:
    """A message among the run's progress (`baco.progress.Progress.note`)."""
    shown.note(message)


def judge(result: CodesignResult, config: ExperimentConfig,
          progress: Callable[[int, int, str], None] | None = None) -> Yardsticks:
    """Any search's design on the three yardsticks (`baco.final_pick.judge_result`, which the
    final pick simulates its candidates with), within the run's area budget; `progress`
    follows the simulation layer by layer."""
    return judge_result(result, config.codesign.sram_step_kb,
                        config.codesign.area_budget_mm2, progress=progress)


def pick(result: CodesignResult, config: ExperimentConfig, shown: Progress | None = None,
         label: str | None = None) -> CodesignResult:
    """What every search of the run returns (`baco.final_pick`, by ``config.final_pick``):
    the simulator's pick of its top designs, or its own best."""
    return final_pick(result, config.final_pick, sram_step_kb=config.codesign.sram_step_kb,
                      area_budget_mm2=config.codesign.area_budget_mm2, progress=shown,
                      label=label)


def _yardstick_entries(judged: Yardsticks) -> dict[str, dict[str, Any] | None]:
    """``{"plain": {"edp", "latency_cycles", "energy_pj", "energy_pj_by_event", ...}, ...}``;
    the hardware only where a yardstick had to grow the design's buffers to score it."""
    out: dict[str, dict[str, Any] | None] = {}
    for name in YARDSTICKS:
        y = judged[name]
        if y is None:
            out[name] = None
            continue
        entry = {"edp": y.edp, "latency_cycles": y.latency_cycles, "energy_pj": y.energy_pj,
                 "energy_pj_by_event": dict(y.energy_pj_by_event), "area_mm2": y.area_mm2}
        if y.grown:
            entry["hardware"] = y.hardware.to_dict()
        out[name] = entry
    return out


def _ratios(theirs: Yardsticks, mine: Yardsticks) -> dict[str, float | None]:
    """How many times lower BACO's EDP is, on each yardstick (None where one is missing)."""
    return {name: (theirs[name].edp / mine[name].edp
                   if theirs[name] is not None and mine[name] is not None else None)
            for name in YARDSTICKS}


def _marks(result: CodesignResult) -> dict[str, float | None]:
    out = {}
    for mark in SAMPLE_MARKS:
        value = result.best_edp_at(mark)
        out[str(mark)] = value if math.isfinite(value) else None
    return out


def _history(result: CodesignResult) -> list[dict[str, float]]:
    return [{"samples": h.samples, "best_edp": h.best_edp} for h in result.history]


BASELINE_YARDSTICK = "plain model"
"""What every registered baseline scores its own points with, hence the yardstick of the EDP
it reports while it runs: the plain analytic model (the Timeloop-equivalent one DOSA
optimizes)."""


def baseline_hardware(config: ExperimentConfig, baco: CodesignResult) -> HardwareConfig:
    """The hardware a baseline starts from: the experiment's, with BACO's DRAM bandwidth when
    the co-design chose it (``hw_mode: free``) -- no baseline search picks a bandwidth, so each
    gets the memory system BACO's design bought, and the ratios measure the searches."""
    hardware = config.hardware_config()
    if config.codesign.hw_mode != "free":
        return hardware
    return dataclasses.replace(hardware, dram_bw_words=baco.hardware.dram_bw_words)


def _run_baseline(name: str, fn: Callable[..., CodesignResult], network: Any, options: dict,
                  config: ExperimentConfig, hardware: HardwareConfig, progress: Progress
                  ) -> CodesignResult:
    kwargs = {"budget_samples": config.codesign.budget_samples, "seed": config.codesign.seed}
    kwargs.update(options)
    params = inspect.signature(fn).parameters
    if "hardware" in params and "hardware" not in kwargs:
        kwargs["hardware"] = hardware
    if "top_k" in params and "top_k" not in kwargs:
        kwargs["top_k"] = config.final_pick.top_k     # the designs the final pick compares
    budget = config.codesign.area_budget_mm2
    if budget is not None and "area_budget_mm2" in params:
        kwargs.setdefault("area_budget_mm2", budget)    # the same area budget as BACO's
    try:
        inspect.signature(fn).bind(network, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{config.source}: baselines: {name}: {exc}") from None
    progress.phase(f"search {name}", kwargs["budget_samples"], yardstick=BASELINE_YARDSTICK,
                   before_update=f"compiling {name}")
    if "progress" in params:
        kwargs["progress"] = progress.update
    return pick(fn(network, **kwargs), config, progress, name)


def output_dir(config: ExperimentConfig, out_dir: str | os.PathLike | None) -> pathlib.Path:
    """`out_dir`, else the config's ``output``, else ``experiments/results/NAME``."""
    return pathlib.Path(out_dir or config.output or f"experiments/results/{config.name}")


OUTPUTS = (CONFIG, RESULTS, HISTORY, CHECKPOINT_DIR, KERNELS_DIR, *REPORT_FILES, *PLOTS,
           PROFILE_JSON, PROFILE_MD)
"""What a run writes in its folder; ``--force`` removes these and nothing else."""


def prepare_output(out: pathlib.Path, resume: bool, force: bool) -> None:
    """Refuse a folder that already holds something unless resuming it or told to overwrite;
    with `force`, clear an earlier run's outputs first so none of them is left stale."""
    if resume or not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    held = sorted(p.name for p in out.iterdir() if p.name != CHECKPOINT_DIR or _saved(p))
    if not held:
        return
    if not force:
        raise ConfigError(f"--out {out}: already holds {', '.join(held[:4])}"
                          f"{', ...' if len(held) > 4 else ''}; pass --resume to continue that "
                          "run, --force to overwrite it, or another --out")
    for name in OUTPUTS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def _saved(ckpt_dir: pathlib.Path) -> bool:
    """Whether a run's checkpoint folder holds anything to resume from (the co-design's state
    or a finished baseline): a run stopped before its first save leaves it empty."""
    return ckpt_dir.is_dir() and any(p.is_file() for p in ckpt_dir.iterdir())


def saved_checkpoint(config_path: str | os.PathLike, out_dir: str | os.PathLike | None,
                     overrides: Sequence[str] = ()) -> pathlib.Path | None:
    """The checkpoint folder that ``--resume`` would continue the run from, or None when
    there is nothing there to resume (or the config cannot be read)."""
    try:
        config = ExperimentConfig.load(config_path, overrides)
    except BacoError:
        return None
    ckpt_dir = output_dir(config, out_dir) / CHECKPOINT_DIR
    return ckpt_dir if _saved(ckpt_dir) else None


def _writable(out: pathlib.Path, ckpt_dir: pathlib.Path) -> None:
    """Make `ckpt_dir` in `out` and check both take files, before any work: an unwritable
    folder is a `ConfigError` naming it, and the folders this made are removed again."""
    made = [p for p in (ckpt_dir, out, *out.parents) if not p.exists()]
    try:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        for folder in (out, ckpt_dir):
            tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        for folder in made:                 # the deepest first; only what is still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise ConfigError(f"cannot write results to {out}: "
                          f"{exc.strerror or exc}") from None


def run_experiment(config_path: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                   resume: bool = False, progress: bool = True,
                   emit_kernels: bool = False, overrides: Sequence[str] = (),
                   force: bool = False, profile: bool = False) -> dict[str, Any]:
    """Run the experiment of `config_path`; write DIR/config.yaml, results.json, history.csv.

    Args:
      config_path: the experiment YAML (`baco.config.ExperimentConfig`).
      out_dir: output folder; default the config's ``output``, else
        ``experiments/results/NAME``.
      resume: continue from ``DIR/checkpoint/`` (the co-design's state and finished
        baselines) instead of starting over.
      progress: show progress on stderr.
      emit_kernels: also write the design's kernels to ``DIR/kernels/`` (`write_kernels`).
      overrides: ``KEY=VALUE`` changes to the config (`ExperimentConfig.load`).
      force: overwrite a folder that holds an earlier run (else it is refused).
      profile: also write where the time went, ``DIR/profile.json`` and ``DIR/profile.md``
        (`baco.profile`); results.json is the same either way.

    Returns:
      The results document written to ``results.json``.
    """
    shown = Progress(enabled=progress)
    recording = Profile() if profile else None
    try:
        with profiling(recording):
            document, out = _run_experiment(config_path, out_dir, resume, shown, emit_kernels,
                                            overrides, force)
    finally:
        shown.close()
    if recording is not None:
        recording.write(out)
    return document


def _run_experiment(config_path: str | os.PathLike, out_dir: str | os.PathLike | None,
                    resume: bool, progress: Progress, emit_kernels: bool,
                    overrides: Sequence[str], force: bool
                    ) -> tuple[dict[str, Any], pathlib.Path]:
    """`run_experiment`'s work: the results document and the folder it was written to."""
    from baco.codesign_loop import codesign, refuse_other_settings
    from baco.compile_cache import enable
    from baco.networks import load_network
    from baco.sim_cache import enable_store

    enable()        # JAX's persistent compilation cache (`baco.compile_cache`)
    enable_store()  # the layers this machine simulated before (`baco.sim_cache`)
    config = ExperimentConfig.load(config_path, overrides)
    registry = baselines()
    for i, spec in enumerate(config.baselines):
        if spec.name not in registry:
            import difflib
            close = difflib.get_close_matches(spec.name, sorted(registry), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{config.source}: baselines[{i}]: unknown baseline "
                              f"{spec.name!r}{hint} (known: {', '.join(sorted(registry))})")
        if ("area_budget_mm2" in spec.options
                and "area_budget_mm2" not in inspect.signature(registry[spec.name]).parameters):
            raise ConfigError(f"{config.source}: baselines[{i}].options.area_budget_mm2: "
                              f"{spec.name} takes no area budget")
    try:
        with timed("load network"):
            network = load_network(config.network_source(), input_shapes=config.input_shapes)
    except BacoError as exc:
        raise type(exc)(f"{config.source}: network: {exc}") from None
    hardware = config.hardware_config()
    out = output_dir(config, out_dir)
    prepare_output(out, resume, force)
    ckpt_dir = out / CHECKPOINT_DIR
    if resume and not (ckpt_dir / "baco.npz").exists():
        _say(f"no checkpoint in {ckpt_dir}: starting from the beginning", progress)
    elif resume:
        refuse_other_settings(ckpt_dir / "baco.npz", config.codesign, network, hardware)
    _writable(out, ckpt_dir)
    sim_cache = ckpt_dir / SIM_CACHE
    if resume and (reused := DEFAULT_CACHE.load(sim_cache)):
        _say(f"{reused} simulated layers reused from {sim_cache}", progress)

    _say(f"[bold]baco run[/] {config.name}: {network.name}, {network.unique_layers} unique "
         f"layers, budget {config.codesign.budget_samples} samples -> {out}", progress)
    with timed("search baco"):
        result = pick(codesign(network, config=config.codesign, hardware=hardware,
                               progress=progress, checkpoint=ckpt_dir / "baco.npz",
                               resume=resume, top_k=config.final_pick.top_k),
                      config, progress, "baco")
    for message in result.extra.get("warnings", []):
        _say(f"[yellow]warning:[/] {message}", progress)
    _say(f"baco: EDP {result.edp:.4g} on the {yardstick_name(config.codesign)} "
         f"({result.samples} samples)", progress)
    DEFAULT_CACHE.save(sim_cache)     # what the final pick simulated survives an interruption

    found: dict[str, CodesignResult] = {}
    for spec in config.baselines:
        label = spec.label
        path = ckpt_dir / f"baseline-{label}.json"
        if resume and path.exists():
            found[label] = CodesignResult.from_json(path.read_text(), where=str(path))
            _say(f"{label}: finished before the interruption, reused from {path}", progress)
            continue
        options = dict(spec.options)
        if options.get("area_budget_mm2") == "match":
            options["area_budget_mm2"] = config_area_mm2(result.hardware)
        with timed(f"baseline {label}"):
            found[label] = _run_baseline(label, registry[spec.name], network, options, config,
                                         baseline_hardware(config, result), progress)
        write_atomic(path, found[label].to_json())
        DEFAULT_CACHE.save(sim_cache)
        _say(f"{label}: EDP {found[label].edp:.4g} on the {BASELINE_YARDSTICK}, its own "
             f"objective ({found[label].samples} samples)", progress)

    judged = {}
    for name, res in [("baco", result), *found.items()]:
        progress.phase(f"judging {name}", len(res.layers), unit="layers")
        with timed(f"judge {name}"):
            judged[name] = judge(res, config, progress.layer)
        DEFAULT_CACHE.save(sim_cache)
    with timed("results and report"):
        document = results_document(config, result, found, judged)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / CONFIG, yaml.safe_dump(config.to_dict(), sort_keys=False))
        write_atomic(out / RESULTS, json.dumps(document, indent=2) + "\n")
        write_atomic(out / HISTORY, history_csv(result, found,
                                                history_yardstick(config.codesign)))
        write_report(out / RESULTS)
    if emit_kernels:
        written, skipped = write_kernels(result, out / KERNELS_DIR)
        _say(f"wrote {len(written)} kernels to {out / KERNELS_DIR}", progress)
        for message in skipped:
            _say(f"[yellow]warning:[/] {message}", progress)
    return document, out


def write_kernels(result: CodesignResult, directory: pathlib.Path
                  ) -> tuple[list[pathlib.Path], list[str]]:
    """Each unique layer's ``@baco.jit`` kernel (`baco.dsl.emit`) as ``NN_LAYER.py``; returns
    the files written and why the others were skipped (layers the DSL cannot express)."""
    from baco import dsl
    from workloads.errors import DSLError

    directory.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for i, row in enumerate(result.layers):
        label = "".join(c if c.isalnum() else "_" for c in row.layer.name) or row.layer.kind
        try:
            source = dsl.emit(row.layer, row.mapping, result.hardware)
        except DSLError as exc:
            skipped.append(f"layer {i} ({label}): no kernel: {exc}")
            continue
        path = directory / f"{i:02d}_{label}.py"
        write_atomic(path, source)
        written.append(path)
    return written, skipped


def results_document(config: ExperimentConfig, result: CodesignResult,
                     found: dict[str, CodesignResult],
                     judged: dict[str, Yardsticks] | None = None) -> dict[str, Any]:
    """The results.json content: deterministic given the config (no wall-clock times).

    BACO (top level) and every ``baselines[LABEL]`` carry ``yardsticks`` (``plain``,
    ``instruction_aware``, ``simulated``: each ``{"edp", "latency_cycles", "energy_pj",
    "area_mm2"}``; `baco.yardsticks`), ``area_mm2`` of the design's hardware, and, for a
    baseline, ``edp_ratios``: how many times BACO's EDP is lower on each yardstick. ``edp``
    (with ``latency_cycles`` and ``energy_pj``) is on the yardstick named by
    ``edp_yardstick``: the judge's (``simulated``) when it judged every design, else the
    co-design's model (``instruction_aware`` or ``plain``, named by ``scorer``), so
    ``edp_ratio`` compares on it; ``edp_analytic`` / ``edp_ratio_analytic`` are the plain
    yardstick's, and ``edp_as_reported`` what the search itself reported. Per-layer figures
    name theirs: ``layers`` (BACO's and each baseline's) on ``layers_yardstick`` (the search's
    model), ``simulated_layers`` on the simulator; ``history_yardstick`` names what
    ``history``'s best EDP is measured on. A baseline's ``warnings`` say when its search was
    cut short (fewer starts than asked). ``simulated_breakdown`` (BACO's and
    each baseline's) splits the simulated figures by layer and padded-MAC assumption, and a
    baseline's ``verdict`` takes its ratio to BACO apart (`baco.verdict`). ``final_pick`` and
    ``final_pick_candidates`` (top level and each baseline) say how the design was picked
    (`baco.final_pick`; the details in ``extra``). ``history_yardstick`` (top level and each
    baseline) names what ``history``'s best EDPs are measured on.
    `judged` holds the methods' `Yardsticks` if already computed (by label, ``"baco"`` for
    the co-design).
    """
    judged = dict(judged or {})
    for name, res in [("baco", result), *found.items()]:
        if name not in judged:
            judged[name] = judge(res, config)
    model = "instruction_aware" if config.codesign.instruction_aware else "plain"
    # the judge's yardstick when it judged every design, else the co-design's model
    headline = ("simulated" if all(y.simulated is not None for y in judged.values())
                else model)
    mine = judged["baco"]

    def figures(y: Yardsticks) -> dict[str, Any]:
        head = y[headline]
        return {"edp": head.edp, "latency_cycles": head.latency_cycles,
                "energy_pj": head.energy_pj, "edp_analytic": y.plain.edp,
                "yardsticks": _yardstick_entries(y), "area_mm2": y.area_mm2}

    doc = result.to_dict()          # its edp: what the co-design reported, on `headline`
    doc.update({k: v for k, v in figures(mine).items()
                if k not in ("edp", "latency_cycles", "energy_pj")})
    doc["edp_as_reported"] = result.edp
    if config.codesign.predictor != "analytic" or headline != model:
        # `edp` is on the headline yardstick, as the baselines' are; what the search itself
        # reported (a hybrid's learned model's EDP) is `edp_as_reported`.
        doc.update({k: v for k, v in figures(mine).items()
                    if k in ("edp", "latency_cycles", "energy_pj")})
    doc["history"] = _history(result)
    doc["history_yardstick"] = history_yardstick(config.codesign)
    doc["name"] = config.name
    doc["edp_yardstick"] = headline
    doc["layers_yardstick"] = model
    doc["area_budget_mm2"] = config.codesign.area_budget_mm2
    doc["scorer"] = "instruction_aware" if model == "instruction_aware" else "analytic"
    doc["best_edp_at"] = _marks(result)
    doc["simulated_layers"] = [x.to_dict() for x in mine.layers]
    doc["simulated_breakdown"] = verdict.contestant(mine)
    doc.update(_pick_facts(result))
    entries = {}
    for name, other in found.items():
        theirs = judged[name]
        ratios = _ratios(theirs, mine)
        entries[name] = {
            "method": other.method, **figures(theirs), "edp_as_reported": other.edp,
            "edp_ratio": ratios[headline], "edp_ratio_analytic": ratios["plain"],
            "edp_ratios": ratios, "samples": other.samples, "best_edp_at": _marks(other),
            "hardware": other.hardware.to_dict(),
            "hardware_as_scored": theirs[headline].hardware.to_dict(),
            "history": _history(other), "history_yardstick": BASELINE_YARDSTICK,
            "seed": other.seed, **_pick_facts(other),
            "layers": [r.to_dict() for r in other.layers], "layers_yardstick": "plain",
            "simulated_layers": [x.to_dict() for x in theirs.layers],
            "warnings": _short_search(other),
            "simulated_breakdown": verdict.contestant(theirs),
            "verdict": verdict.versus(theirs, mine),
            "extra": json.loads(json.dumps(other.extra, default=str)),
        }
    doc["baselines"] = entries
    return json.loads(json.dumps(doc))


def _short_search(result: CodesignResult) -> list[str]:
    """What a reader must know before trusting a baseline's figures: a budget too small for
    the starts it was asked to draw."""
    asked = result.extra.get("settings", {}).get("starts")
    drawn = result.extra.get("starts_drawn")
    if asked is None or drawn is None or drawn >= asked:
        return []
    return [f"drew {drawn} of its {asked} starts within {result.samples} samples: its design "
            "is a partial search's, so BACO's lead over it is overstated; raise the budget"]


def _pick_facts(result: CodesignResult) -> dict[str, Any]:
    """How the method's design was picked (`baco.final_pick`): ``final_pick`` and
    ``final_pick_candidates``."""
    return {"final_pick": result.extra.get("final_pick", "none"),
            "final_pick_candidates": result.extra.get("final_pick_candidates", 1)}


def history_csv(result: CodesignResult, found: dict[str, CodesignResult],
                yardstick: str) -> str:
    """``method, samples, seconds, best_edp, yardstick`` rows: the co-design's history
    (`result`, on `yardstick`: `baco.progress.history_yardstick`), then each baseline's (on
    `BASELINE_YARDSTICK`); ``seconds`` are wall seconds since that search began."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "samples", "seconds", "best_edp", "yardstick"])
    for name, res in [("baco", result), *found.items()]:
        on = yardstick if name == "baco" else BASELINE_YARDSTICK
        for h in res.history:
            writer.writerow([name, h.samples, f"{h.seconds:.3f}", repr(h.best_edp), on])
    return buffer.getvalue()


SUMMARY_YARDSTICKS = (("simulated", "simulated"), ("instruction_aware", "instr.-aware"),
                      ("plain", "plain"))
"""The yardsticks of the summary, the judge (the simulator) first, with their column titles."""


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The one-screen summary of a results document: every method's EDP on each yardstick and
    its area, then BACO's ratio to each baseline on each yardstick."""
    def cell(entry: dict[str, Any] | None) -> str:
        return "-" if entry is None else f"{entry['edp']:.4g}"

    def hardware(hw: dict[str, Any]) -> str:
        return (f"{hw['pe_rows']}x{hw['pe_cols']} PEs, scratchpad {hw['sp_kb']:g} KB, "
                f"accumulator {hw['acc_kb']:g} KB, DRAM {hw['dram_bw_words']:g} words/cycle")

    def versus(ratio: float | None) -> str:
        if ratio is None:
            return "-"
        return f"{ratio:.2f}x better" if ratio >= 1 else f"{1 / ratio:.2f}x worse"

    rows = [("baco", document), *document["baselines"].items()]
    width = max(len(name) for name, _ in rows) + 2
    budget = document.get("area_budget_mm2")
    lines = [f"{document['name']}: EDP in cycles*pJ on each yardstick (simulated: the emitted "
             "programs on the simulator)"
             + (f"; area budget {budget:g} mm2" if budget is not None else ""),
             "  " + "method".ljust(width) + "".join(f"{title:>14s}" for _, title in
                                                   SUMMARY_YARDSTICKS)
             + "   area mm2   samples  hardware"]
    for name, entry in rows:
        marks = entry["yardsticks"]
        lines.append("  " + name.ljust(width)
                     + "".join(f"{cell(marks[key]):>14s}" for key, _ in SUMMARY_YARDSTICKS)
                     + f"   {entry['area_mm2']:8.3g}  {entry['samples']:8d}  "
                     f"{hardware(entry['hardware'])}")
    for name, entry in document["baselines"].items():
        ratios = entry["edp_ratios"]
        lines.append(f"  baco vs {name}: " + ", ".join(
            f"{versus(ratios[key])} {title}" for key, title in SUMMARY_YARDSTICKS))
        lines += verdict.verdict_lines(entry.get("verdict"))
        lines += [f"      warning: {name} {w}" for w in entry.get("warnings", [])]
    return lines


def main_run(config: str, out: str | None, resume: bool, quiet: bool,
             emit_kernels: bool = False, overrides: Sequence[str] = (),
             force: bool = False, profile: bool = False) -> int:
    """The `baco run` command: run, then print a one-screen summary (and with `profile`,
    where the time went) on stdout."""
    document = run_experiment(config, out, resume=resume, progress=not quiet,
                              emit_kernels=emit_kernels, overrides=overrides, force=force,
                              profile=profile)
    out_dir = output_dir(ExperimentConfig.load(config, overrides), out)
    for line in summary_lines(document):
        print(line)
    print(f"  wrote {out_dir / CONFIG}, {out_dir / RESULTS}, {out_dir / HISTORY}, "
          f"{out_dir / REPORT_FILES[0]}, {out_dir / REPORT_FILES[1]} and plots")
    if profile:
        print(f"where the time went ({out_dir / PROFILE_JSON}):")
        print((out_dir / PROFILE_MD).read_text(), end="")
    sys.stdout.flush()
    return 0


__all__ = ["baseline_hardware", "baselines", "history_csv", "main_run", "output_dir",
           "results_document", "run_experiment", "saved_checkpoint", "write_kernels"]
