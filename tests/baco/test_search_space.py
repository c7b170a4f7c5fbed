"""The baselines' shared machinery: the vectorized sampler agrees with `Mapping`, the batched
scores with `perfmodels.analytic.exact`, and the tracker counts samples as `baco.result` says."""

import inspect

import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig
from baco.errors import ConfigError
from baco.search import BASELINES
from baco.search._space import (
    MappingSampler,
    Tracker,
    canonical_orders,
    cumulative_argmin,
    score_layers,
)
from perfmodels.analytic import exact
from workloads import Layer

GEMMINI = HardwareConfig.preset("gemmini_default")
LAYER = Layer.conv2d(R=3, S=3, P=14, Q=14, C=32, K=64, Hstride=1, Wstride=1)


def test_fit_mask_and_scores_agree_with_mapping_and_exact():
    rng = np.random.default_rng(0)
    sampler = MappingSampler(LAYER, GEMMINI)
    batch = sampler.draw(300, rng)
    ok = sampler.fits(batch)
    assert 0 < ok.sum() < 300            # both cases are exercised
    tags = GEMMINI.template_spec.tags
    for i in range(0, 300, 10):
        assert ok[i] == batch.mapping(i, tags).fits(LAYER, GEMMINI)
    valid = batch.take(np.flatnonzero(ok)[:12])
    cycles, energy = score_layers([LAYER], GEMMINI, [valid])
    for i in range(valid.size):
        out = exact(LAYER, GEMMINI, valid.mapping(i, tags))
        assert cycles[0, i] == pytest.approx(float(out.cycles), rel=1e-5)
        assert energy[0, i] == pytest.approx(float(out.energy_pj), rel=1e-5)


def test_sampler_respects_the_template_slots_and_fanout():
    hw = HardwareConfig.preset("eyeriss")
    sampler = MappingSampler(LAYER, hw)
    batch = sampler.sample(200, np.random.default_rng(1))
    spec = hw.template_spec
    dims = np.array([getattr(LAYER, d) for d in workloads.DIMS])
    assert (np.prod(batch.temporal * batch.spatial, axis=1) == dims).all()
    assert not (batch.spatial > 1)[:, ~spec.spatial_mask].any()
    assert not (batch.temporal > 1)[:, ~spec.temporal_mask].any()
    for i in range(batch.size):
        batch.mapping(i, spec.tags).validate(LAYER, hw)


def test_keys_identify_mappings_and_an_empty_batch_has_none():
    batch = MappingSampler(LAYER, HardwareConfig.preset("eyeriss")).sample(
        20, np.random.default_rng(2))
    keys = batch.keys()
    assert len(keys) == 20 and batch.take(np.array([3, 3])).keys() == [keys[3], keys[3]]
    assert batch.take(np.array([], np.int64)).keys() == []


def test_fullest_spatial_uses_the_whole_array_when_dims_allow():
    options = MappingSampler(LAYER, GEMMINI).fullest_spatial()
    assert options.shape[0] == 1 and options[0].prod() == 256
    odd = Layer.conv2d(R=7, S=7, P=14, Q=14, C=3, K=24)
    assert MappingSampler(odd, GEMMINI).fullest_spatial()[0].prod() == 3 * 12
    eyeriss = MappingSampler(LAYER, HardwareConfig.preset("eyeriss")).fullest_spatial()
    assert len(eyeriss) > 1 and (eyeriss.reshape(len(eyeriss), -1).prod(1) == 256).all()


def test_canonical_orders_merge_permutations_of_unit_loops():
    sampler = MappingSampler(LAYER, GEMMINI)
    rng = np.random.default_rng(2)
    base = sampler.draw(1, rng)
    reps = base.take(np.zeros(50, int))
    order, _ = sampler.orders_and_stages(50, rng)
    reps = reps._replace(order=order)
    real = base.temporal[0] > 1
    canon = canonical_orders(reps)
    # Same relative order of the real loops <=> same canonical order.
    for i in range(50):
        for j in range(50):
            same_real = all(
                [d for d in reps.order[i, l] if real[l, d]] == [d for d in reps.order[j, l]
                                                                if real[l, d]]
                for l in range(real.shape[0]))
            assert same_real == np.array_equal(canon.order[i], canon.order[j])


def test_cumulative_argmin():
    x = np.array([[3.0, 5.0, 2.0, 2.0, 1.0], [1.0, 1.0, 4.0, 0.5, 9.0]])
    assert cumulative_argmin(x).tolist() == [[0, 0, 2, 2, 4], [0, 0, 0, 3, 3]]


def test_tracker_counts_network_points_and_keeps_the_running_best():
    net = workloads.Network.from_layers("toy", [LAYER, Layer.gemm(M=16, K_red=16, N_out=16)] * 1
                                        + [LAYER])
    tracker = Tracker(net)                       # counts: LAYER x2, gemm x1
    rng = np.random.default_rng(3)
    batches = [MappingSampler(l, GEMMINI).sample(4, rng) for l in net.layers]
    cycles = np.array([[4.0, 3.0, 5.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    energy = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 3.0, 1.0]])
    best = tracker.add_block(GEMMINI, batches, cycles, energy, np.arange(4.0))
    # Sample 1: (2*4 + 1) * (2*1 + 2) = 36; 2: (2*3+1)*(2+1) = 21; 3: same picks; 4: 3*3 = 9.
    assert [(h.samples, h.best_edp) for h in tracker.history] == [(1, 36.0), (2, 21.0), (4, 9.0)]
    assert best == 9.0 and tracker.samples == 4
    assert tracker.best_mappings[0] == batches[0].mapping(3, GEMMINI.template_spec.tags)
    tracker.add_block(GEMMINI, batches, cycles * 2, energy, np.arange(4.0) + 4)
    assert tracker.samples == 8 and tracker.best_edp == 9.0 and len(tracker.history) == 3


@pytest.mark.parametrize("name", ["random", "bo", "gemmini_default", "random_pruned"])
def test_every_baseline_has_the_common_signature(name):
    params = inspect.signature(BASELINES[name]).parameters
    assert next(iter(params)) == "network"
    for key in ("budget_samples", "seed"):
        assert params[key].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("name", ["random", "bo", "random_pruned"])
def test_bad_budgets_are_config_errors(name):
    net = workloads.Network.from_layers("toy", [LAYER])
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="budget_samples"):
            BASELINES[name](net, budget_samples=bad, seed=0)


def test_unknown_hardware_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown hardware preset"):
        BASELINES["random_pruned"](workloads.Network.from_layers("toy", [LAYER]),
                                   budget_samples=4, seed=0, hardware="eyeris")
