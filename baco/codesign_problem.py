"""What one BACO co-design run (`baco.codesign_loop`) searches: the layers and their counts,
the rounder that makes and scores designs, the relaxed space and the descent's settings. The
rounder and the hybrid model are replaced when ``sim_hybrid`` fine-tunes its model, so the parts
of the run read them from here each time."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from baco.config import CodesignConfig
from baco.importance import ImportanceConfig, ImportanceScheduler
from baco.objective import FusionTerm, Settings, exact_residual, objective
from baco.padding import search_layer
from baco.rounding import Rounder
from perfmodels import relax
from workloads.network import Network

__all__ = ["OWN_ORDER_LOGIT", "TWO_STAGES_LOGIT", "CodesignProblem"]

OWN_ORDER_LOGIT = 2.0
"""A start's own loop orders' logit over the fixed candidates' 0 (weight 0.71 of 4): kept
unless the gradient prefers another (ResNet-50 and BERT at 3,000 samples: 10% and 1.3% lower
simulated EDP than equal weights)."""
TWO_STAGES_LOGIT = float(np.log(1.0 / 3.0) - np.log(2.0 / 3.0))
"""A start's stage logits: they decode to 2 stages."""


class CodesignProblem:
    """The network, base hardware and config of a run, and what they define: the searched
    layers, the `Rounder`, the `relax.RelaxSpace`, the descent's `Settings` and the random key
    every start and refinement round folds its own from. Descent follows `analytic`
    (`baco.objective.objective`), given `hybrid` (a traced argument) when there is one."""

    def __init__(self, net: Network, hw: HardwareConfig, config: CodesignConfig,
                 hybrid: Any, analytic: Callable[..., Any] = objective) -> None:
        self.net = net
        self.config = config
        # The dims searched (`baco.padding`); results carry the network's own layers.
        self.layers = list(net.layers) if config.fusion else [
            search_layer(layer, config.pad_fraction) for layer in net.layers]
        self.counts = np.asarray(net.counts, np.float64)
        self.base_hw = hw
        self.hybrid = hybrid
        rounder_args = {"hw_mode": config.hw_mode, "aware": config.instruction_aware,
                        "max_pe_dim": config.max_pe_dim, "sram_step_kb": config.sram_step_kb,
                        "max_sp_kb": config.max_sp_kb, "max_acc_kb": config.max_acc_kb,
                        "nearest": config.nearest, "area_budget_mm2": config.area_budget_mm2,
                        "max_dram_bw_words": config.max_dram_bw_words}
        if config.fusion:
            from baco.fusion import FusionPlan
            rounder_args["fusion"] = FusionPlan.of(net, aware=config.instruction_aware,
                                                   area_budget_mm2=config.area_budget_mm2)
        self.rounder = Rounder(hw, self.layers, residual=exact_residual(hybrid), **rounder_args)
        self.space = relax.RelaxSpace.create(hw, self.layers, counts=list(net.counts),
                                             hw_mode=config.hw_mode, tau=config.tau)
        big = math.log(1e12)
        self.settings = Settings(
            aware=config.instruction_aware, penalty=config.penalty,
            log_max_pe=math.log(config.max_pe_dim),
            log_max_sp_kb=big if config.max_sp_kb is None else math.log(config.max_sp_kb),
            log_max_acc_kb=big if config.max_acc_kb is None else math.log(config.max_acc_kb),
            log_max_dram_bw=math.log(config.max_dram_bw_words),
            learning_rate=config.learning_rate, decay_steps=config.steps_per_start,
            lr_final_fraction=config.lr_final_fraction,
            round_steps=min(config.round_every, config.steps_per_start),
            objective=analytic,
            area_budget_mm2=config.area_budget_mm2,
            fusion=self._fusion_terms())
        self.key = jax.random.PRNGKey(config.seed)
        imp = config.importance
        self.importance = ImportanceScheduler(
            self.layers, list(net.counts),
            ImportanceConfig(alpha=imp.alpha, beta=imp.beta, window=imp.window,
                             patience=imp.patience))
        """The importance scheduler over the searched layers (`baco.importance`)."""

    def relaxed(self, mappings: Sequence[Mapping], softness: float, hw: HardwareConfig | None
                ) -> relax.RelaxedPoint:
        """A start near `mappings` (`perfmodels.relax.from_mappings`): logits soft enough that
        gradients still move every slot, stages 2, the mappings' own orders ahead of the fixed
        candidates by `OWN_ORDER_LOGIT`."""
        return relax.from_mappings(self.space, mappings, softness=softness,
                                   order_logit=OWN_ORDER_LOGIT, stage_logit=TWO_STAGES_LOGIT,
                                   hw=hw or self.space.base_config)

    def _fusion_terms(self) -> tuple[FusionTerm, ...]:
        """The relaxed objective's fusion terms (none without fusion, or without the
        template's on-chip path)."""
        plan = self.rounder.fusion
        if plan is None or self.base_hw.template_spec.path_area_mm2 is None:
            return ()
        return tuple(FusionTerm(tuple(g.uses.items()), g.instances, tuple(g.dims), g.softmax)
                     for g in plan.groups)

    def use_hybrid(self, hybrid: Any) -> None:
        """Descend and score with `hybrid` from now on (traced, not static: a refit of the
        same shape reuses the compiled descent and scores)."""
        if hybrid is not None and hybrid is not self.hybrid:
            self.hybrid = hybrid
            self.rounder = self.rounder.replace(residual=exact_residual(hybrid))
