"""Check the exact model against Timeloop (or RTL) measurements in DOSA's CSV format.

Each row of ``data/timeloop_gemmini_10k.csv`` (and ``gemmini_rtl_train.csv``, which
has the same columns plus ``target.gemmini_cycle``) is one layer (``prob.*``), one Gemmini
hardware point (``arch.*``) and one mapping (``mapping.mapping``, Timeloop's compact form),
with the measured cycles and energy (µJ). `read_rows` turns rows into `TimeloopRow` records;
`validate_timeloop` scores them all in one vmapped call and reports the error.

Conventions taken from DOSA (``dla_dataset_creator_class.py``, ``gemmini_config.py``):
``pe_dim = ceil(sqrt(arch.pe))``; scratchpad KiB = ``mem2_depth * mem2_width *
mem2_instances / 8 / 1024``; accumulator KiB = the same over ``mem1_*`` (summed over its
per-column instances); DRAM moves 8 words/cycle. Timeloop's ``cnn-layer`` pairs P and R with
``Wstride``/``Wdilation`` (``(P-1)*Wstride + R``); `Layer` pairs P and R with ``Hstride``, so
the CSV's W stride becomes the layer's ``Hstride``. Timeloop overlaps loads with compute (its
latency is a roofline max), which is 2 stages here; its capacity check is single-buffered,
so rows are checked at 1 stage and evaluated at 2.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.dosa_csv import integer, number, read_csv
from accel.mapping import Mapping
from perfmodels.analytic import Metrics, exact_batch
from workloads.errors import ConfigError, InfeasibleError, WorkloadError
from workloads.layer import Layer

REQUIRED = ("target.cycle", "target.energy", "mapping.mapping", "arch.pe", "arch.mem1_depth",
            "arch.mem1_width", "arch.mem2_depth", "arch.mem2_width", "prob.R", "prob.S",
            "prob.P", "prob.Q", "prob.C", "prob.K", "prob.N")


@dataclasses.dataclass(frozen=True)
class TimeloopRow:
    """One measured point: the layer, hardware and mapping, and what was measured."""

    index: int
    layer: Layer
    hw: HardwareConfig
    mapping: Mapping
    cycles: float
    energy_uj: float
    area: float | None = None
    extra: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)


def hardware_from_row(row: dict[str, str], where: str = "row") -> HardwareConfig:
    """The Gemmini `HardwareConfig` a row's ``arch.*`` columns describe."""
    pe_dim = int(math.ceil(math.sqrt(number(row, "arch.pe", where)) - 1e-9))
    sp_bytes = (number(row, "arch.mem2_depth", where) * number(row, "arch.mem2_width", where)
                * number(row, "arch.mem2_instances", where, 1.0) / 8.0)
    acc_bytes = (number(row, "arch.mem1_depth", where) * number(row, "arch.mem1_width", where)
                 * number(row, "arch.mem1_instances", where, 1.0) / 8.0)
    return HardwareConfig(template="gemmini", pe_rows=pe_dim, pe_cols=pe_dim,
                          sp_kb=sp_bytes / 1024.0, acc_kb=acc_bytes / 1024.0,
                          dram_bw_words=8.0, name=where)


def layer_from_row(row: dict[str, str], where: str = "row") -> Layer:
    """The layer of a row's ``prob.*`` columns (a Timeloop ``cnn-layer``)."""
    dims = {d: integer(row, f"prob.{d}", where) for d in ("R", "S", "P", "Q", "C", "K", "N")}
    try:
        return Layer.conv2d(
            **dims,
            Hstride=integer(row, "prob.Wstride", where, 1),
            Wstride=integer(row, "prob.Hstride", where, 1),
            Hdilation=integer(row, "prob.Wdilation", where, 1),
            Wdilation=integer(row, "prob.Hdilation", where, 1),
            name=where)
    except WorkloadError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_row(row: dict[str, str], index: int, source: str = "csv", stages: int = 2,
              cycles_key: str = "target.cycle", strict: bool = True) -> TimeloopRow:
    """One CSV row as a `TimeloopRow`; the mapping is then set to `stages`.

    With `strict`, the mapping must be legal on the row's hardware (`Mapping.validate` at one
    stage, as Timeloop checks capacity); otherwise only its structure is checked (levels, keep
    tags, factors that multiply to the layer), which is all the model needs to score it.
    """
    where = f"{source} row {index + 2}"  # +1 for the header, +1 for 1-based lines
    hw = hardware_from_row(row, where)
    layer = layer_from_row(row, where)
    text = row.get("mapping.mapping", "")
    try:
        mapping = Mapping.from_timeloop(text, stages=1)
        if strict:
            mapping.validate(layer, hw)
        else:
            mapping.check_structure(layer, hw)
    except (ConfigError, InfeasibleError) as exc:
        raise type(exc)(f"{where}: {exc}") from None
    area = row.get("target.area")
    return TimeloopRow(
        index=index, layer=layer, hw=hw, mapping=mapping.with_stages(stages),
        cycles=number(row, cycles_key, where), energy_uj=number(row, "target.energy", where),
        area=float(area) if area not in (None, "") else None,
        extra={k: v for k, v in row.items() if not k.startswith(("prob.", "arch."))})


def read_rows(path: str | pathlib.Path, limit: int | None = None, stages: int = 2,
              cycles_key: str = "target.cycle", strict: bool = True) -> list[TimeloopRow]:
    """Parse a DOSA-format CSV (Timeloop or RTL); `limit` keeps the first rows; `strict` as
    in `parse_row`."""
    return [parse_row(row, i, source=str(path), stages=stages, cycles_key=cycles_key,
                      strict=strict)
            for i, row in read_csv(path, REQUIRED + (cycles_key,), limit)]


def evaluate_rows(rows: Sequence[TimeloopRow], batch: int = 4096) -> Metrics:
    """The exact model on every row, vmapped in chunks of `batch` (one template)."""
    outs = [exact_batch([r.layer for r in chunk], [r.hw for r in chunk],
                        [r.mapping for r in chunk], check=False)
            for chunk in (rows[i:i + batch] for i in range(0, len(rows), batch))]
    return Metrics(*(np.concatenate(parts) for parts in zip(*outs)))


def errors(rows: Sequence[TimeloopRow], out: Metrics) -> dict[str, Any]:
    """Absolute relative errors of cycles and energy, per row (arrays)."""
    cycles = np.array([r.cycles for r in rows], np.float64)
    energy = np.array([r.energy_uj for r in rows], np.float64)
    return {
        "cycles": np.abs(out.cycles.astype(np.float64) - cycles) / cycles,
        "energy": np.abs(out.energy_pj.astype(np.float64) * 1e-6 - energy) / energy,
    }


def summarize(rows: Sequence[TimeloopRow], out: Metrics) -> dict[str, Any]:
    err = errors(rows, out)
    return {
        "rows": len(rows),
        "cycles_mean_abs_rel_err": float(err["cycles"].mean()),
        "cycles_max_abs_rel_err": float(err["cycles"].max()),
        "energy_mean_abs_rel_err": float(err["energy"].mean()),
        "energy_max_abs_rel_err": float(err["energy"].max()),
    }


def validate_timeloop(path: str | pathlib.Path, limit: int | None = None) -> dict[str, Any]:
    """Score every row of a Timeloop CSV with the exact model and summarize the error.

    Returns ``{"rows", "cycles_mean_abs_rel_err", "cycles_max_abs_rel_err",
    "energy_mean_abs_rel_err", "energy_max_abs_rel_err"}`` (fractions, not percent). Rows are
    checked for structure only: a point Timeloop evaluated is scored even if it breaks a
    constraint of our template (every row of the shipped file also passes the strict check).
    """
    rows = read_rows(path, limit=limit, strict=False)
    return summarize(rows, evaluate_rows(rows))


def worst_rows(rows: Sequence[TimeloopRow], out: Metrics, key: str = "energy",
               count: int = 10) -> list[dict[str, Any]]:
    """The rows the model misses most, for inspection."""
    err = errors(rows, out)[key]
    picks = np.argsort(-err)[:count]
    return [{"row": rows[i].index + 2, "err": float(err[i]), "mapping": rows[i].mapping
             .to_timeloop(), "layer": rows[i].layer.config_str(), "measured_cycles":
             rows[i].cycles, "model_cycles": float(out.cycles[i]), "measured_uj":
             rows[i].energy_uj, "model_uj": float(out.energy_pj[i]) * 1e-6} for i in picks]
