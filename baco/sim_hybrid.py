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
import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design, design_of
from accel.lower import padded_layer
from baco.yardsticks import SimCache, cache_key, simulate_design
from perfmodels.atformer import (
    Dataset,
    Hybrid,
    ModelConfig,
    Stats,
    Surrogate,
    TrainConfig,
    init_params,
    tokens_of,
    train_surrogate,
)
from workloads.errors import InfeasibleError, TraceError, UnsupportedOpError
from workloads.layer import Layer

__all__ = ["SimLearner", "SimRecord", "design_key"]

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


def design_key(design: Design) -> str:
    """A stable identity of a design (hardware and every layer's integer arrays)."""
    h = hashlib.sha1(json.dumps(design.hw.to_dict(), sort_keys=True).encode())
    for a in (design.temporal, design.spatial, design.order, design.stages):
        h.update(np.ascontiguousarray(a, np.int64).tobytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class SimRecord:
    """One simulated design: per layer, the simulator's cycles and pJ and the analytic cycles
    the search's model gave it (before any learned residual)."""

    design: Design
    sim_cycles: np.ndarray
    sim_energy_pj: np.ndarray
    model_cycles: np.ndarray
    sim_edp: float


class SimLearner:
    """The pool of candidates, the simulated designs, and the residual fitted to them."""

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
        self.surrogate: Surrogate | None = init
        self.records: list[SimRecord] = []
        self.failed: dict[str, str] = {}               # design key -> why it cannot be simulated
        self.pool: list[tuple[float, str, Design]] = []   # (model EDP, key, design), best first
        self.fine_tunes = 0
        self.cache = SimCache()
        self._seen: set = set()
        self._simulated: set[str] = set()
        self._hybrid: Hybrid | None = None

    @property
    def hybrid(self) -> Hybrid | None:
        """The current `Hybrid` (the same object until the residual is fitted again: a new
        one makes the search's jitted steps compile again)."""
        if self.surrogate is None:
            return None
        if self._hybrid is None or self._hybrid.surrogate is not self.surrogate:
            self._hybrid = Hybrid(self.surrogate)
        return self._hybrid

    # ------------------------------------------------------------------ candidates
    def offer(self, designs: Sequence[Design], edps: Sequence[float]) -> None:
        """Keep the `top_k` best designs (by the search's current score) not yet simulated."""
        known = {k for _, k, _ in self.pool} | self._simulated | set(self.failed)
        for design, edp in zip(designs, edps):
            if not np.isfinite(edp):
                continue
            if len(self.pool) >= self.top_k and edp >= self.pool[-1][0]:
                continue
            key = design_key(design)
            if key in known:
                continue
            known.add(key)
            self.pool.append((float(edp), key, design))
            self.pool.sort(key=lambda t: t[0])
            del self.pool[self.top_k:]

    # ------------------------------------------------------------------ simulation
    def simulate_pool(self, model_cycles: np.ndarray) -> int:
        """Simulate the pool's designs (`model_cycles` ``[design, layer]``: their analytic
        cycles); returns the samples it cost: the unique layers never simulated before."""
        cost = 0
        for (_, key, design), analytic in zip(self.pool, model_cycles):
            mappings = design.mappings()
            keys = {cache_key(x, m, design.hw, None) for x, m in zip(self.layers, mappings)}
            try:
                stick, per_layer = simulate_design(self.layers, self.counts, design,
                                                   sram_step_kb=self.sram_step_kb,
                                                   cache=self.cache,
                                                   max_instructions=SEARCH_MAX_INSTRUCTIONS)
            except (InfeasibleError, UnsupportedOpError, TraceError) as exc:
                self.failed[key] = str(exc)
                continue
            cost += len(keys - self._seen)
            self._seen |= keys
            self._simulated.add(key)
            self.records.append(SimRecord(
                design=design, sim_cycles=np.array([x.cycles for x in per_layer], np.float64),
                sim_energy_pj=np.array([x.energy_pj for x in per_layer], np.float64),
                model_cycles=np.asarray(analytic, np.float64), sim_edp=float(stick.edp)))
        self.pool = []
        return cost

    def dataset(self) -> Dataset:
        """One row per distinct simulated (layer, mapping, hardware): the label is
        ``log(plain) + log(sim / model)``, so that the hybrid's residual (relative to the plain
        model's tokens) is the simulator-to-model ratio the search's cycles are multiplied by."""
        rows: dict[tuple, tuple[Layer, HardwareConfig, Any, float, int]] = {}
        for rec in self.records:
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

    def fine_tune(self) -> Hybrid | None:
        """Fit the residual to every row so far (warm-started); the new `Hybrid`."""
        if not self.records:
            return self.hybrid
        data = self.dataset()
        if len(data) < 2:
            return self.hybrid
        config = dataclasses.replace(FINE_TUNE, seed=self.seed + self.fine_tunes)
        self.surrogate = train_surrogate(data, config, init=self.surrogate,
                                         template=self.template)
        self.fine_tunes += 1
        return self.hybrid

    def polish(self, rounder: Any, record: SimRecord, candidate_orders: np.ndarray,
               per_layer: int) -> int:
        """Choose every layer's program by simulation on `record`'s hardware; returns the
        samples it cost.

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
        lat, en = float(lat0 @ counts), float(en0 @ counts)
        mappings = design.mappings()
        chosen = [(m, record.sim_cycles[b], record.sim_energy_pj[b])
                  for b, m in enumerate(mappings)]
        options: list[list[tuple[Any, float, float]]] = [[c] for c in chosen]
        cost = 0
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
                cost += key not in self._seen
                self._seen.add(key)
                options[b].append((m, float(per[0].cycles), float(per[0].energy_pj)))
        order = np.argsort(-(counts * record.sim_cycles))
        for _ in range(2):
            for b in order:
                sim_lat = sum(counts[j] * chosen[j][1] for j in range(len(chosen)))
                sim_en = sum(counts[j] * chosen[j][2] for j in range(len(chosen)))
                c = counts[b]
                edps = [(sim_lat - c * chosen[b][1] + c * o[1])
                        * (sim_en - c * chosen[b][2] + c * o[2]) for o in options[b]]
                chosen[b] = options[b][int(np.argmin(edps))]
        composed = design_of(design.hw, [m for m, _, _ in chosen])
        key = design_key(composed)
        if key not in self._simulated and key not in self.failed:
            analytic = rounder.analytic_score([composed]).cycles
            self.pool = [(0.0, key, composed)]
            cost += self.simulate_pool(np.asarray(analytic, np.float64))
        return cost

    def best(self) -> SimRecord | None:
        """The simulated design with the lowest simulated EDP (first one on ties)."""
        finite = [r for r in self.records if math.isfinite(r.sim_edp)]
        return min(finite, key=lambda r: r.sim_edp) if finite else None

    def summary(self, chosen: Design | None) -> dict[str, Any]:
        """What the run's ``extra["sim_hybrid"]`` reports: how much was simulated and learned,
        and the chosen design's simulated EDP."""
        key = None if chosen is None else design_key(chosen)
        sim_edp = next((r.sim_edp for r in self.records if design_key(r.design) == key), None)
        return {"designs_simulated": len(self.records), "layers_simulated": len(self._seen),
                "fine_tunes": self.fine_tunes, "failed": len(self.failed),
                "chosen_sim_edp": sim_edp,
                "simulated_edps": [r.sim_edp for r in self.records]}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, prefix: str = "sim_") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays and JSON that `load_state_dict` restores exactly."""
        arrays: dict[str, np.ndarray] = {}
        designs = [r.design for r in self.records] + [d for _, _, d in self.pool]
        for i, d in enumerate(designs):
            for name in ("temporal", "spatial", "order", "stages"):
                arrays[f"{prefix}d{i}_{name}"] = getattr(d, name)
        for i, r in enumerate(self.records):
            arrays[f"{prefix}r{i}_sim_cycles"] = r.sim_cycles
            arrays[f"{prefix}r{i}_sim_energy_pj"] = r.sim_energy_pj
            arrays[f"{prefix}r{i}_model_cycles"] = r.model_cycles
        fitted = self.surrogate is not None and self.surrogate is not self.init
        if fitted:
            for i, leaf in enumerate(jax.tree_util.tree_leaves(self.surrogate.params)):
                arrays[f"{prefix}p{i}"] = np.asarray(leaf)
            for name in ("mean", "std", "offset", "tau"):
                arrays[f"{prefix}stats_{name}"] = np.asarray(getattr(self.surrogate.stats, name))
        meta = {
            "hw": [d.hw.to_dict() for d in designs],
            "sim_edp": [r.sim_edp for r in self.records],
            "pool": [[e, k] for e, k, _ in self.pool],
            "failed": self.failed, "fine_tunes": self.fine_tunes, "fitted": fitted,
            "config": None if not fitted else self.surrogate.config.to_dict(),
        }
        return arrays, meta

    def load_state_dict(self, arrays: dict[str, np.ndarray], meta: dict[str, Any],
                        prefix: str = "sim_") -> None:
        designs = [Design(hw=HardwareConfig.from_dict(h),
                          **{n: arrays[f"{prefix}d{i}_{n}"]
                             for n in ("temporal", "spatial", "order", "stages")})
                   for i, h in enumerate(meta["hw"])]
        n = len(meta["sim_edp"])
        self.records = [SimRecord(design=designs[i],
                                  sim_cycles=arrays[f"{prefix}r{i}_sim_cycles"],
                                  sim_energy_pj=arrays[f"{prefix}r{i}_sim_energy_pj"],
                                  model_cycles=arrays[f"{prefix}r{i}_model_cycles"],
                                  sim_edp=float(meta["sim_edp"][i])) for i in range(n)]
        self.pool = [(float(e), k, d) for (e, k), d in zip(meta["pool"], designs[n:])]
        self.failed = dict(meta["failed"])
        self.fine_tunes = int(meta["fine_tunes"])
        self._simulated = {design_key(r.design) for r in self.records}
        self._seen = {cache_key(x, m, r.design.hw, None) for r in self.records
                      for x, m in zip(self.layers, r.design.mappings())}
        if meta["fitted"]:
            config = TrainConfig.from_dict(meta["config"])
            members = int(arrays[f"{prefix}p0"].shape[0])
            probe = init_params(config.model, jax.random.PRNGKey(0), members, 1)
            treedef = jax.tree_util.tree_structure(probe)
            params = jax.tree_util.tree_unflatten(
                treedef, [arrays[f"{prefix}p{i}"] for i in range(treedef.num_leaves)])
            stats = Stats(*(arrays[f"{prefix}stats_{name}"]
                            for name in ("mean", "std", "offset", "tau")))
            self.surrogate = Surrogate(config=config, params=params, stats=stats,
                                       template=self.template)
