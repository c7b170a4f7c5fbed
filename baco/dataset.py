"""Simulator-labelled datasets for the surrogate: sample points, run `accel.sim`, write a CSV.

A point is a layer (the unique layers of zoo networks, GEMMs and convolutions alike; grouped
layers are skipped, the CSV format has no groups column), one hardware configuration, and a
random mapping that fits it (`baco.search._space.MappingSampler`). Its label is the cycles the
simulator's RTL timing model gives (`accel.sim.rtl.simulate_rows`: the program lowered for a
Gemmini chip with the point's array and buffers, timing only). The file has DOSA's columns
(``data/README.md``), so `perfmodels.atformer.train.read_dataset` reads it like the
real RTL rows: ``target.cycle`` holds the simulated cycles (``target.sim_cycle`` too),
``target.energy`` the analytical model's µJ, and the ``arch.*`` columns the hardware. This is
how simulator cycles reach `perfmodels.atformer`: as data, never as an import.

>>> points = sample_points(3, dataset_hardware(), seed=0, networks=("resnet50",))
>>> all(m.fits(layer, dataset_hardware()) for layer, m in points)
True

``generate(n, out)`` adds the simulator's labels (about a second per row on the 16x16 chip,
more for large layers) and writes the file.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.lower import split_epilogue
from accel.mapping import Mapping
from accel.sim import RtlRow, prepare_rows, simulate_rows
from baco.networks import load_network
from baco.search import MappingSampler
from perfmodels.analytic import exact_batch
from workloads.errors import ConfigError, InfeasibleError
from workloads.files import write_atomic
from workloads.layer import Layer

__all__ = [
    "DEFAULT_NETWORKS",
    "DatasetSummary",
    "dataset_hardware",
    "generate",
    "sample_points",
    "write_csv",
]

DEFAULT_NETWORKS = ("resnet50", "bert", "unet")
COLUMNS = ("target.cycle", "target.sim_cycle", "target.energy", "mapping.mapping", "arch.pe",
           "arch.mem1_depth", "arch.mem1_width", "arch.mem1_instances", "arch.mem2_depth",
           "arch.mem2_width", "arch.mem2_instances", "arch.name", "prob.R", "prob.S", "prob.P",
           "prob.Q", "prob.C", "prob.K", "prob.N", "prob.Wstride", "prob.Hstride",
           "prob.Wdilation", "prob.Hdilation", "source")


def dataset_hardware(dim: int = 16, sp_kb: float = 256.0, acc_kb: float = 64.0
                     ) -> HardwareConfig:
    """The one hardware configuration of a generated dataset (default: a 16x16 Gemmini, the
    array of DOSA's end-to-end FireSim experiment, with Gemmini's default buffers)."""
    return HardwareConfig(template="gemmini", pe_rows=dim, pe_cols=dim, sp_kb=sp_kb,
                          acc_kb=acc_kb, dram_bw_words=8.0, name=f"gemmini_{dim}x{dim}")


@dataclasses.dataclass(frozen=True)
class DatasetSummary:
    path: str
    rows: int
    layers: int
    hardware: str
    seed: int
    host_epilogue_rows: int = 0
    """Rows whose layer was lowered without the epilogue ops the accelerator cannot run."""
    host_epilogue_layers: tuple[str, ...] = ()
    """Those layers, each with the ops left out, e.g. ``"bert.attn_scores (div)"``."""


@functools.lru_cache(maxsize=8)
def _layer_pool(networks: tuple[str, ...]) -> tuple[tuple[Layer, ...], tuple[tuple[str, ...], ...]]:
    """The distinct usable layers of `networks` and, beside each, the epilogue ops it is
    lowered without: those the accelerator cannot fuse (`accel.lower.split_epilogue`), which
    run on the host after the output is stored, outside the simulated cycles."""
    pool: dict[tuple, Layer] = {}
    for name in networks:
        for layer in load_network(name).layers:
            if layer.groups != 1 or layer.kind not in ("conv2d", "gemm", "gemv"):
                continue
            key = (tuple(getattr(layer, d) for d in "RSPQCKN"), layer.Hstride, layer.Wstride,
                   layer.Hdilation, layer.Wdilation)
            pool.setdefault(key, layer)
    if not pool:
        raise ConfigError(f"dataset: no usable layers in {list(networks)}")
    layers, host_ops = [], []
    for layer in pool.values():
        fused, host = split_epilogue(layer.epilogue)
        layers.append(dataclasses.replace(layer, epilogue=fused) if host else layer)
        host_ops.append(host)
    return tuple(layers), tuple(host_ops)


def sample_points(n: int, hw: HardwareConfig, seed: int,
                  networks: Sequence[str] = DEFAULT_NETWORKS
                  ) -> list[tuple[Layer, Mapping]]:
    """`n` (layer, mapping) points: layers drawn uniformly from the networks' unique layers,
    each with a random mapping that fits `hw` (seeded)."""
    if n < 1:
        raise ConfigError(f"dataset: --n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    pool = _layer_pool(tuple(networks))[0]
    picks = rng.integers(0, len(pool), size=n)
    points: list[tuple[Layer, Mapping]] = []
    tags = hw.template_spec.tags
    for index in np.unique(picks):
        count = int((picks == index).sum())
        layer = pool[index]
        try:
            batch = MappingSampler(layer, hw).sample(count, rng, stages=2)
        except InfeasibleError:
            continue            # no mapping of this layer fits: draw others instead
        points.extend((layer, batch.mapping(i, tags)) for i in range(count))
    while len(points) < n:      # refill what infeasible layers left out
        points.extend(sample_points(n - len(points), hw, int(rng.integers(1 << 31)), networks))
    order = rng.permutation(len(points))[:n]
    return [points[i] for i in order]


def write_csv(path: str | os.PathLike, hw: HardwareConfig, points: Sequence[tuple[Layer, Mapping]],
              cycles: Sequence[float], energy_uj: Sequence[float], source: str) -> None:
    """Write points in DOSA's CSV format, atomically."""
    path = pathlib.Path(path)
    sp_depth = hw.sp_kb * 1024 * 8 / 128          # 128-bit rows, one instance
    acc_depth = hw.acc_kb * 1024 * 8 / 128
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    for (layer, mapping), c, e in zip(points, cycles, energy_uj):
        writer.writerow({
            "target.cycle": f"{float(c):.1f}", "target.sim_cycle": f"{float(c):.1f}",
            "target.energy": f"{float(e):.6g}", "mapping.mapping": mapping.to_timeloop(),
            "arch.pe": hw.pe_rows * hw.pe_cols, "arch.mem1_depth": f"{acc_depth:g}",
            "arch.mem1_width": 128, "arch.mem1_instances": 1,
            "arch.mem2_depth": f"{sp_depth:g}", "arch.mem2_width": 128,
            "arch.mem2_instances": 1, "arch.name": hw.name,
            # Timeloop pairs P with Wstride; `Layer` pairs it with Hstride (perfmodels.validate)
            "prob.R": layer.R, "prob.S": layer.S, "prob.P": layer.P, "prob.Q": layer.Q,
            "prob.C": layer.C, "prob.K": layer.K, "prob.N": layer.N,
            "prob.Wstride": layer.Hstride, "prob.Hstride": layer.Wstride,
            "prob.Wdilation": layer.Hdilation, "prob.Hdilation": layer.Wdilation,
            "source": source,
        })
    write_atomic(path, text.getvalue())


def generate(n: int, out: str | os.PathLike, *, seed: int = 0,
             hw: HardwareConfig | None = None, networks: Sequence[str] = DEFAULT_NETWORKS,
             progress: Callable[[int, int, str], Any] | None = None) -> DatasetSummary:
    """Sample `n` points on `hw` (default `dataset_hardware()`), label them with the
    simulator, and write them to `out`."""
    if n < 1:
        raise ConfigError(f"dataset: --n must be >= 1, got {n}")
    hw = hw or dataset_hardware()
    points: list[tuple[Layer, Mapping]] = []
    rows: list[RtlRow] = []
    draw = 0
    while len(rows) < n:
        if draw > 20:
            raise InfeasibleError(f"dataset: the simulator cannot lower enough mappings on "
                                  f"{hw.name}; try larger buffers")
        for layer, m in sample_points(n - len(rows), hw, seed + 7919 * draw, networks):
            row = RtlRow(index=len(rows), layer=layer, mapping=m, cycles=1.0, sp_kb=hw.sp_kb,
                         acc_kb=hw.acc_kb)
            try:        # the lowering pads tiles to DIM-wide rows: a few fit the model only
                prepare_rows([row], dim=hw.pe_rows)
            except ConfigError:
                continue
            points.append((layer, m))
            rows.append(row)
        draw += 1
    cycles = simulate_rows(rows, dim=hw.pe_rows, progress=progress)
    metrics = exact_batch([p[0] for p in points], hw, [p[1] for p in points], check=False)
    write_csv(out, hw, points, cycles, np.asarray(metrics.energy_pj) * 1e-6,
              source=f"accel.sim.rtl seed={seed}")
    pool, host_ops = _layer_pool(tuple(networks))
    dropped = {id(layer): ops for layer, ops in zip(pool, host_ops) if ops}
    stripped = [layer for layer, _ in points if id(layer) in dropped]
    named = {id(layer): f"{layer.name or layer.config_str()} ({', '.join(dropped[id(layer)])})"
             for layer in stripped}
    return DatasetSummary(path=str(out), rows=len(points),
                          layers=len({id(p[0]) for p in points}), hardware=hw.name, seed=seed,
                          host_epilogue_rows=len(stripped),
                          host_epilogue_layers=tuple(sorted(named.values())))
