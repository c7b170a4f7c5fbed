"""Reading DOSA's CSV datasets (``data/README.md``): the rows of a file and the numbers
in them, with errors that name the file, the line and the column, and the chip each RTL row
ran on (`generator_pe_dim`).

Both readers of these files use it: the simulator's RTL validation (`accel.sim.rtl`) and the
analytical model's (`perfmodels.validate`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
from collections.abc import Iterator, Sequence

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from workloads.errors import ConfigError
from workloads.layer import DIMS

DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / "data"
"""DOSA's rows as shipped in the project's ``data/`` folder (provenance and licence in
``data/README.md``)."""
TIMELOOP_CSV = DATA_DIR / "timeloop_gemmini_10k.csv"
RTL_CSV = DATA_DIR / "gemmini_rtl_train.csv"

PE_DIMS = (2, 4, 8, 16, 32, 64, 128)
"""The arrays of the FireSim builds DOSA's RTL rows ran on."""
BUILD = "build"
"""An ``array_dim`` (`with_array`) for rows measured on the build their fan-out picked."""
_ACC, _SP = 1, 2  # the accumulator and scratchpad levels of DOSA's Gemmini mappings


def generator_pe_dim(mapping: Mapping) -> int:
    """The array of the build an RTL row ran on: the smallest of `PE_DIMS` that holds the
    mapping's C fan-out (below the accumulator) and K fan-out (below the scratchpad). DOSA's
    collection script sorted its mappings so (``gemmini_data_collection.py`` ``per_pe_dim``
    in ``ucb-bar/gemmini-rocc-tests``, branch ``dosa``) and ran each group on the build of that
    array (``charleshong3/firesim-dosa`` ``deploy/gemmini.py``); see `accel.sim.rtl`."""
    widest = max(int(mapping.spatial[_ACC, DIMS.index("C")]),
                 int(mapping.spatial[_SP, DIMS.index("K")]))
    for dim in PE_DIMS:
        if widest <= dim:
            return dim
    raise ConfigError(f"a spatial factor of {widest} is wider than any build DOSA ran "
                      f"(largest {PE_DIMS[-1]}x{PE_DIMS[-1]})")


def with_array(hw: HardwareConfig, mapping: Mapping, array_dim: int | str
               ) -> HardwareConfig:
    """`hw` with the array a row was measured on: ``array_dim`` x ``array_dim``, or with
    `BUILD` the build the row's fan-out picked (`generator_pe_dim`)."""
    dim = generator_pe_dim(mapping) if array_dim == BUILD else int(array_dim)
    return dataclasses.replace(hw, pe_rows=dim, pe_cols=dim)


def read_csv(path: str | pathlib.Path, required: Sequence[str], limit: int | None = None
             ) -> Iterator[tuple[int, dict[str, str]]]:
    """``(index, row)`` of each data row (the first `limit`), after checking that the columns
    `required` are there; a file without data rows is an error."""
    path = pathlib.Path(path)
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise ConfigError(f"{path}: missing columns {missing}; expected DOSA's dataset "
                              "format (see data/README.md in the project)")
        count = 0
        for i, row in enumerate(reader):
            if limit is not None and i >= limit:
                break
            count += 1
            yield i, row
    if not count:
        raise ConfigError(f"{path}: no data rows")


def number(row: dict[str, str], key: str, where: str, default: float | None = None,
           positive: bool = False) -> float:
    """Column `key` of `row` as a finite float (`default` when empty or absent, else an
    error); with `positive`, it must be > 0."""
    raw = row.get(key)
    if raw is None or raw == "":
        if default is not None:
            return default
        raise ConfigError(f"{where}: missing value for column {key!r}")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{where}: column {key!r} is {raw!r}, not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{where}: column {key!r} is {raw!r}, not a finite number")
    if positive and value <= 0:
        raise ConfigError(f"{where}: column {key!r} must be a positive number, got {raw!r}")
    return value


def integer(row: dict[str, str], key: str, where: str, default: int | None = None) -> int:
    """Column `key` as a positive integer."""
    value = number(row, key, where, None if default is None else float(default))
    if value != int(value) or value < 1:
        raise ConfigError(f"{where}: column {key!r} must be a positive integer, got {value:g}")
    return int(value)


__all__ = ["integer", "number", "read_csv"]
