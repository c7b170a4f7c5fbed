"""Random search (DOSA's protocol): accounting, validity, determinism."""

import itertools

import numpy as np
import pytest

import workloads
from baco.search import BASELINES
from baco.search.random_search import random_gemmini_hardware
from perfmodels.analytic import exact
from workloads import Layer

NET = workloads.Network.from_layers("toy", [
    Layer.conv2d(R=3, S=3, P=14, Q=14, C=32, K=64, pads=(1, 1, 1, 1)),
    Layer.conv2d(P=7, Q=7, C=64, K=128),
    Layer.conv2d(P=7, Q=7, C=64, K=128),
    Layer.gemm(M=1, K_red=128, N_out=10)])


@pytest.fixture(scope="module")
def result():
    return BASELINES["random"](NET, budget_samples=150, seed=7, mappings_per_hw=60)


def test_samples_equal_the_budget_and_history_is_monotone(result):
    assert result.method == "random" and result.samples == 150 and result.seed == 7
    samples = [h.samples for h in result.history]
    best = [h.best_edp for h in result.history]
    assert samples == sorted(set(samples)) and 1 <= samples[0] and samples[-1] <= 150
    assert all(a > b for a, b in itertools.pairwise(best))
    assert result.history[-1].best_edp == pytest.approx(result.edp, rel=1e-5)
    assert [c["samples"] for c in result.extra["hardware"]] == [60, 60, 30]


def test_result_mappings_are_valid_and_exactly_scored(result):
    hw = result.hardware
    assert [r.count for r in result.layers] == [1, 2, 1]
    for row in result.layers:
        row.mapping.validate(row.layer, hw)
        out = exact(row.layer, hw, row.mapping)
        assert row.latency_cycles == pytest.approx(float(out.cycles))
        assert row.energy_pj == pytest.approx(float(out.energy_pj))
    best_block = min(c["best_edp"] for c in result.extra["hardware"])
    assert result.edp == pytest.approx(best_block, rel=1e-5)


def test_same_seed_same_result_other_seed_other_result(result):
    again = BASELINES["random"](NET, budget_samples=150, seed=7, mappings_per_hw=60)
    assert again.edp == result.edp and again.hardware == result.hardware
    assert [r.mapping for r in again.layers] == [r.mapping for r in result.layers]
    assert [(h.samples, h.best_edp) for h in again.history] == \
        [(h.samples, h.best_edp) for h in result.history]
    other = BASELINES["random"](NET, budget_samples=150, seed=8, mappings_per_hw=60)
    assert other.edp != result.edp


def test_random_hardware_is_dosa_s_draw():
    rng = np.random.default_rng(0)
    draws = [random_gemmini_hardware(rng) for _ in range(300)]
    pes = {hw.pe_rows for hw in draws}
    assert pes == {2, 4, 8, 16, 32, 64, 128}
    assert all(hw.pe_rows == hw.pe_cols for hw in draws)
    kbs = {hw.sp_kb for hw in draws} | {hw.acc_kb for hw in draws}
    assert kbs <= {2.0 ** e for e in range(12)} and len(kbs) >= 10
