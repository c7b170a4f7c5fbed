"""Importance-weighted layer scheduling (seed 001 §6.5, Eq. 6.7–6.9).

Gradient descent on a whole network spends most of its effort where it pays least: small layers,
layers that have already converged, and layers that repeat the same shape. The scheduler gives
each layer a budget ``t_i`` (the rounds of gradient steps it has had), estimates how much one more
round would lower the network objective, and gives the next round to the layers where that is
largest — Ansor's gradient-based task scheduler, which §6.5 copies, adapted to EDP.

The network objective is Eq. 6.9, ``f = (Σ w_i e_i)(Σ w_i l_i)`` with ``w_i`` the layer's repeat
count. Each layer keeps the history of its best energy ``e_i`` and latency ``l_i`` after each of its
rounds, and for either quantity ``g``:

* the backward term (Eq. 6.7) is ``(g(t) - g(t - Δt)) / Δt`` over a window ``Δt`` of its history;
* the forward term (Eq. 6.8) is ``min(g - g/t, β · similar) - g``, an optimistic guess of the next
  round. The thesis prints ``g + g/t``; that cannot be a decrease, and Ansor (whose scheduler this
  is) uses ``g - g/t``, so we do too. ``similar`` is what ``g`` would be if the layer did as well
  per MAC as the best layer of its group (same kind, kernel, stride and dilation): for latency,
  ``MACs_i / max_k (MACs_k / l_k)``; for energy, ``MACs_i · min_k (e_k / MACs_k)``.

By the chain rule, ``∂f/∂t_i ≈ w_i L (α back_e + (1-α) fwd_e) + w_i E (α back_l + (1-α) fwd_l)``
with ``E, L`` the network's totals, α = 0.2 and β = 2 as in §6.6. The most negative estimates win.
A layer that has had ``patience`` rounds in a row without improving its EDP is abandoned (§6.5's
abandonment rule); it is never chosen again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from workloads.errors import ConfigError
from workloads.layer import Layer


@dataclasses.dataclass(frozen=True)
class ImportanceConfig:
    """The scheduler's knobs; the defaults are the thesis's (α, β) and Ansor's window."""

    alpha: float = 0.2
    beta: float = 2.0
    window: int = 3
    patience: int = 4

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"importance.alpha must be in [0, 1], got {self.alpha}")
        if self.beta <= 0:
            raise ConfigError(f"importance.beta must be positive, got {self.beta}")
        if self.window < 1 or self.patience < 1:
            raise ConfigError("importance.window and importance.patience must be >= 1")


def similarity_groups(layers: Sequence[Layer]) -> np.ndarray:
    """Group id per layer: layers of one kind, kernel, stride, dilation and grouping are alike."""
    keys: dict[tuple, int] = {}
    return np.array([
        keys.setdefault((layer.kind, layer.R, layer.S, layer.Hstride, layer.Wstride,
                         layer.Hdilation, layer.Wdilation, layer.groups > 1), len(keys))
        for layer in layers], np.int64)


class ImportanceScheduler:
    """Chooses which layers get the next round of gradient steps.

    Call `select` for the layers of the next round, run the round, then `record` each chosen
    layer's best (energy, latency) so far. Every layer gets one warm-up round first.

    >>> layers = [Layer.gemm(M=64, K_red=64, N_out=64), Layer.gemm(M=512, K_red=512, N_out=512)]
    >>> s = ImportanceScheduler(layers, counts=[1, 1])
    >>> s.select(2).tolist()                      # warm-up: every layer once
    [0, 1]
    >>> s.record([0, 1], energy_pj=[1e3, 1e6], latency_cycles=[1e3, 1e6])
    >>> s.select(1).tolist()                      # the big layer dominates the product
    [1]
    """

    def __init__(self, layers: Sequence[Layer], counts: Sequence[int],
                 config: ImportanceConfig | None = None) -> None:
        if len(layers) != len(counts) or not layers:
            raise ConfigError("importance: need one count per layer and at least one layer")
        self.config = config or ImportanceConfig()
        self.counts = np.asarray(counts, np.float64)
        self.macs = np.array([layer.macs for layer in layers], np.float64)
        self.groups = similarity_groups(layers)
        n = len(layers)
        self.rounds = np.zeros(n, np.int64)            # t_i
        self.stale = np.zeros(n, np.int64)             # rounds in a row without improvement
        self.dead = np.zeros(n, bool)
        self.history: list[list[tuple[float, float]]] = [[] for _ in range(n)]

    # ------------------------------------------------------------------ bookkeeping
    @property
    def best(self) -> np.ndarray:
        """``[layer, (energy_pj, latency_cycles)]``, the best so far (inf before warm-up)."""
        return np.array([h[-1] if h else (np.inf, np.inf) for h in self.history], np.float64)

    @property
    def alive(self) -> np.ndarray:
        return ~self.dead

    def record(self, layers: Sequence[int], energy_pj: Sequence[float],
               latency_cycles: Sequence[float]) -> None:
        """The best (energy, latency) each of ``layers`` reached after its latest round."""
        for i, e, lat in zip(np.atleast_1d(layers), np.atleast_1d(energy_pj),
                             np.atleast_1d(latency_cycles)):
            i = int(i)
            e, lat = float(e), float(lat)
            if not (np.isfinite(e) and np.isfinite(lat)):
                raise ValueError(f"importance: non-finite result for layer {i}: {e}, {lat}")
            if self.history[i]:
                prev_e, prev_l = self.history[i][-1]
                improved = e * lat < prev_e * prev_l * (1.0 - 1e-9)
                if improved:
                    self.history[i].append((e, lat))
                else:  # keep the best so far; the history is of bests
                    self.history[i].append((prev_e, prev_l))
                self.stale[i] = 0 if improved else self.stale[i] + 1
                if self.stale[i] >= self.config.patience:
                    self.dead[i] = True
            else:
                self.history[i].append((e, lat))
            self.rounds[i] += 1

    # ------------------------------------------------------------------ Eq. 6.7–6.9
    def gradients(self) -> np.ndarray:
        """``∂f/∂t_i`` per layer (negative = one more round is expected to help)."""
        cfg = self.config
        best = self.best
        e, lat = best[:, 0], best[:, 1]
        total_e = float(np.sum(self.counts * e))
        total_l = float(np.sum(self.counts * lat))
        t = np.maximum(self.rounds, 1).astype(np.float64)

        back = np.zeros_like(best)
        for i, hist in enumerate(self.history):
            if len(hist) > cfg.window:
                back[i] = (np.asarray(hist[-1]) - np.asarray(hist[-1 - cfg.window])) / cfg.window

        optimistic = best - best / t[:, None]
        similar = np.full_like(best, np.inf)
        for g in np.unique(self.groups):
            members = np.flatnonzero(self.groups == g)
            if len(members) < 2:
                continue
            throughput = np.max(self.macs[members] / lat[members])      # MACs per cycle
            energy_per_mac = np.min(e[members] / self.macs[members])    # pJ per MAC
            similar[members, 1] = cfg.beta * self.macs[members] / throughput
            similar[members, 0] = cfg.beta * self.macs[members] * energy_per_mac
        forward = np.minimum(optimistic, similar) - best

        mix = cfg.alpha * back + (1.0 - cfg.alpha) * forward
        return self.counts * (total_l * mix[:, 0] + total_e * mix[:, 1])

    def select(self, k: int = 1) -> np.ndarray:
        """The ``k`` layers for the next round (fewer if fewer are alive), in index order."""
        alive = np.flatnonzero(self.alive)
        if alive.size == 0:
            return alive
        fresh = alive[self.rounds[alive] == 0]
        if fresh.size:                                     # warm-up: t = (1, 1, ..., 1)
            return np.sort(fresh[:k])
        grads = self.gradients()[alive]
        chosen = alive[np.argsort(grads, kind="stable")[:k]]
        return np.sort(chosen)

    @property
    def finished(self) -> bool:
        return bool(self.dead.all())

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds.tolist(), "stale": self.stale.tolist(),
                "dead": self.dead.tolist(), "history": [list(map(list, h)) for h in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = np.asarray(state["rounds"], np.int64)
        self.stale = np.asarray(state["stale"], np.int64)
        self.dead = np.asarray(state["dead"], bool)
        self.history = [[tuple(x) for x in h] for h in state["history"]]
