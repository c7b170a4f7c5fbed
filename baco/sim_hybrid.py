"""The simulator in the search loop (``codesign.predictor: sim_hybrid``).

The analytic model the descent follows does not take the cycles the emitted programs take on
the simulator (`baco simulate` shows 1.1x-5x per layer for a ResNet-50 design). With
``sim_hybrid`` the search learns that gap as it goes:

1. every ``budget_samples / sim_rounds`` samples, the ``sim_top_k`` best rounded designs the
   search has scored since the last time (its `pool`) are lowered and simulated
   (`baco.yardsticks.simulate_design`: batched, cached per (layer, mapping, hardware));
2. each simulated layer becomes a training row whose label is the simulator's cycles over
   the cycles the search's analytic model (instruction-aware when the search is) gives that
   layer: the ATFormer residual (`perfmodels.atformer`) is fine-tuned on all rows so far,
   warm-started from the last fit (or from ``codesign.model``, a `baco surrogate train`
   folder, when given);
3. descent and every exact score then use analytic x exp(residual) (`Hybrid`), the residual
   shrunk towards 0 where the ensemble disagrees, i.e. away from what was simulated
   (`perfmodels.atformer.train.shrink`);
4. after every simulation round the best *simulated* design so far is the search's best
   (refinement explores around it); when the budget is spent, the pool is simulated once
   more, each layer of the best simulated design gets ``sim_polish`` neighbouring programs
   simulated on its hardware and keeps the one that lowers the simulated network EDP most
   (`SimLearner.polish`), and the final design is the one with the lowest simulated EDP of
   every design simulated during the run.

Designs with a layer whose program passes `SEARCH_MAX_INSTRUCTIONS` are not simulated (nor picked).
Samples: every newly simulated unique layer (a (layer, mapping, hardware) the run has not
simulated before) costs one sample of ``budget_samples`` (`baco.result`); the search keeps
``(sim_top_k + sim_polish + 1)`` x layers samples in reserve for the last round.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import struct

from accel.arch import HardwareConfig
from accel.design import Design, design_of
from accel.lower import padded_layer
from baco.profile import timed
from baco.topk import design_key
from baco.yardsticks import SimCache, cache_key, simulate_design
from perfmodels.atformer import (
    Dataset,
    Hybrid,
    ModelConfig,
    Surrogate,
    TrainConfig,
    tokens_of,
    train_surrogate,
)
from perfmodels.score import network_totals
from workloads.errors import InfeasibleError, TraceError, UnsupportedOpError
from workloads.layer import Layer

__all__ = ["LearnerState", "SimLearner", "SimRecord", "design_key"]

FINE_TUNE = TrainConfig(model=ModelConfig(width=32, heads=2, layers=1, mlp_width=64),
                        epochs=150, batch_size=32, lr=2e-3, lr_final=2e-5, rank_weight=0.0,
                        relative_weight=0.5, patience=40, val_fraction=0.0, ensemble=4)
"""How the residual is fitted each simulation round: a small ensemble (its disagreement is
the uncertainty that shrinks the residual away from the simulated points), all rows used for
fitting (the rows are the designs the search is choosing between; held-out rows would be
designs it then mis-ranks), MAPE in the loss since the round's question is how many cycles,
not which of two is faster."""


SEARCH_MAX_INSTRUCTIONS = 1_000_000
"""A candidate with a layer whose program is longer is not simulated in the search loop (nor
ever picked): about 10 s of lowering and simulating per million instructions on a laptop core.
The judge goes further (`baco.yardsticks.MAX_INSTRUCTIONS`): it simulates one design, not a
round of candidates."""


POLISH_BATCH = 64
"""Neighbours are scored in batches of this size (one compilation)."""


def _score_padded(rounder: Any, designs: list[Design]) -> Any:
    """`rounder.score` of `designs` in fixed-size batches, concatenated."""
    parts = []
    for start in range(0, len(designs), POLISH_BATCH):
        chunk = designs[start:start + POLISH_BATCH]
        out = rounder.score(chunk + [chunk[0]] * (POLISH_BATCH - len(chunk)))
        parts.append(jax.tree_util.tree_map(lambda a, n=len(chunk): np.asarray(a)[:n], out))
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *parts)


@dataclasses.dataclass(frozen=True)
class SimRecord:
    """One simulated design: per layer, the simulator's cycles and pJ and the analytic cycles
    the search's model gave it (before any learned residual)."""

    design: Design
    sim_cycles: np.ndarray
    sim_energy_pj: np.ndarray
    model_cycles: np.ndarray
    sim_edp: float


@struct.dataclass
class LearnerState:
    """What the simulator in the loop has seen, a value: the designs simulated, those that
    could not be (design key -> why), the candidates waiting (model EDP, key, design; best
    first), the fits so far and the residual they give, the keys of the designs simulated,
    and the programs `SimLearner.polish` simulated alone (layer, one-layer design)."""

    records: tuple[SimRecord, ...]
    failed: tuple[tuple[str, str], ...]
    pool: tuple[tuple[float, str, Design], ...]
    fine_tunes: int
    surrogate: Surrogate | None
    simulated: frozenset[str]
    polished: tuple[tuple[int, Design], ...]


class SimLearner:
    """The simulator in the loop: the network, the pool's size, the simulation cache, and pure
    functions of a `LearnerState`."""

    def __init__(self, layers: Sequence[Layer], counts: Sequence[float], *, top_k: int,
                 sram_step_kb: float, seed: int, init: Surrogate | None = None,
                 template: str = "gemmini") -> None:
        self.layers = list(layers)
        self.counts = np.asarray(counts, np.float64)
        self.top_k = top_k
        self.sram_step_kb = sram_step_kb
        self.seed = seed
        self.template = template
        self.init = init
        self.cache = SimCache()             # a memo of simulated programs, not state
        self._hybrid: Hybrid | None = None

    def start(self) -> LearnerState:
        """Nothing simulated yet; the residual is `init`'s."""
        return LearnerState(records=(), failed=(), pool=(), fine_tunes=0, surrogate=self.init,
                            simulated=frozenset(), polished=())

    def seen(self, state: LearnerState) -> set[tuple]:
        """The (layer, mapping, hardware) programs simulated so far (`cache_key`s): a sample
        each, the first time."""
        seen = {cache_key(x, m, r.design.hw, None) for r in state.records
                for x, m in zip(self.layers, r.design.mappings())}
        return seen | {cache_key(self.layers[b], d.mappings()[0], d.hw, None)
                       for b, d in state.polished}

    def hybrid(self, state: LearnerState) -> Hybrid | None:
        """The `Hybrid` of the state's residual (the same object until the residual is fitted
        again; a refit has the same shape, so the search's jitted steps do not compile
        again)."""
        if state.surrogate is None:
            return None
        if self._hybrid is None or self._hybrid.surrogate is not state.surrogate:
            self._hybrid = Hybrid(state.surrogate)
        return self._hybrid

    # ------------------------------------------------------------------ candidates
    def offer(self, state: LearnerState, designs: Sequence[Design], edps: Sequence[float]
              ) -> LearnerState:
        """Keep the `top_k` best designs (by the search's current score) not yet simulated."""
        pool = list(state.pool)
        known = {k for _, k, _ in pool} | state.simulated | {k for k, _ in state.failed}
        for design, edp in zip(designs, edps):
            if not np.isfinite(edp):
                continue
            if len(pool) >= self.top_k and edp >= pool[-1][0]:
                continue
            key = design_key(design)
            if key in known:
                continue
            known.add(key)
            pool.append((float(edp), key, design))
            pool.sort(key=lambda t: t[0])
            del pool[self.top_k:]
        return state.replace(pool=tuple(pool))

    # ------------------------------------------------------------------ simulation
    def simulate_pool(self, state: LearnerState, model_cycles: np.ndarray
                      ) -> tuple[LearnerState, int]:
        """Simulate the pool's designs (`model_cycles` ``[design, layer]``: their analytic
        cycles), emptying it; and the samples it cost: the unique layers never simulated
        before."""
        cost = 0
        records, failed = list(state.records), list(state.failed)
        seen, simulated = self.seen(state), set(state.simulated)
        for (_, key, design), analytic in zip(state.pool, model_cycles):
            mappings = design.mappings()
            keys = {cache_key(x, m, design.hw, None) for x, m in zip(self.layers, mappings)}
            try:
                stick, per_layer = simulate_design(self.layers, self.counts, design,
                                                   sram_step_kb=self.sram_step_kb,
                                                   cache=self.cache,
                                                   max_instructions=SEARCH_MAX_INSTRUCTIONS)
            except (InfeasibleError, UnsupportedOpError, TraceError) as exc:
                failed.append((key, str(exc)))
                continue
            cost += len(keys - seen)
            seen |= keys
            simulated.add(key)
            records.append(SimRecord(
                design=design, sim_cycles=np.array([x.cycles for x in per_layer], np.float64),
                sim_energy_pj=np.array([x.energy_pj for x in per_layer], np.float64),
                model_cycles=np.asarray(analytic, np.float64), sim_edp=float(stick.edp)))
        return state.replace(records=tuple(records), failed=tuple(failed), pool=(),
                             simulated=frozenset(simulated)), cost

    def dataset(self, state: LearnerState) -> Dataset:
        """One row per distinct simulated (layer, mapping, hardware): the label is
        ``log(plain) + log(sim / model)``, so that the hybrid's residual (relative to the plain
        model's tokens) is the simulator-to-model ratio the search's cycles are multiplied by."""
        rows: dict[tuple, tuple[Layer, HardwareConfig, Any, float, int]] = {}
        for rec in state.records:
            for b, (layer, m) in enumerate(zip(self.layers, rec.design.mappings())):
                key = cache_key(layer, m, rec.design.hw, None)
                if key not in rows:
                    ratio = rec.sim_cycles[b] / max(rec.model_cycles[b], 1e-9)
                    # tokens of the layer the mapping covers: the one the search scores
                    rows[key] = (padded_layer(layer, m), rec.design.hw, m, ratio, b)
        layers, hws, maps, ratios, groups = zip(*rows.values())
        tok = tokens_of(list(layers), list(hws), list(maps))
        label = np.asarray(tok.log_cycles, np.float64) + np.log(np.asarray(ratios))
        return Dataset(tok, label.astype(np.float32), np.asarray(groups, np.int64))

    def fine_tune(self, state: LearnerState) -> LearnerState:
        """The residual fitted to every row so far (warm-started)."""
        if not state.records:
            return state
        data = self.dataset(state)
        if len(data) < 2:
            return state
        config = dataclasses.replace(FINE_TUNE, seed=self.seed + state.fine_tunes)
        with timed("residual fitting"):
            surrogate = train_surrogate(data, config, init=state.surrogate,
                                        template=self.template)
        return state.replace(surrogate=surrogate, fine_tunes=state.fine_tunes + 1)

    def polish(self, state: LearnerState, rounder: Any, record: SimRecord,
               candidate_orders: np.ndarray, per_layer: int) -> tuple[LearnerState, int]:
        """Choose every layer's program by simulation on `record`'s hardware; the state after,
        and the samples it cost.

        For each layer, its neighbouring programs (`baco.refine.layer_moves`) that fit the
        hardware are ranked by what they would do to the network EDP on the current model,
        and the best `per_layer` are simulated alone. Then, layer by layer (the costliest
        first, twice round), the simulated option that lowers the network's simulated EDP
        most replaces the current one. The composed design is simulated whole and recorded,
        so `best` takes it only if it is better on the simulator.
        """
        from baco.refine import layer_moves

        design = record.design
        counts = self.counts
        base = rounder.score([design])
        lat0 = np.asarray(base.cycles[0], np.float64)
        en0 = np.asarray(base.energy_pj[0], np.float64)
        _, lat, en = network_totals(lat0, en0, counts)
        mappings = design.mappings()
        chosen = [(m, record.sim_cycles[b], record.sim_energy_pj[b])
                  for b, m in enumerate(mappings)]
        options: list[list[tuple[Any, float, float]]] = [[c] for c in chosen]
        cost = 0
        seen, polished = self.seen(state), list(state.polished)
        for b, layer in enumerate(self.layers):
            moves = layer_moves(rounder, design, b, candidate_orders)
            if not moves:
                continue
            cands = []
            for t, s, o, st in moves:
                T, S, O, ST = (design.temporal.copy(), design.spatial.copy(),
                               design.order.copy(), design.stages.copy())
                T[b], S[b], O[b], ST[b] = t, s, o, st
                cands.append(Design(hw=design.hw, temporal=T, spatial=S, order=O, stages=ST))
            scored = _score_padded(rounder, cands)
            c = counts[b]
            new_edp = ((lat - c * lat0[b] + c * scored.cycles[:, b])
                       * (en - c * en0[b] + c * scored.energy_pj[:, b]))
            ok = (np.isfinite(new_edp) & (scored.overflow[:, b] <= 0)
                  & (scored.fanout_excess[:, b] <= 0))
            for i in [int(i) for i in np.argsort(np.where(ok, new_edp, np.inf))[:per_layer]
                      if ok[i]]:
                m = cands[i].mappings()[b]
                key = cache_key(layer, m, design.hw, None)
                try:
                    _, per = simulate_design([layer], [1.0], design_of(design.hw, [m]),
                                                 sram_step_kb=self.sram_step_kb,
                                                 cache=self.cache,
                                                 max_instructions=SEARCH_MAX_INSTRUCTIONS)
                except (InfeasibleError, UnsupportedOpError, TraceError):
                    continue
                if key not in seen:
                    cost += 1
                    seen.add(key)
                    polished.append((b, design_of(design.hw, [m])))
                options[b].append((m, float(per[0].cycles), float(per[0].energy_pj)))
        order = np.argsort(-(counts * record.sim_cycles))
        for _ in range(2):
            for b in order:
                _, sim_lat, sim_en = network_totals([x[1] for x in chosen],
                                                    [x[2] for x in chosen], counts)
                c = counts[b]
                edps = [(sim_lat - c * chosen[b][1] + c * o[1])
                        * (sim_en - c * chosen[b][2] + c * o[2]) for o in options[b]]
                chosen[b] = options[b][int(np.argmin(edps))]
        composed = design_of(design.hw, [m for m, _, _ in chosen])
        key = design_key(composed)
        state = state.replace(polished=tuple(polished))
        if key not in state.simulated and key not in dict(state.failed):
            analytic = rounder.analytic_score([composed]).cycles
            state, spent = self.simulate_pool(state.replace(pool=((0.0, key, composed),)),
                                              np.asarray(analytic, np.float64))
            cost += spent
        return state, cost

    @staticmethod
    def best(state: LearnerState) -> SimRecord | None:
        """The simulated design with the lowest simulated EDP (first one on ties)."""
        finite = [r for r in state.records if math.isfinite(r.sim_edp)]
        return min(finite, key=lambda r: r.sim_edp) if finite else None

    def summary(self, state: LearnerState, chosen: Design | None) -> dict[str, Any]:
        """What the run's ``extra["sim_hybrid"]`` reports: how much was simulated and learned,
        and the chosen design's simulated EDP."""
        key = None if chosen is None else design_key(chosen)
        sim_edp = next((r.sim_edp for r in state.records if design_key(r.design) == key), None)
        return {"designs_simulated": len(state.records), "layers_simulated": len(self.seen(state)),
                "fine_tunes": state.fine_tunes, "failed": len(state.failed),
                "chosen_sim_edp": sim_edp,
                "simulated_edps": [r.sim_edp for r in state.records]}

