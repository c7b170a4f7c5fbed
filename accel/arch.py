"""The accelerator template and its hardware parameters.

A *template* (``accel/templates/NAME.yaml``) is the shape of an accelerator: its storage levels
from the innermost (level 0, e.g. the PE registers) to the outermost (DRAM), which tensors each
level keeps (the others bypass it), where the spatial fan-out sits, and how capacity, bandwidth,
energy per access and area follow from the hardware parameters. A `HardwareConfig` is one point
of that template: PE rows and columns, buffer sizes, DRAM bandwidth, word widths. Presets live in
``accel/presets/NAME.yaml``; a user describes a new accelerator by writing a template and a
config in the same YAML form.

The Gemmini template reproduces seed 001 Table 6.3 with DOSA's exact fits (reference
dosa-gemmini-isa.md §A.6-A.7, §A.9):

=============  =====  =======================  ================================
level          keeps  bandwidth (words/cycle)  energy per access (pJ)
=============  =====  =======================  ================================
MAC            -      -                        0.5608
Registers      W      2 per PE                 0.48746172
Accumulator    O      2 per column             1.94 + 0.1005 * acc_kb / pe_cols
Scratchpad     W, I   2 * pe_cols              0.49 + 0.02513 * sp_kb
DRAM           W,I,O  dram_bw_words (8)        100
=============  =====  =======================  ================================

Template quantities are small arithmetic expressions over the hardware parameters (``2 *
pe_cols``, ``acc_kb / pe_cols``); they are evaluated with `jax.numpy` so that relaxed
(continuous, traced) hardware goes through the same formulas as a discrete `HardwareConfig`.

>>> hw = HardwareConfig.preset("gemmini_default")
>>> hw.pe_rows, hw.sp_kb, hw.acc_kb
(16, 256.0, 64.0)
>>> [lv.name for lv in hw.template_spec.levels]
['Registers', 'Accumulator', 'Scratchpad', 'DRAM']
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import math
import operator
import pathlib
from collections.abc import Mapping as AbcMapping
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp
import numpy as np
import yaml

from accel import dma
from workloads.errors import ConfigError
from workloads.layer import DIMS

TENSORS = ("W", "I", "O")
"""Tensor order used by every ``[..., tensor]`` array: weights, inputs, outputs."""

TEMPLATE_DIR = pathlib.Path(__file__).parent / "templates"
PRESET_DIR = pathlib.Path(__file__).parent / "presets"

DATAFLOWS = ("WS", "OS", "RS")
"""Weight-, output-, row-stationary. A label: what the model does follows from the template's
levels and loop constraints (Gemmini's template is weight-stationary)."""

MAX_STAGES = 4
"""Most pipeline stages (multi-buffering depth) a level may have (ALCOP's range, seed 001 §2)."""

# Names a template expression may use, besides the template's own `params`.
HW_FIELDS = ("pe_rows", "pe_cols", "sp_kb", "acc_kb", "dram_bw_words", "input_bits",
             "weight_bits", "acc_bits", "clock_mhz")
DERIVED_NAMES = ("n_pe", "dma_bus_bytes", "dma_inflight")


# --------------------------------------------------------------------------- expressions
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}


_FUNCS = ("min", "max", "sqrt")


def _call(name: str, args: list[Any], xp: Any) -> Any:
    if name == "sqrt":
        return xp.sqrt(*args)
    return functools.reduce(xp.minimum if name == "min" else xp.maximum, args)


@functools.lru_cache(maxsize=None)
def _compiled(text: str) -> ast.AST:
    return ast.parse(text, mode="eval").body


@dataclasses.dataclass(frozen=True)
class Expr:
    """A number or an arithmetic expression over hardware parameters, from a template field.

    Only ``+ - * / **``, parentheses, numbers, parameter names and ``min``/``max``/``sqrt``
    are allowed, so a template file cannot run code. Evaluation works on Python numbers and on
    traced JAX values alike.

    >>> Expr.parse("2 * pe_cols", "f", ("pe_cols",)).evaluate({"pe_cols": 16})
    32
    """

    text: str
    names: tuple[str, ...]

    @classmethod
    def parse(cls, value: Any, where: str, allowed: tuple[str, ...]) -> Expr:
        if isinstance(value, bool) or value is None:
            raise ConfigError(f"{where}: expected a number or an expression, got {value!r}")
        text = str(value).strip()
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as exc:
            raise ConfigError(f"{where}: cannot parse expression {text!r}: {exc.msg}") from None
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
                continue
            if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
                continue
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                    and not isinstance(node.value, bool):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in _FUNCS and not node.keywords:
                continue
            if isinstance(node, ast.Name):
                if node.id in _FUNCS:
                    continue
                if node.id not in allowed:
                    close = difflib.get_close_matches(node.id, allowed, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise ConfigError(f"{where}: unknown name {node.id!r} in {text!r}{hint} "
                                      f"(known: {', '.join(allowed)})")
                names.append(node.id)
                continue
            raise ConfigError(f"{where}: {type(node).__name__} is not allowed in {text!r}; "
                              "use numbers, parameter names, + - * / ** and min/max/sqrt")
        return cls(text=text, names=tuple(sorted(set(names))))

    def evaluate(self, env: AbcMapping[str, Any], xp: Any = jnp) -> Any:
        """Value at `env`; `xp` (numpy or jax.numpy) supplies min/max/sqrt."""
        return _eval_node(_compiled(self.text), env, xp)


def _eval_node(node: ast.AST, env: AbcMapping[str, Any], xp: Any) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval_node(node.left, env, xp),
                                      _eval_node(node.right, env, xp))
    if isinstance(node, ast.UnaryOp):
        value = _eval_node(node.operand, env, xp)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        return _call(node.func.id, [_eval_node(a, env, xp) for a in node.args], xp)
    raise AssertionError(f"unexpected node {node!r}")  # Expr.parse rejects everything else


# --------------------------------------------------------------------------- template
@dataclasses.dataclass(frozen=True)
class LevelSpec:
    """One storage level of a template.

    ``capacity_kb`` is per instance (None: unbounded, only for the outermost level);
    ``bandwidth_words`` is words/cycle per instance; energy per word access is
    ``energy_pj + energy_pj_per_kb * capacity_kb`` (DOSA's linear CACTI fits); ``spatial_dims``
    may fan out *below* this level, with the product of their spatial factors at most
    ``fanout``; only ``temporal_dims`` may have temporal factors other than 1 here.
    ``area_mm2`` (per instance) and ``static_pj_per_cycle`` (all instances) cost what does not
    scale with capacity, such as the DRAM interface's width: the idle energy is charged per
    cycle the layer runs, by the instruction-aware model and the simulated yardstick only
    (the plain model is Timeloop's, which has none).
    """

    name: str
    keeps: tuple[str, ...]
    instances: Expr
    capacity_kb: Expr | None
    bandwidth_words: Expr
    energy_pj: Expr
    energy_pj_per_kb: Expr
    area_mm2_per_kb: Expr
    latency_cycles: Expr
    spatial_dims: tuple[str, ...]
    fanout: Expr | None
    temporal_dims: tuple[str, ...]
    area_mm2: Expr = Expr.parse(0, "area_mm2", ())
    static_pj_per_cycle: Expr = Expr.parse(0, "static_pj_per_cycle", ())

    @property
    def tag(self) -> str:
        """The Timeloop-style keep tag, e.g. ``WI``."""
        return "".join(t for t in TENSORS if t in self.keeps)


@dataclasses.dataclass(frozen=True)
class InstructionCost:
    """What one instruction of a kind costs, for the instruction-aware model.

    An instruction handles at most ``max_rows`` rows (of inputs streamed through the array,
    or of a tile moved to or from DRAM); it holds its queue ``max(rows, min_cycles)`` cycles
    and completes ``latency_cycles`` later, and at most ``in_flight`` of its kind are
    outstanding (reservation-station entries). A compute's weight block takes
    ``preload_cycles`` to load, of which the compute before it hides its own length.
    """

    max_rows: Expr
    latency_cycles: Expr
    in_flight: Expr
    min_cycles: Expr
    preload_cycles: Expr

    KINDS: ClassVar[tuple[str, ...]] = ("compute", "load", "store")
    OPTIONAL: ClassVar[dict[str, float]] = {"min_cycles": 1.0, "preload_cycles": 0.0}

    @classmethod
    def table_from_dict(cls, raw: Any, where: str, allowed: tuple[str, ...]
                        ) -> tuple[tuple[str, InstructionCost], ...]:
        """The template's ``instructions`` block: ``{kind: {field: expr}}``, kinds of `KINDS`."""
        if raw is None:
            return ()
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping of {list(cls.KINDS)} to costs")
        _check_keys(raw, set(cls.KINDS), where)
        names = tuple(f.name for f in dataclasses.fields(cls))
        out = []
        for kind, fields in raw.items():
            kw = f"{where}.{kind}"
            if not isinstance(fields, dict):
                raise ConfigError(f"{kw}: expected a mapping with {list(names)}")
            _check_keys(fields, set(names), kw)
            missing = [n for n in names if n not in fields and n not in cls.OPTIONAL]
            if missing:
                raise ConfigError(f"{kw}: missing field {missing[0]!r}")
            out.append((kind, cls(*(Expr.parse(fields.get(n, cls.OPTIONAL.get(n)), f"{kw}.{n}",
                                                allowed) for n in names))))
        return tuple(out)

    def evaluate(self, template: Template, hwp: HwParams, xp: Any = jnp) -> dict[str, Any]:
        """Each field's value at `hwp` (float32 arrays)."""
        env = hw_env(template, hwp, xp)
        return {f.name: xp.asarray(getattr(self, f.name).evaluate(env, xp), dtype=xp.float32)
                for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class Template:
    """The shape of an accelerator: its levels (index 0 innermost) and compute unit.

    Frozen and hashable, so jitted model functions take it as a static argument.
    """

    name: str
    levels: tuple[LevelSpec, ...]
    mac_energy_pj: Expr
    pe_area_mm2: Expr
    square_array: bool
    params: tuple[tuple[str, float], ...]
    description: str = ""
    source: str = ""
    path_area_mm2: Expr | None = None   # the optional on-chip path (fused chains); None: none
    gelu_area_mm2: Expr | None = None   # the optional I-GELU unit on the mvout path; None: none
    norm_area_mm2: Expr | None = None   # the optional normalizer (softmax); None: none
    instructions: tuple[tuple[str, InstructionCost], ...] = ()   # what each kind costs

    def instruction(self, kind: str) -> InstructionCost | None:
        """The cost of one instruction of `kind` (`InstructionCost.KINDS`), None if unknown."""
        return dict(self.instructions).get(kind)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, name_or_path: str | pathlib.Path) -> Template:
        """A shipped template by name (``gemmini``) or a YAML file by path."""
        return _load_template(str(name_or_path))

    @classmethod
    def names(cls) -> list[str]:
        return sorted(p.stem for p in TEMPLATE_DIR.glob("*.yaml"))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Template:
        where = f"template {source}"
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping at the top level, got "
                              f"{type(data).__name__}")
        _check_keys(data, {"name", "description", "levels", "mac", "square_array", "params",
                           "onchip_path", "igelu_unit", "normalizer", "instructions"}, where)
        for key in ("name", "levels", "mac"):
            if key not in data:
                raise ConfigError(f"{where}: missing field {key!r}")
        params_raw = data.get("params") or {}
        if not isinstance(params_raw, dict):
            raise ConfigError(f"{where}: params must be a mapping of name to number")
        params = []
        for pname, pvalue in params_raw.items():
            if pname in HW_FIELDS or pname in DERIVED_NAMES or pname in _FUNCS:
                raise ConfigError(f"{where}: params.{pname} shadows a built-in name")
            params.append((str(pname), _number(pvalue, f"{where}: params.{pname}")))
        allowed = HW_FIELDS + DERIVED_NAMES + tuple(p for p, _ in params)

        levels_raw = data["levels"]
        if not isinstance(levels_raw, list) or len(levels_raw) < 2:
            raise ConfigError(f"{where}: levels must be a list of at least 2 levels, "
                              "innermost first")
        levels = []
        for i, raw in enumerate(levels_raw):
            lw = f"{where}: levels[{i}]"
            if not isinstance(raw, dict):
                raise ConfigError(f"{lw}: expected a mapping")
            _check_keys(raw, {"name", "keeps", "instances", "capacity_kb", "bandwidth_words",
                              "energy_pj", "energy_pj_per_kb", "area_mm2_per_kb", "area_mm2",
                              "static_pj_per_cycle", "latency_cycles", "spatial",
                              "temporal_dims"}, lw)
            if "name" not in raw:
                raise ConfigError(f"{lw}: missing field 'name'")
            lw = f"{where}: level {raw['name']!r}"
            keeps = tuple(raw.get("keeps") or ())
            for t in keeps:
                if t not in TENSORS:
                    raise ConfigError(f"{lw}: keeps has {t!r}; tensors are {TENSORS}")
            top = i == len(levels_raw) - 1
            cap = raw.get("capacity_kb")
            if cap is None and not top:
                raise ConfigError(f"{lw}: capacity_kb is required below the outermost level")
            spatial = raw.get("spatial") or {}
            if not isinstance(spatial, dict):
                raise ConfigError(f"{lw}: spatial must be {{dims: [..], fanout: expr}}")
            _check_keys(spatial, {"dims", "fanout"}, f"{lw}.spatial")
            sdims = tuple(spatial.get("dims") or ())
            tdims = tuple(raw.get("temporal_dims", DIMS) or ())
            for d in sdims + tdims:
                if d not in DIMS:
                    raise ConfigError(f"{lw}: unknown dim {d!r}; dims are {DIMS}")
            if sdims and "fanout" not in spatial:
                raise ConfigError(f"{lw}: spatial needs a fanout (most PEs it spreads over)")
            if top and sdims:
                raise ConfigError(f"{lw}: the outermost level cannot fan out spatially")
            levels.append(LevelSpec(
                name=str(raw["name"]),
                keeps=tuple(t for t in TENSORS if t in keeps),
                instances=Expr.parse(raw.get("instances", 1), f"{lw}.instances", allowed),
                capacity_kb=None if cap is None else Expr.parse(cap, f"{lw}.capacity_kb",
                                                                allowed),
                bandwidth_words=Expr.parse(raw.get("bandwidth_words", "inf_bw"),
                                           f"{lw}.bandwidth_words", allowed + ("inf_bw",)),
                energy_pj=Expr.parse(raw.get("energy_pj", 0), f"{lw}.energy_pj", allowed),
                energy_pj_per_kb=Expr.parse(raw.get("energy_pj_per_kb", 0),
                                            f"{lw}.energy_pj_per_kb", allowed),
                area_mm2_per_kb=Expr.parse(raw.get("area_mm2_per_kb", 0),
                                           f"{lw}.area_mm2_per_kb", allowed),
                latency_cycles=Expr.parse(raw.get("latency_cycles", 0),
                                          f"{lw}.latency_cycles", allowed),
                spatial_dims=sdims,
                fanout=Expr.parse(spatial["fanout"], f"{lw}.spatial.fanout", allowed)
                if sdims else None,
                temporal_dims=tdims,
                area_mm2=Expr.parse(raw.get("area_mm2", 0), f"{lw}.area_mm2", allowed),
                static_pj_per_cycle=Expr.parse(raw.get("static_pj_per_cycle", 0),
                                               f"{lw}.static_pj_per_cycle", allowed),
            ))
        if set(levels[-1].keeps) != set(TENSORS):
            raise ConfigError(f"{where}: the outermost level ({levels[-1].name}) must keep "
                              "W, I and O")
        mac = data["mac"]
        if not isinstance(mac, dict):
            raise ConfigError(f"{where}: mac must be {{energy_pj: .., area_mm2: ..}}")
        _check_keys(mac, {"energy_pj", "area_mm2"}, f"{where}: mac")
        units = {}
        for key in ("onchip_path", "igelu_unit", "normalizer"):
            unit = data.get(key)
            if unit is not None and not isinstance(unit, dict):
                raise ConfigError(f"{where}: {key} must be {{area_mm2: ..}}")
            if unit is not None:
                _check_keys(unit, {"area_mm2"}, f"{where}: {key}")
                units[key] = Expr.parse(unit.get("area_mm2", 0), f"{where}: {key}.area_mm2",
                                        allowed)
        return cls(
            name=str(data["name"]),
            levels=tuple(levels),
            mac_energy_pj=Expr.parse(mac.get("energy_pj", 0), f"{where}: mac.energy_pj",
                                     allowed),
            pe_area_mm2=Expr.parse(mac.get("area_mm2", 0), f"{where}: mac.area_mm2", allowed),
            square_array=bool(data.get("square_array", False)),
            params=tuple(params),
            description=str(data.get("description", "")),
            source=source,
            path_area_mm2=units.get("onchip_path"),
            gelu_area_mm2=units.get("igelu_unit"),
            norm_area_mm2=units.get("normalizer"),
            instructions=InstructionCost.table_from_dict(
                data.get("instructions"), f"{where}: instructions", allowed),
        )

    # ------------------------------------------------------------------ static structure
    @property
    def num_levels(self) -> int:
        return len(self.levels)

    @functools.cached_property
    def keeps_mask(self) -> np.ndarray:
        """``[level, tensor]`` bool: which tensors each level stores."""
        return np.array([[t in lv.keeps for t in TENSORS] for lv in self.levels], dtype=bool)

    @functools.cached_property
    def spatial_mask(self) -> np.ndarray:
        """``[level, dim]`` bool: where spatial factors other than 1 are allowed."""
        return np.array([[d in lv.spatial_dims for d in DIMS] for lv in self.levels],
                        dtype=bool)

    @functools.cached_property
    def temporal_mask(self) -> np.ndarray:
        """``[level, dim]`` bool: where temporal factors other than 1 are allowed."""
        mask = np.array([[d in lv.temporal_dims for d in DIMS] for lv in self.levels],
                        dtype=bool)
        mask[-1, :] = True  # the outermost level takes whatever is left of every dim
        return mask

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(lv.tag for lv in self.levels)

    def level_index(self, name: str) -> int:
        for i, lv in enumerate(self.levels):
            if lv.name == name:
                return i
        raise ConfigError(f"template {self.name}: no level {name!r}; levels are "
                          f"{[lv.name for lv in self.levels]}")

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.params)


def _check_keys(data: dict, known: set[str], where: str) -> None:
    unknown = set(data) - known
    if unknown:
        name = sorted(unknown)[0]
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}: unknown field {name!r}{hint} (known: {sorted(known)})")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def read_yaml(path: pathlib.Path, what: str) -> Any:
    """``yaml.safe_load`` of a file; unreadable files and malformed YAML become `ConfigError`s
    that name ``what``, the file and the line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read ({exc.strerror})") from None
    return _parse_yaml(text, f"{what} {path}")


def _parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}:{line}: malformed YAML ({problem})") from None


@functools.lru_cache(maxsize=None)
def _load_template(name_or_path: str) -> Template:
    path = pathlib.Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return Template.from_dict(read_yaml(path, "template"), source=str(path))
    shipped = TEMPLATE_DIR / f"{name_or_path}.yaml"
    if not shipped.exists():
        names = Template.names()
        close = difflib.get_close_matches(name_or_path, names, n=1)
        hint = f"; closest: {close[0]!r}" if close else ""
        raise ConfigError(f"unknown template {name_or_path!r}{hint} (known: {', '.join(names)})")
    return Template.from_dict(read_yaml(shipped, "template"), source=str(shipped))


# --------------------------------------------------------------------------- hardware config
@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """One accelerator: a template plus its parameters.

    Buffer sizes are totals in KiB (the accumulator's is summed over its per-column instances,
    as in Gemmini's RTL and DOSA's ``min_hw``); ``dram_bw_words`` is DRAM words per cycle;
    ``dataflow`` is a label (see `DATAFLOWS`) and ``clock_mhz`` converts cycles to time.
    ``params`` overrides the template's own named parameters (e.g. an Eyeriss spad size).

    >>> HardwareConfig(pe_rows=8, pe_cols=8).n_pe
    64
    """

    template: str = "gemmini"
    pe_rows: int = 16
    pe_cols: int = 16
    sp_kb: float = 256.0
    acc_kb: float = 64.0
    dram_bw_words: float = 8.0
    input_bits: int = 8
    weight_bits: int = 8
    acc_bits: int = 32
    dataflow: str = "WS"
    clock_mhz: float = 1000.0
    params: tuple[tuple[str, float], ...] = ()
    name: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        where = f"hardware {self.name!r}" if self.name else "hardware"
        for field in ("pe_rows", "pe_cols", "input_bits", "weight_bits", "acc_bits"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{where}: {field} must be a positive integer, got {value!r}")
            object.__setattr__(self, field, int(value))
        for field in ("sp_kb", "acc_kb", "dram_bw_words", "clock_mhz"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
                    or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{where}: {field} must be a positive number, got {value!r}")
            object.__setattr__(self, field, float(value))
        if self.dataflow not in DATAFLOWS:
            raise ConfigError(f"{where}: dataflow must be one of {DATAFLOWS}, got "
                              f"{self.dataflow!r}")
        params = dict(self.params.items() if isinstance(self.params, dict) else self.params)
        object.__setattr__(self, "params", tuple(sorted(
            (str(k), _number(v, f"{where}: params.{k}")) for k, v in params.items())))
        spec = self.template_spec  # fails early on an unknown template
        unknown = set(params) - set(spec.param_names)
        if unknown:
            raise ConfigError(f"{where}: params {sorted(unknown)} are not parameters of "
                              f"template {spec.name!r} (it has {list(spec.param_names)})")

    # ------------------------------------------------------------------ derived
    @property
    def n_pe(self) -> int:
        return self.pe_rows * self.pe_cols

    @property
    def template_spec(self) -> Template:
        return Template.load(self.template)

    def param_values(self) -> dict[str, float]:
        """Template parameters with this config's overrides applied."""
        values = dict(self.template_spec.params)
        values.update(dict(self.params))
        return values

    def to_params(self) -> HwParams:
        """The traced form the model takes (floats; `vmap`-able with `stack_hw`)."""
        spec = self.template_spec
        values = self.param_values()
        return HwParams(
            pe_rows=np.float32(self.pe_rows), pe_cols=np.float32(self.pe_cols),
            sp_kb=np.float32(self.sp_kb), acc_kb=np.float32(self.acc_kb),
            dram_bw_words=np.float32(self.dram_bw_words),
            input_bits=np.float32(self.input_bits), weight_bits=np.float32(self.weight_bits),
            acc_bits=np.float32(self.acc_bits), clock_mhz=np.float32(self.clock_mhz),
            extra=np.array([values[p] for p in spec.param_names], dtype=np.float32),
        )

    def capacities_kb(self) -> dict[str, float]:
        """Per-instance capacity of each bounded level, in KiB."""
        arrays = level_arrays(self.template_spec, self.to_params(), np)
        return {lv.name: float(arrays.capacity_kb[i])
                for i, lv in enumerate(self.template_spec.levels) if lv.capacity_kb is not None}

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["params"] = dict(self.params)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "hardware") -> HardwareConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        _check_keys(data, fields | {"description"}, where)
        kw = {k: v for k, v in data.items() if k in fields}
        kw.setdefault("name", where)
        if "params" in kw:
            if not isinstance(kw["params"], dict):
                raise ConfigError(f"{where}: params must be a mapping of name to number")
            kw["params"] = tuple(kw["params"].items())
        try:
            return cls(**kw)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_yaml(cls, source: str | pathlib.Path) -> HardwareConfig:
        """Load a config from a YAML file (a `Path`, or a string without ``:`` or newlines)
        or from YAML text."""
        text = str(source)
        if isinstance(source, pathlib.Path) or ("\n" not in text and ":" not in text):
            path = pathlib.Path(source)
            return cls.from_dict(read_yaml(path, "hardware config"),
                                 where=f"hardware config {path}")
        return cls.from_dict(_parse_yaml(text, "hardware config <text>"),
                             where="hardware config <text>")

    @classmethod
    def preset(cls, name: str) -> HardwareConfig:
        """A shipped preset (``gemmini_default``, ``gemmini_dosa``, ``eyeriss``...).

        >>> HardwareConfig.preset("gemmini_dosa").sp_kb
        128.0
        """
        path = PRESET_DIR / f"{name}.yaml"
        if not path.exists():
            names = cls.preset_names()
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.3)
            hint = f"; closest: {close[0]!r}" if close else ""
            raise ConfigError(f"unknown hardware preset {name!r}{hint} "
                              f"(known: {', '.join(names)})")
        data = read_yaml(path, "preset")
        if isinstance(data, dict):
            data.setdefault("name", name)
        return cls.from_dict(data, where=f"preset {name}")

    @classmethod
    def preset_names(cls) -> list[str]:
        return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


# --------------------------------------------------------------------------- traced form
class HwParams(NamedTuple):
    """Hardware parameters as float leaves, so relaxed hardware can be traced and vmapped.

    ``extra`` holds the template's named ``params`` in `Template.param_names` order.
    """

    pe_rows: Any
    pe_cols: Any
    sp_kb: Any
    acc_kb: Any
    dram_bw_words: Any
    input_bits: Any
    weight_bits: Any
    acc_bits: Any
    clock_mhz: Any
    extra: Any


def stack_hw(configs: list[HardwareConfig]) -> HwParams:
    """Stack configs of one template along a leading axis, for `jax.vmap`."""
    if len({c.template for c in configs}) > 1:
        raise ConfigError("stack_hw: all configs must share one template")
    parts = [c.to_params() for c in configs]
    return HwParams(*(np.stack(leaves) for leaves in zip(*parts)))


class LevelArrays(NamedTuple):
    """Per-level hardware quantities of a template at one `HwParams` (all ``[level]``).

    ``capacity_kb`` is per instance (inf for the outermost level); ``bandwidth_words`` is
    per instance per cycle; ``fanout`` is the most PEs a level's spatial loops may use
    (inf when it has none).
    """

    instances: Any
    capacity_kb: Any
    bandwidth_words: Any
    energy_pj: Any
    area_mm2: Any
    latency_cycles: Any
    fanout: Any
    static_pj_per_cycle: Any
    mac_energy_pj: Any
    pe_area_mm2: Any


def hw_env(template: Template, hwp: HwParams, xp: Any = jnp) -> dict[str, Any]:
    """The names a template expression sees."""
    env = {f: getattr(hwp, f) for f in HW_FIELDS}
    env["n_pe"] = hwp.pe_rows * hwp.pe_cols
    # The DMA the generator builds for this bandwidth (`accel.dma`), as the simulator times it.
    dram_bytes = dma.dram_bytes_per_cycle(hwp.dram_bw_words, hwp.input_bits, xp)
    env["dma_bus_bytes"] = dma.bus_bytes(dram_bytes, xp)
    env["dma_inflight"] = dma.inflight_requests(dram_bytes, xp=xp)
    for i, name in enumerate(template.param_names):
        env[name] = hwp.extra[..., i]
    env["inf_bw"] = xp.inf
    return env


def unit_area_mm2(hw: HardwareConfig, unit: str) -> float | None:
    """Area at `hw` of the template's optional ``"onchip_path"``, ``"igelu_unit"`` or
    ``"normalizer"``; None where the template has none."""
    template = hw.template_spec
    expr = {"onchip_path": template.path_area_mm2, "igelu_unit": template.gelu_area_mm2,
            "normalizer": template.norm_area_mm2}[unit]
    if expr is None:
        return None
    return float(expr.evaluate(hw_env(template, hw.to_params(), np), np))


def level_arrays(template: Template, hwp: HwParams, xp: Any = jnp) -> LevelArrays:
    """Evaluate the template's per-level expressions at `hwp` (jit- and grad-safe).

    `xp` is `jax.numpy` (default; traced or relaxed hardware) or `numpy` (fast checks).
    """
    env = hw_env(template, hwp, xp)

    def ev(expr: Expr | None, default: float) -> Any:
        value = default if expr is None else expr.evaluate(env, xp)
        return xp.asarray(value, dtype=xp.float32)

    def finite(c: Any) -> Any:
        return xp.where(xp.isfinite(c), c, 0.0)

    cap = [ev(lv.capacity_kb, xp.inf) for lv in template.levels]
    epa = [ev(lv.energy_pj, 0.0) + ev(lv.energy_pj_per_kb, 0.0) * finite(c)
           for lv, c in zip(template.levels, cap)]
    inst = [ev(lv.instances, 1.0) for lv in template.levels]
    area = [(ev(lv.area_mm2_per_kb, 0.0) * finite(c) + ev(lv.area_mm2, 0.0)) * n
            for lv, c, n in zip(template.levels, cap, inst)]
    return LevelArrays(
        instances=xp.stack(inst),
        capacity_kb=xp.stack(cap),
        bandwidth_words=xp.stack([ev(lv.bandwidth_words, xp.inf) for lv in template.levels]),
        energy_pj=xp.stack(epa),
        area_mm2=xp.stack(area),
        latency_cycles=xp.stack([ev(lv.latency_cycles, 0.0) for lv in template.levels]),
        fanout=xp.stack([ev(lv.fanout, xp.inf) for lv in template.levels]),
        static_pj_per_cycle=xp.stack([ev(lv.static_pj_per_cycle, 0.0)
                                      for lv in template.levels]),
        mac_energy_pj=ev(template.mac_energy_pj, 0.0),
        pe_area_mm2=ev(template.pe_area_mm2, 0.0),
    )


def tensor_bits(hwp: HwParams, xp: Any = jnp) -> Any:
    """Word width of W, I, O in bits (``[tensor]``); outputs live on chip as partial sums."""
    return xp.stack([xp.asarray(hwp.weight_bits, xp.float32),
                     xp.asarray(hwp.input_bits, xp.float32),
                     xp.asarray(hwp.acc_bits, xp.float32)], axis=-1)
