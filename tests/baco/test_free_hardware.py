"""Free hardware (``hw_mode: free``): the PE array and buffers are variables that the tiles
grow, so a start on a small array widens it under descent; rounding scores the array between
the two buildable widths around the relaxed one."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import optax
import pytest

from accel.arch import HardwareConfig
from accel.design import design_of
from accel.mapping import Mapping
from baco.codesign_problem import OWN_ORDER_LOGIT, TWO_STAGES_LOGIT
from baco.objective import Settings, objective
from baco.refine import global_moves, narrow_moves
from baco.rounding import Rounder, argmax_orders
from baco.search.gemmini_tiler import gemmini_mapping
from perfmodels import relax
from perfmodels.score import network_edp
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")
LAYER = Layer.conv2d(R=3, S=3, P=28, Q=28, C=128, K=128)
BIG = math.log(1e12)
SETTINGS = Settings(aware=True, penalty=10.0, log_max_pe=math.log(128), log_max_sp_kb=BIG,
                    log_max_acc_kb=BIG, log_max_dram_bw=math.log(64), learning_rate=0.05,
                    decay_steps=100, lr_final_fraction=0.1, round_steps=100,
                    objective=objective)


def _small_start():
    small = dataclasses.replace(HW, pe_rows=4, pe_cols=4, sp_kb=64.0, acc_kb=16.0)
    mapping, _ = gemmini_mapping(LAYER, small)
    space = relax.RelaxSpace.create(small, [LAYER], hw_mode="free")
    theta = relax.from_mappings(space, [mapping], softness=0.05, order_logit=OWN_ORDER_LOGIT,
                                stage_logit=TWO_STAGES_LOGIT, hw=small)
    return small, mapping, space, theta


def test_the_tiles_grow_the_free_hardware_instead_of_overflowing_it():
    small, mapping, space, theta = _small_start()
    maps = relax.decode_mappings(theta, space)
    wide = maps._replace(log_spatial=maps.log_spatial.at[0, 1, 4].set(math.log(32.0)))
    floor = relax.free_hardware(theta, space)
    grown = relax.infer_hw(space.template, floor, space.layers, wide, space.tau, floor)
    assert float(grown.pe_rows) >= 32 and float(grown.pe_cols) >= 32
    # below the floor, the floor stands (up to the smooth max's few percent)
    kept = relax.infer_hw(space.template, floor, space.layers, maps, space.tau, floor)
    assert float(kept.pe_rows) == pytest.approx(4.0, rel=0.05)
    assert float(kept.acc_kb) >= 16.0


def test_descent_widens_a_small_start_array_and_the_rounded_design_is_better():
    """Adam steps from the library tiler's program on a 4x4 array: the array grows with the
    spatial factors (no penalty stands in the way), and the rounded design's exact EDP falls
    several times below the start's."""
    small, mapping, space, theta = _small_start()
    opt = optax.adam(0.05)
    state = opt.init(theta)

    @jax.jit
    def step(theta, state):
        grad = jax.grad(lambda t: objective(t, space, SETTINGS)[0])(theta)
        updates, state = opt.update(grad, state, theta)
        return optax.apply_updates(theta, updates), state

    for _ in range(100):
        theta, state = step(theta, state)
    rounder = Rounder(HW, [LAYER], hw_mode="free")
    maps, hwp = jax.tree_util.tree_map(np.asarray, relax.decode(theta, space))
    orders = argmax_orders(maps.order_weights[None], maps.rank[None])
    design = rounder.round(maps.log_temporal[None], maps.log_spatial[None], orders,
                           maps.stages[None], np.asarray(hwp.dram_bw_words)[None])[0]
    start = rounder.finish(*(getattr(mapping, k)[None, None] for k in
                             ("temporal", "spatial", "order", "stages")))[0]
    assert start.hw.pe_rows == 4
    assert design.hw.pe_rows >= 16
    before, after = (float(network_edp(rounder.score([d]), [1.0])[0][0])
                     for d in (start, design))
    assert after < before / 4


def test_narrow_moves_halve_the_array_to_the_power_of_two_below():
    layers = [LAYER, Layer.gemm(M=256, K_red=96, N_out=100)]
    rounder = Rounder(HW, layers, hw_mode="free")
    mappings = [Mapping.from_timeloop(
        "L3[WIO] P7 Q28 R3 S3 - L2[WI] K1 K128X - L1[O] P4 C128X - L0[W] N1"),
        Mapping.from_timeloop("L3[WIO] P4 - L2[WI] N1 K100X - L1[O] P64 C96X - L0[W] N1")]
    design = rounder.finish(*(np.stack([getattr(m, k) for m in mappings])[None]
                              for k in ("temporal", "spatial", "order", "stages")))[0]
    assert design.hw.pe_rows == 128
    (move,) = narrow_moves(rounder, design)
    narrowed = rounder.finish(*(x[None] for x in move))[0]
    assert narrowed.hw.pe_rows == 64
    T, S = move[0], move[1]
    np.testing.assert_array_equal((T * S).prod(axis=1), (design.temporal * design.spatial
                                                         ).prod(axis=1))
    # C (rows, level 1) and K (columns, level 2): 128 -> 64, 96 -> 48, 100 -> 50
    assert (S[0, 1, 4], S[0, 2, 5], S[1, 1, 4], S[1, 2, 5]) == (64, 64, 48, 50)
    rounder.check(narrowed)
    # refinement offers it among the whole-network moves
    assert any(np.array_equal(m[1], S) for m in global_moves(rounder, design,
                                                             np.zeros((0, 7), np.int64)))
    # a fixed array is not narrowed
    fixed = Rounder(dataclasses.replace(HW, pe_rows=128, pe_cols=128), layers, hw_mode="fixed")
    assert narrow_moves(fixed, design_of(fixed.base_hw, design.mappings())) == []
