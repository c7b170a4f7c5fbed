"""``codesign.predictor: sim_hybrid``: the residual learns the simulator, the final pick is by
simulated EDP, simulated layers are charged as samples, and a killed run resumes exactly."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig
from accel.design import design_of
from baco.codesign_loop import codesign
from baco.config import ExperimentConfig
from baco.rounding import Rounder
from baco.run import results_document
from baco.search.gemmini_tiler import gemmini_default
from baco.sim_hybrid import SimLearner
from baco.yardsticks import simulate_design
from perfmodels.atformer.features import tokens_of
from perfmodels.score import network_edp
from workloads.errors import ConfigError

TINY = ExperimentConfig.load(Path(__file__).parent / "data" / "tiny.yaml")
NET = workloads.load(TINY.network)          # BERT at sequence 16: 5 GEMMs
CFG = TINY.codesign.replace(predictor="sim_hybrid", budget_samples=240, sim_rounds=3,
                            sim_top_k=3)


@pytest.fixture(scope="module")
def reference():
    return codesign(NET, config=CFG)


@pytest.mark.slow
def test_the_final_design_is_the_best_simulated_one(reference):
    info = reference.extra["sim_hybrid"]
    assert info["fine_tunes"] >= CFG.sim_rounds and info["designs_simulated"] >= CFG.sim_top_k
    assert reference.samples <= CFG.budget_samples
    design = design_of(reference.hardware, [r.mapping for r in reference.layers])
    stick, _ = simulate_design(list(NET.layers), list(NET.counts), design)
    assert math.isclose(stick.edp, info["chosen_sim_edp"], rel_tol=1e-9)
    assert info["chosen_sim_edp"] == min(info["simulated_edps"])
    # the result's cycles are the fitted hybrid's: close to the simulator's on this design
    _, per_layer = simulate_design(list(NET.layers), list(NET.counts), design)
    model = np.array([r.latency_cycles for r in reference.layers])
    sim = np.array([x.cycles for x in per_layer], np.float64)
    assert np.mean(np.abs(model / sim - 1)) < 0.25


@pytest.mark.slow
def test_the_history_is_on_the_analytic_model_and_never_rises(reference):
    """The refits change the search's own model; its history stays on the analytic one."""
    best = [h.best_edp for h in reference.history]
    assert len(best) > 1 and all(b < a for a, b in zip(best, best[1:]))
    rounder = Rounder(HardwareConfig.preset(TINY.hardware), NET.layers,
                      aware=CFG.instruction_aware, sram_step_kb=CFG.sram_step_kb)
    design = design_of(reference.hardware, [r.mapping for r in reference.layers])
    final, _, _ = network_edp(rounder.analytic_score([design]), NET.counts)
    # the final design was the search's best once: the history's best is at most its EDP
    assert best[-1] <= float(final[0]) * (1 + 1e-9)


@pytest.mark.slow
def test_results_json_puts_its_edp_on_the_named_yardstick(reference):
    config = dataclasses.replace(TINY, codesign=CFG, baselines=[])
    doc = results_document(config, reference, {})
    assert doc["edp_yardstick"] == "instruction_aware"
    assert doc["edp"] == doc["yardsticks"]["instruction_aware"]["edp"]
    assert doc["edp_as_reported"] == reference.edp != doc["edp"]


def test_fine_tuning_lowers_the_error_on_the_simulated_rows():
    layers, counts = list(NET.layers), list(NET.counts)
    designs = []
    for dim in (8, 16):
        hw = dataclasses.replace(HardwareConfig.preset("gemmini_default"), pe_rows=dim,
                                 pe_cols=dim)
        result = gemmini_default(NET, hardware=hw)
        designs.append(design_of(result.hardware, [r.mapping for r in result.layers]))
    analytic = np.stack([np.asarray(Rounder(d.hw, layers).score([d]).cycles[0], np.float64)
                         for d in designs])
    learner = SimLearner(layers, counts, top_k=2, sram_step_kb=1.0, seed=0)
    state = learner.offer(learner.start(), designs, [1.0, 2.0])
    state, cost = learner.simulate_pool(state, analytic)
    assert cost == 2 * len(layers) and state.pool == ()
    sim = np.stack([r.sim_cycles for r in state.records])
    before = np.mean(np.abs(np.log(analytic / sim)))
    state = learner.fine_tune(state)
    hybrid = learner.hybrid(state)
    residual = np.stack([
        np.log(hybrid.predict(layers, d.hw, d.mappings()))
        - tokens_of(layers, d.hw, d.mappings()).log_cycles for d in designs])
    after = np.mean(np.abs(np.log(analytic * np.exp(residual) / sim)))
    assert after < 0.5 * before, (before, after)
    state = learner.offer(state, designs, [1.0, 2.0])     # simulated already: never again
    assert state.pool == ()


@pytest.mark.slow
def test_a_killed_sim_hybrid_run_resumes_to_the_same_result(tmp_path, reference,
                                                          comparable):
    path = tmp_path / "state.npz"

    class Killed(Exception):
        pass

    def kill(info):
        if info.samples > CFG.budget_samples * 0.6:
            raise Killed

    with pytest.raises(Killed):
        codesign(NET, config=CFG, checkpoint=path, on_round=kill)
    resumed = codesign(NET, config=CFG, checkpoint=path, resume=True)
    assert comparable(resumed) == comparable(reference)


def test_a_budget_too_small_for_the_last_simulation_is_refused():
    with pytest.raises(ConfigError, match="sim_top_k"):
        codesign(NET, config=CFG.replace(budget_samples=40, sim_top_k=8))
