"""The analytical latency/energy model: one jit-able function for exact and relaxed points.

`evaluate` scores one layer on one hardware point with one mapping given as arrays
(`MappingArrays`: log factors, loop-order candidates with weights, stages). The exact model
packs a discrete `accel.Mapping` (integer factors, one candidate order with weight 1, integer
stages) and calls it; `perfmodels.relax` decodes a `RelaxedPoint` into the same arrays. Batches
go through `jax.vmap` (`evaluate_batch`), never Python loops.

>>> from accel.arch import HardwareConfig
>>> from accel.mapping import Mapping
>>> from workloads.layer import Layer
>>> layer = Layer.conv2d(R=1, S=1, P=56, Q=56, C=64, K=64)
>>> m = Mapping.from_timeloop("L3[WIO] P56 Q56 - L2[WI] N1 K16X - L1[O] K4 C4 C16X - L0[W] N1")
>>> out = exact(layer, HardwareConfig.preset("gemmini_default"), m)
>>> round(float(out.cycles)), round(float(out.energy_pj) / 1e6, 2)   # cycles, uJ
(432896, 159.94)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig, HwParams, Template, level_arrays, stack_hw, tensor_bits
from accel.mapping import Mapping, footprint_kb, layer_geometry
from perfmodels.accesses import Accesses, LayerArrays, MappingArrays, accesses, order_rank
from perfmodels.energy import area_mm2, energy
from perfmodels.latency import latency
from workloads.errors import ConfigError
from workloads.layer import Layer

__all__ = ["Metrics", "evaluate", "evaluate_batch", "exact", "exact_batch", "fast_jit",
           "pack_layer", "pack_mapping", "stack_layers", "stack_mappings", "LayerArrays",
           "MappingArrays"]

# XLA's experimental CPU "YNN" fusions run this model's many small elementwise ops ~7x
# slower than XLA's own loop fusions (measured: 12 us vs 1.6 us CPU per exact evaluation), so
# model code is compiled with them off. Scoped per jit, not a process-wide XLA_FLAGS.
_CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


@functools.cache
def compiler_options() -> dict[str, str]:
    """XLA options for jitting model code on this backend ({} if not applicable)."""
    if jax.default_backend() != "cpu":
        return {}
    try:
        jax.jit(lambda x: x + 1.0, compiler_options=_CPU_OPTIONS).lower(1.0).compile()
    except Exception:  # an XLA without the option: plain jit  # noqa: BLE001
        return {}
    return dict(_CPU_OPTIONS)


class fast_jit:  # noqa: N801 - used like jax.jit
    """`jax.jit` with `compiler_options()`; use it for anything that calls the model.

    XLA takes compiler options only on the outermost jit, so inside another trace (an outer
    jit, grad or vmap) this is a plain `jax.jit`: wrap the outermost function with it.

    >>> f = fast_jit(lambda x: x * 2.0)
    >>> float(f(3.0))
    6.0
    """

    def __init__(self, fun: Any, **jit_kwargs: Any) -> None:
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._kwargs = jit_kwargs
        self._jitted: Any = None
        self._nested = jax.jit(fun, **jit_kwargs)

    @property
    def jitted(self) -> Any:
        if self._jitted is None:
            self._jitted = jax.jit(self._fun, compiler_options=compiler_options(),
                                   **self._kwargs)
        return self._jitted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs))):
            return self._nested(*args, **kwargs)
        return self.jitted(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)


class Metrics(NamedTuple):
    """Model outputs for one layer (leading batch axes under vmap).

    Totals cover all ``groups`` of a grouped layer. ``edp`` is cycles x pJ. ``footprint_kb``
    and ``capacity_kb`` are per instance, per level; ``overflow`` is the summed relative
    excess of footprint over capacity and ``fanout_excess`` the summed log excess of spatial
    fan-out over the template's, both 0 for a mapping that fits.
    """

    cycles: Any
    energy_pj: Any
    edp: Any
    area_mm2: Any
    macs: Any
    compute_cycles: Any
    port_cycles: Any
    level_accesses: Any
    level_pj: Any
    fills: Any
    reads: Any
    updates: Any
    footprint_kb: Any
    capacity_kb: Any
    overflow: Any
    fanout_excess: Any
    mac_pj: Any             # the MACs' share of energy_pj (the MACs the model charges)
    pe_idle_pj: Any = 0.0   # the PEs' idle share (the instruction-aware model's)


def evaluate(template: Template, layer: LayerArrays, hwp: HwParams, m: MappingArrays,
             load_latency: bool = False) -> Metrics:
    """Latency, energy, EDP, area and feasibility of one mapping (pure; jit with static
    `template` and `load_latency`; grad-safe in every float input).

    `load_latency` charges every tile load the template's fixed ``latency_cycles`` and the
    pipeline's fill (`perfmodels.latency`), and every level its idle energy per cycle
    (``static_pj_per_cycle``) and every PE its idle energy in the cycles it has no MAC; off (the
    default) is the Timeloop-equivalent roofline that
    ``baco validate timeloop`` checks."""
    lv = level_arrays(template, hwp)
    acc: Accesses = accesses(template, layer, m)
    lat = latency(template, acc, m, lv, load_latency)
    en = energy(template, acc, lv, lat.cycles if load_latency else None,
                array_pes=hwp.pe_rows * hwp.pe_cols)
    groups = layer.groups
    cycles = lat.cycles * groups
    energy_pj = en.energy_pj * groups

    kb = footprint_kb(acc.tile_words, template.keeps_mask, tensor_bits(hwp), m.stages, jnp)
    top = template.num_levels - 1
    cap = lv.capacity_kb
    over = jnp.where(jnp.arange(template.num_levels) < top,
                     jnp.maximum(kb - cap, 0.0) / jnp.maximum(jnp.where(jnp.isfinite(cap), cap,
                                                                          1.0), 1e-9), 0.0)
    fan_log = m.log_spatial.sum(-1)
    fan_limit = jnp.where(jnp.isfinite(lv.fanout), lv.fanout, 1.0)
    fan_excess = jnp.where(jnp.isfinite(lv.fanout),
                           jnp.maximum(fan_log - jnp.log(fan_limit), 0.0), 0.0)
    return Metrics(
        cycles=cycles, energy_pj=energy_pj, edp=cycles * energy_pj,
        area_mm2=area_mm2(hwp, lv), macs=acc.macs * groups,
        compute_cycles=lat.compute_cycles * groups, port_cycles=lat.port_cycles * groups,
        level_accesses=en.level_accesses * groups, level_pj=en.level_pj * groups,
        fills=acc.fills * groups, reads=acc.reads * groups, updates=acc.updates * groups,
        footprint_kb=kb, capacity_kb=cap, overflow=over.sum(), fanout_excess=fan_excess.sum(),
        mac_pj=en.mac_pj * groups, pe_idle_pj=en.pe_idle_pj * groups,
    )


@functools.partial(fast_jit, static_argnums=(0, 4))
def evaluate_batch(template: Template, layers: LayerArrays, hwps: HwParams,
                   mappings: MappingArrays, load_latency: bool = False) -> Metrics:
    """`evaluate` over a leading batch axis of layers, hardware and mappings (all batched)."""
    return jax.vmap(functools.partial(evaluate, template, load_latency=load_latency))(
        layers, hwps, mappings)


# --------------------------------------------------------------------------- packing
def pack_layer(layer: Layer) -> LayerArrays:
    dims, stride, dilation = layer_geometry(layer)
    return LayerArrays(dims=dims, stride=stride, dilation=dilation,
                       groups=np.float32(layer.groups))


def pack_mapping(mapping: Mapping) -> MappingArrays:
    """Exact inputs: log of integer factors, the mapping's own order with weight 1."""
    n = mapping.num_levels
    return MappingArrays(
        log_temporal=np.log(mapping.temporal).astype(np.float32),
        log_spatial=np.log(mapping.spatial).astype(np.float32),
        rank=order_rank(mapping.innermost_first_order())[:, None],
        order_weights=np.ones((n, 1), np.float32),
        stages=mapping.stages.astype(np.float32),
    )


def _stack(items: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *items)


def stack_layers(layers: Sequence[Layer]) -> LayerArrays:
    return _stack([pack_layer(x) for x in layers])


def stack_mappings(mappings: Sequence[Mapping]) -> MappingArrays:
    levels = {m.num_levels for m in mappings}
    if len(levels) != 1:
        raise ConfigError(f"stack_mappings: mappings have different level counts {levels}")
    return _stack([pack_mapping(m) for m in mappings])


# --------------------------------------------------------------------------- exact API
def bucket(n: int) -> int:
    """Padded batch size: powers of two from 8, so that varying batch sizes share compiled
    code."""
    return max(8, 1 << (max(n, 1) - 1).bit_length())


def _pad(items: Sequence[Any], size: int) -> list[Any]:
    return list(items) + [items[-1]] * (size - len(items))


def exact(layer: Layer, hw: HardwareConfig, mapping: Mapping, check: bool = True,
          load_latency: bool = False) -> Metrics:
    """Score a discrete mapping; with `check`, `Mapping.validate` runs first (and raises).
    `load_latency` as in `evaluate`."""
    return jax.tree_util.tree_map(lambda x: x[0], exact_batch([layer], hw, [mapping], check,
                                                              load_latency))


def exact_batch(layers: Sequence[Layer], hws: HardwareConfig | Sequence[HardwareConfig],
                mappings: Sequence[Mapping], check: bool = True,
                load_latency: bool = False) -> Metrics:
    """Score many (layer, hardware, mapping) triples of one template in one vmapped call
    (padded to a `bucket` size); with `check`, every mapping is validated first.
    `load_latency` as in `evaluate`."""
    if isinstance(hws, HardwareConfig):
        hws = [hws] * len(layers)
    if not len(layers) == len(hws) == len(mappings):
        raise ConfigError(f"exact_batch: got {len(layers)} layers, {len(hws)} hardware configs "
                          f"and {len(mappings)} mappings; they must match")
    if not layers:
        raise ConfigError("exact_batch: nothing to evaluate")
    templates = {hw.template_spec for hw in hws}
    if len(templates) != 1:
        raise ConfigError("exact_batch: all hardware configs must share one template")
    if check:
        for layer, hw, m in zip(layers, hws, mappings):
            m.validate(layer, hw)
    size = bucket(len(layers))
    out = evaluate_batch(templates.pop(), stack_layers(_pad(layers, size)),
                         stack_hw(_pad(list(hws), size)), stack_mappings(_pad(mappings, size)),
                         bool(load_latency))
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:len(layers)], out)
