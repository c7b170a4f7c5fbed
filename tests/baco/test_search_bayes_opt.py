"""Bayesian optimization (DOSA's bo.py shape): the GP's LCB ranking, the budget plan, and the
search's accounting, validity and determinism."""

import itertools

import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig
from baco.search import BASELINES
from baco.search._space import MappingSampler, score_layers
from baco.search.bayes_opt import KB_CHOICES, PE_CHOICES, LcbRanker, mapping_features, plan_budget
from workloads import Layer

NET = workloads.Network.from_layers("toy", [
    Layer.conv2d(R=3, S=3, P=14, Q=14, C=32, K=64, pads=(1, 1, 1, 1)),
    Layer.gemm(M=49, K_red=64, N_out=128)])


def _bowl(X):
    return ((X - 0.3) ** 2).sum(1) + 0.5 * np.sin(3 * X[:, 0])


def test_lcb_ranking_follows_the_gp_posterior():
    rng = np.random.default_rng(0)
    X, cand = rng.uniform(-2, 2, (40, 4)), rng.uniform(-2, 2, (500, 4))
    ranker = LcbRanker(kappa=1.0).fit(X, _bowl(X))
    top = ranker.rank(cand)[:10]
    truth = _bowl(cand)
    # An ignored GP (any order unrelated to the data) puts the picks near the median.
    assert truth[top].mean() < np.quantile(truth, 0.1)
    mean, std = ranker.predict(cand)
    assert np.allclose(ranker.lcb(cand), mean - std)
    assert np.array_equal(top, np.argsort(mean - std, kind="stable")[:10])


def test_kappa_trades_mean_for_uncertainty():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (30, 2))
    cand = np.concatenate([rng.uniform(-1, 1, (200, 2)), rng.uniform(4, 6, (20, 2))])
    greedy = LcbRanker(kappa=0.0).fit(X, _bowl(X))
    explore = LcbRanker(kappa=20.0).fit(X, _bowl(X))
    _, std = greedy.predict(cand)
    assert std[explore.rank(cand)[:5]].mean() > std[greedy.rank(cand)[:5]].mean()


def test_software_lcb_picks_beat_random_candidates_on_real_mappings():
    hw = HardwareConfig.preset("gemmini_default")
    layer = NET.layers[0]
    rng = np.random.default_rng(2)
    sampler = MappingSampler(layer, hw)
    train, cand = sampler.sample(40, rng), sampler.sample(400, rng)
    (c1,), (e1,) = score_layers([layer], hw, [train])
    (c2,), (e2,) = score_layers([layer], hw, [cand])
    ranker = LcbRanker().fit(mapping_features(train), np.log(c1 * e1))
    top = ranker.rank(mapping_features(cand))[:10]
    assert np.median(np.log(c2 * e2)[top]) < np.quantile(np.log(c2 * e2), 0.25)


@pytest.mark.parametrize("budget", [1, 2, 3, 7, 40, 999, 1000, 5000, 12100])
def test_plan_spends_exactly_the_budget(budget):
    p = plan_budget(budget)
    assert p["sw_train"] >= 1 and p["hw_train"] >= 1
    assert (p["hw_train"] + p["hw_trial"]) * p["per_hw"] + p["extra_trials"] == budget
    assert p["per_hw"] == p["sw_train"] + p["sw_trial"]
    if budget == 12100:     # DOSA's bo.py settings exactly
        assert (p["hw_train"], p["hw_trial"], p["sw_train"], p["sw_trial"]) == (100, 10, 100, 10)


@pytest.fixture(scope="module")
def result():
    return BASELINES["bo"](NET, budget_samples=40, seed=11)


def test_bo_accounting_validity_and_grid(result):
    assert result.method == "bo" and result.samples == 40
    plan = result.extra["plan"]
    assert len(result.extra["hardware"]) == plan["hw_train"] + plan["hw_trial"]
    best = [h.best_edp for h in result.history]
    assert all(a > b for a, b in itertools.pairwise(best))
    assert result.history[-1].samples <= 40
    assert result.history[-1].best_edp == pytest.approx(result.edp, rel=1e-5)
    hw = result.hardware
    assert hw.pe_rows in PE_CHOICES and hw.sp_kb in KB_CHOICES and hw.acc_kb in KB_CHOICES
    for row in result.layers:
        row.mapping.validate(row.layer, hw)


def test_bo_is_deterministic_for_a_seed(result):
    again = BASELINES["bo"](NET, budget_samples=40, seed=11)
    assert again.edp == result.edp and again.hardware == result.hardware
    assert [r.mapping for r in again.layers] == [r.mapping for r in result.layers]
    assert again.extra["hardware"] == result.extra["hardware"]
