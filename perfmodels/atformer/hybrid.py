"""The hybrid model: analytical cycles x exp(learned residual), differentiable end to end.

The residual is the trained `Surrogate`'s ``offset + ATFormer(tokens)``, the tokens a pure JAX
function of the same `LayerArrays` / `HwParams` / `MappingArrays` the analytical model takes
(`perfmodels.atformer.features.tokens`), so the hybrid scores a relaxed point from
`perfmodels.relax.decode` (and gives gradients) exactly as it scores a discrete one. Energy is
the analytical model's. The residual includes the surrogate's MAPE calibration factor
(`perfmodels.atformer.train.mape_scale`), so every consumer predicts the same cycles.

>>> import jax, jax.numpy as jnp
>>> from accel.arch import HardwareConfig
>>> from accel.mapping import Mapping
>>> from perfmodels.analytic import pack_layer, pack_mapping
>>> from perfmodels.atformer.train import Surrogate, TrainConfig, Stats, init_params
>>> from perfmodels.atformer.model import ModelConfig
>>> from perfmodels.atformer.features import NUM_FEATURES
>>> from workloads.layer import Layer
>>> cfg = TrainConfig(model=ModelConfig(width=8, heads=2, layers=1, mlp_width=8))
>>> params = init_params(cfg.model, jax.random.PRNGKey(0), 1, 4)
>>> stats = Stats(jnp.zeros(NUM_FEATURES), jnp.ones(NUM_FEATURES), jnp.float32(0.5))
>>> hybrid = Hybrid(Surrogate(cfg, params, stats))
>>> hw = HardwareConfig.preset("gemmini_default")
>>> m = Mapping.from_timeloop("L3[WIO] P56 Q56 - L2[WI] N1 K16X - L1[O] K4 C4 C16X - L0[W] N1")
>>> layer = pack_layer(Layer.conv2d(P=56, Q=56, C=64, K=64))
>>> out = hybrid.evaluate(hw.template_spec, layer, hw.to_params(), pack_mapping(m))
>>> bool(out.cycles > 0)
True
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from accel.arch import HardwareConfig, HwParams, Template
from accel.mapping import Mapping
from perfmodels.accesses import LayerArrays, MappingArrays
from perfmodels.analytic import Metrics, fast_jit
from perfmodels.atformer import train as _train
from perfmodels.atformer.features import Tokens, tokens, tokens_of
from workloads.errors import ConfigError
from workloads.layer import Layer

__all__ = ["Hybrid", "load_hybrid"]


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True, eq=False)
class Hybrid:
    """A trained surrogate used as a cycle correction.

    A pytree: its parameters and feature statistics are traced leaves and only the network's
    shape (`ModelConfig`) and the template's name are static, so a jitted function given a
    refitted hybrid of the same shape reuses its compiled code."""

    surrogate: _train.Surrogate

    def tree_flatten(self) -> tuple[tuple[Any, Any], tuple[Any, str]]:
        s = self.surrogate
        return (s.params, s.stats), (s.config.model, s.template)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, str], children: tuple[Any, Any]) -> Hybrid:
        """A hybrid of the same shape: what traced functions read (the model's shape, the
        template, the leaves), not how it was trained."""
        model, template = aux
        params, stats = children
        return cls(_train.Surrogate(_train.TrainConfig(model=model), params, stats, template))

    def log_residual_tokens(self, tok: Tokens) -> Any:
        """``log(hybrid / analytic)`` from tokens ``[..., T, F]`` (pure)."""
        s = self.surrogate
        return _train.predict_log(s.config.model, s.params, s.stats, tok) - tok.log_cycles

    def log_residual(self, template: Template, layer: LayerArrays, hwp: HwParams,
                     m: MappingArrays) -> Any:
        """``log(hybrid / analytic)`` of one point (pure; jit/vmap/grad-safe)."""
        self.check_template(template)
        tok, _ = tokens(template, layer, hwp, m)
        return self.log_residual_tokens(Tokens(tok.x[None], tok.weight[None],
                                               tok.log_cycles[None]))[0]

    def evaluate(self, template: Template, layer: LayerArrays, hwp: HwParams,
                 m: MappingArrays, base: Metrics | None = None) -> Metrics:
        """`base` (default: `perfmodels.analytic.evaluate` of the point, e.g. pass the
        instruction-aware one) with its cycles multiplied by exp(residual)."""
        self.check_template(template)
        tok, plain = tokens(template, layer, hwp, m)
        out = plain if base is None else base
        residual = self.log_residual_tokens(Tokens(tok.x[None], tok.weight[None],
                                                   tok.log_cycles[None]))[0]
        cycles = out.cycles * jnp.exp(residual)
        return out._replace(cycles=cycles, edp=cycles * out.energy_pj)

    def check_template(self, template: Template) -> None:
        if template.name != self.surrogate.template:
            raise ConfigError(f"hybrid: the surrogate was trained on template "
                              f"{self.surrogate.template!r}, not {template.name!r}")

    def predict(self, layers: Sequence[Layer], hws: HardwareConfig | Sequence[HardwareConfig],
                mappings: Sequence[Mapping]) -> np.ndarray:
        """Hybrid cycles of discrete points (numpy)."""
        return self.surrogate.predict_tokens(tokens_of(layers, hws, mappings))

    def residual_grid(self, template: Template, layers: LayerArrays, hwps: HwParams,
                      maps: MappingArrays) -> np.ndarray:
        """``[design, layer]`` log residuals of many designs (hardware ``[D]``, mappings
        ``[D, B]``) over the same layers ``[B]``."""
        return np.asarray(_residual_grid(self, template, layers, hwps, maps))


@functools.partial(fast_jit, static_argnums=(1,))
def _residual_grid(hybrid: Hybrid, template: Template, layers: LayerArrays, hwps: HwParams,
                   maps: MappingArrays) -> Any:
    per_layer = jax.vmap(lambda hwp, layer, m: hybrid.log_residual(template, layer, hwp, m),
                         in_axes=(None, 0, 0))
    return jax.vmap(per_layer, in_axes=(0, None, 0))(hwps, layers, maps)


def load_hybrid(path: str | os.PathLike) -> Hybrid:
    """The hybrid model of a checkpoint written by `perfmodels.atformer.train.save`."""
    return Hybrid(_train.load(path))
