"""Token features of one (layer, mapping, hardware) point for the ATFormer surrogate.

A point becomes a fixed-length sequence of tokens, one per *loop slot* the template allows
(a temporal loop of each dim at each level, a spatial fan-out where the template has one; for
Gemmini 21 + 2 + the two P/Q register loops = 25) plus one *global* token, the operator
embedding. The sequence length depends only on the template, so batches stack without padding;
a slot whose loop does not exist (factor 1) is *masked* through its weight
``gate = clip(log2 f, 0, 1)``: exactly 0 or 1 for a discrete mapping and fractional between
factors 1 and 2 for a relaxed one, so the same function serves `perfmodels.relax.decode`'s
continuous arrays and discrete `accel.Mapping` s (one formula in one place).

Every token is ``[statement features | global features]`` (the operator embedding is
concatenated to each statement, as ATFormer concatenates it); the global token has a zero
statement part and its own flag. All quantities are log2 (``log2(1 + x)`` for counts that may
be 0) so that the model sees well-scaled numbers; the trainer standardises them.

Statement part (`STATEMENT_FEATURES`, one loop slot ``(level, dim, spatial?)``):
  level one-hot, dim one-hot, spatial flag; log2 factor; its position in the level's loop
  order (0 innermost, 1 outermost; mixed over candidate orders by their weights); the tensors
  it indexes (W, I, O); the footprint it implies (log2 words of W, I, O of the tile the loop
  sweeps: everything below it in its level and every level below); that footprint over the
  level's capacity; the level's analytic traffic (log2 fills + reads + updates of W, I, O), its
  port cycles and their ratio to the compute cycles; the gate.
Global part (`GLOBAL_FEATURES`): operator (GEMM-like: R=S=Q=1; grouped), log2 dims, strides,
  dilations, MACs; hardware (log2 PE rows/cols, scratchpad and accumulator KiB, DRAM words per
  cycle); the analytic model's log2 cycles, compute cycles, per-level port cycles and
  footprints (KiB), the cycles/compute ratio, log2 PE utilisation of each spatial level; the
  compute cycles with spatial factors beyond the array folded into time, the log2 excess fan-out,
  the log2 count of outermost-level tiles (kernel calls on Gemmini) and MACs per tile.

>>> from accel.arch import HardwareConfig
>>> from accel.mapping import Mapping
>>> from workloads.layer import Layer
>>> hw = HardwareConfig.preset("gemmini_default")
>>> m = Mapping.from_timeloop("L3[WIO] P56 Q56 - L2[WI] N1 K16X - L1[O] K4 C4 C16X - L0[W] N1")
>>> tok = tokens_of([Layer.conv2d(P=56, Q=56, C=64, K=64)], hw, [m])
>>> tok.x.shape[1:] == (num_tokens(hw.template_spec), NUM_FEATURES)
True
>>> int(tok.weight[0].sum())    # the global token + P56, Q56, K16X, K4, C4, C16X
7
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig, HwParams, Template, level_arrays, stack_hw, tensor_bits
from accel.mapping import Mapping, tile_kb, tile_words
from perfmodels.accesses import RELEVANT, LayerArrays, MappingArrays, gate, inside_mask
from perfmodels.analytic import Metrics, bucket, evaluate, fast_jit, stack_layers, stack_mappings
from workloads.errors import ConfigError
from workloads.layer import Layer

__all__ = ["GLOBAL_FEATURES", "NUM_FEATURES", "STATEMENT_FEATURES", "Tokens", "num_tokens",
           "slots", "tokens", "tokens_batch", "tokens_of"]

NUM_DIMS = 7
MAX_LEVELS = 4
"""Level one-hots have this many entries (templates with more levels are refused)."""
STATEMENT_FEATURES = MAX_LEVELS + NUM_DIMS + 1 + 1 + 1 + 3 + 3 + 1 + 3 + 1 + 1 + 1
GLOBAL_FEATURES = 1 + 2 + NUM_DIMS + 2 + 2 + 1 + 5 + 2 + MAX_LEVELS + MAX_LEVELS + 1 + 2 + 4
NUM_FEATURES = STATEMENT_FEATURES + GLOBAL_FEATURES
_R, _S, _P, _Q, _C, _K, _N = range(NUM_DIMS)


class Tokens(NamedTuple):
    """A batch (or one point) of token sequences.

    ``x``: ``[..., token, feature]`` raw features (unnormalised); ``weight``: ``[..., token]``
    in [0, 1], 0 for a masked slot (a loop of factor 1), 1 for the global token; ``log_cycles``:
    ``[...]`` natural log of the analytic model's cycles (the hybrid's base).
    """

    x: Any
    weight: Any
    log_cycles: Any


@functools.cache
def slots(template: Template) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Static ``(level, dim, spatial)`` of every loop slot the template allows, in a fixed
    order (temporal slots level by level, then spatial ones)."""
    if template.num_levels > MAX_LEVELS:
        raise ConfigError(f"atformer: template {template.name} has {template.num_levels} "
                          f"levels; the features support at most {MAX_LEVELS}")
    t_lv, t_dim = np.nonzero(np.asarray(template.temporal_mask))
    s_lv, s_dim = np.nonzero(np.asarray(template.spatial_mask))
    level = np.concatenate([t_lv, s_lv]).astype(np.int32)
    dim = np.concatenate([t_dim, s_dim]).astype(np.int32)
    spatial = np.concatenate([np.zeros(len(t_lv)), np.ones(len(s_lv))]).astype(np.float32)
    return level, dim, spatial


def num_tokens(template: Template) -> int:
    """Sequence length for this template: its loop slots plus the global token."""
    return len(slots(template)[0]) + 1


def _lg(x: Any) -> Any:
    """``log2(1 + x)`` for non-negative counts (0 stays 0, finite gradient everywhere)."""
    return jnp.log2(1.0 + jnp.maximum(x, 0.0))


def _log2_pos(x: Any, floor: float = 1e-6) -> Any:
    return jnp.log2(jnp.maximum(x, floor))


def tokens(template: Template, layer: LayerArrays, hwp: HwParams, m: MappingArrays
           ) -> tuple[Tokens, Metrics]:
    """Tokens of one point and the analytic metrics they were computed from (pure; jit/vmap/
    grad-safe in every float input; `template` static)."""
    level, dim, spatial = slots(template)
    n_lv = template.num_levels
    lv = level_arrays(template, hwp)
    out = evaluate(template, layer, hwp, m)
    lt, ls = m.log_temporal, m.log_spatial
    log_f = jnp.where(spatial > 0, ls[level, dim], lt[level, dim])             # [T]
    weight = gate(log_f)

    # Position in the level's order (0 innermost .. 1 outermost), mixed over candidates.
    pos = (m.order_weights[..., None] * m.rank).sum(1) / (NUM_DIMS - 1.0)      # [L, 7]
    position = jnp.where(spatial > 0, 0.0, pos[level, dim])

    # Footprint swept by each loop: all factors of lower levels, the level's spatial fan-out
    # (inside its temporal loops), and the level's temporal loops at or inside this one.
    below = jnp.concatenate([jnp.zeros((1, NUM_DIMS)), jnp.cumsum(lt + ls, axis=0)[:-1]])
    inside = (m.order_weights[..., None, None] * inside_mask(m.rank)).sum(1)   # [L, e, d]
    swept_t = lt[level] * inside[level, :, dim]                                 # [T, 7]
    own = jnp.eye(NUM_DIMS)[dim]                                                # [T, 7]
    log_ext_t = below[level] + ls[level] + swept_t                              # [T, 7]
    log_ext_s = below[level] + own * ls[level]                                  # [T, 7]
    log_ext = jnp.where(spatial[:, None] > 0, log_ext_s, log_ext_t)
    words = tile_words(log_ext[:, None, :], layer.stride, layer.dilation, jnp)[:, 0]   # [T, 3]
    keeps = jnp.asarray(template.keeps_mask)[level]                             # [T, 3]
    kb = tile_kb(words, keeps, tensor_bits(hwp), jnp)
    cap = lv.capacity_kb[level]
    fill_ratio = jnp.where(jnp.isfinite(cap), _log2_pos(kb) - _log2_pos(
        jnp.where(jnp.isfinite(cap), cap, 1.0)), 0.0)

    traffic = out.fills + out.reads + out.updates                              # [L, 3]
    port = out.port_cycles                                                      # [L]
    compute = out.compute_cycles
    statement = jnp.concatenate([
        jax.nn.one_hot(level, MAX_LEVELS), jax.nn.one_hot(dim, NUM_DIMS), spatial[:, None],
        (log_f / jnp.log(2.0))[:, None], position[:, None],
        jnp.asarray(RELEVANT.T)[dim],
        jnp.log2(words), fill_ratio[:, None],
        _lg(traffic[level]), _lg(port[level])[:, None],
        (_lg(port[level]) - _lg(compute))[:, None], weight[:, None],
    ], axis=-1)

    dims = layer.dims
    fan = jnp.exp(ls.sum(-1))                                                   # [L]
    limit = jnp.where(jnp.isfinite(lv.fanout), lv.fanout, 1.0)
    spatial_levels = np.flatnonzero(np.asarray(template.spatial_mask).any(-1))[:2]
    util = jnp.log2(fan[spatial_levels] / limit[spatial_levels])
    util = jnp.concatenate([util, jnp.zeros(2 - len(spatial_levels))])
    # The array as it really runs the mapping: fan-out beyond the hardware's is folded into
    # time (compute at the usable fan-out), and the outermost level's loops count the tiles
    # the program walks (each a kernel call on Gemmini, with a fixed cost).
    log2_fan = ls.sum(-1) / jnp.log(2.0)
    log2_limit = jnp.log2(limit)
    log2_used = jnp.minimum(log2_fan, jnp.where(jnp.isfinite(lv.fanout), log2_limit, log2_fan))
    log2_tiles = lt[n_lv - 1].sum() / jnp.log(2.0)
    log2_macs = jnp.log2(jnp.maximum(out.macs, 1.0))
    folded = jnp.stack([log2_macs - log2_used.sum(), (log2_fan - log2_used).sum(), log2_tiles,
                        log2_macs - log2_tiles])
    pad = MAX_LEVELS - n_lv
    foot = jnp.concatenate([_lg(out.footprint_kb), jnp.zeros(pad)])
    ports = jnp.concatenate([_lg(port), jnp.zeros(pad)])
    gemm_like = ((dims[_R] == 1) & (dims[_S] == 1) & (dims[_Q] == 1)).astype(jnp.float32)
    global_part = jnp.concatenate([
        jnp.ones(1), gemm_like[None], (layer.groups > 1).astype(jnp.float32)[None],
        jnp.log2(dims), jnp.log2(layer.stride), jnp.log2(layer.dilation),
        _lg(out.macs)[None],
        _log2_pos(jnp.stack([hwp.pe_rows, hwp.pe_cols, hwp.sp_kb, hwp.acc_kb,
                             hwp.dram_bw_words])),
        _lg(out.cycles)[None], _lg(compute)[None], ports, foot,
        (_lg(out.cycles) - _lg(compute))[None], util, folded,
    ])
    n_slots = len(level)
    x_slots = jnp.concatenate([statement, jnp.broadcast_to(
        global_part.at[0].set(0.0), (n_slots, GLOBAL_FEATURES))], axis=-1)
    x_global = jnp.concatenate([jnp.zeros(STATEMENT_FEATURES), global_part])[None]
    x = jnp.concatenate([x_global, x_slots])
    w = jnp.concatenate([jnp.ones(1), weight])
    return Tokens(x=x, weight=w, log_cycles=jnp.log(out.cycles)), out


@functools.partial(fast_jit, static_argnums=0)
def tokens_batch(template: Template, layers: LayerArrays, hwps: HwParams,
                 mappings: MappingArrays) -> Tokens:
    """`tokens` over a leading batch axis (every input batched)."""
    return jax.vmap(lambda l, h, m: tokens(template, l, h, m)[0])(layers, hwps, mappings)


def tokens_of(layers: Sequence[Layer], hws: HardwareConfig | Sequence[HardwareConfig],
              mappings: Sequence[Mapping], chunk: int = 4096) -> Tokens:
    """Tokens of discrete points (numpy arrays), packed exactly as `perfmodels.exact` packs
    them; computed in padded chunks so that batch sizes share compiled code."""
    if isinstance(hws, HardwareConfig):
        hws = [hws] * len(layers)
    if not len(layers) == len(hws) == len(mappings) or not layers:
        raise ConfigError(f"atformer: got {len(layers)} layers, {len(hws)} hardware configs and "
                          f"{len(mappings)} mappings; they must match and be non-empty")
    templates = {hw.template_spec for hw in hws}
    if len(templates) != 1:
        raise ConfigError("atformer: all hardware configs must share one template")
    template = templates.pop()
    def pad(items: Sequence[Any], start: int, stop: int) -> list[Any]:
        items = list(items[start:stop])
        return items + [items[-1]] * (bucket(stop - start) - len(items))

    parts = []
    for start in range(0, len(layers), chunk):
        stop = min(start + chunk, len(layers))
        out = tokens_batch(template, stack_layers(pad(layers, start, stop)),
                           stack_hw(pad(hws, start, stop)),
                           stack_mappings(pad(mappings, start, stop)))
        parts.append(jax.tree_util.tree_map(lambda a, n=stop - start: np.asarray(a)[:n], out))
    return Tokens(*(np.concatenate(p) for p in zip(*parts)))
