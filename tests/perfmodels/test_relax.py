"""Relaxations: agreement with the exact model at integer points, finite gradients, min_hw."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.arch import MAX_STAGES, HardwareConfig
from accel.buildable import buildable_below_kb, next_buildable_sp_kb, unbuildable_reason
from accel.mapping import Mapping
from perfmodels import relax
from perfmodels.analytic import exact_batch, fast_jit
from workloads.errors import ConfigError
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")
decode = fast_jit(relax.decode)
LAYERS = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=128, Hstride=2, Wstride=2),
          Layer.conv2d(R=1, S=1, P=28, Q=28, C=256, K=64),
          Layer.gemm(M=128, K_red=768, N_out=96),
          Layer.conv2d(R=7, S=7, P=56, Q=56, C=3, K=64, Hstride=2, Wstride=2)]


def _finite(tree) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(tree))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), preset=st.sampled_from(["gemmini_default", "eyeriss"]))
def test_relaxed_equals_exact_at_integer_points(seed, preset):
    """Decoding the point of a discrete mapping reproduces its factors, and the relaxed
    evaluation (soft orders over 4 candidates, continuous stages) its exact score."""
    hw = HardwareConfig.preset(preset)
    rng = np.random.default_rng(seed)
    maps = [Mapping.random(x, hw, rng, stages=int(rng.integers(1, 3))) for x in LAYERS]
    space = relax.RelaxSpace.create(hw, LAYERS, hw_mode="fixed")
    theta = relax.from_mappings(space, maps)
    decoded, _ = decode(theta, space)
    np.testing.assert_allclose(np.exp(decoded.log_temporal), np.stack([m.temporal for m in maps]),
                               rtol=1e-4)
    np.testing.assert_allclose(np.exp(decoded.log_spatial), np.stack([m.spatial for m in maps]),
                               rtol=1e-4)
    np.testing.assert_allclose(decoded.stages, np.stack([m.stages for m in maps]), rtol=1e-5)
    out = relax.evaluate_jit(theta, space).metrics
    ref = exact_batch(LAYERS, hw, maps)
    np.testing.assert_allclose(out.cycles, ref.cycles, rtol=2e-3)
    np.testing.assert_allclose(out.energy_pj, ref.energy_pj, rtol=2e-3)


@pytest.mark.parametrize("mode", ["fixed", "free", "min_hw"])
def test_gradients_are_finite_everywhere(mode):
    space = relax.RelaxSpace.create(HW, LAYERS, hw_mode=mode)
    for scale in (0.0, 1.0, 30.0):
        theta = relax.init_random(jax.random.PRNGKey(int(scale)), space, scale=scale)
        value, grad = relax.edp_loss_and_grad(theta, space)
        assert np.isfinite(float(value)) and _finite(grad)
    # extreme logits everywhere: saturated softmaxes, stages at their bounds, huge hardware
    theta = relax.init_random(jax.random.PRNGKey(7), space)
    big = jax.tree_util.tree_map(lambda x: jnp.sign(x + 0.1) * 80.0, theta)
    value, grad = relax.edp_loss_and_grad(big, space)
    assert np.isfinite(float(value)) and _finite(grad)


def test_decoded_factors_always_multiply_to_the_layer():
    space = relax.RelaxSpace.create(HW, LAYERS, hw_mode="min_hw")
    theta = relax.init_random(jax.random.PRNGKey(3), space, scale=4.0)
    maps, hwp = decode(theta, space)
    logs = np.asarray(maps.log_temporal).sum(1) + np.asarray(maps.log_spatial).sum(1)
    np.testing.assert_allclose(logs, np.log(space.layers.dims), rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(maps.log_temporal) >= 0) and np.all(np.asarray(maps.log_spatial) >= 0)
    template = HW.template_spec
    assert np.all(np.asarray(maps.log_spatial)[:, ~template.spatial_mask] == 0)
    assert np.all(np.asarray(maps.log_temporal)[:, ~template.temporal_mask] == 0)
    stages = np.asarray(maps.stages)
    assert np.all((stages >= 1) & (stages <= MAX_STAGES)) and np.all(stages[:, -1] == 1)
    np.testing.assert_allclose(np.asarray(maps.order_weights).sum(-1), 1, rtol=1e-6)
    assert float(hwp.pe_rows) == float(hwp.pe_cols) >= 1        # Gemmini is square


def test_min_hw_holds_every_layer():
    rng = np.random.default_rng(5)
    maps = [Mapping.random(x, HW, rng) for x in LAYERS]
    small = relax.min_hw(HW, LAYERS, maps)
    for layer, m in zip(LAYERS, maps):
        m.validate(layer, small)
    # and it is minimal among what Gemmini's generator builds: the buildable scratchpad or
    # accumulator below, or the array side halved, breaks one
    assert unbuildable_reason(small) is None
    for field in ("sp_kb", "acc_kb", "pe_rows"):
        if field == "pe_rows":
            value = small.pe_rows // 2
        else:
            value = buildable_below_kb(small, field, getattr(small, field) * 0.99)
        if not value:
            continue
        smaller = small.__class__(**{**small.to_dict(), field: value,
                                     **({"pe_cols": value} if field == "pe_rows" else {})})
        if unbuildable_reason(smaller) is None:
            assert not all(m.fits(x, smaller) for x, m in zip(LAYERS, maps)), field
    # the smooth max bounds the hard one from above, and tends to it as tau -> 0
    space = relax.RelaxSpace.create(HW, LAYERS, hw_mode="min_hw", tau=0.05)
    theta = relax.from_mappings(space, maps)
    _, smooth = decode(theta, space)
    hard_space = relax.RelaxSpace.create(HW, LAYERS, hw_mode="min_hw", tau=0.0)
    _, hard = decode(theta, hard_space)
    assert float(smooth.sp_kb) >= float(hard.sp_kb) * (1 - 1e-5)
    assert float(smooth.sp_kb) <= float(hard.sp_kb) * len(LAYERS) ** 0.05 * (1 + 1e-5)
    assert float(hard.sp_kb) <= small.sp_kb
    assert small.sp_kb == next_buildable_sp_kb(small.pe_rows, float(hard.sp_kb)) or \
        small.sp_kb < 2 * float(hard.sp_kb) + 1      # or held to the accumulator's tiles


def test_descent_lowers_the_network_edp():
    space = relax.RelaxSpace.create(HW, LAYERS, counts=[3, 1, 2, 1], hw_mode="min_hw")
    theta = relax.init_random(jax.random.PRNGKey(0), space)
    opt = optax.adam(0.1)
    state = opt.init(theta)
    first, _ = relax.edp_loss_and_grad(theta, space)
    for _ in range(30):
        _, grad = relax.edp_loss_and_grad(theta, space)
        updates, state = opt.update(grad, state, theta)
        theta = optax.apply_updates(theta, updates)
    last, _ = relax.edp_loss_and_grad(theta, space)
    assert float(last) < float(first) - 0.5


def test_space_errors():
    with pytest.raises(ConfigError, match="hw_mode"):
        relax.RelaxSpace.create(HW, LAYERS, hw_mode="loose")
    with pytest.raises(ConfigError, match="4 mappings for 1 layers"):
        relax.from_mappings(relax.RelaxSpace.create(HW, LAYERS[:1], hw_mode="fixed"),
                            [Mapping.random(x, HW, np.random.default_rng(0)) for x in LAYERS])
    free = relax.RelaxSpace.create(HW, LAYERS, hw_mode="free")
    theta = relax.init_random(jax.random.PRNGKey(0), free)._replace(hw=None)
    with pytest.raises(ConfigError, match="needs RelaxedPoint.hw"):
        relax.evaluate(theta, free)


def test_descent_on_the_learned_order_reaches_an_order_outside_the_fixed_candidates():
    """Adam steps on the learned order's scores alone swap DRAM loops into an order none of
    DOSA's three candidates has, and the exact EDP of that order is lower."""
    layer = Layer.conv2d(R=3, S=3, P=28, Q=28, C=128, K=128)
    temporal = np.array([[1, 1, 1, 1, 1, 1, 1], [3, 1, 2, 2, 2, 1, 1],
                         [1, 1, 7, 2, 1, 1, 1], [1, 3, 2, 7, 8, 128, 1]])
    spatial = np.ones_like(temporal)
    spatial[1, 4] = 8
    order = np.array([[3, 0, 1, 2, 6, 4, 5], [1, 3, 6, 0, 2, 5, 4],
                      [2, 1, 0, 4, 6, 3, 5], [0, 2, 1, 5, 3, 6, 4]])   # outermost first
    start = Mapping.create(temporal, spatial, order, tags=HW.template_spec.tags)
    space = relax.RelaxSpace.create(HW, [layer], hw_mode="fixed")
    theta = relax.from_mappings(space, [start])
    opt = optax.adam(0.3)
    state = opt.init(theta.mappings.order_scores)
    for _ in range(5):
        _, grad = relax.edp_loss_and_grad(theta, space)
        updates, state = opt.update(grad.mappings.order_scores, state)
        theta = theta._replace(mappings=theta.mappings._replace(
            order_scores=optax.apply_updates(theta.mappings.order_scores, updates)))
    innermost_first = np.argsort(np.asarray(theta.mappings.order_scores)[0], axis=-1)
    moved = start.replace(order=np.ascontiguousarray(innermost_first[:, ::-1]))

    top = start.num_levels - 1
    turning = set(np.flatnonzero(temporal[top] > 1))

    def loops(innermost_first_order):
        return [int(d) for d in innermost_first_order if d in turning]

    new = loops(moved.innermost_first_order()[top])
    assert new != loops(start.innermost_first_order()[top])
    assert all(new != loops(c) for c in relax.CANDIDATE_ORDERS.values())
    scored = exact_batch([layer, layer], HW, [start, moved])
    edp = np.asarray(scored.cycles) * np.asarray(scored.energy_pj)
    assert edp[1] < 0.95 * edp[0]


def test_learned_rank_is_the_stable_double_argsort_with_the_scores_gradient():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, (50, 7)).astype(np.float32)     # many ties
    scores[0] = [0.0, -0.0, 1.0, 0.0, -0.0, 2.0, 0.5]            # signed zeros tie
    scores[1, [2, 5]] = np.nan                                    # NaN goes last, as JAX sorts
    scores[2] = rng.normal(size=7)
    want = jnp.argsort(jnp.argsort(jnp.asarray(scores), axis=-1), axis=-1)   # stable
    # a NaN score stays NaN (straight through); the other ranks of its row stay integers
    np.testing.assert_array_equal(jax.jit(relax.learned_rank)(scores), want + (scores - scores))
    weights = rng.normal(size=(48, 7)).astype(np.float32)
    grad = jax.grad(lambda s: (relax.learned_rank(s) * weights).sum())(scores[2:])
    np.testing.assert_array_equal(grad, weights)
