"""The Gemmini default baseline: the tiler port against gemmini.h's worked examples, and the
mapping that scores what it runs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workloads
from accel.arch import HardwareConfig
from baco.errors import ConfigError
from baco.search import BASELINES
from baco.search.gemmini_tiler import (
    ACCUMULATOR_ORDER,
    DEFAULT_PARAMS,
    DRAM_ORDER,
    GemminiParams,
    gemmini_mapping,
    gemmini_tiles,
    tiled_conv_auto,
    tiled_conv_total_spad_rows,
    tiled_matmul_auto,
)
from perfmodels.analytic import exact
from workloads import DIMS, Layer

HW = HardwareConfig.preset("gemmini_default")


@pytest.mark.parametrize("dims, ws, os_", [
    ((512, 512, 512), (5, 6, 32), (8, 8, 32)),
    ((128, 768, 768), (5, 5, 48), (8, 8, 48)),      # BERT: DOSA's auto_tiling 1_1_80_1_768_80_1
    ((128, 768, 3072), (5, 5, 51), (8, 8, 64)),
    ((3136, 64, 64), (8, 4, 4), (16, 4, 4)),
])
def test_matmul_tiler_reproduces_the_worked_examples(dims, ws, os_):
    assert tiled_matmul_auto(*dims) == ws
    assert tiled_matmul_auto(*dims, dataflow="OS") == os_


def test_matmul_tiler_whole_rows_for_layernorm():
    assert tiled_matmul_auto(128, 768, 768, act="layernorm") == (1, 48, 1)


def test_params_come_from_the_hardware():
    assert GemminiParams.from_hardware(HW) == DEFAULT_PARAMS
    assert GemminiParams.from_hardware(HardwareConfig.preset("gemmini_dosa")) == \
        GemminiParams(dim=16, sp_rows=8192, acc_rows=512)
    with pytest.raises(ConfigError, match="square Gemmini"):
        GemminiParams.from_hardware(HardwareConfig.preset("eyeriss"))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4000), st.integers(1, 4000), st.integers(1, 4000))
def test_matmul_tiles_fill_the_half_budgets_greedily(i, j, k):
    dim, sp, acc = 16, DEFAULT_PARAMS.sp_rows // 2, DEFAULT_PARAMS.acc_rows // 2
    ti, tj, tk = tiled_matmul_auto(i, j, k)
    blocks = [-(-x // dim) for x in (i, j, k)]
    spad = lambda a, b, c: (a * c + c * b) * dim
    assert spad(ti, tj, tk) <= sp and ti * tj * dim <= acc
    assert 1 <= ti <= blocks[0] and 1 <= tj <= blocks[1] and 1 <= tk <= blocks[2]
    # Nothing can grow by one block any more (the loop's exit condition).
    assert tj + 1 > blocks[1] or spad(ti, tj + 1, tk) > sp or ti * (tj + 1) * dim > acc
    assert ti + 1 > blocks[0] or spad(ti + 1, tj, tk) > sp or (ti + 1) * tj * dim > acc
    assert tk + 1 > blocks[2] or spad(ti, tj, tk + 1) > sp


def test_conv_tiler_shrinks_then_regrows_within_the_budgets():
    tiles = tiled_conv_auto(1, 56, 56, 64, 64, 56, 56, 1, 1, 1, 1, 3)
    assert tuple(tiles) == (1, 22, 23, 16, 3, 3, 64)
    args = list(tiles)
    rows = lambda a, acc: tiled_conv_total_spad_rows(acc, 1, 1, 1, False, False, False,
                                                     *a, 1, 1)
    assert rows(args, False) <= 8192 and rows(args, True) <= 512
    full = [1, 56, 56, 64, 3, 3, 64]
    for i in range(7):
        grown = list(args)
        grown[i] += 1
        assert grown[i] > full[i] or rows(grown, False) > 8192 or rows(grown, True) > 512


def test_conv_tiler_keeps_a_small_conv_whole():
    assert tuple(tiled_conv_auto(1, 9, 9, 32, 32, 7, 7, 1, 1, 1, 0, 3)) == (1, 7, 7, 32, 3, 3, 32)


def test_downsample_quarters_the_input_rows():
    plain = tiled_conv_total_spad_rows(False, 2, 1, 1, False, False, False, 1, 14, 14, 16,
                                       1, 1, 16, 1, 1)
    down = tiled_conv_total_spad_rows(False, 2, 1, 1, True, False, False, 1, 14, 14, 16,
                                      1, 1, 16, 1, 1)
    assert plain - 16 == 28 * 28 and down - 16 == 14 * 14


def test_pointwise_convs_run_as_matmuls_like_resnet50_c():
    layer = Layer.conv2d(P=56, Q=56, C=64, K=64)
    assert gemmini_tiles(layer)["tiler"] == "tiled_matmul_auto"
    assert gemmini_tiles(layer)["tile_I"] == 8          # the 3136 x 64 x 64 example
    assert gemmini_tiles(layer, pointwise_as_matmul=False)["tiler"] == "tiled_conv_auto"
    strided = Layer.conv2d(P=28, Q=28, C=256, K=512, Hstride=2, Wstride=2)
    assert gemmini_tiles(strided)["tiler"] == "tiled_conv_auto"


def test_mapping_encodes_the_tile_like_dosa_calibration():
    layer = Layer.gemm(M=128, K_red=768, N_out=768)
    m, info = gemmini_mapping(layer, HW)
    assert (info["tile_I"], info["tile_J"], info["tile_K"]) == (5, 5, 48)
    d = {x: i for i, x in enumerate(DIMS)}
    assert m.spatial[1, d["C"]] == 16 and m.spatial[2, d["K"]] == 16
    # Tile at the accumulator: 64 rows (largest divisor of 128 within 80), 48 blocks of C,
    # 4 blocks of K (largest divisor of 48 within 5); registers and scratchpad loop-free.
    assert m.temporal[1, d["P"]] == 64 and m.temporal[1, d["C"]] == 48
    assert m.temporal[1, d["K"]] == 4
    assert (m.temporal[0] == 1).all() and (m.temporal[2] == 1).all()
    assert [DIMS[i] for i in m.order[3][::-1]] == list(DRAM_ORDER)
    assert [DIMS[i] for i in m.order[1][::-1]] == list(ACCUMULATOR_ORDER)
    assert m.stages.tolist() == [2, 2, 2, 1]


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_every_zoo_layer_gets_a_valid_mapping(name):
    for layer, _ in workloads.load(name):
        m, info = gemmini_mapping(layer, HW)
        m.validate(layer, HW)
        # The array is as full as the dims allow: the largest divisor up to DIM.
        assert m.spatial[1, 4] == max(x for x in range(1, 17) if layer.C % x == 0)
        assert m.spatial[2, 5] == max(x for x in range(1, 17) if layer.K % x == 0)
        assert info["tiler"] in ("tiled_matmul_auto", "tiled_conv_auto")


def test_default_baseline_is_one_exactly_scored_sample():
    net = workloads.Network.from_layers("toy", [
        Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64, pads=(1, 1, 1, 1), name="c3"),
        Layer.conv2d(P=14, Q=14, C=64, K=256, name="pw"),
        Layer.gemm(M=1, K_red=256, N_out=100, name="fc")])
    result = BASELINES["gemmini_default"](net, budget_samples=5000, seed=3)
    assert result.method == "gemmini_default" and result.samples == 1
    assert result.hardware == HW
    assert len(result.history) == 1 and result.history[0].samples == 1
    assert result.history[0].best_edp == pytest.approx(result.edp)
    for row in result.layers:
        row.mapping.validate(row.layer, HW)
        out = exact(row.layer, HW, row.mapping)
        assert row.latency_cycles == pytest.approx(float(out.cycles))
        assert row.energy_pj == pytest.approx(float(out.energy_pj))
    assert set(result.extra["tiles"]) == {"c3", "pw", "fc"}
    again = BASELINES["gemmini_default"](net, budget_samples=1, seed=0)
    assert again.edp == result.edp
