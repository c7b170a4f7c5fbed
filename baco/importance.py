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

import numpy as np
from flax import struct

from perfmodels.score import network_totals
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


@struct.dataclass
class SchedulerState:
    """A scheduler's progress, a value (`ImportanceScheduler` returns a new one per record):
    per layer the rounds it had (``t_i``), its rounds in a row without improvement, whether it
    was abandoned, and the history of its best (energy_pj, latency_cycles) after each round."""

    rounds: np.ndarray                                        # [layer] int64
    stale: np.ndarray                                         # [layer] int64
    dead: np.ndarray                                          # [layer] bool
    history: tuple[tuple[tuple[float, float], ...], ...]      # per layer, per round

    @property
    def best(self) -> np.ndarray:
        """``[layer, (energy_pj, latency_cycles)]``, the best so far (inf before warm-up)."""
        return np.array([h[-1] if h else (np.inf, np.inf) for h in self.history], np.float64)

    @property
    def alive(self) -> np.ndarray:
        return ~self.dead

    @property
    def finished(self) -> bool:
        return bool(self.dead.all())


class ImportanceScheduler:
    """Chooses which layers get the next round of gradient steps: the network's counts, MACs
    and similarity groups, and pure functions of a `SchedulerState`.

    `start` gives the first state; `select` the layers of the next round; after the round,
    `record` each chosen layer's best (energy, latency) so far, which returns the next state.
    Every layer gets one warm-up round first.

    >>> layers = [Layer.gemm(M=64, K_red=64, N_out=64), Layer.gemm(M=512, K_red=512, N_out=512)]
    >>> s = ImportanceScheduler(layers, counts=[1, 1])
    >>> state = s.start()
    >>> s.select(state, 2).tolist()               # warm-up: every layer once
    [0, 1]
    >>> state = s.record(state, [0, 1], energy_pj=[1e3, 1e6], latency_cycles=[1e3, 1e6])
    >>> s.select(state, 1).tolist()               # the big layer dominates the product
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

    def start(self) -> SchedulerState:
        """No layer has had a round."""
        n = len(self.macs)
        return SchedulerState(rounds=np.zeros(n, np.int64), stale=np.zeros(n, np.int64),
                              dead=np.zeros(n, bool), history=((),) * n)

    # ------------------------------------------------------------------ bookkeeping
    def record(self, state: SchedulerState, layers: Sequence[int], energy_pj: Sequence[float],
               latency_cycles: Sequence[float]) -> SchedulerState:
        """The state after ``layers`` reached these best (energy, latency) in their latest
        round."""
        rounds, stale, dead = state.rounds.copy(), state.stale.copy(), state.dead.copy()
        history = list(state.history)
        for i, e, lat in zip(np.atleast_1d(layers), np.atleast_1d(energy_pj),
                             np.atleast_1d(latency_cycles)):
            i = int(i)
            e, lat = float(e), float(lat)
            if not (np.isfinite(e) and np.isfinite(lat)):
                raise ValueError(f"importance: non-finite result for layer {i}: {e}, {lat}")
            if history[i]:
                prev_e, prev_l = history[i][-1]
                improved = e * lat < prev_e * prev_l * (1.0 - 1e-9)
                # keep the best so far; the history is of bests
                history[i] += ((e, lat) if improved else (prev_e, prev_l),)
                stale[i] = 0 if improved else stale[i] + 1
                if stale[i] >= self.config.patience:
                    dead[i] = True
            else:
                history[i] += ((e, lat),)
            rounds[i] += 1
        return SchedulerState(rounds=rounds, stale=stale, dead=dead, history=tuple(history))

    # ------------------------------------------------------------------ Eq. 6.7–6.9
    def gradients(self, state: SchedulerState) -> np.ndarray:
        """``∂f/∂t_i`` per layer (negative = one more round is expected to help)."""
        cfg = self.config
        best = state.best
        e, lat = best[:, 0], best[:, 1]
        _, total_l, total_e = map(float, network_totals(lat, e, self.counts))
        t = np.maximum(state.rounds, 1).astype(np.float64)

        back = np.zeros_like(best)
        for i, hist in enumerate(state.history):
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

    def select(self, state: SchedulerState, k: int = 1) -> np.ndarray:
        """The ``k`` layers for the next round (fewer if fewer are alive), in index order."""
        alive = np.flatnonzero(state.alive)
        if alive.size == 0:
            return alive
        fresh = alive[state.rounds[alive] == 0]
        if fresh.size:                                     # warm-up: t = (1, 1, ..., 1)
            return np.sort(fresh[:k])
        grads = self.gradients(state)[alive]
        chosen = alive[np.argsort(grads, kind="stable")[:k]]
        return np.sort(chosen)
