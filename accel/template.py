"""`Template`: the shape of an accelerator, read from ``accel/templates/NAME.yaml``.

A template lists the storage levels from the innermost (level 0, e.g. the PE registers) to the
outermost (DRAM), which tensors each level keeps (the others bypass it), where the spatial
fan-out sits, and how capacity, bandwidth, energy per access and area follow from the hardware
parameters, as `Expr` expressions over the names `hw_env` gives them. The Gemmini template
reproduces seed 001 Table 6.3 with DOSA's exact fits (reference dosa-gemmini-isa.md
§A.6-A.7, §A.9):

=============  =====  =======================  ================================
level          keeps  bandwidth (words/cycle)  energy per access (pJ)
=============  =====  =======================  ================================
MAC            -      -                        0.5608
Registers      W      2 per PE                 0.48746172
Accumulator    O      2 per column             1.94 + 0.1005 * acc_kb / pe_cols
Scratchpad     W, I   2 * pe_cols              0.49 + 0.02513 * sp_kb
DRAM           W,I,O  dram_bw_words (8)        100
=============  =====  =======================  ================================
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import pathlib
from typing import TYPE_CHECKING, Any, ClassVar

import jax.numpy as jnp
import numpy as np

from accel import dma, gemmini_timing
from accel.config_yaml import check_keys, number, read_yaml
from accel.expr import FUNCS, Expr
from workloads.errors import ConfigError
from workloads.layer import DIMS

if TYPE_CHECKING:
    from accel.arch import HwParams

TENSORS = ("W", "I", "O")
"""Tensor order used by every ``[..., tensor]`` array: weights, inputs, outputs."""

TEMPLATE_DIR = pathlib.Path(__file__).parent / "templates"

# Names a template expression may use, besides the template's own `params`.
HW_FIELDS = ("pe_rows", "pe_cols", "sp_kb", "acc_kb", "dram_bw_words", "input_bits",
             "weight_bits", "acc_bits", "clock_mhz")
DERIVED_NAMES = ("n_pe", "dma_bus_bytes", "dma_inflight")
TIMING_NAMES = tuple(gemmini_timing.TEMPLATE_NAMES)   # the simulator's figures, by its names
BUILD_RULES = ("gemmini",)
"""Generators whose rules a template may name in its ``buildable`` field (`accel.buildable`)."""


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
        check_keys(raw, set(cls.KINDS), where)
        names = tuple(f.name for f in dataclasses.fields(cls))
        out = []
        for kind, fields in raw.items():
            kw = f"{where}.{kind}"
            if not isinstance(fields, dict):
                raise ConfigError(f"{kw}: expected a mapping with {list(names)}")
            check_keys(fields, set(names), kw)
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
    # A MAC on a padded (zero) operand, and a PE's cycle with no MAC while the array runs; a
    # template without them charges a padded MAC as a useful one and an idle PE nothing.
    mac_padded_energy_pj: Expr | None = None
    pe_idle_pj_per_cycle: Expr | None = None
    buildable: str | None = None   # the generator's rules (`accel.buildable`); None: none
    technology: str = ""   # the process node and source its energy and area figures assume

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
        check_keys(data, {"name", "description", "levels", "mac", "square_array", "params",
                          "onchip_path", "igelu_unit", "normalizer", "instructions",
                          "buildable", "technology"}, where)
        for key in ("name", "levels", "mac"):
            if key not in data:
                raise ConfigError(f"{where}: missing field {key!r}")
        params = _params_from_dict(data.get("params") or {}, where)
        allowed = HW_FIELDS + DERIVED_NAMES + TIMING_NAMES + tuple(p for p, _ in params)
        levels = _levels_from_list(data["levels"], where, allowed)
        mac = data["mac"]
        if not isinstance(mac, dict):
            raise ConfigError(f"{where}: mac must be {{energy_pj: .., area_mm2: ..}}")
        check_keys(mac, {"energy_pj", "padded_energy_pj", "idle_pj_per_cycle", "area_mm2"},
                   f"{where}: mac")
        units = _units_from_dict(data, where, allowed)
        rules = data.get("buildable")
        if rules is not None and rules not in BUILD_RULES:
            raise ConfigError(f"{where}: buildable must be one of {list(BUILD_RULES)} (the "
                              f"generator whose rules the hardware follows), got {rules!r}")
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
            mac_padded_energy_pj=_optional_expr(mac, "padded_energy_pj", f"{where}: mac",
                                                allowed),
            pe_idle_pj_per_cycle=_optional_expr(mac, "idle_pj_per_cycle", f"{where}: mac",
                                                allowed),
            buildable=rules,
            technology=str(data.get("technology", "")),
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


# --------------------------------------------------------------------------- reading a template
def _params_from_dict(params_raw: Any, where: str) -> list[tuple[str, float]]:
    """The template's own named parameters, none shadowing a built-in name."""
    if not isinstance(params_raw, dict):
        raise ConfigError(f"{where}: params must be a mapping of name to number")
    params = []
    for pname, pvalue in params_raw.items():
        if pname in HW_FIELDS + DERIVED_NAMES + TIMING_NAMES or pname in FUNCS:
            raise ConfigError(f"{where}: params.{pname} shadows a built-in name")
        params.append((str(pname), number(pvalue, f"{where}: params.{pname}")))
    return params


def _levels_from_list(levels_raw: Any, where: str, allowed: tuple[str, ...]
                      ) -> list[LevelSpec]:
    """The levels, innermost first; the outermost must keep every tensor."""
    if not isinstance(levels_raw, list) or len(levels_raw) < 2:
        raise ConfigError(f"{where}: levels must be a list of at least 2 levels, "
                          "innermost first")
    levels = [_level_from_dict(raw, i, i == len(levels_raw) - 1, where, allowed)
              for i, raw in enumerate(levels_raw)]
    if set(levels[-1].keeps) != set(TENSORS):
        raise ConfigError(f"{where}: the outermost level ({levels[-1].name}) must keep "
                          "W, I and O")
    return levels


def _level_from_dict(raw: Any, i: int, top: bool, where: str, allowed: tuple[str, ...]
                     ) -> LevelSpec:
    """Level ``i`` (``top``: the outermost) from its mapping."""
    lw = f"{where}: levels[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{lw}: expected a mapping")
    check_keys(raw, {"name", "keeps", "instances", "capacity_kb", "bandwidth_words",
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
    cap = raw.get("capacity_kb")
    if cap is None and not top:
        raise ConfigError(f"{lw}: capacity_kb is required below the outermost level")
    spatial = raw.get("spatial") or {}
    if not isinstance(spatial, dict):
        raise ConfigError(f"{lw}: spatial must be {{dims: [..], fanout: expr}}")
    check_keys(spatial, {"dims", "fanout"}, f"{lw}.spatial")
    sdims = tuple(spatial.get("dims") or ())
    tdims = tuple(raw.get("temporal_dims", DIMS) or ())
    for d in sdims + tdims:
        if d not in DIMS:
            raise ConfigError(f"{lw}: unknown dim {d!r}; dims are {DIMS}")
    if sdims and "fanout" not in spatial:
        raise ConfigError(f"{lw}: spatial needs a fanout (most PEs it spreads over)")
    if top and sdims:
        raise ConfigError(f"{lw}: the outermost level cannot fan out spatially")
    return LevelSpec(
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
    )


def _optional_expr(raw: dict, key: str, where: str, allowed: tuple[str, ...]) -> Expr | None:
    """``raw[key]`` parsed, None where absent or null."""
    return None if raw.get(key) is None else Expr.parse(raw[key], f"{where}.{key}", allowed)


def _units_from_dict(data: dict, where: str, allowed: tuple[str, ...]) -> dict[str, Expr]:
    """The area of each optional unit the template has (on-chip path, I-GELU, normalizer)."""
    units = {}
    for key in ("onchip_path", "igelu_unit", "normalizer"):
        unit = data.get(key)
        if unit is not None and not isinstance(unit, dict):
            raise ConfigError(f"{where}: {key} must be {{area_mm2: ..}}")
        if unit is not None:
            check_keys(unit, {"area_mm2"}, f"{where}: {key}")
            units[key] = Expr.parse(unit.get("area_mm2", 0), f"{where}: {key}.area_mm2",
                                    allowed)
    return units


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


def hw_env(template: Template, hwp: HwParams, xp: Any = jnp) -> dict[str, Any]:
    """The names a template expression sees."""
    env = {f: getattr(hwp, f) for f in HW_FIELDS}
    env["n_pe"] = hwp.pe_rows * hwp.pe_cols
    # The DMA the generator builds for this bandwidth (`accel.dma`), as the simulator times it.
    dram_bytes = dma.dram_bytes_per_cycle(hwp.dram_bw_words, hwp.input_bits, xp)
    env["dma_bus_bytes"] = dma.bus_bytes(dram_bytes, xp)
    env["dma_inflight"] = dma.inflight_requests(dram_bytes, xp=xp)
    env.update(gemmini_timing.TEMPLATE_NAMES)   # plain ints, as a literal in the text would be
    for i, name in enumerate(template.param_names):
        env[name] = hwp.extra[..., i]
    env["inf_bw"] = xp.inf
    return env


__all__ = [
    "BUILD_RULES",
    "DERIVED_NAMES",
    "HW_FIELDS",
    "TEMPLATE_DIR",
    "TENSORS",
    "TIMING_NAMES",
    "InstructionCost",
    "LevelSpec",
    "Template",
    "hw_env",
]
