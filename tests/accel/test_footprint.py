"""The one buffer-footprint formula: its numpy form (validation, samplers, rounding) and its
jax form (the exact and relaxed model) agree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from accel.arch import HardwareConfig, tensor_bits
from accel.mapping import Mapping, footprint_kb, layer_geometry, tile_words
from workloads.layer import Layer

LAYERS = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=96, Hstride=2, Wstride=2),
          Layer.conv2d(R=3, S=2, P=6, Q=9, C=12, K=20, N=2, Hdilation=2, Wdilation=3),
          Layer.gemm(M=13, K_red=1000, N_out=250)]


@jax.jit
def _jax_footprint(log_t, log_s, stride, dilation, keeps, bits, stages):
    log_ext = jnp.cumsum(log_t + log_s, axis=-2)
    words = tile_words(log_ext, stride, dilation, jnp)
    return footprint_kb(words, keeps, bits, stages, jnp)


@pytest.mark.parametrize("preset", ["gemmini_default", "eyeriss"])
def test_numpy_and_jax_footprints_agree_on_random_mappings(preset):
    hw = HardwareConfig.preset(preset)
    template = hw.template_spec
    bits = tensor_bits(hw.to_params(), np)
    rng = np.random.default_rng(0)
    for layer in LAYERS:
        _, stride, dilation = layer_geometry(layer)
        maps = [Mapping.random(layer, hw, rng, stages=int(rng.integers(1, 3)), fit=False)
                for _ in range(16)]
        exact = np.stack([m.footprint_kb(layer, hw) for m in maps])          # [n, level]
        relaxed = _jax_footprint(
            np.log(np.stack([m.temporal for m in maps])).astype(np.float32),
            np.log(np.stack([m.spatial for m in maps])).astype(np.float32),
            stride, dilation, template.keeps_mask, bits,
            np.stack([m.stages for m in maps]).astype(np.float32))
        assert exact.shape == relaxed.shape == (len(maps), template.num_levels)
        assert np.all(exact[:, -1] == 0.0) and np.all(np.asarray(relaxed)[:, -1] == 0.0)
        np.testing.assert_allclose(np.asarray(relaxed), exact, rtol=1e-5)
        assert np.all(exact >= 0.0) and np.any(exact > 0.0)


def test_footprint_is_kept_words_times_bits_times_stages():
    words = np.array([[4.0, 8.0, 16.0], [1024.0, 2048.0, 4096.0]])    # two levels, W I O
    keeps = np.array([[True, False, True], [True, True, True]])
    bits = np.array([8.0, 8.0, 32.0])
    kb = footprint_kb(words, keeps, bits, np.array([2, 1]))
    assert kb.tolist() == [(4 * 8 + 16 * 32) * 2 / 8192.0, 0.0]
    np.testing.assert_array_equal(
        np.asarray(footprint_kb(jnp.asarray(words), keeps, jnp.asarray(bits),
                                jnp.array([2.0, 1.0]), jnp)), kb)
