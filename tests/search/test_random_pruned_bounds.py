"""Memory bounds of the random-pruned mapper and of the shared batched scoring."""

import importlib

import numpy as np

from accel.arch import HardwareConfig
from baco.search import _space
from baco.search._space import MappingBatch, MappingSampler, score, score_layers
from workloads import Layer

rp = importlib.import_module("baco.search.random_pruned")   # the package re-exports the function

CONV = Layer.conv2d(R=3, S=3, P=14, Q=14, C=32, K=64, pads=(1, 1, 1, 1), name="conv")
PW = Layer.conv2d(P=7, Q=7, C=64, K=128, name="pw")


def _fake_evaluate(template, layers, hws, maps):
    """Stands in for the jitted model: cheap, and a function of the row's mapping only."""
    n = maps.log_temporal.shape[0]
    t = np.asarray(maps.log_temporal).reshape(n, -1).sum(1)
    s = np.asarray(maps.log_spatial).reshape(n, -1).sum(1)
    ll = np.asarray(layers[0]).reshape(n, -1)[:, 0]
    return type("Out", (), {"cycles": t + 2 * s + ll, "energy_pj": t - s + 1.0})()


def test_scoring_packs_one_chunk_at_a_time(monkeypatch):
    hw = HardwareConfig.preset("nvdla_small")
    rng = np.random.default_rng(0)
    m = 3000                                 # 2 layers x 3000 rows: more than one chunk
    batches = [MappingSampler(x, hw).sample(m, rng) for x in (CONV, PW)]
    packed = []
    real_pack = _space._pack
    monkeypatch.setattr(_space, "_pack", lambda b: packed.append(b.size) or real_pack(b))
    monkeypatch.setattr(_space, "evaluate_batch", _fake_evaluate)
    cycles, energy = score_layers([CONV, PW], hw, batches)
    assert cycles.shape == energy.shape == (2, m)
    assert packed and max(packed) <= _space._BUCKETS[-1]
    # Same figures as scoring every row at once (the old, unchunked way).
    joined = MappingBatch.concat(batches)
    maps = real_pack(joined)
    layer_arr = _space.LayerArrays(*(np.stack(xs) for xs in zip(
        *[_space.pack_layer(x) for x in (CONV, PW)])))
    li = np.repeat([0, 1], m)
    whole = _fake_evaluate(None, _space.LayerArrays(*(a[li] for a in layer_arr)), None, maps)
    np.testing.assert_array_equal(cycles.ravel(), whole.cycles)
    np.testing.assert_array_equal(energy.ravel(), whole.energy_pj)
    packed.clear()
    c2, _ = score([CONV, PW], li, [hw], np.zeros(li.size, np.int64), joined)
    assert max(packed) <= _space._BUCKETS[-1]
    np.testing.assert_array_equal(c2, cycles.ravel())


def test_a_round_of_draws_is_capped(monkeypatch):
    hw = HardwareConfig.preset("eyeriss")
    monkeypatch.setattr(rp, "MAX_ROUND_ROWS", 512, raising=False)
    sizes = []
    real = MappingSampler.orders_and_stages

    def spy(self, n, rng, stages=None):
        sizes.append(n)
        return real(self, n, rng, stages)

    monkeypatch.setattr(MappingSampler, "orders_and_stages", spy)
    batch, distinct = rp.pruned_mappings(CONV, hw, 2000, np.random.default_rng(0))
    assert batch.size == 2000 and distinct == 2000
    assert len(set(batch.keys())) == 2000
    assert max(sizes) <= 512
