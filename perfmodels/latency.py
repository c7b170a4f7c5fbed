"""Latency: seed 001 Table 6.2's per-level roofline with ALCOP's multi-stage pipeline model.

Each level's port is busy ``accesses / bandwidth`` cycles, where the bandwidth is per instance
times the instances in use (the fan-out above the level); compute takes ``MACs / PEs in use``.
Walking out from the PEs, the latency inside level l+1 combines the work inside level l
(``use``: everything one load-and-use loop over level l's tiles runs) with level l+1's port
time (``xfer``) through level l's pipeline stages ``S = stages[l]``.

ALCOP's pipeline model (seed 001 §2.4, Table 5.1, one multiplexed block, N_mplx = 1): a loop of
N iterations that each load a tile (``T_load``) and use it (``T_use``) takes
``N * T_use`` if ``T_load <= (S - 1) * T_use`` (the S - 1 loads in flight hide the load),
else ``N * (T_load + T_use) / S``, i.e. ``N * max(T_use, (T_load + T_use) / S)``. ALCOP's
``T_load`` is a fixed latency plus bytes over bandwidth (``LAT + bytes / BW``); its threadblock
adds the first load (``T_init``) that no compute hides. Here, over the whole layer:

* ``N = refills[l]``: how many times level l's tile is (re)loaded per instance;
* ``xfer = port[l+1]``: the cycles level l+1's port is busy (bytes / bandwidth, all N loads);
* ``lat = N * latency_cycles[l+1]``: each tile transfer into level l from level l+1 pays the
  parent's fixed cost once (DMA set-up + round trip: the template's ``latency_cycles``, data
  shared with the simulator's timing table, not its code);
* ``serial = use + xfer + lat``: load and use in sequence (1 stage);
* ``steady = max(use, xfer, serial / S)``: ALCOP's steady state, with the port's bandwidth as
  a floor (S loads in flight overlap their latencies, not their bytes on one port);
* ``fill = (serial - steady) / N``: the first tile's load and use run alone (ALCOP's prologue,
  ``T_init``); the other N - 1 iterations run at the steady rate. Charged where the loads are
  transfers with a latency (``latency_cycles[l+1] > 0``: Gemmini's DMA from DRAM). A level
  with no load latency streams its operands as the work inside consumes them (the array reads
  the scratchpad row by row as it computes), so it has no prologue of its own.

    T(l+1) = steady + on * [latency_cycles[l+1] > 0] * fill,   lat = on * N * latency_cycles[l+1]

so where the fill counts ``T = (N - 1) * steady / N + serial / N``: one stage gives ``serial``
(nothing overlaps), a single tile (N = 1) gives ``serial`` whatever the stages, and the fill
is one exposed load (compute-bound) or one exposed use (load-bound) and vanishes as N grows.
``on`` (``load_latency``) switches the fixed per-load latency and the fill term on: off is
Timeloop's and DOSA's steady-state roofline (``max(use, xfer)`` at 2+ stages, the sum at 1),
which the plain yardstick and ``baco validate timeloop`` reproduce; on is the instruction-aware
yardstick (`perfmodels.aware`), the model as Gemmini's DMA runs the loads. With on, more than
2 stages matter exactly when a per-load latency is exposed (``serial / S`` is the max).

Stages enter as floats, so continuous stages (`perfmodels.relax`) use the same formula; it is
continuous and non-increasing in S (``d T / d S = (1 - fill_on / N) * d steady / d S <= 0``),
with a strictly negative derivative where ``serial / S`` is the max (a load-bound loop) and 0
once the port's bytes or the use bound it.

Known limit: the model is tile-granular, as ALCOP's is. Gemmini's scoreboard tracks
dependences per scratchpad row, so even one stage overlaps the next tile's loads with the
current tile's computes on other rows; the simulator gains far less from the second stage than
``serial`` vs ``steady`` says (tests/perfmodels/test_pipeline_latency.py checks the direction).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from accel.arch import LevelArrays, Template
from perfmodels.accesses import Accesses, MappingArrays


class Latency(NamedTuple):
    cycles: Any            # per group
    compute_cycles: Any
    port_cycles: Any       # [level] accesses / bandwidth
    level_cycles: Any      # [level] latency of everything inside and at each level


def pipeline_cycles(use: Any, xfer: Any, latency_cycles: Any, loads: Any, stages: Any,
                    load_latency: bool) -> Any:
    """ALCOP's load-and-use loop (module docstring): ``use`` and ``xfer`` are totals over the
    ``loads`` iterations, ``latency_cycles`` the fixed cost of one load (its fill is charged
    only if positive), ``stages`` >= 1. ``load_latency`` False drops the fixed cost and the
    fill (Timeloop's roofline)."""
    if not load_latency:
        return jnp.maximum(jnp.maximum(use, xfer), (use + xfer) / stages)
    loads = jnp.maximum(loads, 1.0)
    serial = use + xfer + loads * latency_cycles
    steady = jnp.maximum(jnp.maximum(use, xfer), serial / stages)
    return steady + jnp.where(latency_cycles > 0, (serial - steady) / loads, 0.0)


def latency(template: Template, acc: Accesses, m: MappingArrays, lv: LevelArrays,
            load_latency: bool = False, compute_cycles: Any = None,
            min_port_cycles: Any = None) -> Latency:
    """Cycles of one group of the layer; `load_latency` as in `pipeline_cycles`.

    ``compute_cycles`` replaces the MACs over the PEs in use, and ``min_port_cycles``
    (``[level]``) floors each port's busy time, for a caller that knows what the
    instructions cost (`perfmodels.aware`)."""
    keeps = jnp.asarray(template.keeps_mask)
    per_level = (jnp.where(keeps, acc.reads + acc.updates + acc.fills, 0.0)).sum(-1)   # [L]
    fanout_log = m.log_spatial.sum(-1)                                                 # [L]
    above = jnp.concatenate([jnp.cumsum(fanout_log[::-1])[::-1][1:], jnp.zeros(1)])
    bandwidth = lv.bandwidth_words * jnp.exp(above)
    port = per_level / bandwidth
    if min_port_cycles is not None:
        port = jnp.maximum(port, min_port_cycles)
    compute = acc.macs / jnp.exp(fanout_log.sum()) if compute_cycles is None else compute_cycles
    t = jnp.maximum(compute, port[0])
    levels = [t]
    for level in range(template.num_levels - 1):
        t = pipeline_cycles(t, port[level + 1], lv.latency_cycles[level + 1],
                            jnp.exp(acc.log_refills[level]), m.stages[level], load_latency)
        levels.append(t)
    return Latency(cycles=t, compute_cycles=compute, port_cycles=port,
                   level_cycles=jnp.stack(levels))
