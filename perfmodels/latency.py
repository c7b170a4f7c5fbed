"""Latency: seed 001 Table 6.2's per-level roofline with ALCOP's pipeline-stage model.

Each level's port is busy ``accesses / bandwidth`` cycles, where the bandwidth is per instance
times the instances in use (the fan-out above the level); compute takes ``MACs / PEs in use``.
Walking out from the PEs, the latency inside level l+1 combines the work inside level l
(``use``) with level l+1's port time (``load``) through level l's pipeline stages
(seed 001 §2.4, ALCOP Table 5.1 with one multiplexed block):

    T(l+1) = max(use, load, (use + load + refills * latency_cycles) / stages[l])

One stage serializes loads and use (the sum); two or more hide the smaller one (the max, which
is DOSA's and Timeloop's roofline); a per-load latency (``latency_cycles`` in the template,
0 for the shipped ones) is what more than two stages can amortize. Continuous stages
interpolate, so the formula is also the relaxed one.
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


def latency(template: Template, acc: Accesses, m: MappingArrays, lv: LevelArrays) -> Latency:
    """Cycles of one group of the layer."""
    keeps = jnp.asarray(template.keeps_mask)
    per_level = (jnp.where(keeps, acc.reads + acc.updates + acc.fills, 0.0)).sum(-1)   # [L]
    fanout_log = m.log_spatial.sum(-1)                                                 # [L]
    above = jnp.concatenate([jnp.cumsum(fanout_log[::-1])[::-1][1:], jnp.zeros(1)])
    bandwidth = lv.bandwidth_words * jnp.exp(above)
    port = per_level / bandwidth
    compute = acc.macs / jnp.exp(fanout_log.sum())
    t = jnp.maximum(compute, port[0])
    levels = [t]
    for level in range(template.num_levels - 1):
        load = port[level + 1]
        exposed = jnp.exp(acc.log_refills[level]) * lv.latency_cycles[level + 1]
        t = jnp.maximum(jnp.maximum(t, load), (t + load + exposed) / m.stages[level])
        levels.append(t)
    return Latency(cycles=t, compute_cycles=compute, port_cycles=port,
                   level_cycles=jnp.stack(levels))
