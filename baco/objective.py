"""BACO's relaxed objective: the whole network's log EDP plus penalties, on the relaxed
mappings and hardware (`perfmodels.relax`), with the fusion terms of ``codesign.fusion`` and,
for the hybrid predictors, the surrogate's learned residual."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from baco.config import CodesignConfig
from perfmodels import aware as aware_model
from perfmodels import relax

__all__ = ["FUSE_SOFTNESS", "FusionTerm", "Settings", "exact_residual",
           "fused_totals", "load_predictor", "objective"]


class FusionTerm(NamedTuple):
    """A fusable chain group in the relaxed objective (`baco.fusion.ChainGroup`, static)."""

    uses: tuple[tuple[int, int], ...]   # (unique layer, instances per chain)
    instances: int
    dims: tuple[int, ...]               # perfmodels.fusion.ChainDims
    softmax: bool = False               # the first GEMM's softmax passes (ChainEpilogue)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["penalty", "log_max_pe", "log_max_sp_kb", "log_max_acc_kb", "log_max_dram_bw",
                 "learning_rate", "decay_steps", "lr_final_fraction", "area_budget_mm2"],
    meta_fields=["aware", "round_steps", "objective", "fusion"])
@dataclasses.dataclass(frozen=True)
class Settings:
    """The descent's settings, a pytree: its numbers are traced leaves, so a run with another
    learning rate, penalty, limit or area budget reuses the compiled step (also from the
    persistent cache); the rest (the model, the step count, the fusion terms, and whether
    there is an area budget at all) is static, and jit compiles again when it changes."""

    aware: bool
    penalty: float
    log_max_pe: float
    log_max_sp_kb: float
    log_max_acc_kb: float
    log_max_dram_bw: float
    learning_rate: float
    decay_steps: int
    lr_final_fraction: float
    round_steps: int
    objective: Callable[..., Any]
    area_budget_mm2: float | None = None
    fusion: tuple[FusionTerm, ...] = ()


FUSE_SOFTNESS = 0.1
"""Width, in log EDP, of the soft fuse-or-not decision of the relaxed objective."""


def fused_totals(cycles: Any, energy_pj: Any, layer_cycles: Any, layer_pj: Any, hwp: Any,
                 template: Any, settings: Settings) -> tuple[Any, Any]:
    """Network totals with each fusable chain fused to the degree that pays: per group (in
    order, as `baco.fusion.FusionPlan.decide`), the chain's relaxed cost on the relaxed
    hardware (`perfmodels.fusion.chain_metrics` with relaxed trips, tiles by
    `perfmodels.fusion.relaxed_chain_tiles`) replaces its layers' instances with weight
    ``sigmoid(log EDP drop / FUSE_SOFTNESS)``; so the gradient sees what fusing would gain
    (an accumulator large enough to keep E, for one) and what the layers apart cost."""
    from perfmodels.fusion import ChainEpilogue, chain_metrics, relaxed_chain_tiles, relaxed_trips

    for term in settings.fusion:
        tiles, fits = relaxed_chain_tiles(hwp, term.dims)
        fused_l, fused_e, _ = chain_metrics(template, hwp, term.dims, tiles, relaxed_trips,
                                            settings.aware,
                                            epilogue=ChainEpilogue(softmax=term.softmax))
        fits = jnp.maximum(fits, 1e-6)      # where nothing fits, fusing costs ~1e6x
        fused_l, fused_e = fused_l / fits, fused_e / fits
        saved_l = term.instances * (sum(k * layer_cycles[i] for i, k in term.uses) - fused_l)
        saved_e = term.instances * (sum(k * layer_pj[i] for i, k in term.uses) - fused_e)
        gain = (jnp.log(cycles) + jnp.log(energy_pj) - jnp.log(cycles - saved_l)
                - jnp.log(energy_pj - saved_e))
        w = jax.nn.sigmoid(gain / FUSE_SOFTNESS)
        cycles = cycles - w * saved_l
        energy_pj = energy_pj - w * saved_e
    return cycles, energy_pj


def objective(theta: relax.RelaxedPoint, space: relax.RelaxSpace, settings: Settings,
              hybrid: Any = None) -> tuple[Any, tuple[Any, Any]]:
    """``log(cycles) + log(pJ)`` of the whole network plus penalties, and ``(cycles, pJ)``:
    `perfmodels.relax.network_loss` on the instruction-aware model if ``settings.aware``.

    The hardware: fixed; inferred from the tiles (min_hw); or the free variables grown to
    hold the tiles (free), padded rows included when instruction-aware, so a tile that
    outgrows the array or a buffer pays for the larger one rather than a penalty. Penalties
    (log excess, times ``settings.penalty``): buffer overflow and fan-out beyond the hardware
    (fixed mode), PE dims beyond ``max_pe_dim``, buffers beyond ``max_sp_kb``/``max_acc_kb``,
    DRAM bandwidth beyond ``max_dram_bw_words``, and the hardware's area beyond
    ``area_budget_mm2``. With `hybrid` (`perfmodels.atformer.Hybrid`), every layer's cycles
    are multiplied by the surrogate's learned residual; with ``settings.fusion``, the totals
    fuse chains (`fused_totals`).
    """
    template = space.template
    totals = None
    if settings.fusion:
        def totals(cycles: Any, energy_pj: Any, layer_cycles: Any, layer_pj: Any, hwp: Any
                   ) -> tuple[Any, Any]:
            return fused_totals(cycles, energy_pj, layer_cycles, layer_pj, hwp, template,
                                settings)
    limits = (("pe_rows", settings.log_max_pe), ("pe_cols", settings.log_max_pe),
              ("sp_kb", settings.log_max_sp_kb), ("acc_kb", settings.log_max_acc_kb),
              ("dram_bw_words", settings.log_max_dram_bw))
    return relax.network_loss(
        theta, space, settings.penalty, area_budget_mm2=settings.area_budget_mm2,
        limits=limits, model=functools.partial(aware_model.evaluate, aware=settings.aware),
        infer=functools.partial(aware_model.infer_hw, aware=settings.aware), hybrid=hybrid,
        totals=totals)


def exact_residual(hybrid: Any) -> Any:
    """The exact scores' correction of a hybrid predictor (None: the model's cycles)."""
    return None if hybrid is None else hybrid.residual_grid


def load_predictor(config: CodesignConfig, template: Any) -> Any:
    """The `perfmodels.atformer.Hybrid` of a ``hybrid`` config, or of a ``sim_hybrid`` one's
    ``model`` (its starting point); None for ``analytic``."""
    if config.predictor == "analytic" or not config.model:
        return None
    from perfmodels.atformer import load_hybrid
    hybrid = load_hybrid(config.model)
    hybrid.check_template(template)
    return hybrid
