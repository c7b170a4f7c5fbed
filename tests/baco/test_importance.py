"""The importance scheduler: warm-up, the chain rule of Eq. 6.9, Eq. 6.7–6.8, abandonment."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from baco.checkpoint import load_checkpoint, save_checkpoint
from baco.errors import ConfigError
from baco.importance import (
    ImportanceConfig,
    ImportanceScheduler,
    SchedulerState,
    similarity_groups,
)
from workloads import Layer

conv = Layer.conv2d


def warmed(layers, counts, energy, latency, **cfg):
    s = ImportanceScheduler(layers, counts, ImportanceConfig(**cfg))
    state = s.start()
    assert s.select(state, len(layers)).tolist() == list(range(len(layers)))
    return s, s.record(state, range(len(layers)), energy, latency)


def test_warm_up_gives_every_layer_one_round_first():
    layers = [Layer.gemm(M=8 * (i + 1), K_red=8, N_out=8) for i in range(5)]
    s = ImportanceScheduler(layers, [1] * 5)
    state = s.start()
    assert s.select(state, 2).tolist() == [0, 1]
    state = s.record(state, [0, 1], [1.0, 1.0], [1.0, 1.0])
    assert s.select(state, 2).tolist() == [2, 3]
    state = s.record(state, [2, 3], [1.0, 1.0], [1.0, 1.0])
    assert s.select(state, 2).tolist() == [4]


def test_repeat_counts_weigh_a_layer():
    # Two identical shapes (no similarity pull between distinct groups), one repeated 10 times.
    layers = [conv(R=3, S=3, P=14, Q=14, C=64, K=64), Layer.gemm(M=196, K_red=576, N_out=64)]
    s, state = warmed(layers, [1, 10], [5.0, 5.0], [7.0, 7.0])
    assert s.select(state, 1).tolist() == [1]
    s2, state2 = warmed(layers, [10, 1], [5.0, 5.0], [7.0, 7.0])
    assert s2.select(state2, 1).tolist() == [0]


def test_similar_layer_far_behind_its_group_is_chosen():
    # Same group, same MACs, same EDP share: but layer 1 does 4x worse per MAC than layer 0 in
    # latency, so the similarity term predicts it can catch up.
    a = conv(R=3, S=3, P=28, Q=28, C=64, K=64)
    b = conv(R=3, S=3, P=56, Q=56, C=16, K=64)
    c = Layer.gemm(M=64, K_red=64, N_out=64)
    assert a.macs == b.macs
    s, state = warmed([a, b, c], [1, 1, 1], [10.0, 10.0, 10.0], [10.0, 40.0, 10.0])
    grads = s.gradients(state)
    assert grads[1] < grads[0]
    assert s.select(state, 1).tolist() == [1]


def test_backward_window_prefers_layers_that_are_still_improving():
    layers = [Layer.gemm(M=64, K_red=64, N_out=64), conv(R=3, S=3, P=8, Q=8, C=8, K=8)]
    s, state = warmed(layers, [1, 1], [10.0, 10.0], [10.0, 10.0], window=2, patience=100)
    for step in range(1, 4):   # layer 0 keeps halving its latency; layer 1 barely moves
        state = s.record(state, [0, 1], [10.0, 10.0], [10.0 / 2**step, 10.0 - 1e-3 * step])
    back_only = ImportanceScheduler(layers, [1, 1], ImportanceConfig(alpha=1.0, window=2))
    grads = back_only.gradients(state)
    assert grads[0] < grads[1] < 0


def test_forward_estimate_is_an_optimistic_decrease():
    layers = [Layer.gemm(M=32 * (i + 1), K_red=32, N_out=32) for i in range(3)]
    s, state = warmed(layers, [1, 2, 3], [3.0, 2.0, 1.0], [1.0, 2.0, 3.0], alpha=0.0)
    assert np.all(s.gradients(state) < 0)


def test_layers_that_stop_improving_are_abandoned():
    layers = [Layer.gemm(M=64, K_red=64, N_out=64), Layer.gemm(M=512, K_red=512, N_out=512)]
    s, state = warmed(layers, [1, 1], [1.0, 100.0], [1.0, 100.0], patience=3)
    for _ in range(3):
        assert s.select(state, 1).tolist() == [1]
        state = s.record(state, [1], [100.0], [100.0])       # no improvement
    assert state.dead.tolist() == [False, True]
    assert s.select(state, 1).tolist() == [0]
    for _ in range(3):
        state = s.record(state, [0], [1.0], [1.0])
    assert state.finished and s.select(state, 1).size == 0


def test_a_state_is_a_value_that_a_checkpoint_gives_back_exactly(tmp_path):
    layers = [Layer.gemm(M=16 * (i + 1), K_red=64, N_out=32) for i in range(4)]
    s, state = warmed(layers, [1, 2, 1, 3], [4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0])
    later = s.record(state, [2], [1.5], [2.5])
    assert state.rounds.tolist() == [1, 1, 1, 1] and later.rounds.tolist() == [1, 1, 2, 1]
    save_checkpoint(tmp_path / "s.npz", later)
    twin = load_checkpoint(tmp_path / "s.npz")
    assert isinstance(twin, SchedulerState) and twin.history == later.history
    np.testing.assert_array_equal(s.gradients(twin), s.gradients(later))
    assert s.select(twin, 2).tolist() == s.select(later, 2).tolist()


@given(st.lists(st.tuples(st.floats(1e-3, 1e6), st.floats(1e-3, 1e6)), min_size=2, max_size=8),
       st.integers(1, 3))
def test_gradients_are_finite_and_selection_is_alive(results, k):
    layers = [Layer.gemm(M=8 * (i + 1), K_red=16, N_out=16) for i in range(len(results))]
    e, lat = zip(*results)
    s, state = warmed(layers, [1] * len(layers), e, lat)
    assert np.all(np.isfinite(s.gradients(state)))
    chosen = s.select(state, k)
    assert len(chosen) == min(k, len(layers)) and state.alive[chosen].all()


def test_groups_by_kind_kernel_and_stride():
    layers = [conv(R=3, S=3, P=8, Q=8, C=8, K=8), conv(R=3, S=3, P=4, Q=4, C=16, K=16),
              conv(R=3, S=3, P=4, Q=4, C=16, K=16, Hstride=2, Wstride=2),
              conv(R=1, S=1, P=8, Q=8, C=8, K=8), Layer.gemm(M=4, K_red=4, N_out=4)]
    assert similarity_groups(layers).tolist() == [0, 0, 1, 2, 3]


def test_bad_config_and_input():
    with pytest.raises(ConfigError, match="alpha"):
        ImportanceConfig(alpha=1.5)
    with pytest.raises(ConfigError, match="count"):
        ImportanceScheduler([Layer.gemm(M=2, K_red=2, N_out=2)], [1, 2])
    s = ImportanceScheduler([Layer.gemm(M=2, K_red=2, N_out=2)], [1])
    with pytest.raises(ValueError, match="non-finite"):
        s.record(s.start(), [0], [float("nan")], [1.0])
