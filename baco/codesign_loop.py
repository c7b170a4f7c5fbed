"""`baco.codesign`: Algorithm 6 of seed 001 -- multi-start gradient descent on the network's EDP,
then exact refinement where the importance estimator says it pays.

**Descent** (the first ``1 - refine_fraction`` of the budget). Each *start* draws a random
accelerator (PE dim a power of two up to ``max_pe_dim``, buffers a power of two KiB, as DOSA's
``gen_random_hw_config``), takes per layer the best of ``start_mappings`` mappings that fit it
(`start_mappings`), and relaxes them (`perfmodels.relax`: tiling factors as softmax shares of
each dim's log, soft loop orders, continuous stages). ``starts`` of them descend side by side
(vmapped) with Adam (optax) on

    log(Σ count·latency) + log(Σ count·energy)  +  penalty · (infeasibility)

(the log of seed 001's Eq. 6.5 EDP: same optimum, better conditioned), on the minimal hardware
inferred from the tiles (``hw_mode: min_hw``), on free hardware (``free``: PE dims, buffers
and the DRAM bandwidth are variables, the first three grown smoothly to hold the tiles, so
that a start's array widens when its tiles want it) or on fixed hardware, counting padded
DIM x DIM blocks when instruction-aware (`perfmodels.aware`). Every ``round_every`` steps
each start is rounded to a valid design (`baco.rounding`: nearest divisors, argmax loop
orders, rounded stages, the array filled, minimal hardware in 1 KB steps, a power-of-two
bandwidth) and scored exactly, and so is that design with its array narrowed to the power of
two below (`baco.refine.narrow_moves`); the best design is kept. A start whose steps are
used up makes way for a new random one.

**Refinement** (the rest). Rounding loses part of what descent found; exact local moves around
the best design (`baco.refine`; in free mode also the bandwidth halved and doubled) win some
of it back. The importance scheduler (`baco.importance`, §6.5, Eq. 6.7-6.9) picks the layers
each round explores and abandons those that stop improving; without it the layers take turns.
With ``importance.mask_descent`` it also chooses which layers take each descent round's steps
(the others' updates masked).

Sample accounting (`baco.result`): a gradient step of one start, the exact score of one
rounded design or neighbour, each whole-network start candidate and each start's own design
count one sample each.

A run checkpoints (``checkpoint=PATH``) every few rounds into one ``.npz`` written atomically;
``resume=True`` continues from it bit-identically (same final design, EDP and history).
A non-finite loss or gradient sends the start back to its last point with a finite loss, with
half the learning rate and a `CodesignWarning`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from accel.arch import HardwareConfig
from accel.design import Design
from baco.checkpoint import load_checkpoint, save_checkpoint
from baco.codesign_ledger import CodesignWarning, Ledger
from baco.codesign_problem import CodesignProblem
from baco.codesign_refine import Refinement
from baco.codesign_sim import SimRounds, sim_learner
from baco.codesign_starts import StartSlots
from baco.codesign_state import LedgerState, RefineState, SearchState, SlotsState
from baco.config import CodesignConfig
from baco.objective import load_predictor, objective
from baco.profile import timed
from baco.progress import Progress, history_yardstick
from baco.result import CodesignResult, HistoryPoint, LayerResult
from baco.search import base_hardware, resolve_network
from baco.topk import DEFAULT_TOP_K, design_key
from perfmodels.energy import check_area_budget
from perfmodels.score import network_edp, plain_edp
from workloads.errors import ConfigError, InfeasibleError
from workloads.network import Network

__all__ = ["CodesignWarning", "RoundInfo", "codesign", "refuse_other_settings",
           "settings_differences"]

CHECKPOINT_VERSION = 6        # 2: learned loop orders; 3: free-mode DRAM bandwidth;
#                               4: free hardware grown by the tiles, narrowed arrays scored;
#                               5: the search's state saved as it is (`SearchState`);
#                               6: the ledger's top designs for the final pick


class RoundInfo(NamedTuple):
    """Progress after a round, passed to ``on_round``."""

    round: int
    samples: int
    budget_samples: int
    best_edp: float
    seconds: float


def _plain(value: Any) -> Any:
    """`value` as JSON reads it back (tuples as lists), to compare what a run was given."""
    return json.loads(json.dumps(value))


def _leaves_apart(key: str, saved: Any, mine: Any) -> list[str]:
    """``KEY: SAVED there, MINE now`` for each leaf of two JSON values that differs (a mapping
    is gone into; a long value is only named)."""
    if isinstance(saved, dict) and isinstance(mine, dict):
        return [line for k in sorted(set(saved) | set(mine), key=str)
                for line in _leaves_apart(f"{key}.{k}", saved.get(k), mine.get(k))]
    if saved == mine:
        return []
    if max(len(json.dumps(saved)), len(json.dumps(mine))) > 40:
        return [f"{key} differs"]
    return [f"{key}: {json.dumps(saved)} there, {json.dumps(mine)} now"]


def settings_differences(saved: Any, config: CodesignConfig, net: Network,
                         hw: HardwareConfig) -> list[str]:
    """What a run on `config`, `net` and `hw` changes from the one a checkpoint's header
    (`_Search.checkpoint`: its version, config, network, hardware) was written for, one line
    per setting (`_leaves_apart`); empty when the run may resume it."""
    if not isinstance(saved, dict) or saved.get("version") != CHECKPOINT_VERSION:
        version = saved.get("version") if isinstance(saved, dict) else None
        return [f"checkpoint version: {version} there, {CHECKPOINT_VERSION} now"]
    mine_config = config.to_dict()
    defaults = CodesignConfig().to_dict()
    for key in [k for k in mine_config if k not in saved["config"]]:
        if mine_config[key] == defaults[key]:  # a checkpoint from before that option
            mine_config.pop(key)
    return [line for key, theirs, mine in (
        ("codesign", saved["config"], mine_config),
        ("network", saved["network"], net.to_dict()["layers"]),
        ("hardware", saved["hardware"], hw.to_dict()))
        for line in _leaves_apart(key, _plain(theirs), _plain(mine))]


def refuse_other_settings(path: str | os.PathLike, config: CodesignConfig, net: Network,
                          hw: HardwareConfig) -> None:
    """Refuse to resume the checkpoint at `path` with other settings than it was written for,
    naming each (`settings_differences`), before any work; reads only its header."""
    saved = load_checkpoint(path, only=("version", "config", "network", "hardware"))
    differ = settings_differences(saved, config, net, hw)
    if differ:
        raise ConfigError(f"--resume: the checkpoint {path} was written with other settings: "
                          f"{'; '.join(differ)}; resume with the same --budget/--seed/--set, "
                          "or run with --force instead of --resume to start over")


# --------------------------------------------------------------------------- the search
class _Search:
    """One run: its phases (descent, refinement, with ``sim_hybrid`` a final simulation), each
    round a function from one `SearchState` to the next over the parts that know how: the
    problem, the ledger of samples and best design, the start slots, the refinement and the
    simulation rounds; see the module docstring."""

    def __init__(self, net: Network, hw: HardwareConfig, config: CodesignConfig,
                 top_k: int = DEFAULT_TOP_K) -> None:
        self.net = net
        self.config = config
        self.base_hw = hw
        check_area_budget(config.area_budget_mm2, hw, config.sram_step_kb,
                          fixed=config.hw_mode == "fixed")
        hybrid = load_predictor(config, hw.template_spec)
        learner, reserve = sim_learner(net, hw, config, hybrid)
        self.problem = CodesignProblem(net, hw, config, hybrid, analytic=objective)
        self.ledger = Ledger(learner, top_k=top_k,
                             history_score=None if learner is None else self._analytic_edp)
        self.budget = config.budget_samples - reserve
        self.descent_budget = round(self.budget * (1.0 - config.refine_fraction))
        self.slots = StartSlots(self.problem, self.ledger, self.descent_budget)
        self.refinement = Refinement(self.problem, self.ledger)
        self.sim = (None if learner is None
                    else SimRounds(learner, self.problem, self.ledger, self.budget))

    def _analytic_edp(self, design: Design) -> float:
        """`design`'s EDP on the analytic model (no residual): the fixed yardstick of a
        ``sim_hybrid`` run's history, whose own model changes at every simulation round."""
        metrics = self.problem.rounder.analytic_score([design])
        return float(network_edp(metrics, self.problem.counts)[0][0])

    def start(self) -> SearchState:
        """The state before the first round."""
        return SearchState(round=0, phase="descent", done=False, ledger=LedgerState.start(),
                           slots=SlotsState.start(self.config.starts),
                           refine=RefineState(refiner=None, cursor=0),
                           sim=None if self.sim is None else self.sim.start())

    # ------------------------------------------------------------------ one round
    def step_round(self, state: SearchState) -> SearchState:
        """One round of the current phase; done when the budget is spent."""
        if state.phase == "descent":
            with timed("descent round"):
                state, stepped = (self.slots.descent_round(state, state.round)
                                  if self.config.descent else self.slots.starts_round(state))
            if stepped:
                return self._next_round(state)
            state = state.replace(phase="refine")
        if state.ledger.best is not None:
            with timed("refinement round"):
                state, stepped = self.refinement.round(state, self.budget, state.round)
            if stepped:
                return self._next_round(state)
        if self.sim is not None and state.phase != "final":
            state = self.sim.round(state.replace(phase="final"), final=True)
        return state.replace(done=True)

    def _next_round(self, state: SearchState) -> SearchState:
        """The round counted; with ``sim_hybrid``, a simulation round every ``budget /
        sim_rounds`` samples (the last one comes when the budget is spent)."""
        state = state.replace(round=state.round + 1)
        return state if self.sim is None else self.sim.if_due(state)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, state: SearchState) -> dict[str, Any]:
        """What the checkpoint holds: the state as it is, the seconds run so far, and what it
        was run on."""
        return {"version": CHECKPOINT_VERSION, "config": self.config.to_dict(),
                "network": self.net.to_dict()["layers"], "hardware": self.base_hw.to_dict(),
                "state": state.replace(ledger=state.ledger.replace(
                    seconds=self.ledger.seconds()))}

    def resume(self, saved: Any, where: str) -> SearchState:
        """The state a checkpoint holds, after checking it was written for this run."""
        if not isinstance(saved, dict) or saved.get("version") != CHECKPOINT_VERSION:
            version = saved.get("version") if isinstance(saved, dict) else None
            raise ConfigError(f"checkpoint {where}: version {version} is not "
                              f"{CHECKPOINT_VERSION}; delete it to start over")
        differ = settings_differences(saved, self.config, self.net, self.base_hw)
        if differ:
            raise ConfigError(f"checkpoint {where}: it was written for a different config "
                              f"({'; '.join(differ)}); resume with the same config, or delete "
                              "it to start over")
        state = saved["state"]
        self.ledger.seconds_before = state.ledger.seconds
        if self.sim is not None:          # the model the rest descends and scores on
            self.sim.follow(state)
        return state

    # ------------------------------------------------------------------ result
    def result(self, state: SearchState) -> CodesignResult:
        """The best design's `CodesignResult`; without ``sim_hybrid`` (whose final design is
        already the simulator's pick), with the ledger's top designs as its ``candidates``
        (the best first) for `baco.final_pick`."""
        best = state.ledger.best
        if best is None:
            raise InfeasibleError("codesign: the budget ended before any design was rounded; "
                                  "raise codesign.budget_samples")
        result = self._result_of(state, best)
        if self.sim is not None:
            return result
        key = design_key(best)
        others = [d for _, k, d in state.ledger.top if k != key]
        candidates = (result, *(self._result_of(state, d)
                                for d in others[:self.ledger.top_k - 1]))
        return dataclasses.replace(result, candidates=candidates)

    def _result_of(self, state: SearchState, best: Design) -> CodesignResult:
        """`best` scored exactly, with the run's samples, history and facts."""
        rounder, problem = self.problem.rounder, self.problem
        mappings = rounder.check(best)
        metrics = rounder.score([best])
        plain = (plain_edp(best, problem.layers, problem.counts)
                 if self.config.instruction_aware else None)
        fused_with: dict[int, list[str]] = {}
        fusion = None
        if rounder.fusion is not None:
            alone = rounder.layer_score([best])
            chains = rounder.fusion.describe(np.asarray(alone.cycles[0], np.float64),
                                             np.asarray(alone.energy_pj[0], np.float64),
                                             best.hw)
            fused_with, fusion = rounder.fusion.summary(chains, best.hw)
        layers = tuple(
            LayerResult(layer=layer, count=int(count), mapping=m,
                        latency_cycles=float(metrics.cycles[0, b]),
                        energy_pj=float(metrics.energy_pj[0, b]),
                        fused_with=tuple(fused_with.get(b, ())))
            for b, (layer, count, m) in enumerate(zip(self.net.layers, self.net.counts,
                                                      mappings)))
        history = tuple(HistoryPoint(samples=int(s), seconds=float(t), best_edp=float(e))
                        for s, t, e in state.ledger.history)
        extra = {
            "scorer": "instruction_aware" if self.config.instruction_aware else "analytic",
            "predictor": self.config.predictor,
            "rounds": state.round, "starts_drawn": state.slots.next_start,
            "config": self.config.to_dict(), "warnings": list(state.ledger.warnings),
        }
        if plain is not None:
            extra["edp_analytic"] = plain
        if fusion is not None:
            extra["fusion"] = fusion
        if self.sim is not None:
            extra["sim_hybrid"] = self.sim.learner.summary(state.sim.learner, best)
        return CodesignResult(method="baco", network=self.net.name, hardware=best.hw,
                              layers=layers, samples=state.ledger.samples, history=history,
                              seed=self.config.seed, extra=extra)


def _history_best(state: SearchState) -> float:
    """The best EDP of the run's history (what its progress shows): the search's own best,
    except with ``sim_hybrid`` (`history_yardstick`)."""
    history = state.ledger.history
    return history[-1][2] if history else float("inf")


def codesign(network: Network | str, template: str = "gemmini",
             config: CodesignConfig | None = None, *, hardware: HardwareConfig | None = None,
             progress: bool | Progress = False, checkpoint: str | os.PathLike | None = None,
             resume: bool = False, on_round: Callable[[RoundInfo], None] | None = None,
             top_k: int = DEFAULT_TOP_K) -> CodesignResult:
    """Co-design an accelerator of `template` and every layer's program for `network`.

    Args:
      network: a `workloads.Network`, a zoo name (``"resnet50"``) or an ONNX path.
      template: the accelerator template (``"gemmini"``); ignored if `hardware` is given.
      config: the search's hyperparameters (`CodesignConfig`).
      hardware: base hardware; its template and fixed fields (word widths; DRAM bandwidth
        unless ``free``) are kept, and in ``fixed`` mode it is the hardware.
      progress: show progress on stderr (`baco.progress`): True for a display of its own, or
        a run's `Progress` to show it as one of its phases.
      checkpoint: ``.npz`` path written every ``config.checkpoint_every`` rounds and at the end.
      resume: continue from `checkpoint` if it exists (same config required).
      on_round: called after every round with a `RoundInfo`.
      top_k: the best distinct designs kept as the result's ``candidates`` for the final
        pick (`baco.final_pick`).

    Returns:
      A `CodesignResult` (method ``"baco"``): the best rounded design, scored exactly.

    >>> import workloads
    >>> from workloads.layer import Layer
    >>> net = workloads.Network.from_layers("tiny", [Layer.gemm(M=64, K_red=64, N_out=64)])
    >>> cfg = CodesignConfig(budget_samples=60, starts=2, steps_per_start=20, round_every=10)
    >>> result = codesign(net, config=cfg)
    >>> result.samples <= 60 and result.edp > 0
    True
    """
    config = config or CodesignConfig()
    net = resolve_network(network)
    hw = base_hardware(template, hardware)
    with timed("setup"):
        search = _Search(net, hw, config, top_k=top_k)
    ckpt = pathlib.Path(checkpoint) if checkpoint is not None else None
    resumed = resume and ckpt is not None and ckpt.exists()
    state = (search.resume(load_checkpoint(ckpt), str(ckpt)) if resumed else search.start())
    shown = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    yardstick = history_yardstick(config)
    shown.phase("search baco", config.budget_samples, completed=state.ledger.samples,
                best_edp=_history_best(state), yardstick=yardstick,
                before_update="compiling baco")
    if resumed:
        shown.note(f"baco: resuming from {ckpt}: round {state.round}, {state.ledger.samples} "
                   f"of {config.budget_samples} samples done, best EDP "
                   f"{_history_best(state):.4g} ({yardstick})" if state.ledger.samples
                   else f"baco: resuming from {ckpt}")
    try:
        while not state.done:
            state = search.step_round(state)
            shown.update(state.ledger.samples, _history_best(state))
            if ckpt is not None and (state.done or state.round % config.checkpoint_every == 0):
                with timed("checkpoint"):
                    save_checkpoint(ckpt, search.checkpoint(state))
            if on_round is not None:
                on_round(RoundInfo(state.round, state.ledger.samples, config.budget_samples,
                                   state.ledger.best_edp, search.ledger.seconds()))
    finally:
        if shown is not progress:
            shown.close()
    with timed("result"):
        return search.result(state)
