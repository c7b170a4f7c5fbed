"""Experiment files: what to run, read strictly from YAML.

An experiment file (``experiments/configs/table6_6.yaml``) names a registered *kind* of runner,
its parameters, and a ``quick:`` section whose keys override the parameters for
``--quick``::

    name: table6_6
    kind: table6_6                 # a key of baco.reproduce.RUNNERS
    description: Seed 001 Table 6.6, single operators ...
    params: {suites: [gemm, gemv], cases_per_suite: null, ...}
    quick: {cases_per_suite: 3}

Every runner declares its parameters as a frozen dataclass; `parse` checks a mapping against it
with the key path and the file in every message, so a typo'd key is named (with the closest
known key) rather than silently ignored.

>>> import dataclasses
>>> @dataclasses.dataclass(frozen=True)
... class P:
...     seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
>>> parse(P, {"seeds": [0, 1]}, "params", "x.yaml")
P(seeds=[0, 1])
>>> try:
...     parse(P, {"seed": [0]}, "params", "x.yaml")
... except ConfigError as exc:
...     print(exc)
x.yaml: unknown key 'params.seed'; did you mean 'seeds'? (known: seeds)
"""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
import typing
from collections.abc import Mapping
from typing import Any

import yaml

from accel.arch import read_yaml
from baco.config import build_dataclass as parse
from baco.config import check_value as check
from workloads.errors import ConfigError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG_DIR = PROJECT_ROOT / "experiments" / "configs"
RESULTS_DIR = PROJECT_ROOT / "experiments" / "results" / "reproduce"


@dataclasses.dataclass(frozen=True)
class ExperimentFile:
    """An experiment file as read: the raw parameters are checked by the runner (`parse`)."""

    name: str
    kind: str
    params: dict[str, Any]
    quick: dict[str, Any]
    description: str = ""
    source: str = "<dict>"

    def effective(self, quick: bool) -> dict[str, Any]:
        """The parameters with the ``quick:`` overrides merged in (nested mappings merged)."""
        return merge(self.params, self.quick) if quick else dict(self.params)


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s keys replacing its own, mappings merged recursively.

    >>> merge({"a": 1, "b": {"x": 1, "y": 2}}, {"b": {"y": 3}})
    {'a': 1, 'b': {'x': 1, 'y': 3}}
    """
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


_TOP_KEYS = ("name", "kind", "description", "params", "quick")


def read_experiment(path: str | pathlib.Path) -> ExperimentFile:
    """Read an experiment file (YAML, ``safe_load``); check its top-level keys."""
    path = pathlib.Path(path)
    data = read_yaml(path, "experiment file")
    return experiment_from_dict(data, str(path))


def experiment_from_dict(data: Any, source: str = "<dict>") -> ExperimentFile:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{source}: unknown key {key!r}{_hint(key, _TOP_KEYS)} "
                              f"(known: {', '.join(_TOP_KEYS)})")
    for key in ("name", "kind"):
        if not isinstance(data.get(key), str) or not data.get(key):
            raise ConfigError(f"{source}: {key} must be a non-empty string")
    params, quick = data.get("params") or {}, data.get("quick") or {}
    for key, value in (("params", params), ("quick", quick)):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: {key} must be a mapping, got {type(value).__name__}")
    return ExperimentFile(name=data["name"], kind=data["kind"], params=dict(params),
                          quick=dict(quick), description=str(data.get("description") or ""),
                          source=source)


def known_names() -> list[str]:
    """The experiments ``baco reproduce NAME`` knows: ``experiments/configs/*.yaml`` with a
    ``kind`` (the ``baco run`` configs have none)."""
    names = []
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, Mapping) and "kind" in data and not path.stem.startswith("sweep_"):
            names.append(path.stem)
    return names


def find_experiment(name: str) -> ExperimentFile:
    """The experiment called `name` (``experiments/configs/NAME.yaml``) or at path `name`."""
    path = pathlib.Path(name)
    if name.endswith((".yaml", ".yml")):
        return read_experiment(path)
    known = known_names()
    if name not in known:
        raise ConfigError(f"unknown experiment {name!r}{_hint(name, known)} "
                          f"(known: {', '.join(known)}; or give a path to an experiment file)")
    return read_experiment(CONFIG_DIR / f"{name}.yaml")


# --------------------------------------------------------------------------- strict parsing
def _hint(key: Any, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(str(key), list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def to_plain(obj: Any) -> Any:
    """Dataclasses, tuples and mappings as plain JSON-able dicts and lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


__all__ = [
    "CONFIG_DIR",
    "RESULTS_DIR",
    "ExperimentFile",
    "check",
    "experiment_from_dict",
    "find_experiment",
    "known_names",
    "merge",
    "parse",
    "read_experiment",
    "to_plain",
]
