"""DOSA's differentiable objective and its Adam descent (`baco.search.dosa`): raw tiling
factors below DRAM, max-normalized, with DRAM's derived; EDP on the plain analytic model of
the ``min_hw`` hardware, plus validity, PE-bound and area penalties."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from accel.arch import HardwareConfig
from baco.search.descent import all_finite, scan_starts, where_tree
from perfmodels import relax
from perfmodels.accesses import LayerArrays, MappingArrays
from perfmodels.analytic import evaluate as model_evaluate
from perfmodels.analytic import fast_jit, stack_layers
from perfmodels.energy import area_excess
from workloads.layer import Layer

__all__ = ["Problem", "Static", "build_problem", "descend"]


class Problem(NamedTuple):
    """The network as arrays (a pytree; the template rides along as a static argument)."""

    layers: LayerArrays
    counts: Any          # [B]
    norm: Any            # [7] max-normalization of the factors
    t_mask: Any          # [L-1, 7] temporal slots below DRAM
    s_mask: Any          # [L-1, 7] spatial slots below DRAM
    base: Any            # HwParams


class Static(NamedTuple):
    """The descent's settings (a static argument of `descend`)."""

    template: Any
    penalty: float
    max_pe_dim: float
    learning_rate: float
    round_steps: int
    area_budget_mm2: float | None = None


def build_problem(hw: HardwareConfig, layers: Sequence[Layer], counts: np.ndarray
                  ) -> tuple[Problem, np.ndarray]:
    """The network's `Problem` on `hw`'s template, and its dims ``[layer, dim]`` (RSPQCKN),
    whose largest per dim normalize the factors."""
    template_spec = hw.template_spec
    dims = np.array([[getattr(x, d) for d in ("R", "S", "P", "Q", "C", "K", "N")]
                     for x in layers], np.float64)
    prob = Problem(layers=stack_layers(layers), counts=counts.astype(np.float32),
                   norm=np.maximum(dims.max(0), 1.0).astype(np.float32),
                   t_mask=template_spec.temporal_mask[:-1], s_mask=template_spec.spatial_mask[:-1],
                   base=hw.to_params())
    return prob, dims


def _decode(params: Any, orders: Any, stages: Any, prob: Problem) -> tuple[MappingArrays, Any]:
    """Model inputs from raw factors; and the validity penalty Σ relu(1 - f)^2."""
    ft = jnp.where(prob.t_mask, params["t"] * prob.norm, 1.0)            # [B, L-1, 7]
    fs = jnp.where(prob.s_mask, params["s"] * prob.norm, 1.0)
    inner = jnp.prod(ft * fs, axis=1)                                      # [B, 7]
    top = prob.layers.dims / inner
    temporal = jnp.concatenate([ft, top[:, None]], axis=1)
    spatial = jnp.concatenate([fs, jnp.ones_like(top)[:, None]], axis=1)
    invalid = (jnp.square(jnp.maximum(1.0 - temporal, 0.0)).sum()
               + jnp.square(jnp.maximum(1.0 - spatial, 0.0)).sum())
    maps = MappingArrays(
        log_temporal=jnp.log(jnp.maximum(temporal, 1e-6)),
        log_spatial=jnp.log(jnp.maximum(spatial, 1e-6)),
        rank=orders, order_weights=jnp.ones(orders.shape[:-1], jnp.float32), stages=stages)
    return maps, invalid


def _loss(params: Any, orders: Any, stages: Any, ref: Any, prob: Problem, static: Static
          ) -> Any:
    maps, invalid = _decode(params, orders, stages, prob)
    template = static.template
    hwp = relax.infer_hw(template, prob.base, prob.layers, maps, 0.0)
    metrics = jax.vmap(lambda layer, m: model_evaluate(template, layer, hwp, m))(
        prob.layers, maps)
    edp = ((metrics.cycles * prob.counts).sum() * (metrics.energy_pj * prob.counts).sum()) / ref
    pe_excess = (jnp.square(jnp.maximum(hwp.pe_rows - static.max_pe_dim, 0.0))
                 + jnp.square(jnp.maximum(hwp.pe_cols - static.max_pe_dim, 0.0)))
    if static.area_budget_mm2 is not None:
        pe_excess = pe_excess + area_excess(template, hwp, static.area_budget_mm2)
    return edp + jax.lax.stop_gradient(jnp.abs(edp)) * (invalid + static.penalty * pe_excess)


@functools.partial(fast_jit, static_argnames=("static",))
def descend(params: Any, opt_state: Any, orders: Any, stages: Any, refs: Any, n_steps: Any,
            prob: Problem, static: Static) -> tuple[Any, Any, Any]:
    """Up to ``static.round_steps`` Adam steps of every start (`scan_starts`; ``n_steps``
    each). A start whose loss turns non-finite keeps its last good point (finite flag
    returned)."""
    opt = optax.adam(static.learning_rate)
    grad_fn = jax.value_and_grad(_loss)

    def one(carry: Any, row: Any, active: Any) -> tuple[Any, Any]:
        p, st = carry
        loss, g = grad_fn(p, *row, prob, static)
        updates, new_st = opt.update(g, st, p)
        new_p = optax.apply_updates(p, updates)
        ok = jnp.isfinite(loss) & all_finite(new_p)
        go = active & ok
        return (where_tree(go, new_p, p), where_tree(go, new_st, st)), ok

    (params, opt_state), finite = scan_starts(one, (params, opt_state), (orders, stages, refs),
                                              n_steps, static.round_steps)
    return params, opt_state, finite
