"""Reading the YAML that templates, presets and configs are written in, and the checks their
mappings share: unknown keys (with a close-match hint) and finite numbers, each failure a
`ConfigError` naming where it is.
"""

from __future__ import annotations

import difflib
import math
import pathlib
from typing import Any

import yaml

from workloads.errors import ConfigError


def check_keys(data: dict, known: set[str], where: str) -> None:
    """Raise on the first key of ``data`` outside ``known``, naming the closest known one."""
    unknown = set(data) - known
    if unknown:
        name = sorted(unknown)[0]
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}: unknown field {name!r}{hint} (known: {sorted(known)})")


def number(value: Any, where: str) -> float:
    """``value`` as a float; anything but a finite int or float raises."""
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
    return parse_yaml(text, f"{what} {path}")


def parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}:{line}: malformed YAML ({problem})") from None


__all__ = ["check_keys", "number", "parse_yaml", "read_yaml"]
