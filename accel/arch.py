"""The accelerator template and its hardware parameters.

A *template* (``accel/templates/NAME.yaml``, `Template` in `accel.template`) is the shape of an
accelerator: its storage levels from the innermost (level 0, e.g. the PE registers) to the
outermost (DRAM), which tensors each level keeps (the others bypass it), where the spatial
fan-out sits, and how capacity, bandwidth, energy per access and area follow from the hardware
parameters. A `HardwareConfig` is one point of that template: PE rows and columns, buffer sizes,
DRAM bandwidth, word widths. Presets live in ``accel/presets/NAME.yaml``; a user describes a new
accelerator by writing a template and a config in the same YAML form.

Template quantities are small arithmetic expressions over the hardware parameters (``2 *
pe_cols``, ``acc_kb / pe_cols``; `Expr` in `accel.expr`); they are evaluated with `jax.numpy`
so that relaxed (continuous, traced) hardware goes through the same formulas as a discrete
`HardwareConfig` (`HwParams`, `level_arrays`).

>>> hw = HardwareConfig.preset("gemmini_default")
>>> hw.pe_rows, hw.sp_kb, hw.acc_kb
(16, 256.0, 64.0)
>>> [lv.name for lv in hw.template_spec.levels]
['Registers', 'Accumulator', 'Scratchpad', 'DRAM']
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from accel.config_yaml import check_keys, number, parse_yaml, read_yaml
from accel.expr import Expr
from accel.template import (
    DERIVED_NAMES,
    HW_FIELDS,
    TEMPLATE_DIR,
    TENSORS,
    InstructionCost,
    LevelSpec,
    Template,
    hw_env,
)
from workloads.errors import ConfigError

PRESET_DIR = pathlib.Path(__file__).parent / "presets"

DATAFLOWS = ("WS", "OS", "RS")
"""Weight-, output-, row-stationary. A label: what the model does follows from the template's
levels and loop constraints (Gemmini's template is weight-stationary)."""

MAX_STAGES = 4
"""Most pipeline stages (multi-buffering depth) a level may have (ALCOP's range, seed 001 §2)."""


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
            (str(k), number(v, f"{where}: params.{k}")) for k, v in params.items())))
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
        check_keys(data, fields | {"description"}, where)
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
        return cls.from_dict(parse_yaml(text, "hardware config <text>"),
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
    mac_padded_energy_pj: Any       # a MAC on a padded (zero) operand
    pe_idle_pj_per_cycle: Any       # a PE's cycle without a MAC while the array runs


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
    mac_pj = ev(template.mac_energy_pj, 0.0)
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
        mac_energy_pj=mac_pj,
        pe_area_mm2=ev(template.pe_area_mm2, 0.0),
        mac_padded_energy_pj=(mac_pj if template.mac_padded_energy_pj is None
                              else ev(template.mac_padded_energy_pj, 0.0)),
        pe_idle_pj_per_cycle=ev(template.pe_idle_pj_per_cycle, 0.0),
    )


def tensor_bits(hwp: HwParams, xp: Any = jnp) -> Any:
    """Word width of W, I, O in bits (``[tensor]``); outputs live on chip as partial sums."""
    return xp.stack([xp.asarray(hwp.weight_bits, xp.float32),
                     xp.asarray(hwp.input_bits, xp.float32),
                     xp.asarray(hwp.acc_bits, xp.float32)], axis=-1)


__all__ = [
    "DATAFLOWS",
    "DERIVED_NAMES",
    "HW_FIELDS",
    "MAX_STAGES",
    "PRESET_DIR",
    "TEMPLATE_DIR",
    "TENSORS",
    "Expr",
    "HardwareConfig",
    "HwParams",
    "InstructionCost",
    "LevelArrays",
    "LevelSpec",
    "Template",
    "hw_env",
    "level_arrays",
    "read_yaml",
    "stack_hw",
    "tensor_bits",
    "unit_area_mm2",
]
