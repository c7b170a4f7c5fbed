"""Scoring whole designs: a design's mappings as model inputs, and the network's EDP from its
layers' figures (seed 001 Eq. 6.9), the one place that sums a network."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from accel.arch import level_arrays
from accel.design import Design
from perfmodels.accesses import MappingArrays, order_rank
from perfmodels.analytic import exact_batch
from perfmodels.energy import Energy, energy_by_event


def design_arrays(design: Design) -> MappingArrays:
    """A design's mappings stacked as model inputs (one candidate order with weight 1),
    ``[layer, ...]``."""
    n = design.temporal.shape[0]
    levels = design.temporal.shape[1]
    return MappingArrays(
        log_temporal=np.log(design.temporal).astype(np.float32),
        log_spatial=np.log(design.spatial).astype(np.float32),
        rank=order_rank(design.order[:, :, ::-1])[:, :, None, :],
        order_weights=np.ones((n, levels, 1), np.float32),
        stages=design.stages.astype(np.float32))


def network_edp(metrics: Any, counts: Sequence[float]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(edp, cycles, pJ)`` per design from per-layer metrics ``[design, layer]`` (anything
    with ``cycles`` and ``energy_pj``): Eq. 6.9's ``(Σ count·pJ) x (Σ count·cycles)``, in
    float64."""
    return network_totals(metrics.cycles, metrics.energy_pj, counts)


def network_totals(cycles: Any, energy_pj: Any, counts: Sequence[float], axis: int = -1
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`network_edp` of per-layer cycles and pJ given as arrays whose layer axis is `axis`
    (a search's ``[layer, sample]`` blocks sum over axis 0)."""
    counts = np.asarray(counts, np.float64)
    cycles = np.asarray(cycles, np.float64)
    counts = counts.reshape(counts.shape + (1,) * (cycles.ndim - 1 - axis % cycles.ndim))
    cycles = (cycles * counts).sum(axis)
    energy_pj = (np.asarray(energy_pj, np.float64) * counts).sum(axis)
    return cycles * energy_pj, cycles, energy_pj


def network_edp_exact(rows: Iterable[Any]) -> tuple[float, float, float]:
    """``(edp, cycles, pJ)`` of rows that carry their own ``count``, ``cycles`` and
    ``energy_pj`` (a simulated design's layers and fused chains), each sum correctly rounded
    (`math.fsum`)."""
    rows = list(rows)
    cycles = math.fsum(x.count * x.cycles for x in rows)
    energy_pj = math.fsum(x.count * x.energy_pj for x in rows)
    return cycles * energy_pj, cycles, energy_pj


def network_energy_by_event(events: Iterable[dict[str, float]], counts: Iterable[float]
                            ) -> dict[str, float]:
    """The network's energy per event class (`perfmodels.energy.energy_by_event`) from its
    layers' (or fused chains') ``{event: pJ}`` weighted by their counts, as Eq. 6.9 sums
    ``energy_pj``: ``Σ count x pJ`` per event, correctly rounded (`math.fsum`)."""
    terms: dict[str, list[float]] = {}
    for row, count in zip(events, counts):
        for name, pj in row.items():
            terms.setdefault(name, []).append(float(count) * pj)
    return {name: math.fsum(values) for name, values in terms.items()}


def metrics_by_event(design: Design, metrics: Any, useful_macs: Sequence[float],
                     timed: bool) -> list[dict[str, float]]:
    """Per layer, the model's energy (`Metrics` ``[layer]`` of `design`'s hardware) by event
    class (`energy_by_event`); `timed`: the model charged the levels' idle energy over its
    cycles (the instruction-aware model), else not (the plain one)."""
    template = design.hw.template_spec
    lv = level_arrays(template, design.hw.to_params(), np)
    out = []
    for b, useful in enumerate(useful_macs):
        en = Energy(metrics.energy_pj[b], metrics.level_pj[b], metrics.mac_pj[b],
                    metrics.level_accesses[b], metrics.pe_idle_pj[b])
        out.append(energy_by_event(template, en, lv, useful,
                                   metrics.cycles[b] if timed else None))
    return out


def plain_edp(design: Design, layers: Sequence[Any], counts: np.ndarray) -> float:
    """The design's EDP under the plain (instruction-agnostic) analytic model."""
    out = exact_batch(list(layers), design.hw, design.mappings(), check=False)
    return float(network_totals(out.cycles, out.energy_pj, counts)[0])


__all__ = ["design_arrays", "metrics_by_event", "network_edp", "network_edp_exact",
           "network_energy_by_event", "network_totals", "plain_edp"]
