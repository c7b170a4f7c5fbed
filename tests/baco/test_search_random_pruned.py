"""The Timeloop-like random-pruned mapper on fixed hardware."""

import itertools

import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig
from baco.search import BASELINES
from baco.search._space import MappingSampler, canonical_orders, score_layers
from baco.search.random_pruned import pruned_mappings
from workloads import Layer

CONV = Layer.conv2d(R=3, S=3, P=14, Q=14, C=32, K=64, pads=(1, 1, 1, 1), name="conv")
NET = workloads.Network.from_layers("toy", [CONV, Layer.conv2d(P=7, Q=7, C=64, K=128, name="pw")])


def test_pruned_mappings_are_distinct_valid_and_fill_the_array():
    hw = HardwareConfig.preset("eyeriss")
    batch, distinct = pruned_mappings(CONV, hw, 300, np.random.default_rng(0))
    assert distinct == 300 and len(set(batch.keys())) == 300
    sampler = MappingSampler(CONV, hw)
    assert sampler.fits(batch).all()
    fullest = sampler.fullest_spatial()[0].prod()
    assert (batch.spatial.reshape(300, -1).prod(1) == fullest).all()
    assert np.array_equal(canonical_orders(batch).order, batch.order)
    for i in range(0, 300, 37):
        batch.mapping(i, hw.template_spec.tags).validate(CONV, hw)


def test_small_mapspace_is_exhausted_then_repeated():
    tiny = Layer.gemm(M=1, K_red=4, N_out=2)
    hw = HardwareConfig.preset("gemmini_default")
    batch, distinct = pruned_mappings(tiny, hw, 400, np.random.default_rng(1))
    assert batch.size == 400 and 1 <= distinct < 400
    assert len(set(batch.keys())) == distinct


def test_random_pruned_beats_the_median_random_mapping():
    hw = HardwareConfig.preset("nvdla_small")
    result = BASELINES["random_pruned"](NET, budget_samples=200, seed=2, hardware=hw)
    rng = np.random.default_rng(3)
    randoms = [MappingSampler(layer, hw).sample(200, rng) for layer in NET.layers]
    cycles, energy = score_layers(list(NET.layers), hw, randoms)
    for row, c, e in zip(result.layers, cycles, energy):
        assert row.edp < np.median(c * e)


@pytest.mark.parametrize("preset", ["eyeriss", "nvdla_small", "nvdla_large", "gemmini_default"])
def test_random_pruned_on_each_preset(preset):
    result = BASELINES["random_pruned"](NET, budget_samples=64, seed=5, hardware=preset)
    hw = HardwareConfig.preset(preset)
    assert result.method == "random_pruned" and result.samples == 64
    assert result.hardware == hw
    best = [h.best_edp for h in result.history]
    assert all(a > b for a, b in itertools.pairwise(best))
    assert best[-1] == pytest.approx(result.edp, rel=1e-5)
    for row in result.layers:
        row.mapping.validate(row.layer, hw)
    again = BASELINES["random_pruned"](NET, budget_samples=64, seed=5, hardware=preset)
    assert [r.mapping for r in again.layers] == [r.mapping for r in result.layers]
