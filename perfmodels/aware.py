"""Instruction awareness: what a DIM x DIM array really spends on a mapping, padding included.

Gemmini's instructions (``preload``, ``compute``, ``mvin``; reference dosa-gemmini-isa.md §B.4-B.6)
work on DIM x DIM blocks: a weight block fills every PE row (C, the reduction) and column (K), and
scratchpad rows are DIM elements wide. A mapping whose spatial C factor is ``c < DIM`` therefore
runs blocks with ``DIM - c`` rows of zeros: the compute cycles are those the model already counts
(``MACs / (c * k)``), but the padded MACs burn energy, the registers and buffers move and hold
padded rows (a scratchpad read is a whole DIM-wide row, so padded rows also take port cycles),
and the buffers must be sized for them. DRAM traffic is not padded (``mvin`` reads
only the real bytes and zero-fills the rest on chip).

This module is a wrapper around `perfmodels.analytic.evaluate`, not a second model. For every
*array axis* of the template (a level whose spatial fan-out spreads one dim over ``pe_rows`` or
``pe_cols``; Gemmini: C over the rows at the accumulator, K over the columns at the scratchpad)
it pads the spatial factor up to the fan-out, scaling the layer's dim by the same ratio, and
runs the unchanged model on that padded nest; the DRAM level's accesses come from the unpadded
nest. The same function serves relaxed (continuous) and exact (integer) points.

Instructions also pay for each load: every DRAM tile an ``mvin`` brings in costs the DMA's
fixed round trip (the template's ``latency_cycles``, the simulator's constants as data) on top
of its bytes, and the first tile's load is not hidden by compute. The aware model therefore
scores latency with `perfmodels.latency`'s per-load term on (``load_latency``): with S
pipeline stages, S - 1 loads are in flight and hide that latency (ALCOP's model). The plain
model leaves it out, as Timeloop does.

And each instruction costs more than its rows: a compute holds the array at least a few
cycles and completes only after the array's fill and drain, a move only after the DRAM round
trip, and a queue holds a few of them at a time (the template's ``instructions`` table, the
simulator's constants as data). A mapping whose loops cut the work into short instructions
(a 2-row compute under a sliding window, an mvout of 2 output pixels) is throughput-bound on
them, however few bytes it moves: `array_cycles` replaces the compute cycles with what the
computes and preloads take, and `move_cycles` floors the DRAM port's time with what the mvins
and mvouts take. Which rows one instruction may take follows the lowering's layouts
(`accel.lower`): rows evenly spaced in a tile, so the run of the innermost loop
(`instruction_runs`).

Stores pay their round trip too: an accumulator tile's rows are free for the next tile only
once its last mvout is acknowledged, so small accumulator tiles wait on their write-backs
(`drain_cycles`: the same load-and-use loop, with the drain in place of the load, floors the
layer's cycles).

>>> from accel.arch import HardwareConfig
>>> from accel.mapping import Mapping
>>> from workloads.layer import Layer
>>> hw = HardwareConfig.preset("gemmini_default")
>>> layer = Layer.conv2d(R=1, S=1, P=14, Q=14, C=8, K=64)
>>> m = Mapping.from_timeloop("L3[WIO] P14 Q14 - L2[WI] K16X - L1[O] K4 C8X - L0[W] N1")
>>> plain, padded = exact(layer, hw, m, aware=False), exact(layer, hw, m, aware=True)
>>> float(padded.macs / plain.macs)             # C=8 runs on 16 PE rows
2.0
>>> bool(padded.energy_pj > plain.energy_pj), bool(padded.cycles >= plain.cycles)
(True, True)
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig, HwParams, Template, level_arrays
from accel.lower import kernel_columns_per_row
from accel.mapping import Mapping, span
from perfmodels import relax
from perfmodels.accesses import (
    Accesses,
    I,
    LayerArrays,
    MappingArrays,
    O,
    W,
    accesses,
    gate,
    inside_mask,
    product,
    skipped_candidates,
)
from perfmodels.analytic import Metrics, fast_jit, pack_layer, pack_mapping
from perfmodels.analytic import evaluate as model_evaluate
from perfmodels.energy import energy
from perfmodels.latency import latency, pipeline_cycles
from workloads.errors import ConfigError
from workloads.layer import Layer

_PE_FIELDS = ("pe_rows", "pe_cols")
R, S, P, Q, C, K, N = range(7)                          # workloads.layer.DIMS
_PIXEL = np.array([0, 0, 1, 1, 0, 0, 1], np.float32)    # N, P, Q
_OUT = np.array([0, 0, 1, 1, 0, 1, 1], np.float32)      # the output's dims
_IN = np.array([1, 1, 1, 1, 1, 0, 1], np.float32)       # the input's
_ALL = np.ones(7, np.float32)


@functools.cache
def array_axes(template: Template) -> tuple[tuple[int, int], ...]:
    """``(level, dim)`` of every array axis: a fan-out level spreading one dim over PE rows or
    columns. Raises `ConfigError` if the template has none or spreads several dims at one level
    (instruction awareness models a DIM x DIM array like Gemmini's)."""
    axes = []
    for l, lv in enumerate(template.levels):
        if not lv.spatial_dims:
            continue
        names = set(lv.fanout.names) & set(_PE_FIELDS)
        if len(lv.spatial_dims) != 1 or len(names) != 1:
            raise ConfigError(
                f"template {template.name!r}: level {lv.name} spreads {list(lv.spatial_dims)} "
                f"over {lv.fanout.text!r}; instruction awareness needs one dim per PE-array axis "
                "(a DIM x DIM array such as gemmini); set codesign.instruction_aware: false")
        axes.append((l, template.levels[l].spatial_dims[0]))
    if not axes:
        raise ConfigError(f"template {template.name!r} has no PE-array axis; set "
                          "codesign.instruction_aware: false")
    from workloads.layer import DIMS
    return tuple((l, DIMS.index(d)) for l, d in axes)


def padding(fanout: Any, log_spatial: Any, xp: Any = jnp) -> Any:
    """Log of an array axis's padding: a DIM x DIM block rounds the axis's spatial extent
    (``exp(log_spatial)``) up to the array's `fanout`, ``max(log fanout - log_spatial, 0)``.

    The single padding formula, over numpy or jax (`xp`): `pad` (the model, exact and
    relaxed) adds it to the spatial or the temporal log factor of each array axis
    (`array_axes`), and `baco.rounding.Rounder.footprint_kb` (numpy) to the temporal one.
    """
    return xp.maximum(xp.log(fanout) - log_spatial, 0.0)


def pad(template: Template, layer: LayerArrays, m: MappingArrays, fanout: Any
        ) -> tuple[LayerArrays, MappingArrays, MappingArrays]:
    """The padded nest: ``(layer, mapping with padded spatial factors, mapping with the padding
    folded into the temporal factor at the same level)``.

    ``fanout[level]`` is the block size of each array axis (the hardware's fan-out). The
    folded form has the same tiles as the padded one but the real spatial factors, which is
    what minimal-hardware inference needs (it reads PE dims off the spatial factors).
    """
    dims, log_s, log_t = layer.dims, m.log_spatial, m.log_temporal
    for level, d in array_axes(template):
        rho = padding(fanout[level], log_s[level, d])
        dims = dims.at[d].multiply(jnp.exp(rho))
        log_s = log_s.at[level, d].add(rho)
        log_t = log_t.at[level, d].add(rho)
    return layer._replace(dims=dims), m._replace(log_spatial=log_s), m._replace(log_temporal=log_t)


class Runs(NamedTuple):
    """Logs of the rows one instruction of each kind can take (`instruction_runs`)."""

    compute: Any
    store: Any
    load: Any


def instruction_runs(m: MappingArrays, num_levels: int) -> Runs:
    """How many rows one compute, mvout and mvin can take: the trip of the innermost loop
    over the instruction's dims (all, the output's, the input's) in the levels inside its
    tile (the accumulator's, the accumulator's, the scratchpad's), if it runs over pixels,
    times the next levels' while each is that level's innermost over the same dim (``P2 |
    P8`` is one P run of 16); 1 if none (all as logs).

    A tile's rows are laid out in loop order; one instruction takes rows that are evenly
    spaced (one address stride, `accel.lower`), which one dim's run is and two dims', in
    general, are not. The three kinds run through the levels side by side (one pass).
    """
    among = np.stack([_ALL, _OUT, _IN])                                # [A, 7]
    reach = np.array([2, 2, num_levels - 1])   # registers + accumulator; + scratchpad
    lt, eye = m.log_temporal, np.eye(7, dtype=bool)
    log_run, none_yet, open_ = jnp.zeros(3), jnp.ones(3), jnp.zeros((3, 7))
    for level in range(int(reach.max())):
        exists = gate(lt[level]) * among                               # [A, 7]
        inside = inside_mask(m.rank[level]) * ~eye                     # [Kc, 7(e), 7(d)]
        first = exists[:, None] * product(
            1.0 - inside[None] * exists[:, None, :, None], axis=2)     # [A, Kc, 7]
        inner = (m.order_weights[level][None, :, None] * first).sum(1)           # [A, 7]
        single = exists * product(jnp.where(eye, 1.0, 1.0 - exists[:, None, :]), axis=2)
        any_loop = 1.0 - product(1.0 - exists, axis=-1)                # [A]
        start = none_yet[:, None] * _PIXEL + open_
        on = jnp.asarray(level < reach)
        log_run = log_run + on * (start * inner * lt[level]).sum(-1)
        open_ = jnp.where(on[:, None], start * single + open_ * (1.0 - any_loop[:, None]),
                          open_)
        none_yet = jnp.where(on, none_yet * (1.0 - any_loop), none_yet)
    return Runs(*log_run)


def _per_row(cost: dict[str, Any], rows: Any) -> Any:
    """Cycles per row of instructions of `rows` rows: each holds its queue for
    ``max(rows, min_cycles)``, and ``in_flight`` of them share the ``rows + latency``."""
    return jnp.maximum(jnp.maximum(1.0, cost["min_cycles"] / rows),
                       (1.0 + cost["latency_cycles"] / rows) / cost["in_flight"])


def packed_columns(template: Template, layer: LayerArrays, m: MappingArrays, fanout: Any
                   ) -> Any:
    """Kernel columns one array row group takes on average under first-layer packing (1
    where the lowering does not pack): the lowering's rule (`accel.lower.nest.Nest`, Gemmini's
    ``LoopConv`` ``max_pixels_per_row``): every input channel on the array's rows (``Cs =
    C``, no temporal C), ``2 Cs <= DIM``, unit kernel dilation along W, and the innermost S
    loop inside the array's row level; its T kernel columns go ``p = min(DIM // Cs, T)`` at a
    time, so ``T / ceil(T / p)`` per group."""
    axes = {d: level for level, d in array_axes(template)}
    if C not in axes:
        return jnp.float32(1.0)
    level_c = axes[C]
    lt, eps = m.log_temporal, 1e-6
    t_log, found = jnp.float32(0.0), jnp.bool_(False)
    for level in range(level_c + 1):  # the innermost S loop at or below the row level
        here = lt[level, S] > eps
        t_log = jnp.where(~found & here, lt[level, S], t_log)
        found = found | here
    cs = jnp.exp(m.log_spatial[level_c, C])
    trip = jnp.round(jnp.exp(t_log))
    p = kernel_columns_per_row(fanout[level_c], cs, trip, jnp)
    ok = (found & (jnp.abs(layer.dilation[1] - 1.0) < eps) & (jnp.abs(cs - layer.dims[C]) < 0.5)
          & (jnp.abs(lt[:, C]).sum() < eps) & (2.0 * cs <= fanout[level_c] + eps))
    return jnp.where(ok, trip / jnp.ceil(trip / p), 1.0)


def _window(layer: LayerArrays) -> Any:
    """Whether the inputs take the sliding-window layout (a kernel or a stride)."""
    return (layer.dims[R] * layer.dims[S] > 1.0) | (jnp.max(layer.stride) > 1.0)


def array_cycles(template: Template, layer: LayerArrays, hwp: HwParams, m: MappingArrays,
                 compute: Any, runs: Runs) -> Any:
    """Cycles the array's instructions take to stream `compute` rows (the padded nest's MACs
    over the array) at the template's ``compute`` instruction cost (none: `compute`).

    One preloaded weight block streams the pixels of the loops that turn inside it (the
    registers' loops and the accumulator's innermost pixel loops: the W tile stays put); a
    compute takes as many of them as are evenly spaced in the scratchpad, at most
    ``max_rows``: all of them in a GEMM or 1x1 convolution, only the innermost loop's under
    a sliding window. Each block's preload costs what the compute before it does not hide.
    """
    cost = template.instruction("compute")
    if cost is None:
        return compute
    c = cost.evaluate(template, hwp)
    log_stream = (m.log_temporal[0].sum()
                  + (m.order_weights[1] * skipped_candidates(m)[1, :, W]).sum())
    log_run = jnp.where(_window(layer), runs.compute, log_stream)
    rows = jnp.minimum(jnp.exp(log_run), c["max_rows"])
    preload = jnp.maximum(c["preload_cycles"] - rows, 0.0) / jnp.exp(log_stream)
    return compute * (_per_row(c, rows) + preload)


def move_cycles(template: Template, layer: LayerArrays, hwp: HwParams, m: MappingArrays,
                acc: Accesses, runs: Runs) -> Any:
    """The fewest cycles the DRAM moves' instructions take, at the template's ``load`` and
    ``store`` instruction costs (their queues run side by side; none: 0).

    A row is one pixel's channels on the array's axis (Cs inputs, Ks outputs). Outputs go
    out in runs of the accumulator tile's innermost output loop; inputs come in runs of the
    scratchpad tile's innermost input loop, or under a sliding window one line of the tile's
    window at a time. Weights and bias loads are not counted.
    """
    top = template.num_levels - 1
    floor = jnp.float32(0.0)
    store = template.instruction("store")
    if store is not None:
        c = store.evaluate(template, hwp)
        rows = acc.updates[top, O] / jnp.exp(m.log_spatial[:, K].sum())
        run = jnp.minimum(jnp.exp(runs.store), c["max_rows"])
        floor = jnp.maximum(floor, rows * _per_row(c, run))
    load = template.instruction("load")
    if load is not None:
        c = load.evaluate(template, hwp)
        rows = acc.reads[top, I] / jnp.exp(m.log_spatial[:, C].sum())
        ext = jnp.exp(jnp.cumsum(m.log_temporal + m.log_spatial, axis=0)[top - 1])
        line = span(ext[Q], ext[S], layer.stride[1], layer.dilation[1])
        run = jnp.where(_window(layer), line, jnp.exp(runs.load))
        floor = jnp.maximum(floor, rows * _per_row(c, jnp.minimum(run, c["max_rows"])))
    return floor


def drain_cycles(template: Template, hwp: HwParams, m: MappingArrays, acc: Accesses,
                 level_cycles: Any, dram_words_per_cycle: Any) -> Any:
    """The least cycles the output tiles' write-backs allow (none without a ``store`` cost).

    An output tile's buffer is free again only when its last mvout is acknowledged: its rows
    read out, then the store's round trip (``latency_cycles``). The tiles of the lowest level
    that keeps outputs (the accumulator) go through ALCOP's load-and-use loop as its loads do,
    with the drain in place of the load: the cycles inside that level (``level_cycles``, as
    `perfmodels.latency.latency` gives them) and the drain's own (a row read out per cycle,
    or the written words over the DRAM's bandwidth if slower) over its refills and stages
    (`perfmodels.latency.pipeline_cycles`). With a few small accumulator tiles the round
    trips, not the bytes, bound the layer.
    """
    store = template.instruction("store")
    if store is None:
        return jnp.float32(0.0)
    c = store.evaluate(template, hwp)
    level = int(np.flatnonzero(template.keeps_mask[:-1, O])[0])
    top = template.num_levels - 1
    rows = acc.updates[top, O] / jnp.exp(m.log_spatial[:, K].sum())
    xfer = jnp.maximum(rows, acc.updates[top, O] / dram_words_per_cycle)
    return pipeline_cycles(level_cycles[level], xfer, c["latency_cycles"],
                           jnp.exp(acc.log_refills[level]), m.stages[level], True)


def evaluate(template: Template, layer: LayerArrays, hwp: HwParams, m: MappingArrays,
             aware: bool) -> Metrics:
    """`perfmodels.analytic.evaluate`, on the padded nest if `aware` (pure; jit and vmap it).

    The padded nest gives compute, register and buffer terms and the footprints; the DRAM
    level's reads and updates come from the real nest. Cycles, energy and EDP are recombined
    through the model's own `latency` and `energy` functions, with the per-load latency on
    (``load_latency``: each tile load pays the template's DMA set-up and round trip, and the
    pipeline its fill, so stages beyond double buffering can hide it; see
    `perfmodels.latency`), and energy the levels' idle ``static_pj_per_cycle`` over those
    cycles. Not `aware` is the plain, Timeloop-equivalent model.
    """
    if not aware:
        return model_evaluate(template, layer, hwp, m)
    lv = level_arrays(template, hwp)
    padded_layer, padded_m, _ = pad(template, layer, m, lv.fanout)
    out = model_evaluate(template, padded_layer, hwp, padded_m)
    acc_pad = accesses(template, padded_layer, padded_m)
    acc_real = accesses(template, layer, m)
    top = template.num_levels - 1
    # First-layer packing fills the array's rows with several kernel columns: fewer MACs on
    # padded rows (the buffers still hold one pixel per row, so the footprints keep the pad).
    acc = acc_pad._replace(
        reads=acc_pad.reads.at[top].set(acc_real.reads[top]),
        updates=acc_pad.updates.at[top].set(acc_real.updates[top]),
        fills=acc_pad.fills.at[top].set(acc_real.fills[top]),
        macs=acc_pad.macs / packed_columns(template, layer, m, lv.fanout))
    compute = acc.macs / jnp.exp(padded_m.log_spatial.sum())
    runs = instruction_runs(m, template.num_levels)   # padding moves no temporal loop
    moves = jnp.zeros(top + 1).at[top].set(move_cycles(template, layer, hwp, m, acc_real, runs))
    lat = latency(template, acc, padded_m, lv, load_latency=True,
                  compute_cycles=array_cycles(template, padded_layer, hwp, padded_m, compute,
                                              runs),
                  min_port_cycles=moves)
    lat = lat._replace(cycles=jnp.maximum(lat.cycles, drain_cycles(
        template, hwp, m, acc_real, lat.level_cycles, lv.bandwidth_words[top])))
    en = energy(template, acc, lv, lat.cycles, useful_macs=acc_real.macs,
                array_pes=hwp.pe_rows * hwp.pe_cols)
    groups = layer.groups
    cycles, energy_pj = lat.cycles * groups, en.energy_pj * groups
    return out._replace(
        cycles=cycles, energy_pj=energy_pj, edp=cycles * energy_pj,
        compute_cycles=lat.compute_cycles * groups, port_cycles=lat.port_cycles * groups,
        level_accesses=en.level_accesses * groups, level_pj=en.level_pj * groups,
        reads=acc.reads * groups, updates=acc.updates * groups, mac_pj=en.mac_pj * groups,
        pe_idle_pj=en.pe_idle_pj * groups)


def infer_hw(template: Template, base: HwParams, layers: LayerArrays, maps: MappingArrays,
             tau: float, aware: bool, floor: HwParams | None = None) -> HwParams:
    """Minimal hardware for every layer's tiles (`perfmodels.relax.infer_hw`, DOSA's min_hw),
    with buffers sized for the padded rows if `aware`. PE dims come from the real spatial
    factors (at least `floor`'s, in ``"free"`` mode); the padding then fills the array they
    define."""
    hwp = relax.infer_hw(template, base, layers, maps, tau, floor)
    if not aware:
        return hwp
    fanout = level_arrays(template, hwp).fanout
    padded_layers, _, folded = jax.vmap(lambda x, m: pad(template, x, m, fanout))(layers, maps)
    return relax.infer_hw(template, base, padded_layers, folded, tau, floor)


# --------------------------------------------------------------------------- exact
@functools.partial(fast_jit, static_argnums=(0, 4))
def _exact_one(template: Template, layer: LayerArrays, hwp: HwParams, m: MappingArrays,
               aware: bool) -> Metrics:
    return evaluate(template, layer, hwp, m, aware)


def exact(layer: Layer, hw: HardwareConfig, mapping: Mapping, aware: bool = True,
          check: bool = True) -> Metrics:
    """Score one discrete mapping (validated first with `check`), padded if `aware`."""
    if check:
        mapping.validate(layer, hw)
    out = _exact_one(hw.template_spec, pack_layer(layer), hw.to_params(),
                     pack_mapping(mapping), aware)
    return jax.tree_util.tree_map(np.asarray, out)
