"""Instruction awareness: padding of DIM x DIM blocks, as a wrapper of the analytic model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from baco.errors import ConfigError
from perfmodels import aware as aware_model
from perfmodels import relax
from perfmodels.analytic import exact, fast_jit, pack_layer, pack_mapping
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")


def test_a_full_array_costs_what_the_plain_model_says():
    layer = Layer.conv2d(R=3, S=3, P=16, Q=16, C=64, K=64)
    m = Mapping.from_timeloop("L3[WIO] P16 R3 S3 - L2[WI] K4 K16X - L1[O] C4 C16X - L0[W] Q16")
    # the instruction-aware model counts the per-load DMA latency (perfmodels.latency); its
    # instruction costs (perfmodels.aware.array_cycles) are nil with full 16-row computes
    plain = exact(layer, HW, m, load_latency=True)
    aware = aware_model.exact(layer, HW, m, aware=True)
    for field in ("cycles", "energy_pj", "macs", "footprint_kb"):
        np.testing.assert_allclose(getattr(aware, field), getattr(plain, field), rtol=1e-5)
    assert float(exact(layer, HW, m).cycles) < float(aware.cycles)   # Timeloop's roofline


def test_half_empty_blocks_pay_for_their_padding():
    layer = Layer.conv2d(R=1, S=1, P=16, Q=16, C=8, K=64)
    m = Mapping.from_timeloop("L3[WIO] P16 - L2[WI] K16X - L1[O] K4 C8X - L0[W] Q16")
    plain = exact(layer, HW, m)
    aware = aware_model.exact(layer, HW, m, aware=True)
    assert float(aware.macs) == 2 * float(plain.macs)                 # 8 real rows of 16
    assert float(aware.compute_cycles) == pytest.approx(float(plain.compute_cycles))
    assert float(aware.energy_pj) > float(plain.energy_pj)
    assert float(aware.footprint_kb[2]) > float(plain.footprint_kb[2])  # DIM-wide rows
    # DRAM moves only the real bytes
    np.testing.assert_allclose(aware.level_accesses[-1], plain.level_accesses[-1], rtol=1e-5)


def test_relaxed_aware_objective_has_finite_gradients():
    layers = [Layer.conv2d(R=7, S=7, P=28, Q=28, C=3, K=64, Hstride=2, Wstride=2),
              Layer.gemm(M=64, K_red=1000, N_out=250)]
    space = relax.RelaxSpace.create(HW, layers, hw_mode="min_hw")
    template = HW.template_spec

    def loss(theta):
        maps, _ = relax.decode(theta, space)
        hwp = aware_model.infer_hw(template, space.base, space.layers, maps, 0.05, True)
        out = jax.vmap(lambda x, m: aware_model.evaluate(template, x, hwp, m, True))(
            space.layers, maps)
        return jnp.log(out.cycles.sum()) + jnp.log(out.energy_pj.sum())

    value_and_grad = fast_jit(jax.value_and_grad(loss))
    for seed, scale in ((0, 0.0), (1, 1.0), (2, 20.0)):
        theta = relax.init_random(jax.random.PRNGKey(seed), space, scale=scale)
        value, grad = value_and_grad(theta)
        assert np.isfinite(float(value))
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grad))


def test_padded_buffers_are_what_min_hw_infers():
    layer = Layer.conv2d(R=1, S=1, P=14, Q=14, C=8, K=64)
    m = Mapping.from_timeloop("L3[WIO] P14 Q14 - L2[WI] K4 K16X - L1[O] C8X - L0[W] N1")
    packed = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], pack_layer(layer))
    maps = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], pack_mapping(m))
    template = HW.template_spec
    plain = relax.infer_hw(template, HW.to_params(), packed, maps, 0.0)
    aware = aware_model.infer_hw(template, HW.to_params(), packed, maps, 0.0, True)
    assert float(aware.pe_rows) == float(plain.pe_rows) == 16.0
    assert float(aware.sp_kb) > float(plain.sp_kb)


def test_templates_without_a_square_array_are_refused():
    with pytest.raises(ConfigError, match="instruction_aware"):
        aware_model.array_axes(HardwareConfig.preset("eyeriss").template_spec)


def test_one_padding_formula_for_numpy_and_jax():
    """`perfmodels.aware.padding` rounds a spatial extent up to the array, in numpy (rounding's
    footprints) and in jax (the model), to the same logs."""
    log_s = np.log([1.0, 3.0, 16.0, 32.0])
    want = np.log([16.0, 16.0 / 3.0, 1.0, 1.0])
    np.testing.assert_allclose(aware_model.padding(16.0, log_s, np), want, atol=1e-12)
    np.testing.assert_allclose(np.asarray(aware_model.padding(jnp.float32(16.0),
                                                               jnp.asarray(log_s, jnp.float32))),
                               want, rtol=1e-6, atol=1e-6)
