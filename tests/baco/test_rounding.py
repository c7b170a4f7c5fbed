"""Rounding relaxed points to designs: every rounded design validates on its hardware."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accel.arch import MAX_STAGES, HardwareConfig, level_arrays
from accel.buildable import unbuildable_reason
from accel.design import design_of
from accel.mapping import Mapping
from baco.errors import InfeasibleError
from baco.rounding import Rounder, argmax_orders, common_score, nearest_divisor
from perfmodels import aware as aware_model
from perfmodels import relax
from perfmodels.analytic import exact
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")
# Awkward shapes on purpose: C=3 (conv1), K=1000 (a classifier), prime and odd extents,
# strides, a GEMM and a GEMV.
LAYERS = [
    Layer.conv2d(R=7, S=7, P=14, Q=14, C=3, K=64, Hstride=2, Wstride=2),
    Layer.conv2d(R=3, S=3, P=7, Q=7, C=96, K=80),
    Layer.gemm(M=13, K_red=1000, N_out=1000),
    Layer.gemm(M=1, K_red=768, N_out=250),
    Layer.conv2d(R=1, S=1, P=28, Q=28, C=256, K=128, Hstride=2, Wstride=2),
]


def relaxed_point(seed: int, scale: float, hw_mode: str):
    space = relax.RelaxSpace.create(HW, LAYERS, hw_mode=hw_mode)
    theta = relax.init_random(jax.random.PRNGKey(seed), space, scale=scale)
    theta = theta._replace(mappings=theta.mappings._replace(
        stage_logits=scale * jax.random.normal(jax.random.PRNGKey(seed + 1),
                                               theta.mappings.stage_logits.shape),
        order_logits=scale * jax.random.normal(jax.random.PRNGKey(seed + 2),
                                               theta.mappings.order_logits.shape)))
    maps, _ = relax.decode(theta, space)
    maps = jax.tree_util.tree_map(lambda x: np.asarray(x)[None], maps)
    orders = argmax_orders(maps.order_weights, maps.rank)
    return maps, orders


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**20), scale=st.sampled_from([0.3, 1.0, 3.0, 10.0]),
       hw_mode=st.sampled_from(["min_hw", "fixed"]), aware=st.booleans(),
       nearest=st.sampled_from(["log", "linear"]), max_pe=st.sampled_from([4, 16, 128]),
       max_sp=st.sampled_from([None, 8.0, 64.0]), step=st.sampled_from([1.0, 4.0]))
# a 128-wide array's least buildable scratchpad is 64 KiB: an 8 KiB bound narrows the array
@example(seed=0, scale=3.0, hw_mode="min_hw", aware=False, nearest="log", max_pe=128,
         max_sp=8.0, step=1.0)
def test_every_rounded_design_validates(seed, scale, hw_mode, aware, nearest, max_pe, max_sp,
                                        step):
    maps, orders = relaxed_point(seed, scale, hw_mode)
    rounder = Rounder(HW, LAYERS, hw_mode=hw_mode, aware=aware, max_pe_dim=max_pe,
                      sram_step_kb=step, max_sp_kb=max_sp, nearest=nearest)
    (design,) = rounder.round(maps.log_temporal, maps.log_spatial, orders, maps.stages)
    mappings = rounder.check(design)        # Mapping.validate of every layer, padded tiles too
    for layer, m in zip(LAYERS, mappings):
        assert m.fits(layer, design.hw)
        product = m.temporal.prod(0) * m.spatial.prod(0)
        assert product.tolist() == list(layer.dims.values())
        assert 1 <= m.stages.min() and m.stages.max() <= MAX_STAGES and m.stages[-1] == 1
    hw = design.hw
    if hw_mode == "fixed":
        assert hw == HW
    else:
        assert max(hw.pe_rows, hw.pe_cols) <= max_pe
        # Gemmini's buffers snap to what its generator builds, not to sram_step_kb steps
        assert unbuildable_reason(hw) is None
        if max_sp is not None:
            assert hw.sp_kb <= max_sp
    metrics = rounder.score([design])
    assert np.all(np.isfinite(metrics.edp)) and float(metrics.overflow.max()) <= 1e-5
    # the numpy footprints rounding repairs with are the model's (padded ones when aware)
    fanout = level_arrays(HW.template_spec, hw.to_params(), np).fanout
    for b, m in enumerate(mappings):
        np.testing.assert_allclose(
            rounder.footprint_kb(b, m.temporal, m.spatial, m.stages, fanout),
            metrics.footprint_kb[0, b], rtol=1e-4, atol=1e-9)


def test_log_rounding_keeps_tile_sizes_and_minimal_hardware():
    layers = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64)]
    rounder = Rounder(HW, layers, aware=False)
    log_t = np.zeros((1, 1, 4, 7))
    log_s = np.zeros((1, 1, 4, 7))
    log_s[0, 0, 1, 4] = np.log(16)           # C16X at the accumulator
    log_s[0, 0, 2, 5] = np.log(16)           # K16X at the scratchpad
    log_t[0, 0, 1, 2] = np.log(7.3)          # P ~7 at the accumulator: rounds to 7
    log_t[0, 0, 2, 4] = np.log(1.9)          # C ~2 at the scratchpad
    orders = np.tile(np.arange(7), (1, 1, 4, 1))
    (design,) = rounder.round(log_t, log_s, orders, np.full((1, 1, 4), 1.6))
    (m,) = design.mappings()
    assert m.spatial[1, 4] == 16 and m.spatial[2, 5] == 16
    assert m.temporal[1, 2] == 7 and m.temporal[2, 4] == 2
    assert m.temporal[3].tolist() == [3, 3, 2, 14, 2, 4, 1]
    assert m.stages.tolist() == [2, 2, 2, 1]
    assert (design.hw.pe_rows, design.hw.pe_cols) == (16, 16)
    # minimal hardware: every buffer one step above what the tiles need, no more
    need = m.footprint_kb(layers[0], design.hw)
    caps = design.hw.capacities_kb()
    assert caps["Scratchpad"] - 1.0 < need[2] <= caps["Scratchpad"]


def test_nearest_divisor():
    assert nearest_divisor(56, 7.2) == 7
    assert nearest_divisor(56, 100.0) == 56
    assert nearest_divisor(56, 20.0, cap=16) == 14
    assert nearest_divisor(1000, 30.0, linear=True) == 25
    assert nearest_divisor(1000, 30.0) == 25          # log: 30/25 < 40/30
    assert nearest_divisor(7, 2.0) == 1 and nearest_divisor(7, 3.0) == 7


def test_fill_array_folds_loops_into_the_array_without_changing_tiles():
    layers = [Layer.conv2d(R=1, S=1, P=14, Q=14, C=96, K=64),
              Layer.conv2d(R=1, S=1, P=14, Q=14, C=64, K=64)]
    rounder = Rounder(HW, layers, aware=True)
    T = np.ones((1, 2, 4, 7), np.int64)
    S = np.ones((1, 2, 4, 7), np.int64)
    S[0, 1, 1, 4] = 32                                   # the widest layer: DIM = 32
    T[0, 0, 1, 4] = 12
    S[0, 0, 1, 4] = 4                                    # C extent 48 at the accumulator
    before = np.cumprod(T * S, axis=2)
    rounder.fill_array(T, S)
    assert S[0, 0, 1, 4] == 24 and T[0, 0, 1, 4] == 2    # largest divisor of 48 <= 32
    assert np.array_equal(np.cumprod(T * S, axis=2), before)


def test_fill_array_from_any_loop_takes_the_dim_from_another_level():
    layer = Layer.conv2d(R=1, S=1, P=16, Q=16, C=128, K=768)
    rounder = Rounder(HW, [layer], aware=True)
    T = np.ones((1, 1, 4, 7), np.int64)
    S = np.ones((1, 1, 4, 7), np.int64)
    T[0, 0, 3, 2:4] = 16                                 # P, Q at DRAM
    S[0, 0, 1, 4] = 128                                  # C128 across the array: DIM = 128
    S[0, 0, 2, 5] = 96                                   # K96 at the scratchpad ...
    T[0, 0, 1, 5] = 8                                    # ... and K8 one level in
    same = (T.copy(), S.copy())
    rounder.fill_array(*same)                            # the same level has no K loop
    assert np.array_equal(same[1], S)
    rounder.fill_array(T, S, any_loop=True)
    assert S[0, 0, 2, 5] == 128 and T[0, 0, 1, 5] == 6
    assert np.array_equal((T * S).prod(axis=2), same[0].prod(axis=2) * same[1].prod(axis=2))


def test_refinement_fills_the_array_in_one_move_where_two_prime_moves_are_needed():
    from baco.refine import global_moves, layer_moves

    layer = Layer.conv2d(R=1, S=1, P=16, Q=16, C=128, K=768)
    rounder = Rounder(HW, [layer], aware=True)
    T = np.ones((1, 4, 7), np.int64)
    S = np.ones((1, 4, 7), np.int64)
    T[0, 3, 2:4] = 16
    S[0, 1, 4], S[0, 2, 5], T[0, 1, 5] = 128, 96, 8
    (design,) = rounder.finish(T[None], S[None], np.tile(np.arange(7), (1, 1, 4, 1)),
                               np.ones((1, 1, 4), np.int64))
    widened = [(t, s) for t, s, _, _ in global_moves(rounder, design, np.arange(7)[None])
               if s[0, 2, 5] == 128]
    assert len(widened) == 1
    assert not any(s[2, 5] == 128 for _, s, _, _ in
                   layer_moves(rounder, design, 0, np.arange(7)[None]))
    t, s = widened[0]
    assert t[0, 1, 5] == 6 and np.array_equal((t * s).prod(axis=1), (T * S).prod(axis=1))
    (filled,) = rounder.finish(t[None], s[None], design.order[None], design.stages[None])
    before, after = rounder.score([design, filled]).cycles[:, 0]
    assert after < before                               # no padded array columns


def test_infeasible_bounds_are_refused_before_any_search():
    # below the least scratchpad Gemmini's generator builds (2x2 array: 1/64 KiB)
    with pytest.raises(InfeasibleError, match="max_sp_kb"):
        Rounder(HW, LAYERS, max_sp_kb=0.01)
    tiny = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=0.001, acc_kb=64.0, name="tiny")
    with pytest.raises(InfeasibleError) as info:
        Rounder(tiny, LAYERS, hw_mode="fixed")
    assert "Scratchpad" in str(info.value) and "layer 0" in str(info.value)


def test_repair_shrinks_tiles_that_overflow_a_bound():
    layer = Layer.conv2d(R=3, S=3, P=28, Q=28, C=128, K=128)
    rounder = Rounder(HW, [layer], aware=False, max_sp_kb=16.0)
    log_t = np.zeros((1, 1, 4, 7))
    log_t[0, 0, 2] = np.log([3, 3, 28, 28, 128, 8, 1])    # the whole layer in the scratchpad
    log_s = np.zeros((1, 1, 4, 7))
    log_s[0, 0, 2, 5] = np.log(16)
    (design,) = rounder.round(log_t, log_s, np.tile(np.arange(7), (1, 1, 4, 1)),
                              np.full((1, 1, 4), 1.0))
    rounder.check(design)
    assert design.hw.sp_kb <= 16.0


def test_common_score_is_the_design_itself_when_nothing_needs_padding():
    layers = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64)]
    rounder = Rounder(HW, layers, aware=True)
    log_s = np.zeros((1, 1, 4, 7))
    log_s[0, 0, 1, 4] = np.log(16)
    log_s[0, 0, 2, 5] = np.log(16)
    (design,) = rounder.round(np.zeros((1, 1, 4, 7)), log_s,
                              np.tile(np.arange(7), (1, 1, 4, 1)), np.full((1, 1, 4), 2.0))
    aware = common_score(layers, [1], design, aware=True)
    plain = common_score(layers, [1], design, aware=False)
    assert aware.edp == pytest.approx(aware.latency_cycles * aware.energy_pj, rel=1e-9)
    # the same design, scored with the per-load DMA latency and the instruction costs the
    # plain model leaves out
    (one,) = design.mappings()
    ref = aware_model.exact(layers[0], design.hw, one)
    assert aware.edp == pytest.approx(float(ref.cycles) * float(ref.energy_pj), rel=1e-5)
    assert float(ref.cycles) >= float(exact(layers[0], design.hw, one, load_latency=True).cycles)
    # the same accesses, plus the levels' idle energy over the aware cycles and the PEs' in
    # the cycles they have no MAC (the array full: no padded MACs)
    idle = float(level_arrays(HW.template_spec, design.hw.to_params(), np)
                 .static_pj_per_cycle.sum())
    assert aware.energy_pj_by_event["mac_padded"] == 0
    assert aware.energy_pj == pytest.approx(plain.energy_pj + idle * aware.latency_cycles
                                            + aware.energy_pj_by_event["pe_idle"], rel=1e-6)
    assert aware.latency_cycles > plain.latency_cycles
    # a half-empty array where the dim allows a full one is realized full (re-blocked) ...
    (m,) = design.mappings()
    spatial, temporal = m.spatial.copy(), m.temporal.copy()
    spatial[1, 4], temporal[1, 4] = 8, temporal[1, 4] * 2            # C8X, C2 at L1
    half = m.replace(spatial=spatial, temporal=temporal)
    realized = common_score(layers, [1], design_of(design.hw, [half]), aware=True)
    assert realized.edp == pytest.approx(aware.edp, rel=1e-6)
    # ... but a layer too narrow for the array pays for its padding on the common scorer
    narrow = [layers[0], Layer.conv2d(R=3, S=3, P=14, Q=14, C=8, K=64)]
    spatial, temporal = m.spatial.copy(), m.temporal.copy()
    spatial[1, 4], temporal[:, 4] = 8, 1                              # C=8 all in the array
    both = design_of(design.hw, [m, m.replace(spatial=spatial, temporal=temporal)])
    assert common_score(narrow, [1, 1], both, aware=True).edp > \
        common_score(narrow, [1, 1], both, aware=False).edp * (1 + 1e-4)


def test_a_rounder_is_immutable_and_replace_gives_another():
    layer = Layer.conv2d(P=8, Q=8, C=16, K=16)
    rounder = Rounder(HardwareConfig.preset("gemmini_default"), [layer], hw_mode="fixed")
    with pytest.raises(AttributeError, match="immutable"):
        rounder.fusion = object()
    doubled = rounder.replace(residual=lambda template, layers, hwps, maps: np.full(
        (len(maps.stages), 1), np.log(2.0)))
    assert rounder.residual is None and doubled.packed is rounder.packed
    design = design_of(rounder.base_hw, [Mapping.from_timeloop(
        "L3[WIO] P8 Q8 - L2[WI] K16X - L1[O] C16X - L0[W] N1")])
    base, twice = rounder.score([design]), doubled.score([design])
    np.testing.assert_allclose(twice.cycles, 2 * base.cycles, rtol=1e-6)
    np.testing.assert_allclose(doubled.analytic_score([design]).cycles, base.cycles)
