"""The Gemmini default baseline: the tiler port against gemmini.h's worked examples, and the
mapping that scores what it runs (padded edge tiles, as the library runs them).

The expected tiles below are not computed by the port: the simple ones are hand-traced from
ucb-bar/gemmini-rocc-tests ``include/gemmini.h`` (commit 180c46848eca) with the default
``gemmini_params.h`` (DIM 16, BANK_NUM*BANK_ROWS 16384, ACC_ROWS 1024); the long traces (tens of
shrink steps) were printed by gemmini.h's own loops (``tiled_matmul_auto`` L1243-1308,
``tiled_conv_total_spad_rows`` L1791-1831, ``tiled_conv_stride_auto`` L2656-2771, copied
verbatim into a C harness and compiled with gcc), and are written here as literals.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workloads
from accel.arch import HardwareConfig
from accel.design import design_of
from accel.lower.nest import padded_layer
from baco.errors import ConfigError
from baco.rounding import common_score
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


# WS budgets: 8192 scratchpad rows, 512 accumulator rows; db_max_tile_i_j = isqrt(512/16) = 5,
# db_max_tile_k = (4096/16) / 5 = 51. spad(i,j,k) = (i*k + k*j)*16, acc(i,j) = i*j*16.
@pytest.mark.parametrize("dims, dataflow, expected", [
    # I=607 (38 blocks), J=1000 (63), K=37 (3): start (5, 5, 3). Pass 1: J 6 (spad 528,
    # acc 480); I 6? acc(6,6) = 576 > 512, no; K 4 > 3 blocks, no. Pass 2: J 7? acc 560, no;
    # nothing grows -> (5, 6, 3).
    ((607, 1000, 37), "WS", (5, 6, 3)),
    # OS: whole budgets, max_tile_i_j = isqrt(1024/16) = 8; start (8, 8, 3) = 8*8*16 = 1024
    # acc rows: nothing grows.
    ((607, 1000, 37), "OS", (8, 8, 3)),
    # GEMV I=1, J=1000 (63), K=2048 (128): start (1, 5, 51); J and K grow in turn (J 6, K 52,
    # J 7, K 53, J 8, K 54, K 55, K 56: spad (56 + 448)*16 = 8064); J 9 = 8800 and
    # K 57 = 8208 exceed 8192 -> (1, 8, 56).
    ((1, 1000, 2048), "WS", (1, 8, 56)),
    # Table 6.6 GEMM shapes with odd sizes (gemmini.h's loops, compiled).
    ((1003, 9, 282), "WS", (27, 1, 18)),
    ((341, 4, 46163), "WS", (8, 1, 56)),
    ((3136, 256, 64), "WS", (5, 6, 4)),
])
def test_matmul_tiler_matches_gemmini_h_on_odd_shapes(dims, dataflow, expected):
    assert tiled_matmul_auto(*dims, dataflow=dataflow) == expected


# Arguments as tiled_conv_auto takes them: batch, in rows, in cols, in channels, out channels,
# out rows, out cols, stride, input dilation, kernel dilation, padding, kernel dim.
@pytest.mark.parametrize("args, expected", [
    # C=3, K=37, 15x15 out of 29x29, stride 2, 3x3: the whole conv needs acc rows
    # ceil(37/16)*15*15 = 675 > 512; the largest argument is K=37 -> 32 (down to a DIM
    # multiple): 2*225 = 450 fits (spad: 1*31*31 + 2*3*3*3 = 979). Regrowing K to 33 needs
    # 675 acc rows again; everything else is whole -> (1, 15, 15, 32, 3, 3, 3).
    ((1, 29, 29, 3, 37, 15, 15, 2, 1, 1, 1, 3), (1, 15, 15, 32, 3, 3, 3)),
    # Batch 3, C=5, K=7, 7x7 out of 15x15, stride 2, no padding: spad 1*3*15*15 + 1*3*3*5 =
    # 720, acc 1*3*7*7 = 147: the whole conv fits.
    ((3, 15, 15, 5, 7, 7, 7, 2, 1, 1, 0, 3), (3, 7, 7, 7, 3, 3, 5)),
    # Long traces (gemmini.h's loops, compiled): ResNet-50's 7x7 stride-2 stem (C=3); an odd
    # 29x29 stride-2 output; a 14x14 stride-2 3x3 whose kchs regrows to 105 (not a DIM
    # multiple); odd channels (C=17, K=33) on an odd 27x27 output.
    ((1, 224, 224, 3, 64, 112, 112, 2, 1, 1, 3, 7), (1, 22, 23, 16, 7, 7, 3)),
    ((1, 57, 57, 3, 64, 29, 29, 2, 1, 1, 1, 3), (1, 22, 23, 16, 3, 3, 3)),
    ((1, 28, 28, 256, 256, 14, 14, 2, 1, 1, 1, 3), (1, 14, 14, 32, 3, 3, 105)),
    ((1, 27, 27, 17, 33, 27, 27, 1, 1, 1, 1, 3), (1, 22, 23, 16, 3, 3, 17)),
])
def test_conv_tiler_matches_gemmini_h_on_odd_shapes(args, expected):
    assert tuple(tiled_conv_auto(*args)) == expected


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
    # The library's loops: I0 = ceil(128/80) = 2 calls, J0 = ceil(48/5) = 10, K0 = 1. Each
    # call's share: 64 rows, 48 blocks of C, ceil(48/10) = 5 blocks of K (the last call of
    # K covers 32 padded columns); registers and scratchpad loop-free.
    assert m.temporal[3, d["P"]] == 2 and m.temporal[3, d["K"]] == 10
    assert m.temporal[1, d["P"]] == 64 and m.temporal[1, d["C"]] == 48
    assert m.temporal[1, d["K"]] == 5
    assert info["padded_dims"] == {"K": 800}
    assert (m.temporal[0] == 1).all() and (m.temporal[2] == 1).all()
    assert [DIMS[i] for i in m.order[3][::-1]] == list(DRAM_ORDER)
    assert [DIMS[i] for i in m.order[1][::-1]] == list(ACCUMULATOR_ORDER)
    assert m.stages.tolist() == [2, 2, 2, 1]


def _library_tile(layer, info):
    """Elements of each dim one call of the library's FSM covers (from the tiler's record)."""
    tile = dict.fromkeys(DIMS, 1)
    if info["tiler"] == "tiled_matmul_auto":
        tile.update(C=info["tile_K"] * 16, K=info["tile_J"] * 16)
        rows = info["tile_I"] * 16
        if layer.kind in ("gemm", "gemv"):
            tile["P"] = rows
        else:
            tile.update(Q=min(layer.Q, rows), P=max(1, rows // layer.Q), N=1)
    else:
        tile.update(N=info["batches"], P=info["porows"], Q=info["pocols"], R=info["krows"],
                    S=info["kcols"], C=info["kchs"], K=info["pochs"])
    return {d: min(t, layer.dims[d]) for d, t in tile.items()}


def _check_covers(layer, m, info):
    """The mapping runs the library's loops over a padded layer: every dim covered, by at
    most one tile more; the library's number of calls at DRAM; DIM rows/columns in use."""
    m.validate(padded_layer(layer, m), HW)
    cover = (m.temporal * m.spatial).prod(axis=0)
    tile = _library_tile(layer, info)
    # (a tile the model's footprint cannot hold is halved, see the module docstring)
    halved = {a.split()[0] for a in info.get("adjustments", []) if a.endswith("halved")}
    for i, d in enumerate(DIMS):
        dim = layer.dims[d]
        call = m.temporal[1, i] * m.spatial[1, i] * m.spatial[2, i]     # one call's extent
        assert dim <= cover[i] < dim + call, (d, dim, cover[i], call)
        if d in halved:
            continue
        # no more than the library's call (C, K: its DIM-blocks, the last one zero-padded)
        blocks = -(-tile[d] // 16) * 16 if d in "CK" and tile[d] >= 16 else tile[d]
        assert call <= blocks, (d, call, tile[d])
        assert m.temporal[3, i] == -(-dim // tile[d]), (d, m.temporal[3, i], tile[d])
    assert m.spatial[1, DIMS.index("C")] == min(16, tile["C"])
    assert m.spatial[2, DIMS.index("K")] == min(16, tile["K"])
    assert info["padded_dims"] == {d: int(cover[i]) for i, d in enumerate(DIMS)
                                   if cover[i] > layer.dims[d]}


@pytest.mark.parametrize("layer", [
    Layer.gemm(M=607, K_red=37, N_out=1000),
    Layer.gemm(M=1, K_red=2048, N_out=1000),
    Layer.gemm(M=1003, K_red=282, N_out=9),
    Layer.conv2d(R=3, S=3, P=15, Q=15, C=3, K=37, Hstride=2, Wstride=2, pads=(1, 1, 1, 1)),
    Layer.conv2d(R=7, S=7, P=112, Q=112, C=3, K=64, Hstride=2, Wstride=2, pads=(3, 3, 3, 3)),
    Layer.conv2d(R=3, S=3, P=27, Q=27, C=17, K=33, pads=(1, 1, 1, 1)),
    Layer.conv2d(P=13, Q=13, C=37, K=101),                     # pointwise: an im2col GEMM
], ids=lambda x: x.config_str())
def test_mapping_covers_odd_layers_with_padded_edge_tiles(layer):
    m, info = gemmini_mapping(layer, HW)
    _check_covers(layer, m, info)


def test_prime_gemm_mapping_runs_the_library_tiles():
    # I=607, K=37, J=1000, tiles (5, 6, 3) (hand-traced above): I0 = ceil(38/5) = 8 calls of
    # ceil(607/8) = 76 rows; K: 16 PE rows x 3 blocks, one call; J: 16 PE columns, J0 =
    # ceil(63/6) = 11 calls of ceil(63/11) = 6 blocks (1056 columns, 56 padded).
    m, info = gemmini_mapping(Layer.gemm(M=607, K_red=37, N_out=1000), HW)
    assert m.to_timeloop() == "L3[WIO] P8 K11 - L2[WI] N1 K16X - L1[O] K6 C3 P76 C16X - L0[W] N1"
    assert info["padded_dims"] == {"P": 608, "C": 48, "K": 1056}


def test_prime_gemm_array_utilisation_is_the_librarys_not_one_row():
    layer = Layer.gemm(M=607, K_red=37, N_out=1000)
    m, _ = gemmini_mapping(layer, HW)
    out = exact(padded_layer(layer, m), HW, m)
    util = layer.macs / (HW.pe_rows * HW.pe_cols * float(out.compute_cycles))
    # The library's zero-padded DIM blocks: ceil(607/16) * ceil(37/16) * ceil(1000/16) =
    # 38 * 3 * 63 blocks of 16^3 MACs for 607*37*1000 useful ones: 0.763.
    library = 607 * 37 * 1000 / (38 * 3 * 63 * 16 ** 3)
    assert library == pytest.approx(0.7635, abs=1e-4)
    assert 0.85 * library <= util <= library
    # (Divisor tiles put one PE row on the prime C=37 and 10 columns on J=1000: 10/256.)
    assert util > 10 * (10 / 256)


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_every_zoo_layer_gets_a_valid_mapping(name):
    for layer, _ in workloads.load(name):
        m, info = gemmini_mapping(layer, HW)
        assert info["tiler"] in ("tiled_matmul_auto", "tiled_conv_auto")
        _check_covers(layer, m, info)


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
        padded = padded_layer(row.layer, row.mapping)
        out = exact(padded, HW, row.mapping)
        assert row.latency_cycles == pytest.approx(float(out.cycles))
        assert row.energy_pj == pytest.approx(float(out.energy_pj))
    assert set(result.extra["tiles"]) == {"c3", "pw", "fc"}
    again = BASELINES["gemmini_default"](net, budget_samples=1, seed=0)
    assert again.edp == result.edp


def test_common_scorer_scores_the_padded_default_on_the_padded_layers():
    net = workloads.Network.from_layers("odd", [
        Layer.gemm(M=607, K_red=37, N_out=1000, name="prime"),
        Layer.conv2d(R=3, S=3, P=15, Q=15, C=3, K=37, Hstride=2, Wstride=2,
                     pads=(1, 1, 1, 1), name="c3")])
    result = BASELINES["gemmini_default"](net)
    layers, counts = list(net.layers), [float(c) for c in net.counts]
    design = design_of(result.hardware, [r.mapping for r in result.layers])
    plain = common_score(layers, counts, design, False)
    assert plain.edp == pytest.approx(result.edp, rel=1e-6)
    aware = common_score(layers, counts, design, True)
    assert aware.edp >= plain.edp * (1 - 1e-6)     # C=3 runs on 16 PE rows: padding costs
