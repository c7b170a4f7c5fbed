"""Fusion in the co-design (`codesign.fusion`, `baco.fusion`): which chains may fuse, how a
fused chain enters each design's score, and the result a fused search leaves: recorded,
judged by the same yardsticks, and run bit-exactly by `baco simulate`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.design import design_of
from baco.codesign_loop import codesign
from baco.config import CodesignConfig
from baco.fusion import FusionPlan, chain_figures, fused_chains, fusion_groups, path_area_mm2
from baco.result import CodesignResult
from baco.rounding import Rounder
from baco.search.gemmini_tiler import gemmini_mapping
from baco.simulate import report, simulate_result
from baco.yardsticks import hardware_area_mm2, yardsticks
from perfmodels.score import network_edp
from workloads.errors import ConfigError
from workloads.fusion import Chain
from workloads.layer import Layer
from workloads.network import Network
from workloads.suites import suite
from workloads.zoo import load

HW = HardwareConfig.preset("gemmini_default")


def _g(name: str) -> Network:
    return next(n for n in suite("bmm_chain") if n.name == name)


def test_groups_take_lowerable_gemm_chains_and_count_the_rest_by_reason():
    groups, skipped = fusion_groups(_g("G10"))
    assert [(g.first, g.second, g.instances) for g in groups] == [(0, 1, 1)] and not skipped
    # BERT's attention blocks (the mask as qk's bias, the scale and softmax -> av) and its FFN
    # blocks (bias, GELU -> bias, residual) are one group of twelve each.
    (attention, ffn), skipped = fusion_groups(load("bert"))
    assert attention.instances == ffn.instances == 12 and not skipped
    assert attention.softmax and not ffn.softmax
    assert [x.epilogue for x in attention.layers] == [("bias", "softmax"), ()]
    assert [x.epilogue for x in ffn.layers] == [("bias", "gelu"), ("bias", "add")]
    # Without the softmax unit's row rule (a softmax over another axis) the chain stays apart.
    net = load("bert")
    odd = [("bias", "softmax_axis") if e == ("bias", "softmax") else e for e in net.epilogues]
    groups, skipped = fusion_groups(dataclasses.replace(net, epilogues=tuple(odd)))
    assert [g.softmax for g in groups] == [False] and sum(skipped.values()) == 12
    # Two chain instances over the same unique layers are one group; a chain reusing a layer
    # of an earlier one is left apart.
    a = Layer.gemm(M=32, K_red=16, N_out=48, name="a")
    b = Layer.gemm(M=32, K_red=48, N_out=32, name="b")
    c = Layer.gemm(M=32, K_red=32, N_out=16, name="c")
    net = Network.from_layers("twice", [a, b, a, b, c], chains=[
        Chain("gemm_chain", (0, 1), ("a", "b")), Chain("gemm_chain", (2, 3), ("a", "b")),
        Chain("gemm_chain", (3, 4), ("b", "c"))])
    groups, skipped = fusion_groups(net)
    assert [(g.first, g.second, g.instances) for g in groups] == [(0, 1, 2)]
    assert skipped == {"shares a layer with an earlier fused chain": 1}
    # Conv chains fuse as GEMMs of their pixels when both convolutions are 1x1 (C7: the same
    # unique layer twice, C8); a window (3x3) keeps C1-C6 apart.
    fused = {n.name: fusion_groups(n)[0] for n in suite("conv_chain")}
    assert [name for name, g in fused.items() if g] == ["C7", "C8"]
    (c7,) = fused["C7"]
    assert (c7.first, c7.second, c7.uses) == (0, 0, {0: 2})
    assert c7.dims == (1, 56 * 56, 64, 64, 64)


def _scores(net: Network, hws: list[HardwareConfig]):
    rounder = Rounder(HW, list(net.layers), hw_mode="fixed")
    designs = [design_of(hw, [gemmini_mapping(x, hw)[0] for x in net.layers]) for hw in hws]
    return rounder, designs, rounder.layer_score(designs)


def test_fold_charges_the_fused_chain_exactly_where_it_lowers_the_edp():
    net = _g("G10")
    small = dataclasses.replace(HW, acc_kb=4.0)        # no n-spanning tiling fits: apart
    rounder, designs, alone = _scores(net, [HW, small])
    plan = FusionPlan.of(net)
    (group,) = plan.groups
    folded = plan.fold(alone, [HW, small])
    counts = np.asarray(net.counts, np.float64)
    fused_cycles, fused_pj, tiles = chain_figures(group, HW)
    assert tiles is not None and math.isinf(chain_figures(group, small)[0])
    before = network_edp(alone, counts)
    after = network_edp(folded, counts)
    # On the default chip the chain fuses: the network is the chain alone.
    np.testing.assert_allclose(after[1][0], fused_cycles, rtol=1e-5)
    np.testing.assert_allclose(after[2][0], fused_pj, rtol=1e-5)
    assert after[0][0] < before[0][0]
    # Where it cannot fuse, nothing changes.
    np.testing.assert_allclose(np.asarray(folded.cycles[1]), np.asarray(alone.cycles[1]))
    # A chain that would not lower the EDP stays apart (the layers apart made 1000x cheaper).
    assert plan.decide(np.asarray(alone.cycles, np.float64),
                       np.asarray(alone.energy_pj, np.float64), [HW, small]).tolist() == [
        [True], [False]]
    assert plan.decide(np.asarray(alone.cycles, np.float64) * 1e-3,
                       np.asarray(alone.energy_pj, np.float64) * 1e-3, [HW, small]).sum() == 0
    # The rounder scores with the plan folded in.
    np.testing.assert_allclose(np.asarray(rounder.replace(fusion=plan).score(designs).cycles),
                               np.asarray(folded.cycles))


def _judged(result: CodesignResult):
    """The result's design judged with its fused chains, and with every layer apart."""
    layers = [x.layer for x in result.layers]
    design = design_of(result.hardware, [x.mapping for x in result.layers])
    counts = [x.count for x in result.layers]
    return (yardsticks(layers, counts, design, fused=fused_chains(result.extra, layers)),
            yardsticks(layers, counts, design))


@pytest.mark.slow  # a fused search end to end; test_run covers a fused case's records and trace
def test_a_fused_search_records_judges_and_simulates_its_chains():
    net = _g("G10")
    config = CodesignConfig(budget_samples=300, seed=0, fusion=True)
    result = codesign(net, config=config)
    assert [x.fused_with for x in result.layers] == [("G10/gemm2",), ("G10/gemm1",)]
    (entry,) = result.extra["fusion"]["chains"]
    assert entry["fused"] and entry["tiles"] and result.extra["fusion"]["left_apart"] == {}
    loaded = CodesignResult.from_json(result.to_json())
    assert loaded.layers == result.layers
    judged, apart = _judged(loaded)
    # The search's score is the instruction-aware yardstick of what it decided.
    assert judged.instruction_aware.edp == pytest.approx(result.edp, rel=1e-5)
    # On the simulator the chain runs as one trace, with less DRAM traffic than apart.
    assert [x.count for x in judged.layers] == [0.0, 0.0, 1.0]
    moved = [x.dram_read_bytes + x.dram_write_bytes for x in judged.layers]
    assert moved[2] < sum(x.dram_read_bytes + x.dram_write_bytes for x in apart.layers)
    assert judged.simulated.edp < apart.simulated.edp
    # The fused design carries the template's on-chip path; the unfused one does not.
    path = path_area_mm2(loaded.hardware)
    assert path > 0 and result.extra["fusion"]["path_area_mm2"] == path
    assert judged.area_mm2 == pytest.approx(hardware_area_mm2(loaded.hardware) + path)
    assert apart.area_mm2 == pytest.approx(hardware_area_mm2(loaded.hardware))
    records = simulate_result(loaded, check=True)
    assert [r.count for r in records] == [0, 0, 1] and records[2].checked
    assert report(records, "r")["all_ok"] and records[2].outputs == 512 * 64


def test_fusion_refuses_the_simulator_trained_predictor():
    with pytest.raises(ConfigError, match="codesign.fusion"):
        CodesignConfig(fusion=True, predictor="sim_hybrid")


def test_a_chain_of_one_unique_layer_folds_both_instances():
    net = next(n for n in suite("conv_chain") if n.name == "C7")     # one 1x1 conv, twice
    assert net.counts == (2,)
    _, designs, alone = _scores(net, [HW])
    plan = FusionPlan.of(net)
    folded = plan.fold(alone, [HW], fused=np.ones((1, 1), bool))
    fused_cycles, fused_pj, _ = chain_figures(plan.groups[0], HW)
    _, cycles, energy_pj = network_edp(folded, np.asarray(net.counts, np.float64))
    np.testing.assert_allclose([cycles[0], energy_pj[0]], [fused_cycles, fused_pj], rtol=1e-5)


def test_within_an_area_budget_a_design_fuses_only_if_the_path_fits_beside_it():
    net = _g("G10")
    _, _, alone = _scores(net, [HW])
    cycles, energy_pj = (np.asarray(x, np.float64) for x in (alone.cycles, alone.energy_pj))
    area, path = hardware_area_mm2(HW), path_area_mm2(HW)
    groups = fusion_groups(net)[0]
    for budget, fuses in ((area + 0.5 * path, False), (area + 2 * path, True), (None, True)):
        plan = FusionPlan(groups, net.counts, area_budget_mm2=budget)
        assert plan.decide(cycles, energy_pj, [HW]).tolist() == [[fuses]]


@pytest.mark.slow
def test_a_killed_fused_search_resumes_to_the_uninterrupted_result(tmp_path, comparable,
                                                                   killed_after_round):
    net = _g("G10")
    config = CodesignConfig(budget_samples=240, seed=1, fusion=True, starts=2,
                            steps_per_start=40, round_every=10, checkpoint_every=1)
    reference = codesign(net, config=config)
    path = tmp_path / "state.npz"
    killed_after_round(net, config=config, checkpoint=path)
    resumed = codesign(net, config=config, checkpoint=path, resume=True)
    assert comparable(resumed) == comparable(reference)
    assert resumed.extra["fusion"] == reference.extra["fusion"]


@pytest.mark.slow  # a descent on both objectives; perfmodels/test_fusion checks the chain model
def test_the_relaxed_objective_sees_the_chain_fused_where_that_pays():
    import jax

    from baco import codesign_loop as search
    from baco.objective import objective

    net = _g("G10")
    run = search._Search(net, HW, CodesignConfig(budget_samples=1000, seed=0, fusion=True))
    problem = run.problem
    (term,) = problem.settings.fusion
    assert term.uses == ((0, 1), (1, 1)) and term.dims == (1, 512, 64, 256, 64)
    _, theta, _ = run.slots.new_start(run.start(), 0)

    def loss(settings):
        (value, totals), grad = jax.jit(jax.value_and_grad(
            lambda t: objective(t, problem.space, settings), has_aux=True))(theta)
        return float(value), [float(x) for x in totals], grad

    fused, (cycles, pj), grad = loss(problem.settings)
    apart, (cycles0, pj0), grad0 = loss(dataclasses.replace(problem.settings, fusion=()))
    assert fused < apart and cycles < cycles0 and pj < pj0
    # ... and its gradient: the mappings are pulled differently once the chain fuses.
    moved = jax.tree_util.tree_map(lambda a, b: float(abs(a - b).max()), grad, grad0)
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-3
    plain = search._Search(net, HW, CodesignConfig(budget_samples=1000))
    assert plain.problem.settings.fusion == ()


def test_an_onnx_attention_block_fuses_through_the_normalizer_and_simulates_bit_exactly():
    """q @ k / 8 + mask -> softmax -> @ v: the chain is a group whose first GEMM carries the
    mask as its bias and the softmax; fused on the Gemmini default it moves less DRAM than
    apart, the judged area includes the normalizer, and its one trace (the softmax's three
    passes per row) matches numpy with the check's scales, as `baco simulate --check` runs it."""
    from accel.arch import unit_area_mm2
    from accel.lower import lower_gemm_chain
    from accel.lower.check import check_scales, expected_chain_output, random_chain_inputs
    from accel.sim import run
    from baco.fusion import plan_chain_tiles
    from workloads.onnx_import import from_onnx
    from workloads.zoo.builder import GraphBuilder

    b = GraphBuilder("attention")
    q, k, v = (b.input(n, s) for n, s in (("q", (1, 2, 64, 32)), ("k", (1, 2, 32, 64)),
                                           ("v", (1, 2, 64, 32))))
    s = b.add(b.div(b.matmul(q, k, name="qk"), b.scalar(8.0)), b.input("mask", (1, 1, 1, 64)))
    b.output(b.matmul(b.softmax(s), v, name="av"))
    net = from_onnx(b.build())
    (group,), skipped = fusion_groups(net)
    assert not skipped and group.softmax
    first, second = group.layers
    tiles = plan_chain_tiles(first, second, HW)
    assert tiles["l"] == 64                       # whole rows of the scores
    _, (design,), _ = _scores(net, [HW])
    layers, counts = list(net.layers), list(net.counts)
    judged = yardsticks(layers, counts, design, fused=[group])
    apart = yardsticks(layers, counts, design)
    moved = judged.layers[-1].dram_read_bytes + judged.layers[-1].dram_write_bytes
    assert moved < sum(x.dram_read_bytes + x.dram_write_bytes for x in apart.layers)
    assert judged.area_mm2 == pytest.approx(apart.area_mm2 + path_area_mm2(HW, softmax=True))
    assert path_area_mm2(HW, softmax=True) > unit_area_mm2(HW, "normalizer") > 0
    low = lower_gemm_chain(first, second, HW, tiles,
                           acc_scales=check_scales(first.C, second.C, softmax=True))
    arrays, image, initialized = random_chain_inputs(low, np.random.default_rng(0))
    out = run(low.trace, HW, image, initialized=initialized)
    want = expected_chain_output(low, arrays)
    assert np.array_equal(low.layout.read(out.dram, "E"), want) and np.abs(want).max() > 8


def test_an_onnx_mlp_block_fuses_with_its_biases_and_residual_and_simulates_bit_exactly():
    """Gemm + bias -> Relu -> Gemm + bias -> Add(input): the chain is a group with both biases
    and the residual, the search's plan fuses it on the Gemmini default with its library's
    programs, it moves less DRAM and costs less on the simulator than apart, and its one trace
    matches numpy."""
    from accel.lower import lower_gemm_chain
    from accel.lower.check import check_scales, expected_chain_output, random_chain_inputs
    from accel.sim import run
    from baco.fusion import plan_chain_tiles
    from workloads.onnx_import import from_onnx
    from workloads.zoo.builder import GraphBuilder

    b = GraphBuilder("mlp")
    x = b.input("x", (512, 32))
    y = b.gemm(b.relu(b.gemm(x, 256, name="fc1")), 32, name="fc2")
    b.output(b.add(y, x, name="residual"))
    net = from_onnx(b.build())
    (group,), skipped = fusion_groups(net)
    assert not skipped
    first, second = group.layers
    assert [first.epilogue, second.epilogue] == [("bias", "relu"), ("bias", "add")]
    _, (design,), alone = _scores(net, [HW])
    fuse = FusionPlan.of(net).decide(np.asarray(alone.cycles, np.float64),
                                     np.asarray(alone.energy_pj, np.float64), [HW])
    assert fuse.tolist() == [[True]]
    layers, counts = list(net.layers), list(net.counts)
    judged = yardsticks(layers, counts, design, fused=[group])
    apart = yardsticks(layers, counts, design)
    moved = [x.dram_read_bytes + x.dram_write_bytes for x in judged.layers]
    assert [x.count for x in judged.layers] == [0.0, 0.0, 1.0]
    assert moved[2] < sum(x.dram_read_bytes + x.dram_write_bytes for x in apart.layers)
    assert judged.simulated.edp < apart.simulated.edp
    low = lower_gemm_chain(first, second, HW, plan_chain_tiles(first, second, HW),
                           acc_scales=check_scales(first.C, second.C))
    arrays, image, initialized = random_chain_inputs(low, np.random.default_rng(0))
    out = run(low.trace, HW, image, initialized=initialized)
    assert np.array_equal(low.layout.read(out.dram, "E"), expected_chain_output(low, arrays))
