"""The instruction-aware model charges what the array's instructions cost (the template's
``compute_instruction``), as the simulator does: short computes, their fill and drain, and
exposed weight preloads."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from accel.arch import HardwareConfig, Template
from accel.design import design_of
from accel.mapping import Mapping
from accel.sim.timing import TimingTable, array_latency_cycles
from baco import yardsticks as ys
from perfmodels import aware as aware_model
from perfmodels.analytic import pack_layer, pack_mapping
from workloads.errors import ConfigError
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")
CONV = Layer.conv2d(R=3, S=3, P=16, Q=16, C=16, K=16)
SHORT = "L3[WIO] P8 - L2[WI] K16X - L1[O] S3 R3 Q8 C16X - L0[W] P2 Q2"   # 2-row computes
LONG = "L3[WIO] P8 - L2[WI] K16X - L1[O] S3 R3 P2 C16X - L0[W] Q16"      # 16-row computes

MODELS_PREDATE_THE_CHIP = pytest.mark.xfail(strict=True, reason=(
    "the instruction-aware and chain models predate the chip-fitted simulator (DMA request rate "
    "and outstanding moves, scratchpad bank turns, mvout retired at hand-over); they are "
    "re-derived under the fair-contest issue"))


def _three_cycles(layer, hw, m):
    """The plain model's, the instruction-aware model's and the simulator's cycles."""
    plain = aware_model.exact(layer, hw, m, aware=False)
    aware = aware_model.exact(layer, hw, m)
    _, (sim,) = ys.simulate_design([layer], [1], design_of(hw, [m]))
    return float(plain.cycles), float(aware.cycles), sim.cycles


def test_template_costs_are_the_simulators():
    table = TimingTable()
    for dim in (16, 64):
        hw = dataclasses.replace(HW, pe_rows=dim, pe_cols=dim)
        t, hwp = hw.template_spec, hw.to_params()
        c = t.instruction("compute").evaluate(t, hwp, np)
        assert float(c["max_rows"]) == dim
        assert float(c["preload_cycles"]) == dim
        assert float(c["min_cycles"]) == table.min_compute_rows
        assert float(c["latency_cycles"]) == (table.spad_read_cycles + table.acc_write_cycles
                                              + array_latency_cycles(dim, dim))
        assert float(c["in_flight"]) == min(table.rs_entries_execute // 2, table.mesh_matmuls)
        load, store = (t.instruction(k).evaluate(t, hwp, np) for k in ("load", "store"))
        assert float(load["latency_cycles"]) == (table.dram_latency_cycles
                                                 + table.mvin_write_cycles)
        assert float(store["latency_cycles"]) == (table.dram_latency_cycles
                                                  + table.mvout_read_cycles)
        assert (float(load["in_flight"]), float(store["in_flight"])) == (
            table.rs_entries_load, table.rs_entries_store)
        assert float(load["max_rows"]) == float(store["max_rows"]) == dim


def test_short_computes_cost_what_the_simulator_says():
    """Same tiles, same plain-model cycles; the simulator runs 2-row computes about 2.5x
    slower than 16-row ones, and the instruction-aware model says so within 20%."""
    cycles = {name: _three_cycles(CONV, HW, Mapping.from_timeloop(text))
              for name, text in (("short", SHORT), ("long", LONG))}
    for name, (_, aware, sim) in cycles.items():
        assert 0.8 < sim / aware < 1.25, (name, cycles[name])
    assert cycles["short"][0] == pytest.approx(cycles["long"][0])
    assert cycles["short"][2] > 2.0 * cycles["long"][2]
    assert cycles["short"][1] > 2.0 * cycles["long"][1]


def _packed(layer, text):
    m = Mapping.from_timeloop(text)
    return (jax.tree_util.tree_map(jnp.asarray, pack_layer(layer)),
            jax.tree_util.tree_map(jnp.asarray, pack_mapping(m)))


@MODELS_PREDATE_THE_CHIP
def test_gemm_rows_are_the_whole_stream():
    """Without a sliding window every pixel a weight block streams is evenly spaced: a 1x1
    convolution with `SHORT`'s loops runs full 16-row computes (no overhead), the 3x3 one
    2-row computes; the simulator agrees with the whole 1x1 program's cycles."""
    template, hwp = HW.template_spec, HW.to_params()
    compute = jnp.float32(16 * 16)
    gemm = Layer.conv2d(R=1, S=1, P=16, Q=16, C=16, K=16)
    loops = "L3[WIO] P8 - L2[WI] K16X - L1[O] Q8 C16X - L0[W] P2 Q2"
    conv = Layer.conv2d(R=1, S=1, P=16, Q=16, C=16, K=16, Hstride=1, Wstride=2)
    (g, gm), (c, cm) = _packed(gemm, loops), _packed(conv, loops)
    runs = aware_model.instruction_runs(gm, 4)
    assert float(aware_model.array_cycles(template, g, hwp, gm, compute, runs)) == 256.0
    assert float(aware_model.array_cycles(template, c, hwp, cm, compute, runs)) > 2 * 256.0
    m = Mapping.from_timeloop(loops)
    aware = float(aware_model.exact(gemm, HW, m).cycles)
    _, (sim,) = ys.simulate_design([gemm], [1], design_of(HW, [m]))
    assert 0.8 < sim.cycles / aware < 1.35


def test_runs_continue_over_the_same_dim():
    """``L1 P8 | L0 P2`` is one P run of 16 rows (consecutive P rows are evenly spaced); with
    Q outside the registers' P the run stops at 2; a reduction loop innermost leaves 1."""
    mappings = {
        "same": "L3[WIO] Q8 - L2[WI] K16X - L1[O] S3 R3 Q2 P8 C16X - L0[W] P2",
        "other": "L3[WIO] P4 Q2 - L2[WI] K16X - L1[O] S3 R3 P2 Q8 C16X - L0[W] P2",
        "reduction": "L3[WIO] Q8 P8 - L2[WI] K16X - L1[O] Q2 P2 S3 R3 C16X - L0[W] N1",
    }
    rows = {}
    for name, text in mappings.items():
        Mapping.from_timeloop(text).validate(CONV, HW)
        _, m = _packed(CONV, text)
        rows[name] = float(jnp.exp(aware_model.instruction_runs(m, 4).compute))
    assert rows == pytest.approx({"same": 16.0, "other": 2.0, "reduction": 1.0})


def test_relaxed_gradient_prefers_longer_computes():
    """Moving a pixel factor into the registers lengthens every compute under a window:
    the relaxed instruction term's gradient says so, and is finite."""
    template, hwp = HW.template_spec, HW.to_params()
    layer, m = _packed(CONV, SHORT)
    compute = jnp.float32(16 * 16 * 9)

    def cost(shift):
        moved = m._replace(log_temporal=m.log_temporal.at[0, 3].add(shift).at[1, 3].add(-shift))
        return aware_model.array_cycles(template, layer, hwp, moved, compute,
                                         aware_model.instruction_runs(moved, 4))

    g = jax.jit(jax.grad(cost))(0.0)
    assert np.isfinite(float(g)) and float(g) < 0


def test_template_block_is_checked():
    raw = {"name": "t", "mac": {"energy_pj": 1},
           "levels": [{"name": "R", "keeps": ["W"], "capacity_kb": 1},
                      {"name": "D", "keeps": ["W", "I", "O"]}],
           "instructions": {"compute": {"max_rows": "pe_rows", "min_cycles": 4}}}
    with pytest.raises(ConfigError, match="instructions.compute.*latency_cycles"):
        Template.from_dict(raw)
    raw["instructions"] = {"store": {"max_rows": 1, "latency_cycles": 1, "in_flight": 1,
                                     "typo": 2}}
    with pytest.raises(ConfigError, match="typo"):
        Template.from_dict(raw)
    raw["instructions"] = {"mvin": {"max_rows": 1, "latency_cycles": 1, "in_flight": 1}}
    with pytest.raises(ConfigError, match="mvin"):
        Template.from_dict(raw)
    del raw["instructions"]
    assert Template.from_dict(raw).instruction("compute") is None


@MODELS_PREDATE_THE_CHIP
def test_small_accumulator_tiles_wait_for_their_write_backs():
    """Same traffic, same plain-model cycles: 16-row accumulator tiles wait on each mvout's
    round trip before the next tile may use the buffer, and the simulator runs them 2.7x
    slower than 128-row tiles; the instruction-aware model's drain term says 2x or more."""
    hw = dataclasses.replace(HW, dram_bw_words=64)
    gemm = Layer.gemm(M=512, K_red=16, N_out=256)
    cycles = {name: _three_cycles(gemm, hw, Mapping.from_timeloop(text, stages=2)) for name, text
              in (("small", "L3[WIO] K16 P32 - L2[WI] K16X - L1[O] P2 C16X - L0[W] P8"),
                  ("large", "L3[WIO] K16 P4 - L2[WI] K16X - L1[O] P16 C16X - L0[W] P8"))}
    for name, (_, aware, sim) in cycles.items():
        assert 0.8 < sim / aware < 1.4, (name, cycles[name])
    assert cycles["small"][0] == pytest.approx(cycles["large"][0])
    assert cycles["small"][2] > 2.0 * cycles["large"][2]
    assert cycles["small"][1] > 2.0 * cycles["large"][1]
