"""`baco validate programs`: baco's own programs as run on the chip, against the yardsticks.

A programs file is a CSV of programs run on the real Gemmini RTL, its traces in the folder of
the same stem (``ID.npz``: arrays ``funct``, ``rs1``, ``rs2`` for `Trace.from_arrays`; the
format of ``data/gemmini_rtl_baco_programs.csv``, see ``data/README.md``). Each row says what
it ran: the layer (``kind``, ``R..N``, strides, ``pads``, ``epilogue``), the mapping and its
``stages``, the preset it was lowered for (``hw``: array, ``sp_kb``, ``acc_kb``), the chip's
DMA bus (``dma_bus_bytes_per_cycle``) and memory round trip (``latency``), the cycles the chip
took (``rtl_cycles``) and whether its output matched numpy (``bit_exact``).

Each program is judged on the chip the row describes: the simulator runs the row's own trace
with the DRAM bandwidth and bus of that chip and its latency; the plain (Timeloop-equivalent)
and instruction-aware models score the row's layer and mapping on the same hardware; the race
check (`accel.sim.hazards`) reads the trace as the chip's reservation station does.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import pathlib
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from accel.sim import TimingTable, find_races, metrics, preferred_batch, run_batch
from accel.trace import Trace
from workloads.errors import ConfigError
from workloads.layer import Layer

CHIP_MAX_IN_FLIGHT = 32
"""The measured chip's ``max_in_flight_mem_reqs`` (Gemmini's defaultConfig has 16): its
generated Verilog has 32 StreamWriter transaction ids (``xactBusy``, DMA.scala ~393) and a
2-bit command id in the LoadController's tracker (nCmds = 32 / 16 + 1 = 3). A file may give
its own in a ``max_in_flight_mem_reqs`` column."""

REQUIRED = ("id", "kind", "R", "S", "P", "Q", "C", "K", "N", "Hstride", "Wstride", "pads",
            "mapping", "stages", "hw", "latency", "dma_bus_bytes_per_cycle", "rtl_cycles",
            "bit_exact")


@dataclasses.dataclass(frozen=True)
class Program:
    """One row of a programs file: what ran, on which chip, and what the chip measured."""

    id: str
    name: str
    layer: Layer
    mapping: Mapping
    hw: HardwareConfig
    timing: TimingTable
    trace: Trace
    rtl_cycles: float
    bit_exact: bool

    @property
    def acc_scale(self) -> float:
        """The output scale the programs were lowered with, 1 / (64 sqrt(C R S)): it keeps
        random int8 products in range, so the output check compares real values."""
        return float(1 / (64 * np.sqrt(self.layer.C * self.layer.R * self.layer.S)))


def _int(raw: dict[str, str], key: str, where: str) -> int:
    try:
        return int(float(raw[key]))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: column {key!r} is not a number: {raw[key]!r}") from exc


def _layer(raw: dict[str, str], where: str) -> Layer:
    dims = {k: _int(raw, k, where) for k in ("R", "S", "P", "Q", "C", "K", "N", "Hstride",
                                             "Wstride")}
    try:
        pads = tuple(int(p) for p in raw["pads"].split("-"))
    except ValueError as exc:
        raise ConfigError(f"{where}: column 'pads' is not top-left-bottom-right: "
                          f"{raw['pads']!r}") from exc
    epilogue = tuple(e for e in (raw.get("epilogue") or "").split("+") if e)
    kind = raw["kind"]
    if kind not in ("conv2d", "gemm", "gemv"):
        raise ConfigError(f"{where}: column 'kind' must be conv2d, gemm or gemv, got {kind!r}")
    return Layer(kind=kind, pads=pads, epilogue=epilogue, name=raw.get("name", ""), **dims)


def _hardware(raw: dict[str, str], where: str) -> HardwareConfig:
    """The chip the row ran on: the preset it was lowered for, with the chip's DMA bus as its
    DRAM bandwidth (the memory answers one beat per cycle, so the bus is the limit)."""
    try:
        hw = HardwareConfig.preset(raw["hw"])
    except ConfigError as exc:
        raise ConfigError(f"{where}: column 'hw' names no preset: {raw['hw']!r}") from exc
    bus = _int(raw, "dma_bus_bytes_per_cycle", where)
    return dataclasses.replace(hw, dram_bw_words=bus / max(1, hw.input_bits // 8))


def read_programs(path: str | os.PathLike) -> list[Program]:
    """The rows of a programs file with their traces (``STEM/ID.npz`` beside it)."""
    path = pathlib.Path(path)
    folder = path.with_suffix("")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the programs file: {exc}") from exc
    if not rows:
        raise ConfigError(f"{path}: no programs")
    missing = [c for c in REQUIRED if c not in rows[0]]
    if missing:
        raise ConfigError(f"{path}: missing columns {missing}")
    out = []
    for line, raw in enumerate(rows, start=2):
        where = f"{path}:{line} (id {raw['id']})"
        npz = folder / f"{raw['id']}.npz"
        try:
            with np.load(npz) as z:
                trace = Trace.from_arrays(z["funct"], z["rs1"], z["rs2"])
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"{where}: cannot read its trace {npz}: {exc}") from exc
        stages = [_int({"s": s}, "s", where) for s in raw["stages"].split("-")]
        mapping = Mapping.from_timeloop(raw["mapping"])
        mapping = dataclasses.replace(mapping, stages=np.array(stages, np.int64))
        hw = _hardware(raw, where)
        in_flight = (_int(raw, "max_in_flight_mem_reqs", where)
                     if raw.get("max_in_flight_mem_reqs") else CHIP_MAX_IN_FLIGHT)
        timing = TimingTable(dram_latency_cycles=_int(raw, "latency", where),
                             dma_bus_bytes_per_cycle=_int(raw, "dma_bus_bytes_per_cycle", where),
                             max_inflight_requests=in_flight)
        out.append(Program(raw["id"], raw.get("name", ""), _layer(raw, where), mapping, hw,
                           timing, trace, float(raw["rtl_cycles"]),
                           raw["bit_exact"].strip().lower() == "true"))
    return out


def _figures(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    rel = np.abs(predicted - measured) / measured
    return {**metrics(predicted, measured), "max_abs_rel_err": float(rel.max()),
            "median_ratio": float(np.median(predicted / measured))}


def simulate_programs(programs: list[Program]) -> np.ndarray:
    """Each program's simulated cycles on its own chip (timing only; per chip, in batches of
    `preferred_batch` programs of similar length)."""
    cycles = np.zeros(len(programs))
    groups: dict[tuple, list[int]] = {}
    for i in sorted(range(len(programs)), key=lambda i: len(programs[i].trace)):
        groups.setdefault((programs[i].hw, programs[i].timing), []).append(i)
    batch = preferred_batch()
    for (hw, timing), idx in groups.items():
        for start in range(0, len(idx), batch):
            part = idx[start:start + batch]
            results = run_batch([programs[i].trace for i in part], hw, timing_table=timing,
                                functional=False)
            cycles[part] = [res.cycles for res in results]
    return cycles


def validate_programs(path: str | os.PathLike) -> dict[str, Any]:
    """Per program and overall: the simulator and both models against the chip's cycles, and
    the programs the race check flags beside those the chip got wrong."""
    from baco.yardsticks import YARDSTICKS
    from perfmodels.aware import exact

    programs = read_programs(path)
    measured = np.array([p.rtl_cycles for p in programs])
    predicted = {"simulated": simulate_programs(programs)}
    for name, aware in (("instruction_aware", True), ("plain", False)):
        predicted[name] = np.array([float(exact(p.layer, p.hw, p.mapping, aware=aware,
                                                check=False).cycles)
                                    for p in programs])
    racing = [p.id for p in programs if find_races(p.trace, p.hw).racing]
    per_program = [{"id": p.id, "name": p.name, "rtl_cycles": p.rtl_cycles,
                    **{f"{k}_cycles": float(predicted[k][i]) for k in YARDSTICKS},
                    "racing": p.id in racing, "bit_exact": p.bit_exact}
                   for i, p in enumerate(programs)]
    report = {"file": str(path), "programs": len(programs),
              **_figures(predicted["simulated"], measured),
              "yardsticks": {k: _figures(predicted[k], measured) for k in YARDSTICKS},
              "racing": racing, "bit_exact": {p.id: p.bit_exact for p in programs},
              "wrong_on_chip": [p.id for p in programs if not p.bit_exact],
              "per_program": per_program}
    return report


__all__ = ["CHIP_MAX_IN_FLIGHT", "Program", "read_programs", "simulate_programs",
           "validate_programs"]
