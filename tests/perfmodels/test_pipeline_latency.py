"""ALCOP's multi-stage pipeline with a per-load latency (`perfmodels.latency`).

The instruction-aware model charges every DRAM tile load the template's ``latency_cycles``
(the simulator's DMA round trip + scratchpad write) and the pipeline's fill; the plain model
stays Timeloop's roofline.
"""

from __future__ import annotations

import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from accel.arch import MAX_STAGES, HardwareConfig, level_arrays
from accel.lower import lower
from accel.mapping import Mapping
from accel.sim import TimingTable, run
from perfmodels import aware as aware_model
from perfmodels import relax
from perfmodels.analytic import exact, exact_batch, pack_layer
from perfmodels.latency import pipeline_cycles
from perfmodels.validate import read_rows, summarize
from workloads.layer import Layer

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSV = ROOT / "data" / "timeloop_gemmini_10k.csv"
HW = HardwareConfig.preset("gemmini_default")

# Load-dominated: 16 DRAM tiles of 64 pixels x 256 channels (20 KiB at one stage); per tile
# 1024 MAC cycles but 2208 cycles of DRAM transfer.
LAYER = Layer.gemm(M=1024, K_red=256, N_out=16)
MAPPING = Mapping.from_timeloop("L3[WIO] P16 - L2[WI] N1 K16X - L1[O] C16 P64 C16X - L0[W] N1")
SP = 2    # the scratchpad: its tiles come from DRAM


def staged(s: float) -> Mapping:
    """`MAPPING` at `s` stages (the registers hold two weights: at most 2 there)."""
    return MAPPING.replace(stages=np.array([min(s, 2), s, s, 1]))


def test_the_template_latency_is_the_simulators_dma_latency():
    """The gemmini template's DRAM latency, evaluated, is what the simulator charges a DRAM
    load: its expression adds the figures the simulator adds."""
    lv = level_arrays(HW.template_spec, HW.to_params(), np)
    table = TimingTable()
    assert float(lv.latency_cycles[-1]) == table.dram_latency_cycles + table.mvin_write_cycles
    assert np.all(lv.latency_cycles[:-1] == 0)


def test_pipeline_formula_cases():
    """ALCOP's Table 5.1 with a bandwidth floor and the first tile's fill."""
    use, xfer, lat, n = 1000.0, 3000.0, 50.0, 10.0
    serial = use + xfer + n * lat
    on = [float(pipeline_cycles(use, xfer, lat, n, s, True)) for s in (1.0, 2.0, 3.0)]
    assert on[0] == pytest.approx(serial)                                  # nothing overlaps
    steady2 = max(use, xfer, serial / 2)
    assert on[1] == pytest.approx(steady2 + (serial - steady2) / n)
    # one tile: its load and use in sequence, whatever the stages
    assert float(pipeline_cycles(use, xfer, lat, 1.0, 4.0, True)) == pytest.approx(
        use + xfer + lat)
    # a level with no load latency (on-chip operand streaming) has no fill either
    assert float(pipeline_cycles(use, xfer, 0.0, n, 2.0, True)) == pytest.approx(xfer)
    # off: Timeloop's roofline, no fixed latency, no fill
    assert float(pipeline_cycles(use, xfer, lat, n, 1.0, False)) == pytest.approx(use + xfer)
    assert float(pipeline_cycles(use, xfer, lat, n, 2.0, False)) == pytest.approx(xfer)
    # a latency-bound loop (many small loads): the third stage hides what the second cannot
    small = [float(pipeline_cycles(30.0, 30.0, 44.0, 100.0, s, True)) for s in (2.0, 3.0, 4.0)]
    assert small[0] > small[1] > small[2]


def test_more_stages_hide_loads_and_cost_buffer_space():
    """(a) Load-dominated: cycles drop strictly from 1 to 2 stages, do not rise at 3 or 4,
    and the scratchpad footprint grows with the stages; the plain model is unchanged by the
    per-load term, the instruction-aware one pays it."""
    aware = [aware_model.exact(LAYER, HW, staged(s), aware=True) for s in (1, 2, 3, 4)]
    plain = [exact(LAYER, HW, staged(s)) for s in (1, 2, 3, 4)]
    cycles = [float(x.cycles) for x in aware]
    assert cycles[0] > cycles[1] >= cycles[2] >= cycles[3]
    assert cycles[0] > 1.5 * cycles[1]
    kb = [float(x.footprint_kb[SP]) for x in aware]
    assert kb[0] < kb[1] < kb[2] < kb[3]
    np.testing.assert_allclose(kb[1], 2 * kb[0], rtol=1e-6)
    # loads dominate: the DRAM port's busy time exceeds the compute
    assert float(plain[1].port_cycles[-1]) > 2 * float(plain[1].compute_cycles)
    # the per-load latency and the fill make every stage count slower than the roofline ...
    for a, p in zip(aware, plain):
        assert float(a.cycles) > float(p.cycles)
    # ... and with the term on, the analytic model alone gives the same (no padding here)
    with_term = exact(LAYER, HW, staged(2), load_latency=True)
    np.testing.assert_allclose(with_term.cycles, aware[1].cycles, rtol=1e-6)
    # the fill is one tile's load and use: 16 tiles, so at most 1/16 of the serial time extra
    roofline = float(plain[1].cycles)
    assert roofline < cycles[1] < roofline + cycles[0] / 16 + 1.0


def test_the_simulator_agrees_on_the_trend():
    """(b) The same layer and mapping lowered at 1 and 2 stages (the lowering gives every
    scratchpad and accumulator tile `stages` slots): the simulated cycles drop too."""
    sim = []
    for s in (1, 2):
        low = lower(LAYER, staged(s), HW)
        assert low.alloc["input"].slots == s
        sim.append(int(run(low.trace, HW, functional=False).cycles))
    model = [float(aware_model.exact(LAYER, HW, staged(s), aware=True).cycles) for s in (1, 2)]
    assert sim[0] > sim[1]
    assert model[0] > model[1]


@functools.partial(jax.jit, static_argnums=1)
def _relaxed_cycles(stage_logit, aware: bool):
    space = relax.RelaxSpace.create(HW, [LAYER], hw_mode="fixed")
    theta = relax.from_mappings(space, [MAPPING])
    logits = jnp.asarray(theta.mappings.stage_logits).at[0, SP].set(stage_logit)
    theta = theta._replace(mappings=theta.mappings._replace(stage_logits=logits))
    maps, hwp = relax.decode(theta, space)
    m = jax.tree_util.tree_map(lambda x: x[0], maps)
    layer = jax.tree_util.tree_map(jnp.asarray, pack_layer(LAYER))
    return aware_model.evaluate(space.template, layer, hwp, m, aware).cycles


_value_and_grad = jax.jit(jax.value_and_grad(_relaxed_cycles), static_argnums=1)


@pytest.mark.parametrize("stages", [1.25, 1.5])
def test_relaxed_stage_gradient_is_negative_when_loads_dominate(stages):
    """(c) Relaxed stages (`perfmodels.relax.decode_mapping`: ``1 + (MAX_STAGES - 1) *
    sigmoid(logit)``) get a negative gradient while loads are exposed, and the relaxed
    value equals the exact one at an integer stage count."""
    logit = float(np.log((stages - 1) / (MAX_STAGES - stages)))
    value, grad = _value_and_grad(jnp.float32(logit), True)
    assert np.isfinite(float(grad)) and float(grad) < 0.0
    s1 = jnp.float32(np.log(1e-6))   # ~1 stage
    s2 = jnp.float32(np.log(1.0 / 2.0))   # 2 stages
    np.testing.assert_allclose(_relaxed_cycles(s2, True),
                               aware_model.exact(LAYER, HW, staged(2), aware=True).cycles,
                               rtol=2e-3)
    assert float(_relaxed_cycles(s1, True)) > float(value) > float(_relaxed_cycles(s2, True))


def test_relaxed_stage_gradient_vanishes_once_bandwidth_binds():
    """Past ``serial / S = xfer`` (here S ~ 1.55) the DRAM port's bytes bound the loop:
    more stages hide nothing, the gradient is 0 and the value is the roofline plus the fill."""
    logit = float(np.log((2.5 - 1) / (MAX_STAGES - 2.5)))
    value, grad = _value_and_grad(jnp.float32(logit), True)
    assert float(grad) == 0.0
    np.testing.assert_allclose(value, aware_model.exact(LAYER, HW, staged(2), aware=True).cycles,
                               rtol=2e-3)


def test_timeloop_validation_stays_exact():
    """(d) The plain model still reproduces Timeloop; switching the per-load term (and the
    idle energy) on would not (so it is the switch, not a zero table, that keeps the
    yardstick)."""
    rows = read_rows(CSV, limit=300, strict=False)
    layers, hws, maps = ([r.layer for r in rows], [r.hw for r in rows],
                         [r.mapping for r in rows])
    plain = exact_batch(layers, hws, maps, check=False)
    summary = summarize(rows, plain)
    assert summary["cycles_mean_abs_rel_err"] < 1e-3
    assert summary["cycles_max_abs_rel_err"] < 0.02   # one row: Timeloop rounds
    with_term = exact_batch(layers, hws, maps, check=False, load_latency=True)
    assert np.all(with_term.cycles >= plain.cycles * (1 - 1e-6))
    assert summarize(rows, with_term)["cycles_mean_abs_rel_err"] > 1e-3
    # energy: the same accesses, plus the levels' idle energy over the cycles and the PEs'
    # in the cycles they have no MAC
    lvs = [level_arrays(h.template_spec, h.to_params(), np) for h in hws]
    idle = np.array([float(lv.static_pj_per_cycle.sum()) for lv in lvs])
    pes = np.array([h.pe_rows * h.pe_cols for h in hws], np.float64)
    pe_idle = (np.maximum(pes * with_term.cycles - with_term.macs, 0.0)
               * np.array([float(lv.pe_idle_pj_per_cycle) for lv in lvs]))
    np.testing.assert_allclose(with_term.pe_idle_pj, pe_idle, rtol=1e-4)
    np.testing.assert_allclose(with_term.energy_pj,
                               plain.energy_pj + idle * with_term.cycles + pe_idle, rtol=1e-5)
