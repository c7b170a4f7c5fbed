"""Run configurations: `CodesignConfig` (the search) and `ExperimentConfig` (a whole run).

Both are frozen dataclasses. `ExperimentConfig.load` reads a YAML file with `yaml.safe_load` and
checks it against the dataclasses' type hints, so a typo or a wrong type is reported with the key
path and the file, not as a traceback from deep inside the search:

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "bad.yaml"
>>> _ = path.write_text("name: x\\nnetwork: resnet50\\ncodesign: {learning_rat: 0.1}\\n")
>>> try:
...     ExperimentConfig.load(path)
... except ConfigError as exc:
...     print(str(exc).split(": ", 1)[1].split(" (known")[0])
unknown key 'codesign.learning_rat'; did you mean 'learning_rate'?

A config file looks like ``experiments/configs/resnet50.yaml``::

    name: resnet50
    network: resnet50                 # a zoo name or a path to an ONNX file
    hardware: gemmini_default         # fixed fields (bandwidth, word widths) and the template
    codesign: {seed: 0, budget_samples: 10000, starts: 8, ...}
    baselines: [gemmini_default, {name: dosa, options: {learning_rate: 7.5e-5}},
                {name: dosa, label: dosa_iso_area, options: {area_budget_mm2: match}}]
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from accel.arch import HardwareConfig, read_yaml
from baco.padding import PAD_FRACTION
from perfmodels.energy import check_area_budget
from workloads.errors import ConfigError

_HW_MODES = ("min_hw", "free", "fixed")
_PREDICTORS = ("analytic", "hybrid", "sim_hybrid")
_NEAREST = ("log", "linear")
_FINAL_PICKS = ("simulated", "none")


@dataclasses.dataclass(frozen=True)
class ImportanceSettings:
    """The importance scheduler (seed 001 §6.5): which layers get the next round of work.

    Each refinement round (`baco.refine`) explores ``layers_per_round`` layers, chosen by the
    estimate of Eq. 6.7-6.9 (disabled: in turn, round-robin). With ``mask_descent`` the
    scheduler also chooses the layers whose gradient steps a descent round applies (the
    others are frozen). ``alpha``, ``beta`` are the thesis's (0.2, 2); ``window`` is the
    backward window and ``patience`` the rounds without improvement before a layer is
    abandoned.
    """

    enabled: bool = True
    layers_per_round: int = 4
    mask_descent: bool = False
    alpha: float = 0.2
    beta: float = 2.0
    window: int = 3
    patience: int = 4

    def __post_init__(self) -> None:
        _positive(self, "layers_per_round", "window", "patience", prefix="codesign.importance")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"codesign.importance.alpha must be in [0, 1], got {self.alpha}")
        if self.beta <= 0:
            raise ConfigError(f"codesign.importance.beta must be positive, got {self.beta}")


@dataclasses.dataclass(frozen=True)
class CodesignConfig:
    """Hyperparameters of `baco.codesign` (Algorithm 6 with multi-start and periodic rounding).

    Budget: ``budget_samples`` whole-network points scored by the model (`baco.result`); every
    gradient step of a start, every exact score of a rounded design and every start candidate
    counts one. ``starts`` descents run side by side (vmapped); each runs ``steps_per_start``
    steps, rounding every ``round_every``, then makes way for a fresh random start while budget
    remains.

    Hardware: ``hw_mode`` ``min_hw`` infers the smallest hardware holding every layer's tiles
    (DOSA's min_hw, smooth during descent), ``free`` descends on PE dims, buffer sizes and the
    DRAM bandwidth too (the tiles grow the array and buffers they outgrow), ``fixed`` keeps the
    experiment's hardware. Rounded designs have PE dims <= ``max_pe_dim`` and buffers in
    ``sram_step_kb`` steps, within ``max_sp_kb``/``max_acc_kb`` if set; on a template with a
    generator's rules (``buildable: gemmini``) the array and buffers snap instead to the next
    sizes that generator builds (`accel.buildable`), and ``sram_step_kb`` is unused. In
    ``free`` mode the DRAM bandwidth is a power of two words per cycle up to
    ``max_dram_bw_words`` (its cost: the template's DRAM interface area and idle energy):
    starts take the experiment's hardware's, and descent and refinement move it; the other
    modes keep the experiment's hardware's.

    Refinement: the last ``refine_fraction`` of the budget explores ``refine_moves`` exact
    neighbours per layer and round around the best design, on the layers the importance
    scheduler picks (`baco.refine`).

    Descent (``descent``; default on): with ``descent: false`` the first part of the budget
    goes to exactly scored starts only (the same random hardware and tiler / random-pruned
    start mappings, no gradient steps), then refinement as usual: the yardstick of what
    gradient descent adds (`experiments/bench/codesign_ablation.py`).

    Instruction awareness (``instruction_aware``): the PE array runs DIM x DIM blocks, so a
    layer whose spatial C or K factor is below DIM pays for the padded rows and columns in
    compute energy and buffer rows (`perfmodels.aware`); the search sees it, and the score
    reported counts it.

    Area budget (``area_budget_mm2``, mm2 by the template's area model; null: none): the
    relaxed objective adds ``penalty * relu(log(area / budget))`` of the (inferred or free)
    hardware, and a rounded design over the budget is rejected (never the best). Checked when
    the config is loaded: it must be at least the template's smallest design
    (`accel.buildable.smallest_buildable`: on Gemmini the smallest its generator builds, else
    1x1 PEs and ``sram_step_kb`` buffers; in ``fixed`` mode, the fixed hardware's area).

    Predictor: ``analytic`` scores latency with the analytical model; ``hybrid`` multiplies
    its cycles by the learned residual of the surrogate at ``model`` (a folder from `baco
    surrogate train`; `perfmodels.atformer.hybrid`), in the descent and in every exact score.
    ``sim_hybrid`` learns that residual from the simulator during the search: ``sim_rounds``
    times it simulates the ``sim_top_k`` best new designs, fine-tunes the residual on every
    simulated layer so far (warm-started from ``model`` if given), and the final design is the
    one with the lowest simulated EDP, after each of its layers' programs is chosen by
    simulation among ``sim_polish`` neighbours (0: off) (`baco.sim_hybrid`; each newly
    simulated layer costs a sample).

    Padding (``pad_fraction``): a layer dim that is mostly one large prime (its factors 2, 3,
    5, 7 multiply to less than the rest) is searched grown to the smallest size with no other
    factors, if that adds at most this fraction (`baco.padding`: a prime K = 2729 is searched
    as 2744), as Gemmini's library pads edge tiles; the padded work is counted and the
    programs zero-fill it. 0: the exact dims. Not with ``fusion`` (fused chains are searched
    on their exact dims).

    Fusion (``fusion``; default off): the network's GEMM chains that the fused lowering runs
    (`baco.fusion`) are fused wherever that lowers a scored design's EDP, with the on-chip
    path from the accumulator to the scratchpad; each exact score, and so the hardware the
    search keeps, counts them fused (the chain's own model, `perfmodels.fusion.chain_cost`),
    and the descent's objective weighs each chain fused or apart, relaxed.
    The result's fused layers carry ``fused_with`` and the simulated yardstick runs each fused
    chain as one trace.
    """

    seed: int = 0
    budget_samples: int = 10000
    starts: int = 8
    steps_per_start: int = 300
    round_every: int = 50
    learning_rate: float = 0.05
    lr_final_fraction: float = 0.1
    hw_mode: str = "min_hw"
    instruction_aware: bool = True
    max_pe_dim: int = 128
    sram_step_kb: float = 1.0
    max_sp_kb: float | None = None
    max_acc_kb: float | None = None
    max_dram_bw_words: float = 64.0
    start_mappings: int = 4
    refine_fraction: float = 0.3
    refine_moves: int = 32
    init_softness: float = 0.05
    snap_to_rounded: bool = False
    penalty: float = 10.0
    tau: float = 0.05
    nearest: str = "log"
    checkpoint_every: int = 5
    importance: ImportanceSettings = dataclasses.field(default_factory=ImportanceSettings)
    predictor: str = "analytic"
    model: str | None = None
    area_budget_mm2: float | None = None
    descent: bool = True
    sim_rounds: int = 4
    sim_top_k: int = 4
    sim_polish: int = 4
    fusion: bool = False
    pad_fraction: float = PAD_FRACTION

    def __post_init__(self) -> None:
        if self.predictor not in _PREDICTORS:
            raise ConfigError(f"codesign.predictor must be one of {_PREDICTORS}, got "
                              f"{self.predictor!r}")
        if self.predictor == "hybrid" and not self.model:
            raise ConfigError("codesign.predictor 'hybrid' needs codesign.model: a surrogate "
                              "folder from `baco surrogate train`")
        _positive(self, "budget_samples", "starts", "steps_per_start", "round_every",
                  "max_pe_dim", "start_mappings", "checkpoint_every", "refine_moves",
                  "sim_rounds", "sim_top_k")
        if self.fusion and self.predictor == "sim_hybrid":
            raise ConfigError("codesign.fusion: the sim_hybrid predictor learns per-layer "
                              "residuals and would mislearn fused chains; use predictor "
                              "analytic or hybrid with fusion")
        if not 0.0 <= self.pad_fraction < 1.0:
            raise ConfigError(f"codesign.pad_fraction must be in [0, 1), got "
                              f"{self.pad_fraction}")
        if self.sim_polish < 0:
            raise ConfigError(f"codesign.sim_polish must be >= 0, got {self.sim_polish}")
        if not 0.0 <= self.refine_fraction < 1.0:
            raise ConfigError(f"codesign.refine_fraction must be in [0, 1), got "
                              f"{self.refine_fraction}")
        _positive(self, "learning_rate", "sram_step_kb", "penalty")
        if self.seed < 0:
            raise ConfigError(f"codesign.seed must be >= 0, got {self.seed}")
        if self.hw_mode not in _HW_MODES:
            raise ConfigError(f"codesign.hw_mode must be one of {_HW_MODES}, got "
                              f"{self.hw_mode!r}")
        if self.nearest not in _NEAREST:
            raise ConfigError(f"codesign.nearest must be one of {_NEAREST}, got {self.nearest!r}")
        if not 0.0 < self.lr_final_fraction <= 1.0:
            raise ConfigError("codesign.lr_final_fraction must be in (0, 1], got "
                              f"{self.lr_final_fraction}")
        if not 0.0 < self.init_softness < 1.0:
            raise ConfigError(f"codesign.init_softness must be in (0, 1), got "
                              f"{self.init_softness}")
        if self.tau < 0:
            raise ConfigError(f"codesign.tau must be >= 0, got {self.tau}")
        for key in ("max_sp_kb", "max_acc_kb", "max_dram_bw_words"):
            value = getattr(self, key)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"codesign.{key} must be a positive number, got {value}")

    def replace(self, **changes: Any) -> CodesignConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "codesign") -> CodesignConfig:
        return build_dataclass(cls, data, "codesign", where)


@dataclasses.dataclass(frozen=True)
class FinalPickConfig:
    """How every search of a run (BACO's and each baseline's) picks the design it returns
    (`baco.final_pick`): ``simulated``, its ``top_k`` best distinct designs by its own score
    are simulated and the one of lowest simulated EDP is returned (each newly simulated layer
    a sample); ``none``, its own best."""

    mode: str = "simulated"
    top_k: int = 4

    def __post_init__(self) -> None:
        if self.mode not in _FINAL_PICKS:
            raise ConfigError(f"final_pick.mode must be one of {_FINAL_PICKS}, got "
                              f"{self.mode!r}")
        if isinstance(self.top_k, bool) or self.top_k < 1:
            raise ConfigError(f"final_pick.top_k must be a positive integer, got "
                              f"{self.top_k!r}")


@dataclasses.dataclass(frozen=True)
class BaselineSpec:
    """One baseline to run beside the co-design: a name in `baco.search.BASELINES` and its
    keyword options (the sample budget and seed default to the co-design's). ``label`` names
    it in the results (default: ``name``), so one search can run twice with other options.
    ``area_budget_mm2: match`` holds a search that takes an area budget to the area of
    BACO's design (an iso-area comparison)."""

    name: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "options": dict(self.options)}
        if self.label != self.name:
            out["label"] = self.label
        return out


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A whole run: the network, the base hardware, the search, the baselines, the output.

    ``network`` is a zoo name (``resnet50``, ``bert:seq=128``) or an ONNX path (relative paths
    are resolved against the config file's folder), with ``input_shapes`` for dynamic inputs.
    ``hardware`` names a preset (or gives a mapping) whose template and fixed fields (DRAM
    bandwidth, word widths) the search keeps; in ``fixed`` mode it is the hardware.
    ``final_pick`` says how every search picks the design it returns (`FinalPickConfig`).
    """

    name: str
    network: str
    input_shapes: dict[str, list[int]] | None = None
    hardware: str | dict[str, Any] = "gemmini_default"
    codesign: CodesignConfig = dataclasses.field(default_factory=CodesignConfig)
    baselines: tuple[BaselineSpec, ...] = ()
    final_pick: FinalPickConfig = dataclasses.field(default_factory=FinalPickConfig)
    output: str | None = None
    source: str = dataclasses.field(default="<dict>", compare=False)

    def hardware_config(self) -> HardwareConfig:
        if isinstance(self.hardware, str):
            return HardwareConfig.preset(self.hardware)
        return HardwareConfig.from_dict(dict(self.hardware), where=f"{self.source}: hardware")

    def network_source(self) -> str:
        """The network as `baco.load_network` takes it (ONNX paths made absolute)."""
        text = self.network
        if text.endswith(".onnx") and self.source not in ("<dict>", "<text>"):
            path = pathlib.Path(text)
            if not path.is_absolute():
                return str((pathlib.Path(self.source).parent / path).resolve())
        return text

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("source")
        out["baselines"] = [b.to_dict() for b in self.baselines]
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> ExperimentConfig:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected a mapping at the top level, got "
                              f"{type(data).__name__}")
        data = dict(data)
        baselines = data.pop("baselines", None)
        config = build_dataclass(cls, {**data, "source": source}, "", source)
        specs = _baselines(baselines, source)
        config = dataclasses.replace(config, baselines=specs)
        try:
            hw = config.hardware_config()
        except ConfigError as exc:
            raise ConfigError(f"{source}: hardware: {exc}") from None
        try:
            check_area_budget(config.codesign.area_budget_mm2, hw, config.codesign.sram_step_kb,
                              fixed=config.codesign.hw_mode == "fixed")
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        return config

    @classmethod
    def load(cls, path: str | pathlib.Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
        """The config of `path`, with `overrides` (``KEY=VALUE``, dotted keys such as
        ``codesign.budget_samples=5000``; values in YAML) applied before it is checked."""
        path = pathlib.Path(path)
        data = read_yaml(path, "config")
        if data is None:
            raise ConfigError(f"config {path}: the file is empty (or only comments); a config "
                              "gives at least name and network, e.g. experiments/configs/"
                              "resnet50.yaml")
        if isinstance(data, dict) and "kind" in data:
            raise ConfigError(f"config {path}: this is a `baco reproduce` experiment (kind: "
                              f"{data['kind']}), not a `baco run` config; run it with "
                              f"`baco reproduce {data.get('name', path.stem)}`")
        source = str(path)
        if overrides:
            data = apply_overrides(data, overrides, source)
            source += " (with --set " + " ".join(overrides) + ")"
        return cls.from_dict(data, source=source)


def apply_overrides(data: Any, overrides: Sequence[str], where: str) -> dict[str, Any]:
    """A copy of the mapping `data` with each ``KEY=VALUE`` of `overrides` set (the value read
    as YAML, so ``5000`` is a number and ``[1, 2]`` a list); the keys are checked later, like
    the file's own."""
    import copy

    import yaml

    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    data = copy.deepcopy(dict(data))
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. "
                              "codesign.budget_samples=5000")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: the value is not YAML "
                              f"({' '.join(str(exc).split())})") from None
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:depth + 1])} is "
                                  f"{child!r}, not a mapping")
            node = child
        node[parts[-1]] = value
    return data


# --------------------------------------------------------------------------- checking
def _positive(obj: Any, *names: str, prefix: str = "codesign") -> None:
    for name in names:
        value = getattr(obj, name)
        if not value > 0:
            raise ConfigError(f"{prefix}.{name} must be positive, got {value}")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin is not None:
        return {dict: "a mapping", list: "a list", tuple: "a list"}.get(origin, str(tp))
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def check_value(value: Any, tp: Any, key: str, where: str) -> Any:
    """`value` converted to `tp` (ints are accepted as floats; lists as tuples), or a
    ConfigError naming `key` and `where`. Shared by every strict YAML reader (the experiment
    configs here, `baco.reproduce.spec`)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return check_value(value, arg, key, where)
            except ConfigError:
                continue
        raise _wrong_type(value, tp, key, where)
    if tp is type(None):
        if value is None:
            return None
        raise _wrong_type(value, tp, key, where)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, key, where)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _wrong_type(value, tp, key, where)
        kt, vt = typing.get_args(tp) or (Any, Any)
        return {check_value(k, kt, f"{key}.{k}", where): check_value(v, vt, f"{key}.{k}", where)
                for k, v in value.items()}
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise _wrong_type(value, tp, key, where)
        (et, *_) = typing.get_args(tp) or (Any,)
        items = [check_value(v, et, f"{key}[{i}]", where) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _wrong_type(value, tp, key, where)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _wrong_type(value, tp, key, where)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{where}: {key} must be a finite number, got {value!r}")
            return float(value)
        raise _wrong_type(value, tp, key, where)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _wrong_type(value, tp, key, where)
    raise AssertionError(f"unsupported config type {tp!r}")  # a bug in the dataclasses


def _wrong_type(value: Any, tp: Any, key: str, where: str) -> ConfigError:
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return ConfigError(f"{where}: {key} must be {_type_name(tp)}, got {shown}")


def build_dataclass(cls: type, data: Any, prefix: str, where: str) -> Any:
    """An instance of dataclass `cls` from mapping `data`: unknown keys (with the closest known
    one), missing keys and wrong types are reported as ``WHERE: ... 'PREFIX.KEY' ...``."""
    label = prefix or "the top level"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: {label} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    public = [name for name in fields if name != "source"]
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), public, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}: unknown key {path!r}{hint} (known: {', '.join(public)})")
        kwargs[key] = check_value(value, hints[key], path, where)
    for name, field in fields.items():
        if (field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
                and name not in kwargs):
            path = f"{prefix}.{name}" if prefix else name
            raise ConfigError(f"{where}: missing key {path!r} ({_type_name(hints[name])})")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {prefix}: {exc}" if prefix else f"{where}: {exc}") from None


def _baselines(raw: Any, where: str) -> tuple[BaselineSpec, ...]:
    """``[name, {name: .., options: {..}}]`` or ``{name: {options}}`` as BaselineSpecs."""
    if raw is None:
        return ()
    if isinstance(raw, Mapping):
        raw = [{"name": k, "options": v or {}} for k, v in raw.items()]
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: baselines must be a list of names or "
                          f"{{name: .., options: {{..}}}} entries, got {type(raw).__name__}")
    specs = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            item = {"name": item}
        specs.append(build_dataclass(BaselineSpec, item, f"baselines[{i}]", where))
    labels = [s.label for s in specs]
    if "baco" in labels:
        raise ConfigError(f"{where}: baselines[{labels.index('baco')}]: 'baco' names the "
                          "co-design in the results; give the baseline another label")
    dupes = sorted({n for n in labels if labels.count(n) > 1})
    if dupes:
        raise ConfigError(f"{where}: baselines lists {dupes[0]!r} twice (give one a label)")
    for i, spec in enumerate(specs):
        area = spec.options.get("area_budget_mm2")
        if isinstance(area, str) and area != "match":
            raise ConfigError(f"{where}: baselines[{i}].options.area_budget_mm2: a number of "
                              f"mm2 or 'match' (BACO's design's area), got {area!r}")
    return tuple(specs)
