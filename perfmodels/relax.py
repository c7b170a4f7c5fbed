"""Relaxations: the continuous search space the co-design loop descends on.

A `RelaxedPoint` is a pytree of unconstrained reals, one `RelaxedMapping` per layer (stacked
along a leading axis) and optionally a `RelaxedHardware`. `decode` turns it into the arrays
the analytical model takes (`perfmodels.analytic.MappingArrays`, `accel.arch.HwParams`), so the
relaxed and the exact score come from the same `perfmodels.analytic.evaluate`:

* **Tiling factors, in log space, tied to the layer.** For each dim d, the fractions
  ``softmax(logits[:, d])`` over the slots the template allows (a temporal loop at each level,
  a spatial fan-out where it may sit) split ``log D_d``: every factor is >= 1 and their product
  is exactly ``D_d``, whatever the logits (DOSA instead derives the DRAM factor and penalizes
  factors below 1, reference §A.3).
* **Loop orders, any permutation.** Each level has a learned order, the ranks of
  ``order_scores`` (its loops sorted by score, innermost first), plus DOSA's weight-, input-
  and output-stationary orders (`CANDIDATE_ORDERS`) as fixed candidates, mixed with
  ``softmax(order_logits)`` (learned order first). The model sees the learned order's integer
  ranks, so it scores a real order; the gradient reaches the scores straight through
  (`perfmodels.accesses.inside_mask`), and when two scores cross, the loops swap. A point
  started from a mapping starts at that mapping's own order.
* **Pipeline stages, continuous** in ``[1, MAX_STAGES]`` through a sigmoid.
* **Hardware**, three modes (`RelaxSpace.hw_mode`): ``"fixed"`` (a given `HardwareConfig`),
  ``"free"`` (log PE dims, buffer KiB and DRAM words/cycle are variables within
  `FREE_HW_BOUNDS`, each PE dim and buffer grown, smoothly, to what the tiles need, so that
  the tiles and the hardware move together: `infer_hw` with the variables as its floor), or
  ``"min_hw"``: DOSA's minimal hardware that holds every layer's tiles, with a smooth max over
  layers (``tau * logsumexp(log x / tau)``, which bounds the max from above).

Gradients are finite for every input (the factor split is a softmax, gates are clipped, logs
see only values >= 1); the tests check this on random points.

>>> import jax
>>> from accel.arch import HardwareConfig
>>> from workloads.layer import Layer
>>> space = RelaxSpace.create(HardwareConfig.preset("gemmini_default"),
...                           [Layer.conv2d(R=3, S=3, P=14, Q=14, C=256, K=256)],
...                           hw_mode="min_hw")
>>> theta = init_random(jax.random.PRNGKey(0), space)
>>> out = evaluate(theta, space)
>>> out.metrics.cycles.shape
(1,)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import MAX_STAGES, HardwareConfig, HwParams, Template, hw_env, tensor_bits
from accel.buildable import buildable_hardware
from accel.mapping import Mapping, footprint_kb, tile_words
from perfmodels.accesses import LayerArrays, MappingArrays, order_rank
from perfmodels.analytic import Metrics, fast_jit, pack_layer
from perfmodels.analytic import evaluate as evaluate_arrays
from perfmodels.energy import area_excess
from workloads.errors import ConfigError
from workloads.layer import DIMS, Layer

_IDX = {d: i for i, d in enumerate(DIMS)}


def _order(innermost_first: str) -> np.ndarray:
    return np.array([_IDX[d] for d in innermost_first], np.int32)


CANDIDATE_ORDERS = {
    # DOSA's three DRAM orders (mapping_driven_hw_search, ranks [4,5,1,2,6,7,3] etc.),
    # written innermost loop first.
    "weight_stationary": _order("PQNRSCK"),
    "input_stationary": _order("KRSPQCN"),
    "output_stationary": _order("RSCKPQN"),
}
HW_MODES = ("fixed", "free", "min_hw")
FREE_HW_BOUNDS = {"pe": (1.0, 1024.0), "kb": (1.0 / 64.0, 65536.0), "bw": (0.25, 1024.0)}
"""Range of ``"free"`` hardware (PE rows/columns; buffer KiB; DRAM words per cycle): the log
variables are clipped to it, so no input overflows the model."""
_LOGIT_FLOOR = -1e9
_EPS = 1e-12


class RelaxedMapping(NamedTuple):
    """Unconstrained parameters of one layer's mapping (leading axis: layers).

    ``temporal_logits``/``spatial_logits`` ``[level, dim]`` (disallowed slots are ignored),
    ``order_logits`` ``[level, 1 + fixed candidates]``, ``order_scores`` ``[level, dim]`` (the
    learned order: loops by increasing score, innermost first), ``stage_logits`` ``[level]``.
    """

    temporal_logits: Any
    spatial_logits: Any
    order_logits: Any
    order_scores: Any
    stage_logits: Any


class RelaxedHardware(NamedTuple):
    """Log PE rows/columns, log buffer KiB and log DRAM words per cycle (``"free"`` mode)."""

    log_pe_rows: Any
    log_pe_cols: Any
    log_sp_kb: Any
    log_acc_kb: Any
    log_dram_bw_words: Any

    @classmethod
    def of(cls, hw: Any) -> RelaxedHardware:
        """The point of a `HardwareConfig` or `HwParams`."""
        return cls(*(np.log(np.asarray(getattr(hw, f), np.float32)) for f in (
            "pe_rows", "pe_cols", "sp_kb", "acc_kb", "dram_bw_words")))


class RelaxedPoint(NamedTuple):
    mappings: RelaxedMapping
    hw: RelaxedHardware | None = None


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["layers", "orders", "rank", "counts", "base"],
                   meta_fields=["template", "hw_mode", "tau", "base_config"])
@dataclasses.dataclass(frozen=True)
class RelaxSpace:
    """What a `RelaxedPoint` is evaluated against: the layers, their fixed candidate loop
    orders, repeat counts, and the hardware mode. Arrays are pytree leaves; the template and
    mode are static (jit retraces only when they change)."""

    layers: LayerArrays          # [B] stacked
    orders: Any                  # int [B, level, fixed candidate, 7], innermost first
    rank: Any                    # [B, level, fixed candidate, 7] loop positions of `orders`
    counts: Any                  # [B] repeats of each layer in the network
    base: HwParams               # fixed fields (bandwidth, widths) and the "fixed" hardware
    template: Template
    hw_mode: str
    tau: float
    base_config: HardwareConfig

    @classmethod
    def create(cls, hw: HardwareConfig, layers: Sequence[Layer],
               counts: Sequence[float] | None = None, hw_mode: str = "min_hw",
               tau: float = 0.05) -> RelaxSpace:
        """Build the space for `layers` on `hw`'s template. `tau` is the smooth-max
        temperature of ``"min_hw"`` (0 gives the hard max)."""
        if hw_mode not in HW_MODES:
            raise ConfigError(f"relax: hw_mode must be one of {HW_MODES}, got {hw_mode!r}")
        if not layers:
            raise ConfigError("relax: no layers")
        if counts is not None and len(counts) != len(layers):
            raise ConfigError(f"relax: {len(counts)} counts for {len(layers)} layers")
        template = hw.template_spec
        n = template.num_levels
        base_orders = np.stack(list(CANDIDATE_ORDERS.values()))            # [3, 7]
        orders = np.broadcast_to(base_orders, (len(layers), n) + base_orders.shape)
        orders = np.ascontiguousarray(orders, np.int32)
        packed = [pack_layer(x) for x in layers]
        stacked = LayerArrays(*(np.stack(leaves) for leaves in zip(*packed)))
        return cls(layers=stacked, orders=orders, rank=order_rank(orders),
                   counts=np.asarray(counts if counts is not None else np.ones(len(layers)),
                                     np.float32),
                   base=hw.to_params(), template=template, hw_mode=hw_mode, tau=float(tau),
                   base_config=hw)

    @property
    def num_layers(self) -> int:
        return int(self.orders.shape[0])

    @property
    def num_candidates(self) -> int:
        """The learned order and the fixed ones."""
        return 1 + int(self.orders.shape[2])


class RelaxedEval(NamedTuple):
    metrics: Metrics               # per layer, [B]
    hw: HwParams                   # the hardware the layers were scored on
    mappings: MappingArrays        # decoded, [B]


# --------------------------------------------------------------------------- decoding
def learned_rank(order_scores: Any) -> Any:
    """The integer ranks of the scores (a valid order), with the scores' gradient.

    The ranks are ``argsort(argsort(scores))`` (stable: a tie goes to the lower index; NaN
    last, as JAX sorts), counted by comparing every pair: XLA's two sorts of rows of seven
    took 14% of a gradient's time (profiled, plain model)."""
    s = jax.lax.stop_gradient(order_scores)
    e, d = s[..., :, None], s[..., None, :]                    # [..., e, d]
    nan_e, nan_d = jnp.isnan(e), jnp.isnan(d)
    below = (e < d) | (~nan_e & nan_d)
    tied = (e == d) | (nan_e & nan_d)
    lower = np.tri(s.shape[-1], k=-1, dtype=bool).T             # [e, d]: e < d
    hard = (below | (tied & lower)).sum(-2).astype(jnp.float32)
    return hard + (order_scores - s)


def decode_mapping(rm: RelaxedMapping, layer: LayerArrays, rank: Any,
                   template: Template) -> MappingArrays:
    """One layer's relaxed parameters as model inputs (factors, soft orders, stages);
    `rank` holds the fixed candidates' ranks, behind which the learned order goes first."""
    t_mask, s_mask = template.temporal_mask, template.spatial_mask
    logits = jnp.concatenate([jnp.where(t_mask, rm.temporal_logits, _LOGIT_FLOOR),
                              jnp.where(s_mask, rm.spatial_logits, _LOGIT_FLOOR)], axis=0)
    frac = jax.nn.softmax(logits, axis=0)                      # [2L, 7], sums to 1 per dim
    log_dims = jnp.log(layer.dims)
    n = template.num_levels
    log_t = jnp.where(t_mask, frac[:n] * log_dims, 0.0)
    log_s = jnp.where(s_mask, frac[n:] * log_dims, 0.0)
    stages = 1.0 + (MAX_STAGES - 1.0) * jax.nn.sigmoid(rm.stage_logits)
    stages = stages.at[n - 1].set(1.0)
    rank = jnp.concatenate([learned_rank(rm.order_scores)[:, None, :], rank], axis=1)
    return MappingArrays(log_temporal=log_t, log_spatial=log_s, rank=rank,
                         order_weights=jax.nn.softmax(rm.order_logits, axis=-1), stages=stages)


def _smooth_max(x: Any, tau: float, axis: Any = None) -> Any:
    """Smooth upper bound of ``max(x)`` for positive x (scale-free: works on log x)."""
    logx = jnp.log(jnp.maximum(x, 1e-30))
    if tau <= 0:
        return jnp.exp(jnp.max(logx, axis=axis))
    return jnp.exp(tau * jax.scipy.special.logsumexp(logx / tau, axis=axis))


_SIZE_FIELDS = ("sp_kb", "acc_kb")
_PE_FIELDS = ("pe_rows", "pe_cols")


def _linear_field(expr: Any, fields: tuple[str, ...], where: str) -> str | None:
    if expr is None:
        return None
    found = [f for f in fields if f in expr.names]
    if len(found) > 1:
        raise ConfigError(f"{where}: {expr.text!r} depends on {found}; min_hw needs one")
    return found[0] if found else None


def _check_proportional(expr: Any, field: str, where: str) -> None:
    """min_hw inverts ``value = field * unit``; refuse expressions that are not."""
    probe = {name: 3.0 for name in expr.names}
    one = float(expr.evaluate({**probe, field: 1.0}, np))
    two = float(expr.evaluate({**probe, field: 2.0}, np))
    if not np.isclose(two, 2.0 * one):
        raise ConfigError(f"{where}: {expr.text!r} must be proportional to {field} for min_hw")


def _with(hwp: HwParams, **fields: Any) -> HwParams:
    return hwp._replace(**{k: jnp.asarray(v, jnp.float32) for k, v in fields.items()})


def infer_hw(template: Template, base: HwParams, layers: LayerArrays, maps: MappingArrays,
             tau: float, floor: HwParams | None = None) -> HwParams:
    """DOSA's ``min_hw``: the smallest PE array and buffers that hold every layer's tiles.

    PE rows/columns come from the largest spatial fan-out at the levels whose ``fanout``
    expression names them (one ``pe_dim`` if the template is square, floored at 1); buffer
    sizes from the largest footprint (tile x stages) at the levels whose ``capacity_kb``
    names ``sp_kb`` or ``acc_kb``, inverted through that (linear) expression. `tau` = 0 gives
    the hard max, > 0 the smooth one. Levels whose capacity is fixed are not resized.

    With `floor` (``"free"`` mode's hardware variables) each PE dim and buffer is at least the
    floor's: the tiles grow the hardware they outgrow, paying for it, instead of meeting an
    overflow penalty, so the gradient sees what a wider array or a larger buffer buys.
    """
    def at_least(value: Any, field: str) -> Any:
        if floor is None:
            return value
        return _smooth_max(jnp.stack([value, getattr(floor, field)]), tau)

    fan = jnp.exp(maps.log_spatial.sum(-1))                              # [B, L]
    need_pe: dict[str, list[Any]] = {f: [] for f in _PE_FIELDS}
    for l, lv in enumerate(template.levels):
        field = _linear_field(lv.fanout, _PE_FIELDS, f"template {template.name}: {lv.name}")
        if field is not None:
            _check_proportional(lv.fanout, field, f"template {template.name}: {lv.name}")
            unit = lv.fanout.evaluate({**hw_env(template, base), field: 1.0})
            need_pe[field].append(fan[:, l] / unit)
    pe = {}
    for field in _PE_FIELDS:
        if need_pe[field]:
            pe[field] = _smooth_max(jnp.stack(need_pe[field]), tau)
        else:
            pe[field] = getattr(base, field)
    if template.square_array:
        dim = _smooth_max(jnp.stack([pe["pe_rows"], pe["pe_cols"]]), tau)
        pe = {"pe_rows": dim, "pe_cols": dim}
    pe = {k: jnp.maximum(at_least(v, k), 1.0) for k, v in pe.items()}
    hwp = _with(base, **pe)

    log_ext = jnp.cumsum(maps.log_temporal + maps.log_spatial, axis=1)     # [B, L, 7]
    words = tile_words(log_ext, layers.stride, layers.dilation, jnp)      # [B, L, 3]
    kb = footprint_kb(words, template.keeps_mask, tensor_bits(hwp), maps.stages, jnp)  # [B, L]
    sizes: dict[str, Any] = {}
    for l, lv in enumerate(template.levels[:-1]):
        field = _linear_field(lv.capacity_kb, _SIZE_FIELDS,
                              f"template {template.name}: {lv.name}")
        if field is None:
            continue
        _check_proportional(lv.capacity_kb, field, f"template {template.name}: {lv.name}")
        unit = lv.capacity_kb.evaluate({**hw_env(template, hwp), field: 1.0})
        value = _smooth_max(kb[:, l], tau) / unit
        sizes[field] = jnp.maximum(sizes[field], value) if field in sizes else value
    return _with(hwp, **{field: at_least(value, field) for field, value in sizes.items()})


def decode_mappings(theta: RelaxedPoint, space: RelaxSpace) -> MappingArrays:
    """Model inputs for every layer (factors, soft orders, stages)."""
    template = space.template
    return jax.vmap(lambda rm, layer, rank: decode_mapping(rm, layer, rank, template))(
        theta.mappings, space.layers, space.rank)


def free_hardware(theta: RelaxedPoint, space: RelaxSpace) -> HwParams:
    """``"free"`` mode's hardware variables, within `FREE_HW_BOUNDS` (before the tiles grow
    them: `decode`)."""
    if theta.hw is None:
        raise ConfigError("relax: hw_mode 'free' needs RelaxedPoint.hw")
    h = theta.hw

    def bounded(x: Any, kind: str) -> Any:
        lo, hi = FREE_HW_BOUNDS[kind]
        return jnp.exp(jnp.clip(x, np.log(lo), np.log(hi)))

    rows = bounded(h.log_pe_rows, "pe")
    cols = rows if space.template.square_array else bounded(h.log_pe_cols, "pe")
    return _with(space.base, pe_rows=rows, pe_cols=cols, sp_kb=bounded(h.log_sp_kb, "kb"),
                 acc_kb=bounded(h.log_acc_kb, "kb"),
                 dram_bw_words=bounded(h.log_dram_bw_words, "bw"))


def decode(theta: RelaxedPoint, space: RelaxSpace, infer: Callable[..., HwParams] = infer_hw
           ) -> tuple[MappingArrays, HwParams]:
    """Model inputs for every layer, and the hardware they run on: the fixed hardware, the
    minimal one for the tiles (``"min_hw"``), or the free variables grown to hold the tiles
    (``"free"``: `infer_hw` with them as its floor). `infer`: `infer_hw`'s stand-in
    (``perfmodels.aware.infer_hw`` sizes the buffers for the padded rows)."""
    maps = decode_mappings(theta, space)
    if space.hw_mode == "fixed":
        return maps, space.base
    floor = free_hardware(theta, space) if space.hw_mode == "free" else None
    return maps, infer(space.template, space.base if floor is None else floor,
                       space.layers, maps, space.tau, floor=floor)


def evaluate(theta: RelaxedPoint, space: RelaxSpace,
             model: Callable[..., Metrics] = evaluate_arrays,
             infer: Callable[..., HwParams] = infer_hw) -> RelaxedEval:
    """Score every layer of the space at `theta` (vmapped; jit it with the space as an arg)
    by `model` (``(template, layer, hwp, mapping) -> Metrics``: the plain analytic model, or
    ``perfmodels.aware.evaluate``'s) on `decode`'s hardware."""
    maps, hwp = decode(theta, space, infer)
    template = space.template
    metrics = jax.vmap(lambda layer, m: model(template, layer, hwp, m))(space.layers, maps)
    return RelaxedEval(metrics=metrics, hw=hwp, mappings=maps)


def network_loss(theta: RelaxedPoint, space: RelaxSpace, penalty: float = 10.0, *,
                 area_budget_mm2: float | None = None,
                 limits: tuple[tuple[str, float], ...] = (),
                 model: Callable[..., Metrics] = evaluate_arrays,
                 infer: Callable[..., HwParams] = infer_hw, hybrid: Any = None,
                 totals: Callable[..., tuple[Any, Any]] | None = None
                 ) -> tuple[Any, tuple[Any, Any]]:
    """``log(cycles) + log(pJ)`` of the whole network (DOSA's EDP objective, in logs) plus
    ``penalty`` times the excess, and ``(cycles, pJ)``; the layers scored by `evaluate`.

    The excess: overflow and fan-out beyond the hardware summed over layers (0 in
    ``"min_hw"`` and ``"free"`` modes except for levels of fixed size); per ``(field, log
    max)`` of `limits`, ``relu(log(hardware field) - log max)``; with an area budget,
    ``relu(log(area / budget))`` of the hardware the layers run on (`area_excess`; in
    ``"min_hw"`` and ``"free"`` modes the hardware the tiles size, so they shrink). With
    `hybrid` (``perfmodels.atformer.Hybrid``), every layer's cycles are multiplied by the
    surrogate's learned residual (differentiably); `totals` ``(cycles, pJ, layer cycles,
    layer pJ, hwp) -> (cycles, pJ)`` then revises the network's totals (fused chains).
    """
    out = evaluate(theta, space, model, infer)
    template, hwp, metrics = space.template, out.hw, out.metrics
    layer_cycles = metrics.cycles
    if hybrid is not None:
        residual = jax.vmap(lambda layer, m: hybrid.log_residual(template, layer, hwp, m))(
            space.layers, out.mappings)
        layer_cycles = layer_cycles * jnp.exp(residual)
    cycles = (layer_cycles * space.counts).sum()
    energy_pj = (metrics.energy_pj * space.counts).sum()
    if totals is not None:
        cycles, energy_pj = totals(cycles, energy_pj, layer_cycles, metrics.energy_pj, hwp)
    excess = (metrics.overflow + metrics.fanout_excess).sum()
    for field, log_max in limits:
        excess = excess + jnp.maximum(jnp.log(getattr(hwp, field)) - log_max, 0.0)
    if area_budget_mm2 is not None:
        excess = excess + area_excess(template, hwp, area_budget_mm2)
    return jnp.log(cycles) + jnp.log(energy_pj) + penalty * excess, (cycles, energy_pj)


def edp_loss(theta: RelaxedPoint, space: RelaxSpace, penalty: float = 10.0,
             area_budget_mm2: float | None = None) -> Any:
    """`network_loss` on the plain analytic model: log EDP plus ``penalty`` times overflow,
    fan-out excess and (with a budget) area excess."""
    return network_loss(theta, space, penalty, area_budget_mm2=area_budget_mm2)[0]


edp_loss_and_grad = fast_jit(jax.value_and_grad(edp_loss),
                             static_argnames=("penalty", "area_budget_mm2"))
"""Jitted ``(loss, d loss / d theta)`` of `edp_loss`, compiled with the model's XLA options."""

evaluate_jit = fast_jit(evaluate)
"""Jitted `evaluate`."""


# --------------------------------------------------------------------------- initialization
def _logit(p: Any) -> Any:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return np.log(p) - np.log1p(-p)


def from_mappings(space: RelaxSpace, mappings: Sequence[Mapping], *, softness: float = _EPS,
                  order_logit: float = 30.0, stage_logit: float | None = None,
                  hw: Any = None) -> RelaxedPoint:
    """The relaxed point of discrete mappings: factor logits ``log(share + softness)`` (the
    default decodes to the mappings to float precision; a search starts softer, so that
    gradients still move every slot), the mappings' own orders as the learned ones, ahead of
    the fixed candidates by `order_logit`, and their own stages (or `stage_logit`
    everywhere). In free mode the hardware is `hw` (default: the space's base)."""
    if len(mappings) != space.num_layers:
        raise ConfigError(f"relax: {len(mappings)} mappings for {space.num_layers} layers")
    t_mask, s_mask = space.template.temporal_mask, space.template.spatial_mask
    log_dims = np.log(np.asarray(space.layers.dims, np.float64))               # [B, 7]
    lt = np.log(np.stack([m.temporal for m in mappings]).astype(np.float64))   # [B, L, 7]
    ls = np.log(np.stack([m.spatial for m in mappings]).astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        ft = np.where(log_dims[:, None] > 0, lt / log_dims[:, None], 0.0)
        fs = np.where(log_dims[:, None] > 0, ls / log_dims[:, None], 0.0)
    t_logits = np.where(t_mask, np.log(ft + softness), 0.0)
    s_logits = np.where(s_mask, np.log(fs + softness), 0.0)
    n_layers, n_levels = lt.shape[:2]
    order_logits = np.zeros((n_layers, n_levels, space.num_candidates), np.float32)
    order_logits[..., 0] = order_logit
    if stage_logit is None:
        stages = np.stack([m.stages for m in mappings]).astype(np.float64)
        stage_logits = _logit((stages - 1.0) / (MAX_STAGES - 1.0)).astype(np.float32)
    else:
        stage_logits = np.full((n_layers, n_levels), stage_logit, np.float32)
    maps = RelaxedMapping(
        temporal_logits=t_logits.astype(np.float32), spatial_logits=s_logits.astype(np.float32),
        order_logits=order_logits,
        order_scores=np.stack([order_scores(m) for m in mappings]),
        stage_logits=stage_logits)
    if hw is not None and space.hw_mode == "free":
        return RelaxedPoint(mappings=maps, hw=RelaxedHardware.of(hw))
    return RelaxedPoint(mappings=maps, hw=_hw_point(space))


def order_scores(mapping: Mapping) -> np.ndarray:
    """Learned-order scores ``[level, dim]`` that decode to the mapping's own orders."""
    return order_rank(mapping.innermost_first_order()).astype(np.float32)


def _hw_point(space: RelaxSpace) -> RelaxedHardware | None:
    if space.hw_mode != "free":
        return None
    return RelaxedHardware.of(space.base)


def init_random(key: Any, space: RelaxSpace, scale: float = 1.0,
                stages: float = 2.0) -> RelaxedPoint:
    """Random logits (normal, `scale`), uniform order weights, random learned orders,
    `stages` everywhere."""
    n = space.template.num_levels
    k1, k2, k3 = jax.random.split(key, 3)
    shape = (space.num_layers, n, len(DIMS))
    stage = float(_logit((stages - 1.0) / (MAX_STAGES - 1.0)))
    mappings = RelaxedMapping(
        temporal_logits=scale * jax.random.normal(k1, shape),
        spatial_logits=scale * jax.random.normal(k2, shape),
        order_logits=jnp.zeros((space.num_layers, n, space.num_candidates), jnp.float32),
        order_scores=jax.random.normal(k3, shape),
        stage_logits=jnp.full((space.num_layers, n), stage, jnp.float32),
    )
    return RelaxedPoint(mappings=mappings, hw=_hw_point(space))


def rounded_up_hardware(hw: HardwareConfig, pe_rows: float, pe_cols: float, sp_kb: float,
                        acc_kb: float, sram_step_kb: float = 1.0, **fields: Any
                        ) -> HardwareConfig:
    """`hw` with the smallest buildable sizes that hold inferred (continuous) ones: PE dims
    rounded up, then `accel.buildable.buildable_hardware` (Gemmini: the next sizes its
    generator builds; other templates: buffers up to whole `sram_step_kb` steps); `fields`
    replace others."""
    return buildable_hardware(hw, sram_step_kb, pe_rows=max(1, math.ceil(float(pe_rows) - 1e-4)),
                              pe_cols=max(1, math.ceil(float(pe_cols) - 1e-4)),
                              sp_kb=max(float(sp_kb), 1e-9), acc_kb=max(float(acc_kb), 1e-9),
                              **fields)


def min_hw(hw: HardwareConfig, layers: Sequence[Layer], mappings: Sequence[Mapping]
           ) -> HardwareConfig:
    """The smallest `hw`-like config (PE dims and KiB rounded up) holding every mapping.

    DOSA's ``min_hw`` with ``grad=False`` (hard max, ``ceil``), for discrete mappings.
    """
    from perfmodels.analytic import stack_layers, stack_mappings
    template = hw.template_spec
    hwp = infer_hw(template, hw.to_params(), stack_layers(layers), stack_mappings(mappings), 0.0)
    return rounded_up_hardware(hw, hwp.pe_rows, hwp.pe_cols, hwp.sp_kb, hwp.acc_kb,
                               name=f"min_hw({hw.name})")