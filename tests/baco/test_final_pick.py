"""The final pick: every search's top designs by its own score simulated, the best kept."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.design import Design, design_of
from baco.codesign_ledger import Ledger
from baco.codesign_state import LedgerState
from baco.config import ExperimentConfig, FinalPickConfig
from baco.final_pick import final_pick, judge_result
from baco.progress import Progress
from baco.result import CodesignResult
from baco.run import _run_baseline, baselines
from baco.topk import design_key, offer
from baco.yardsticks import cache_key
from workloads import Network
from workloads.errors import ConfigError
from workloads.layer import Layer

NET = Network.from_layers("two", [Layer.gemm(M=64, K_red=64, N_out=64),
                                  Layer.gemm(M=64, K_red=128, N_out=32)])
SEARCHES = {
    "random": {"budget_samples": 60, "mappings_per_hw": 20},
    "bo": {"budget_samples": 40},
    "random_pruned": {"budget_samples": 40, "hardware": "gemmini_default"},
}


def _design(i: int) -> Design:
    hw = HardwareConfig.preset("gemmini_default")
    arrays = np.full((1, 3, 7), i, np.int64)
    return Design(hw=hw, temporal=arrays, spatial=arrays, order=arrays, stages=arrays[..., 0])


def _same_design(a: CodesignResult, b: CodesignResult) -> bool:
    return design_key(design_of(a.hardware, [r.mapping for r in a.layers])) == design_key(
        design_of(b.hardware, [r.mapping for r in b.layers]))


def _check_pick(result: CodesignResult, top_k: int) -> CodesignResult:
    """The pick of `result` is its candidates' simulated-EDP minimum, its samples the
    search's plus the distinct layers simulated."""
    picked = final_pick(result, FinalPickConfig(mode="simulated", top_k=top_k))
    candidates = result.candidates[:top_k]
    assert 1 < len(candidates) <= top_k
    assert _same_design(candidates[0], result)           # the search's own best comes first
    assert len({design_key(design_of(c.hardware, [r.mapping for r in c.layers]))
                for c in candidates}) == len(candidates)
    sims = [judge_result(c).simulated.edp for c in candidates]
    assert picked.extra["final_pick"] == "simulated"
    assert picked.extra["final_pick_candidates"] == len(candidates)
    assert picked.extra["final_pick_sim_edps"] == sims
    assert judge_result(picked).simulated.edp == min(sims)
    assert _same_design(picked, candidates[int(np.argmin(sims))])
    simulated = {cache_key(r.layer, r.mapping, c.hardware, None)
                 for c in candidates for r in c.layers}
    assert picked.samples == result.samples + len(simulated)
    assert picked.history == result.history and picked.candidates == ()
    return picked


def test_a_top_list_keeps_the_k_best_distinct_designs():
    entries = [(5.0, "a", 1), (2.0, "b", 2), (2.0, "a", 3), (math.inf, "c", 4), (3.0, "d", 5),
               (1.0, "e", 6)]
    top = offer((), entries, 3)
    assert top == ((1.0, "e", 6), (2.0, "b", 2), (3.0, "d", 5))
    assert offer(top, [(9.0, "f", 7)], 3) == top


def test_the_ledger_keeps_its_top_designs_apart_from_the_best():
    class Passing:
        def check(self, design):
            return []

    class State:                      # the part of a `SearchState` the ledger touches
        def __init__(self, ledger):
            self.ledger, self.sim = ledger, None

        def replace(self, **changes):
            out = State(self.ledger)
            out.__dict__.update(changes)
            return out

    ledger = Ledger(top_k=2)
    designs = [_design(i) for i in range(4)]
    state = ledger.consider(State(LedgerState.start()), Passing(), designs,
                            np.array([4.0, 1.0, 3.0, np.nan]))
    state = ledger.consider(state, Passing(), [designs[1], designs[0]], np.array([1.0, 2.0]))
    assert state.ledger.best is designs[1] and state.ledger.best_edp == 1.0
    assert [(e, d) for e, _, d in state.ledger.top] == [(1.0, designs[1]), (2.0, designs[0])]


@pytest.fixture(scope="module")
def found():
    return {name: baselines()[name](NET, seed=0, **options) for name, options in SEARCHES.items()}


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_a_baseline_returns_the_simulators_pick_of_its_top_designs(found, name):
    _check_pick(found[name], top_k=4)


def test_with_the_pick_off_a_search_returns_its_own_best(found):
    result = found["random"]
    kept = final_pick(result, FinalPickConfig(mode="none", top_k=4))
    assert kept.extra["final_pick"] == "none"
    assert _same_design(kept, result) and kept.samples == result.samples
    assert kept.candidates == ()
    assert final_pick(kept, FinalPickConfig()) is kept       # a picked result stays as it is


def test_a_fixed_design_is_its_own_pick():
    result = baselines()["gemmini_default"](NET, budget_samples=1, seed=0)
    picked = final_pick(result, FinalPickConfig())
    assert picked.extra["final_pick"] == "simulated"
    assert picked.extra["final_pick_candidates"] == 1
    assert _same_design(picked, result) and picked.samples == result.samples


def test_sim_hybrids_own_final_selection_is_recorded_not_repeated(found):
    result = dataclasses.replace(found["bo"], extra={"sim_hybrid": {"designs_simulated": 7}})
    picked = final_pick(result, FinalPickConfig())
    assert picked.extra["final_pick"] == "simulated"
    assert picked.extra["final_pick_candidates"] == 7
    assert _same_design(picked, result) and picked.samples == result.samples


@pytest.mark.parametrize("mode", ["simulated", "none"])
def test_a_run_hands_its_top_k_to_the_search_and_picks_by_the_config(mode):
    config = ExperimentConfig.from_dict({"name": "t", "network": "x",
                                         "final_pick": {"mode": mode, "top_k": 2}})
    result = _run_baseline("random", baselines()["random"], NET, {"mappings_per_hw": 20},
                           dataclasses.replace(config, codesign=config.codesign.replace(
                               budget_samples=60, seed=0)),
                           HardwareConfig.preset("gemmini_default"),
                           progress=Progress(enabled=False))
    assert result.extra["final_pick"] == mode
    assert result.extra["final_pick_candidates"] == (2 if mode == "simulated" else 1)
    assert (result.samples > 60) == (mode == "simulated")


@pytest.mark.parametrize("section, field", [({"mode": "best"}, "final_pick.mode"),
                                            ({"top_k": 0}, "final_pick.top_k"),
                                            ({"topk": 2}, "final_pick.topk")])
def test_a_bad_final_pick_names_the_file_and_field(tmp_path, section, field):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: t\nnetwork: resnet50\nfinal_pick: {section}\n")
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.load(path)
    assert str(path) in str(info.value) and field in str(info.value)


@pytest.mark.slow
def test_dosa_and_baco_return_the_simulators_pick_of_their_top_designs():
    from baco.codesign_loop import codesign
    from baco.config import CodesignConfig

    dosa = baselines()["dosa"](NET, budget_samples=60, seed=0, starts=2, gd_iters=20,
                               round_steps=10, start_mappings_per_layer=2)
    _check_pick(dosa, top_k=4)
    baco = codesign(NET, config=CodesignConfig(budget_samples=60, starts=2, steps_per_start=20,
                                               round_every=10), top_k=3)
    _check_pick(baco, top_k=3)
