"""DRAM bandwidth as a design variable (``hw_mode: free``): its cost in the template's table
(interface area, idle energy per cycle), its relaxation, its rounding and its search."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig, level_arrays
from accel.lower import lower
from accel.mapping import Mapping
from accel.sim import run
from baco.codesign_loop import codesign
from baco.config import CodesignConfig
from baco.objective import Settings, objective
from baco.rounding import Rounder
from perfmodels import aware as aware_model
from perfmodels import relax
from perfmodels.analytic import exact
from perfmodels.energy import config_area_mm2
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")
# Load-bound: every weight used once per pixel tile, 64 pixels per DRAM tile.
LOAD_BOUND = Layer.gemm(M=1024, K_red=256, N_out=16)
LOAD_MAPPING = Mapping.from_timeloop(
    "L3[WIO] P16 - L2[WI] N1 K16X - L1[O] C16 P64 C16X - L0[W] N1")
# Compute-bound: a 3x3 conv, each weight used on 3136 pixels.
COMPUTE_BOUND = Layer.conv2d(R=3, S=3, P=56, Q=56, C=64, K=64)
BALANCED = Layer.gemm(M=256, K_red=256, N_out=256)


def _with_bw(hw: HardwareConfig, words: float) -> HardwareConfig:
    return dataclasses.replace(hw, dram_bw_words=words)


def test_bandwidth_costs_area_and_idle_energy_per_the_template():
    lv8, lv32 = (level_arrays(HW.template_spec, _with_bw(HW, w).to_params(), np) for w in (8, 32))
    assert lv8.static_pj_per_cycle[-1] > 0
    assert lv32.static_pj_per_cycle[-1] == pytest.approx(4 * lv8.static_pj_per_cycle[-1])
    # on chip, only the SRAMs' leakage, whatever the bandwidth
    np.testing.assert_array_equal(lv8.static_pj_per_cycle[:-1], lv32.static_pj_per_cycle[:-1])
    assert lv8.static_pj_per_cycle[0] == 0
    assert config_area_mm2(_with_bw(HW, 32)) - config_area_mm2(HW) == pytest.approx(
        float(lv32.area_mm2[-1] - lv8.area_mm2[-1]), rel=1e-5)
    assert lv32.area_mm2[-1] > lv8.area_mm2[-1] > 0


def test_idle_energy_is_charged_per_cycle_by_the_aware_model_only():
    m = LOAD_MAPPING
    aware = aware_model.exact(LOAD_BOUND, HW, m, aware=True)
    static = level_arrays(HW.template_spec, HW.to_params(), np).static_pj_per_cycle
    idle = float(static[-1])
    accesses_only = float(aware.level_pj[-1]) - idle * float(aware.cycles)
    plain = exact(LOAD_BOUND, HW, m)
    # the plain model (Timeloop's) counts the same DRAM accesses and no idle energy (of the
    # levels, or of the PEs in the cycles they have no MAC)
    assert float(plain.level_pj[-1]) == pytest.approx(accesses_only, rel=1e-5)
    assert float(plain.pe_idle_pj) == 0 < float(aware.pe_idle_pj)
    assert float(aware.energy_pj) - float(plain.energy_pj) == pytest.approx(
        float(static.sum()) * float(aware.cycles) + float(aware.pe_idle_pj), rel=1e-4)


def test_the_simulator_and_the_model_agree_that_bandwidth_helps_a_load_bound_layer():
    cycles_model, cycles_sim = [], []
    for words in (4, 8, 16):
        hw = _with_bw(HW, words)
        cycles_model.append(float(aware_model.exact(LOAD_BOUND, hw, LOAD_MAPPING).cycles))
        low = lower(LOAD_BOUND, LOAD_MAPPING, hw)
        cycles_sim.append(int(run(low.trace, hw, functional=False).cycles))
    assert cycles_model[0] > cycles_model[1] > cycles_model[2]
    assert cycles_sim[0] > cycles_sim[1] > cycles_sim[2]


def _free_space(layer: Layer, words: float):
    """One layer's free space from its tiler (or `LOAD_MAPPING`) program, at `words` DRAM
    words/cycle: the bandwidth is the point's variable, so every layer shares one space's
    shapes and one compilation."""
    space = relax.RelaxSpace.create(HW, [layer], hw_mode="free")
    mapping = LOAD_MAPPING if layer is LOAD_BOUND else None
    if mapping is None:
        from baco.search.gemmini_tiler import gemmini_mapping
        mapping, _ = gemmini_mapping(layer, HW)
    theta = relax.from_mappings(space, [mapping])
    return space, theta._replace(hw=theta.hw._replace(
        log_dram_bw_words=jnp.float32(np.log(words))))


_BIG = math.log(1e12)
_SETTINGS = Settings(aware=True, penalty=10.0, log_max_pe=math.log(128), log_max_sp_kb=_BIG,
                     log_max_acc_kb=_BIG, log_max_dram_bw=math.log(64), learning_rate=0.05,
                     decay_steps=10, lr_final_fraction=0.1, round_steps=10, objective=objective)
_GRAD = jax.jit(jax.grad(lambda theta, space: objective(theta, space, _SETTINGS)[0]))


def _log_edp_grad(layer: Layer, words: float) -> float:
    space, theta = _free_space(layer, words)
    return float(_GRAD(theta, space).hw.log_dram_bw_words)


def test_relaxed_bandwidth_is_a_trade_off():
    """More bandwidth lowers a load-bound layer's EDP (negative gradient), raises a
    compute-bound one's (its idle energy, no cycles saved), and a balanced layer's EDP has its
    optimum between 8 and 32 words/cycle."""
    assert _log_edp_grad(LOAD_BOUND, 8.0) < -0.1
    assert _log_edp_grad(COMPUTE_BOUND, 8.0) > 0
    assert _log_edp_grad(BALANCED, 8.0) < 0 < _log_edp_grad(BALANCED, 32.0)


def test_relaxed_bandwidth_decodes_to_the_hardware_the_model_scores():
    space, theta = _free_space(LOAD_BOUND, 32.0)
    _, hwp = relax.decode(theta, space)
    assert float(hwp.dram_bw_words) == pytest.approx(32.0, rel=1e-5)


def test_rounding_makes_a_buildable_bandwidth_and_finish_keeps_it():
    rounder = Rounder(HW, [LOAD_BOUND], hw_mode="free", max_dram_bw_words=32)
    np.testing.assert_array_equal(rounder.round_bandwidth([0.3, 5.0, 6.0, 20.0, 1e4]),
                                  [1, 4, 8, 16, 32])
    arrays = [getattr(LOAD_MAPPING, k)[None, None] for k in
              ("temporal", "spatial", "order", "stages")]
    design = rounder.finish(*arrays, dram_bw_words=[16.0])[0]
    assert design.hw.dram_bw_words == 16.0
    assert rounder.finish(*arrays)[0].hw.dram_bw_words == HW.dram_bw_words


@pytest.mark.slow
def test_free_search_buys_bandwidth_for_a_load_bound_network_and_min_hw_keeps_the_base():
    net = workloads.Network.from_layers("load", [LOAD_BOUND])
    cfg = CodesignConfig(budget_samples=160, starts=2, steps_per_start=40, round_every=10,
                         seed=0, max_dram_bw_words=32)
    free = codesign(net, config=cfg.replace(hw_mode="free"))
    assert free.hardware.dram_bw_words > HW.dram_bw_words
    kept = codesign(net, config=cfg)
    assert kept.hardware.dram_bw_words == HW.dram_bw_words
    assert free.edp < kept.edp


@pytest.mark.slow
def test_a_killed_free_search_resumes_to_the_uninterrupted_result(tmp_path, comparable,
                                                                 killed_after_round):
    """The relaxed bandwidth and the refinement's bandwidth moves are in the checkpoint."""
    net = workloads.Network.from_layers("pair", [LOAD_BOUND, BALANCED])
    cfg = CodesignConfig(budget_samples=160, starts=2, steps_per_start=40, round_every=10,
                         seed=1, hw_mode="free", max_dram_bw_words=32, checkpoint_every=1,
                         refine_moves=4)
    reference = codesign(net, config=cfg)
    path = tmp_path / "state.npz"
    # killed in the refinement (the last round but one), then at the descent's second round
    killed_after_round(net, config=cfg, checkpoint=path, round=reference.extra["rounds"] - 1)
    assert comparable(codesign(net, config=cfg, checkpoint=path, resume=True)) == \
        comparable(reference)
    path.unlink()
    killed_after_round(net, config=cfg, checkpoint=path, round=2)
    assert comparable(codesign(net, config=cfg, checkpoint=path, resume=True)) == \
        comparable(reference)
