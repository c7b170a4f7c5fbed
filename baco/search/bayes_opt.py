"""Bayesian optimization over hardware and mappings, DOSA's BO baseline (reference §A.8).

DOSA's ``dataset/dse/bo.py``: two nested Gaussian-process searches, each ranking candidates by
the lower confidence bound ``mean - l * std`` (``l = 1``) of a scikit-learn
`GaussianProcessRegressor` fitted on standardized features and targets.

* **Software (per layer, on one hardware point):** score ``sw_train`` random valid mappings,
  fit a GP from mapping features to the layer's EDP, rank ``10 * sw_train`` fresh random
  candidates by LCB and score the top ``sw_trial``.
* **Hardware:** run the software BO on ``hw_train`` random configurations (PE dim in
  ``range(2, 129, 2)``, scratchpad and accumulator KiB in ``range(8, 1025, 8)``), fit a GP from
  the configuration to its best network EDP, rank the whole grid (64 x 128 x 128 points, in
  vectorized chunks) by LCB, and run the software BO on the top ``hw_trial`` configurations.

**Budget.** DOSA's settings (``hw_training_size=100``, ``hw_trial_size=10``,
``sw_training_size=100``, ``sw_trial_size=10``) spend 110 samples per configuration on 110
configurations: 12,100 samples, with samples per configuration = configurations =
sqrt(budget). For a budget B we keep that shape: ``per_hw = round(sqrt(B))`` samples per
configuration split 10:1 into training and trials, ``B // per_hw`` configurations split 10:1
into random and GP-ranked ones, and the remainder as extra trials on the last configuration.
Sample j on a configuration is the whole-network point of the j-th scored mapping of every
layer (training mappings first, then trials in LCB order), as `baco.search._space.Tracker`
counts; candidates that are ranked but not scored cost no sample.

**Departures from bo.py, all documented choices where DOSA's code is silent or broken:**

* The GP kernel is ``C * Matern(nu=2.5) + White`` with its hyperparameters fitted by
  maximum likelihood; bo.py's default ``1 * RBF(1)`` with fixed length scale makes the
  posterior flat on 80-odd standardized mapping features, so its ranking is nearly random.
* Targets are log EDP (EDPs span orders of magnitude; standardizing raw EDPs lets one outlier
  dominate).
* bo.py ranks the grid twice (``np.argsort(preds)`` of indices already sorted), which selects
  unrelated configurations; we take the LCB-best ones, excluding configurations already scored.
* Area budget (``area_budget_mm2``; DOSA has none): the hardware grid is cut to the
  configurations within it (area by the template's model, `perfmodels.energy.areas_mm2`):
  the random training configurations are drawn from those, and the GP ranks only those.
* Mapping features: log2 temporal and spatial factors per level, each loop's rank in its level
  (innermost 0; loops of factor 1 get rank 7, DOSA's "don't care"), and stages.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
from threadpoolctl import threadpool_limits

from accel.arch import HardwareConfig
from accel.buildable import buildable_hardware, buildable_sizes
from baco.errors import ConfigError, InfeasibleError
from baco.result import CodesignResult
from baco.search._space import (
    NUM_DIMS,
    MappingBatch,
    MappingSampler,
    Tracker,
    budget_check,
    check_budget,
    check_network,
    interpolate_seconds,
    make_result,
    score_layers,
)
from baco.topk import DEFAULT_TOP_K
from perfmodels.energy import areas_mm2
from workloads.network import Network

PE_CHOICES = tuple(range(2, 129, 2))
KB_CHOICES = tuple(range(8, 1025, 8))
GRID_CHUNK = 65536


# --------------------------------------------------------------------------- the GP
class LcbRanker:
    """A Gaussian process on standardized features and targets, ranking by the lower
    confidence bound ``mean - kappa * std`` (lower is better: we minimize).

    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(30, 3)); y = (X ** 2).sum(1)
    >>> ranker = LcbRanker().fit(X, y)
    >>> cand = np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    >>> ranker.rank(cand).tolist()
    [0, 1]
    """

    def __init__(self, kappa: float = 1.0, seed: int = 0) -> None:
        self.kappa = float(kappa)
        self.seed = int(seed)
        self._keep: np.ndarray | None = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> LcbRanker:
        X = np.asarray(X, np.float64)
        y = np.asarray(y, np.float64)
        if X.ndim != 2 or y.shape != (X.shape[0],) or X.shape[0] < 1:
            raise ConfigError(f"LcbRanker.fit: need X [n, d] and y [n], got {X.shape}, {y.shape}")
        std = X.std(0)
        self._keep = std > 1e-12
        self._mean = X.mean(0)[self._keep]
        self._std = std[self._keep]
        self._y_mean = float(y.mean())
        self._y_std = float(y.std()) if y.std() > 1e-12 else 1.0
        Z = (X[:, self._keep] - self._mean) / self._std
        d = max(1, Z.shape[1])
        kernel = (ConstantKernel(1.0, (1e-2, 1e2))
                  * Matern(length_scale=math.sqrt(d), length_scale_bounds=(1e-2, 1e3), nu=2.5)
                  + WhiteKernel(1e-2, (1e-6, 1.0)))
        self.gp = GaussianProcessRegressor(kernel=kernel, normalize_y=False,
                                           n_restarts_optimizer=0, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp.fit(Z if Z.shape[1] else np.zeros((len(y), 1)),
                        (y - self._y_mean) / self._y_std)
        return self

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation, in the target's units."""
        X = np.asarray(X, np.float64)
        Z = (X[:, self._keep] - self._mean) / self._std
        mean, std = self.gp.predict(Z if Z.shape[1] else np.zeros((len(X), 1)),
                                    return_std=True)
        return mean * self._y_std + self._y_mean, std * self._y_std

    def lcb(self, X: np.ndarray) -> np.ndarray:
        mean, std = self.predict(X)
        return mean - self.kappa * std

    def rank(self, X: np.ndarray) -> np.ndarray:
        """Candidate indices, best (lowest LCB) first."""
        return np.argsort(self.lcb(X), kind="stable")


def mapping_features(batch: MappingBatch) -> np.ndarray:
    """``[n, features]``: log2 temporal and spatial factors, loop ranks, stages."""
    n = batch.size
    rank = np.argsort(batch.order[:, :, ::-1], axis=-1)        # 0 = innermost
    rank = np.where(batch.temporal > 1, rank, NUM_DIMS)
    return np.concatenate([np.log2(batch.temporal).reshape(n, -1),
                           np.log2(batch.spatial).reshape(n, -1),
                           rank.reshape(n, -1), batch.stages], axis=1).astype(np.float64)


def hardware_features(configs: np.ndarray) -> np.ndarray:
    """``[n, 3]``: (PE dim, scratchpad KiB, accumulator KiB) as bo.py feeds them (the GP
    standardizes them; the random training configurations are uniform in these units)."""
    return np.asarray(configs, np.float64)


# --------------------------------------------------------------------------- the plan
def plan_budget(budget: int, per_hw_samples: int | None = None) -> dict[str, int]:
    """How DOSA's BO shape scales to `budget` samples (see the module docstring).

    >>> plan_budget(12100)
    {'per_hw': 110, 'sw_train': 100, 'sw_trial': 10, 'hw_train': 100, 'hw_trial': 10, 'extra_trials': 0}
    >>> plan_budget(1000)
    {'per_hw': 32, 'sw_train': 29, 'sw_trial': 3, 'hw_train': 28, 'hw_trial': 3, 'extra_trials': 8}
    """
    per_hw = per_hw_samples if per_hw_samples is not None else max(2, round(math.sqrt(budget)))
    per_hw = max(1, min(int(per_hw), budget))
    sw_trial = 0 if per_hw < 2 else max(1, round(per_hw / 11))
    sw_train = per_hw - sw_trial
    n_hw = budget // per_hw
    hw_trial = 0 if n_hw < 2 else min(n_hw - 1, max(1, round(n_hw / 11)))
    return {"per_hw": per_hw, "sw_train": sw_train, "sw_trial": sw_trial,
            "hw_train": n_hw - hw_trial, "hw_trial": hw_trial,
            "extra_trials": budget - n_hw * per_hw}


# --------------------------------------------------------------------------- the search
class _SoftwareBO:
    """The per-layer software BO on one hardware point, recording its samples."""

    def __init__(self, network: Network, tracker: Tracker, rng: np.random.Generator,
                 plan: dict[str, int], kappa: float, candidates_per_train: int,
                 stages: int | None, max_draws: int, seed: int) -> None:
        self.layers = list(network.layers)
        self.tracker = tracker
        self.rng = rng
        self.plan = plan
        self.kappa = kappa
        self.candidates_per_train = candidates_per_train
        self.stages = stages
        self.max_draws = max_draws
        self.seed = seed

    def run(self, hw: HardwareConfig, trials: int) -> float:
        """Score ``sw_train`` random mappings then ``trials`` LCB picks per layer on `hw`;
        returns the best network EDP there. Raises `InfeasibleError` (before any sample is
        spent) if a layer has no fitting mapping."""
        n_train = self.plan["sw_train"]
        n_cand = max(trials, self.candidates_per_train * n_train)
        samplers = [MappingSampler(layer, hw) for layer in self.layers]
        train = [s.sample(n_train, self.rng, self.stages, max_draws=self.max_draws)
                 for s in samplers]
        cands = [s.sample(n_cand, self.rng, self.stages, max_draws=self.max_draws)
                 for s in samplers] if trials else []
        t0 = self.tracker.seconds()
        cycles, energy = score_layers(self.layers, hw, train)
        t1 = self.tracker.seconds()
        seconds = [interpolate_seconds(t0, t1, n_train)]
        batches = train
        if trials:
            picks = []
            for l in range(len(self.layers)):
                ranker = LcbRanker(self.kappa, self.seed).fit(
                    mapping_features(train[l]), np.log(cycles[l] * energy[l]))
                order = ranker.rank(mapping_features(cands[l]))
                picks.append(cands[l].take(order[:trials]))
            t2 = self.tracker.seconds()
            c2, e2 = score_layers(self.layers, hw, picks)
            seconds.append(interpolate_seconds(t2, self.tracker.seconds(), trials))
            cycles = np.concatenate([cycles, c2], axis=1)
            energy = np.concatenate([energy, e2], axis=1)
            batches = [MappingBatch.concat([a, b]) for a, b in zip(train, picks)]
        return self.tracker.add_block(hw, batches, cycles, energy, np.concatenate(seconds))


def _grid_lcb_top(ranker: LcbRanker, pe: Sequence[int], kb: Sequence[int], k: int,
                  exclude: set[tuple[int, int, int]], allowed: np.ndarray | None = None
                  ) -> list[tuple[int, int, int]]:
    """The `k` grid configurations of lowest LCB, not in `exclude` (and, if given, where the
    flat grid mask `allowed` is True), scanning the grid in vectorized chunks."""
    pe_a, sp_a, acc_a = (np.asarray(x, np.int64) for x in (pe, kb, kb))
    total = pe_a.size * sp_a.size * acc_a.size
    keep = k + len(exclude)
    best_lcb = np.empty(0)
    best_idx = np.empty(0, np.int64)
    for start in range(0, total, GRID_CHUNK):
        idx = np.arange(start, min(start + GRID_CHUNK, total))
        i_pe, rest = np.divmod(idx, sp_a.size * acc_a.size)
        i_sp, i_acc = np.divmod(rest, acc_a.size)
        configs = np.stack([pe_a[i_pe], sp_a[i_sp], acc_a[i_acc]], axis=1)
        lcb = ranker.lcb(hardware_features(configs))
        if allowed is not None:
            lcb = np.where(allowed[idx], lcb, np.inf)
        best_lcb = np.concatenate([best_lcb, lcb])
        best_idx = np.concatenate([best_idx, idx])
        if best_lcb.size > keep:
            part = np.argpartition(best_lcb, keep - 1)[:keep]
            best_lcb, best_idx = best_lcb[part], best_idx[part]
    order = np.lexsort((best_idx, best_lcb))
    out = []
    for i in best_idx[order]:
        i_pe, rest = divmod(int(i), sp_a.size * acc_a.size)
        i_sp, i_acc = divmod(rest, acc_a.size)
        config = (int(pe_a[i_pe]), int(sp_a[i_sp]), int(acc_a[i_acc]))
        if config not in exclude and (allowed is None or allowed[int(i)]):
            out.append(config)
    return out[:k]


def _gemmini(config: tuple[int, int, int], name: str) -> HardwareConfig:
    """A grid point as the hardware Gemmini's generator builds for it (the next sizes up)."""
    pe, sp, acc = config
    return buildable_hardware(HardwareConfig(template="gemmini", pe_rows=pe, pe_cols=pe,
                                             sp_kb=float(sp), acc_kb=float(acc), name=name))


def bayes_opt(network: Network | str, *, budget_samples: int, seed: int, kappa: float = 1.0,
              candidates_per_train: int = 10, per_hw_samples: int | None = None,
              pe_choices: Sequence[int] = PE_CHOICES, kb_choices: Sequence[int] = KB_CHOICES,
              stages: int | None = None, max_draws_per_layer: int = 200_000,
              progress: Callable[[int, float], Any] | None = None,
              area_budget_mm2: float | None = None,
              top_k: int = DEFAULT_TOP_K) -> CodesignResult:
    """Nested GP-LCB search over Gemmini hardware and per-layer mappings (DOSA's bo.py).

    Args:
      network: the layers to map.
      budget_samples: whole-network points to score; the BO shape scales with it
        (`plan_budget`).
      seed: seeds the `numpy.random.Generator` of every draw and the GP.
      kappa: the LCB weight ``l`` (DOSA: 1.0).
      candidates_per_train: ranked candidates per training mapping (DOSA: 1000 / 100).
      per_hw_samples: samples per hardware configuration (default ``round(sqrt(budget))``).
      pe_choices, kb_choices: the hardware grid (DOSA's ``range(2, 129, 2)`` PEs a side,
        ``range(8, 1025, 8)`` KiB for both buffers).
      stages: fix every level's stages; None draws 1 or 2, as the other random baselines.
      max_draws_per_layer: rejection-sampling limit before a configuration is given up.
      progress: called with ``(samples, best_edp)`` as the search goes (a progress bar).
      area_budget_mm2: only grid configurations within this area (mm2) are drawn or ranked;
        None: no budget.
      top_k: the best distinct network points kept as the result's ``candidates`` for the
        final pick (`baco.final_pick`).

    Returns:
      A `CodesignResult` with ``method="bo"`` and ``samples == budget_samples``.
    """
    network = check_network(network, "bo")
    budget = check_budget(budget_samples, "bo")
    if candidates_per_train < 1:
        raise ConfigError(f"bo: candidates_per_train must be >= 1, got {candidates_per_train}")
    pe_choices, kb_choices = tuple(int(x) for x in pe_choices), tuple(int(x) for x in kb_choices)
    if not pe_choices or not kb_choices or min(pe_choices) < 1 or min(kb_choices) <= 0:
        raise ConfigError("bo: pe_choices and kb_choices must be non-empty and positive")
    plan = plan_budget(budget, per_hw_samples)
    allowed = _within_budget(pe_choices, kb_choices, budget_check(area_budget_mm2, "bo"))
    # One BLAS thread: the GP fits are small, and OpenBLAS's spinning threads slow them ~5x.
    with threadpool_limits(limits=1):
        return _search(network, budget, seed, plan, kappa, candidates_per_train, pe_choices,
                       kb_choices, stages, max_draws_per_layer, progress, allowed,
                       area_budget_mm2, top_k)


def _within_budget(pe: Sequence[int], kb: Sequence[int], area_budget_mm2: float | None
                   ) -> np.ndarray | None:
    """The flat grid mask (as `_grid_lcb_top` indexes the grid) of configurations within
    the area budget; None without one. Raises `InfeasibleError` if none is."""
    if area_budget_mm2 is None:
        return None
    pe_g, sp_g, acc_g = np.meshgrid(np.asarray(pe, np.float64), np.asarray(kb, np.float64),
                                    np.asarray(kb, np.float64), indexing="ij")
    dim_g, sp_g, acc_g = buildable_sizes(pe_g, sp_g, acc_g)   # the hardware `_gemmini` builds
    area = areas_mm2(HardwareConfig(template="gemmini"), dim_g, dim_g, sp_g, acc_g)
    allowed = area <= area_budget_mm2
    if not allowed.any():
        raise InfeasibleError(f"bo: no configuration of the hardware grid is within "
                              f"area_budget_mm2 = {area_budget_mm2:g} mm2 (the smallest has "
                              f"{area.min():.4g} mm2); raise the budget or pass smaller "
                              "pe_choices/kb_choices")
    return allowed


def _search(network: Network, budget: int, seed: int, plan: dict[str, int], kappa: float,
            candidates_per_train: int, pe_choices: tuple[int, ...], kb_choices: tuple[int, ...],
            stages: int | None, max_draws_per_layer: int,
            progress: Callable[[int, float], Any] | None, allowed: np.ndarray | None = None,
            area_budget_mm2: float | None = None, top_k: int = DEFAULT_TOP_K
            ) -> CodesignResult:
    rng = np.random.default_rng(seed)
    tracker = Tracker(network, progress, top_k)
    sw = _SoftwareBO(network, tracker, rng, plan, kappa, candidates_per_train, stages,
                     max_draws_per_layer, seed)
    n_hw = plan["hw_train"] + plan["hw_trial"]
    evaluated: dict[tuple[int, int, int], float] = {}
    skipped = 0

    def trials_for(i: int) -> int:
        return plan["sw_trial"] + (plan["extra_trials"] if i == n_hw - 1 else 0)

    grid_size = len(pe_choices) * len(kb_choices) ** 2
    inside = None if allowed is None else np.flatnonzero(allowed)
    if inside is not None:
        grid_size = inside.size
    while len(evaluated) < plan["hw_train"]:
        if len(evaluated) + skipped >= grid_size:
            raise InfeasibleError(f"bo: the hardware grid ({grid_size} configurations"
                                  f"{'' if inside is None else ' within the area budget'}) is "
                                  f"too small for {plan['hw_train']} random training points")
        if inside is None:
            config = (int(rng.choice(pe_choices)), int(rng.choice(kb_choices)),
                      int(rng.choice(kb_choices)))
        else:   # a uniform draw among the configurations within the area budget
            i_pe, rest = divmod(int(rng.choice(inside)), len(kb_choices) ** 2)
            i_sp, i_acc = divmod(rest, len(kb_choices))
            config = (pe_choices[i_pe], kb_choices[i_sp], kb_choices[i_acc])
        if config in evaluated:
            continue
        try:
            evaluated[config] = sw.run(_gemmini(config, f"bo-{len(evaluated)}"),
                                       trials_for(len(evaluated)))
        except InfeasibleError:
            skipped += 1
            if skipped > 1000:
                raise InfeasibleError("bo: 1000 random hardware configurations had a layer "
                                      "with no fitting mapping") from None
    ranked: list[tuple[int, int, int]] = []
    while len(evaluated) < n_hw:
        if not ranked:
            configs = np.array(list(evaluated), np.float64)
            ranker = LcbRanker(kappa, seed).fit(hardware_features(configs),
                                                np.log(np.array(list(evaluated.values()))))
            ranked = _grid_lcb_top(ranker, pe_choices, kb_choices,
                                   4 * (n_hw - len(evaluated)), set(evaluated), allowed)
            if not ranked:
                break  # the grid is exhausted
        config = ranked.pop(0)
        try:
            evaluated[config] = sw.run(_gemmini(config, f"bo-{len(evaluated)}"),
                                       trials_for(len(evaluated)))
        except InfeasibleError:
            skipped += 1
    if tracker.samples < budget:   # the grid ran out of feasible configurations
        raise InfeasibleError(f"bo: the hardware grid has too few feasible configurations "
                              f"for {budget} samples")
    return make_result("bo", network, tracker, seed,
                       extra={"plan": plan, "kappa": kappa,
                              "candidates_per_train": candidates_per_train,
                              "hardware": [{"pe": c[0], "sp_kb": c[1], "acc_kb": c[2],
                                            "best_edp": e} for c, e in evaluated.items()],
                              "infeasible_hardware": skipped,
                              **({} if area_budget_mm2 is None else
                                 {"area_budget_mm2": float(area_budget_mm2)})})


__all__ = [
    "KB_CHOICES",
    "PE_CHOICES",
    "LcbRanker",
    "bayes_opt",
    "hardware_features",
    "mapping_features",
    "plan_budget",
]
