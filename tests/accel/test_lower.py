"""accel.lower: addresses, coverage, capacity, buffering and the loop_ws form (no simulator).

The end-to-end tests that run lowered traces on `accel.sim` are in test_lower_sim.py.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import IsaParams
from accel.lower import (
    DramLayout,
    access_matrix,
    check_coverage,
    check_matching,
    check_tile_coverage,
    im2col_input,
    im2col_weight,
    input_hw,
    lower,
    matching_matrices,
    parse_epilogue,
    reference,
)
from accel.lower.coverage import GEMMINI_Z
from accel.lower.nest import Nest
from accel.lower.ws import allocate
from accel.mapping import Mapping
from accel.trace import Trace
from workloads.errors import ConfigError, InfeasibleError, TraceError, UnsupportedOpError
from workloads.layer import Layer


def hw_dim(dim: int, sp_kb: float = 4, acc_kb: float = 2) -> HardwareConfig:
    return HardwareConfig(pe_rows=dim, pe_cols=dim, sp_kb=sp_kb, acc_kb=acc_kb)


def tl(text: str, stages: int = 1) -> Mapping:
    return Mapping.from_timeloop(text, stages=stages)


def field(ins, name):
    return ins.fields()[name]


# --------------------------------------------------------------------------- the seed's example
def test_seed_4x9x4_example_addresses_follow_the_seed_formula():
    """Seed 001 §4.6: a 3x3 conv, P=Q=2, C=1, K=4 is a 4x9 @ 9x4 GEMM; on a 2x2 array its A
    matrix splits into 2x5 sub-matrices (the last column zero-padded) and sub-matrix
    (m, kk) starts at element ((n*4 + p*2 + q)/2)*20 + ((c*9 + r*3 + s)/2)*4."""
    conv = Layer.conv2d(R=3, S=3, P=2, Q=2, C=1, K=4)
    gemm = conv.to_gemm()
    assert (gemm.P, gemm.C, gemm.K) == (4, 9, 4)
    # C covers 10 = 2 (PE rows) x 5: the trailing block of K_red is padded.
    mapping = tl("L3[WIO] N1 - L2[WI] N1 K2X - L1[O] P2 C5 K2 C2X - L0[W] P2")
    low = lower(gemm, mapping, hw_dim(2, sp_kb=1, acc_kb=1))
    dim = 2
    computes = [ins for ins in low.trace if ins.mnemonic.startswith("compute")]
    blocks = low.compute_blocks()
    assert len(computes) == len(blocks) == 2 * 5 * 2  # m-blocks x k_red-blocks x out blocks
    a_base = low.alloc["input"].start_row
    seen = set()
    for ins, blk in zip(computes, blocks):
        _, n, m, q, _, k_blk, r, s, rows, a_cols, _ = blk.tolist()
        assert (n, q, r, s) == (0, 0, 0, 0) and m % dim == 0
        element = (field(ins, "a").row - a_base) * dim
        assert element == (m // 2) * 20 + k_blk * 4
        assert rows == 2 and a_cols == (1 if k_blk == 4 else 2)
        seen.add((m // 2, k_blk))
    # Every iteration (n, p, q, c, r, s) falls in a sub-matrix at its formula's address.
    for n, p, q, c, r, s in itertools.product(range(1), range(2), range(2), range(1), range(3),
                                              range(3)):
        assert ((n * 4 + p * 2 + q) // 2, (c * 9 + r * 3 + s) // 2) in seen


def test_im2col_matrices_use_the_seed_ordering():
    conv = Layer.conv2d(R=3, S=3, P=2, Q=2, C=1, K=4)
    x = np.arange(16, dtype=np.int8).reshape(1, 4, 4, 1)
    cols = im2col_input(conv, x)
    assert cols.shape == (1, 4, 1, 9)
    # row m = p*2 + q, column c*9 + r*3 + s reads x[p + r, q + s]
    for p, q, r, s in itertools.product(range(2), range(2), range(3), range(3)):
        assert cols[0, p * 2 + q, 0, r * 3 + s] == x[0, p + r, q + s, 0]
    w = np.arange(36, dtype=np.int8).reshape(1, 3, 3, 1, 4)
    gw = im2col_weight(conv, w)
    assert gw.shape == (1, 1, 1, 9, 4) and gw[0, 0, 0, 5, 2] == w[0, 1, 2, 0, 2]
    gemm = conv.to_gemm()
    np.testing.assert_array_equal(reference(gemm, cols, gw, full_output=True),
                                  reference(conv, x, w, full_output=True).reshape(1, 4, 1, 4))


# --------------------------------------------------------------------------- reference
def naive_conv(layer: Layer, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The defining 7-loop sum, element by element."""
    hz = (x.shape[1] - 1) * layer.upsample[0] + 1
    wz = (x.shape[2] - 1) * layer.upsample[1] + 1
    out = np.zeros((layer.N, layer.P, layer.Q, layer.groups * layer.K), np.int64)
    for g, n, p, q, k in itertools.product(range(layer.groups), range(layer.N), range(layer.P),
                                           range(layer.Q), range(layer.K)):
        total = 0
        for r, s, c in itertools.product(range(layer.R), range(layer.S), range(layer.C)):
            h = p * layer.Hstride + r * layer.Hdilation - layer.pads[0]
            v = q * layer.Wstride + s * layer.Wdilation - layer.pads[1]
            if not (0 <= h < hz and 0 <= v < wz):
                continue
            if h % layer.upsample[0] or v % layer.upsample[1]:
                continue
            total += int(x[n, h // layer.upsample[0], v // layer.upsample[1], g * layer.C + c]) \
                * int(w[g, r, s, c, k])
        out[n, p, q, g * layer.K + k] = total
    return out


@pytest.mark.parametrize("layer", [
    Layer.conv2d(R=3, S=2, P=3, Q=4, C=2, K=3, N=2, Hstride=2, Wstride=1, Hdilation=1,
                 Wdilation=2, pads=(1, 0, 2, 1), groups=2),
    Layer(kind="conv_transpose", R=3, S=3, P=5, Q=4, C=2, K=2, pads=(2, 1, 2, 1),
          upsample=(2, 2)),
    Layer.conv1d(R=3, P=4, C=3, K=2, stride=2, dilation=2, pads=(1, 0, 1, 0)),
    Layer.gemm(M=5, K_red=7, N_out=3, batch=2),
])
def test_reference_is_the_defining_sum(layer):
    rng = np.random.default_rng(0)
    lay = DramLayout.for_layer(layer, dim=4)
    x = rng.integers(-128, 128, lay["input"].shape).astype(np.int8)
    w = rng.integers(-128, 128, lay["weight"].shape).astype(np.int8)
    np.testing.assert_array_equal(reference(layer, x, w, full_output=True),
                                  naive_conv(layer, x, w))
    bias = rng.integers(-9, 9, lay["output"].shape[-1]).astype(np.int32)
    out = reference(layer, x, w, bias, acc_scale=0.01, relu=True)
    expect = np.clip(np.maximum(np.rint((naive_conv(layer, x, w) + bias).astype(np.float32)
                                        * np.float32(0.01)), 0), -128, 127)
    np.testing.assert_array_equal(out, expect)


def test_layout_pack_and_read_round_trip():
    layer = Layer.conv2d(R=3, S=3, P=4, Q=4, C=3, K=5, pads=(1, 1, 1, 1),
                         epilogue=("bias", "add"))
    lay = DramLayout.for_layer(layer, dim=4, partial=True)
    assert lay["zeros"].offset_bytes == 0
    assert [t.name for t in lay.tensors] == ["zeros", "input", "weight", "bias", "residual",
                                             "output", "partial"]
    assert all(t.offset_bytes % 64 == 0 for t in lay.tensors)
    assert input_hw(layer) == (4, 4)
    bias = np.arange(5, dtype=np.int32) * -1000
    image = lay.pack(bias=bias)
    np.testing.assert_array_equal(lay.read(image, "bias"), bias)
    with pytest.raises(ConfigError, match="expected shape"):
        lay.pack(bias=np.zeros(4, np.int32))
    with pytest.raises(ConfigError, match="range"):
        lay.pack(input=np.full(lay["input"].shape, 300))


# --------------------------------------------------------------------------- every layer kind
KIND_CASES = [
    # (layer, mapping, hardware)
    (Layer.gemm(M=20, K_red=12, N_out=10),
     "L3[WIO] P5 C3 - L2[WI] K5X - L1[O] K2 C4X - L0[W] P4", hw_dim(8)),
    (Layer(kind="gemv", C=30, K=7),
     "L3[WIO] C5 K7 - L2[WI] N1 - L1[O] C6X - L0[W] N1", hw_dim(8)),
    (Layer.conv1d(R=3, P=9, C=6, K=5, stride=2, dilation=2, pads=(2, 0, 1, 0), N=2),
     "L3[WIO] R3 N2 - L2[WI] K5X - L1[O] C2 P3 C3X - L0[W] P3", hw_dim(8)),
    (Layer.conv2d(R=3, S=3, P=5, Q=6, C=4, K=6, Hstride=2, Wstride=2, pads=(1, 1, 1, 1)),
     "L3[WIO] K2 S3 - L2[WI] R3 K3X - L1[O] P5 C4X - L0[W] Q6", hw_dim(4)),
    (Layer.conv2d(R=2, S=3, P=3, Q=3, C=3, K=4, Hdilation=2, Wdilation=3, groups=3,
                  pads=(0, 2, 1, 0)),
     "L3[WIO] C3 - L2[WI] S3 K4X - L1[O] R2 Q3 - L0[W] P3", hw_dim(4)),
    (Layer(kind="conv_transpose", R=3, S=3, P=6, Q=5, C=3, K=5, pads=(2, 2, 2, 1),
           upsample=(2, 2)),
     "L3[WIO] R3 - L2[WI] S3 K5X - L1[O] P2 C3X - L0[W] Q5 P3", hw_dim(8)),
]


@pytest.mark.parametrize("layer,text,hw", KIND_CASES,
                         ids=["gemm", "gemv", "conv1d", "conv2d", "grouped", "transposed"])
def test_every_layer_kind_lowers_validates_and_covers(layer, text, hw):
    low = lower(layer, tl(text), hw)  # check=True: matching, coverage, Trace.validate
    stats = low.stats
    assert stats.block_macs == layer.macs
    assert stats.computes == stats.preloads == len(low.compute_blocks())
    assert stats.array_macs >= stats.macs
    counts = stats.instructions
    assert counts["compute_preloaded"] + counts.get("compute_accumulated", 0) == stats.computes
    assert counts["mvout"] >= 1
    assert counts["fence"] == 1 + stats.partial_spills  # one before each partial-sum reload
    low.trace.validate(IsaParams.from_hardware(hw))


@pytest.mark.parametrize("m,k_red,n_out,dim", [(13, 7, 5, 4), (1, 17, 3, 8), (9, 9, 9, 2)])
def test_sizes_that_are_not_multiples_of_dim_pad_the_trailing_block(m, k_red, n_out, dim):
    """A mapping covering DIM-multiples of each dim (as Gemmini's tiler pads them)."""
    layer = Layer.gemm(M=m, K_red=k_red, N_out=n_out)
    pad = lambda v: -(-v // dim)
    text = (f"L3[WIO] P{pad(m)} C{pad(k_red)} - L2[WI] K{dim}X - L1[O] K{pad(n_out)} "
            f"C{dim}X - L0[W] P{dim}")
    low = lower(layer, tl(text), hw_dim(dim, sp_kb=4, acc_kb=4))
    blocks = low.compute_blocks()
    assert low.stats.block_macs == layer.macs
    # trailing blocks are short: rows, input and output channels below DIM
    assert blocks[:, 8].min() == (m % dim or dim)
    assert blocks[:, 9].min() == (k_red % dim or dim)
    assert blocks[:, 10].min() == (n_out % dim or dim)


def test_conv_padding_rows_come_from_the_zero_region():
    layer = Layer.conv2d(R=3, S=3, P=4, Q=4, C=4, K=4, pads=(1, 1, 1, 1))
    low = lower(layer, tl("L3[WIO] N1 - L2[WI] K4X - L1[O] S3 R3 P4 C4X - L0[W] Q4"), hw_dim(4))
    zeros, x = low.layout["zeros"], low.layout["input"]
    mvins = [ins for ins in low.trace if ins.mnemonic == "mvin"]
    from_zero = [ins for ins in mvins if field(ins, "dram") < zeros.nbytes]
    from_input = [ins for ins in mvins if x.offset_bytes <= field(ins, "dram")
                  < x.offset_bytes + x.nbytes]
    assert len(from_zero) + len(from_input) == len(mvins)
    # the 6x6 padded tile: 20 border pixels from zeros, 16 interior pixels from the input
    assert sum(field(i, "rows") for i in from_zero) == 20
    assert sum(field(i, "rows") for i in from_input) == 16


def test_strided_conv_streams_rows_with_a_stride():
    layer = Layer.conv2d(R=1, S=1, P=4, Q=4, C=4, K=4, Hstride=2, Wstride=2)
    low = lower(layer, tl("L3[WIO] P4 - L2[WI] K4X - L1[O] C4X - L0[W] Q4"), hw_dim(4))
    strides = [field(ins, "a_stride") for ins in low.trace if ins.mnemonic == "config_ex"]
    assert strides[-1] == 2
    text = low.trace.to_text().splitlines()
    for i, line in enumerate(text):  # a config_ex never splits a preload from its compute
        if line.startswith("preload"):
            assert text[i + 1].startswith("compute")


def test_stages_two_alternate_scratchpad_and_accumulator_halves():
    layer = Layer.gemm(M=32, K_red=4, N_out=4)
    text = "L3[WIO] P4 - L2[WI] K4X - L1[O] C4X - L0[W] P8"
    single = lower(layer, tl(text, stages=1), hw_dim(4))
    double = lower(layer, tl(text, stages=2), hw_dim(4))

    def first_rows(low, mnemonic, space):
        """Local row of the first move of each run of consecutive `mnemonic` moves."""
        out, previous = [], None
        for ins in low.trace:
            if ins.mnemonic == mnemonic and previous != mnemonic:
                addr = field(ins, "sp")
                if addr.space == space:
                    out.append(addr.row)
            previous = ins.mnemonic
        return out

    slot_i = double.alloc["input"].rows_per_slot
    assert double.alloc["input"].slots == 2 and slot_i == 8
    assert first_rows(single, "mvin", "sp") == [0, 0, 0, 0]
    assert first_rows(double, "mvin", "sp") == [0, slot_i, 0, slot_i]
    slot_o = double.alloc["output"].rows_per_slot
    assert [r for r in first_rows(double, "mvout", "acc")] == [0, slot_o, 0, slot_o]
    assert first_rows(single, "mvout", "acc") == [0, 0, 0, 0]
    assert double.alloc.sp_rows_used == 2 * single.alloc.sp_rows_used


def test_partial_sums_spill_when_the_reduction_loop_is_outside():
    layer = Layer.gemm(M=8, K_red=8, N_out=4)
    inner = lower(layer, tl("L3[WIO] P2 C2 - L2[WI] K4X - L1[O] C4X - L0[W] P4"), hw_dim(4))
    outer = lower(layer, tl("L3[WIO] C2 P2 - L2[WI] K4X - L1[O] C4X - L0[W] P4"), hw_dim(4))
    assert inner.stats.partial_spills == 0 and "partial" not in inner.layout
    assert outer.stats.partial_spills == 2 and "partial" in outer.layout
    full = [ins for ins in outer.trace if ins.mnemonic == "mvout" and field(ins, "sp").full]
    assert len(full) == 2  # one int32 spill per output tile


# --------------------------------------------------------------------------- capacity
def test_scratchpad_overflow_names_the_buffer_and_rows():
    """Mapping.validate counts words; rows of DIM elements hold one channel each here."""
    layer = Layer.gemm(M=64, K_red=1, N_out=16)
    hw = hw_dim(16, sp_kb=1, acc_kb=4)
    mapping = tl("L3[WIO] N1 - L2[WI] K16X - L1[O] N1 - L0[W] P64")
    mapping.validate(layer, hw)
    with pytest.raises(InfeasibleError, match=r"scratchpad: .*65 rows.* 64 rows"):
        lower(layer, mapping, hw)


def test_accumulator_overflow_names_the_buffer_and_rows():
    layer = Layer.gemm(M=64, K_red=4, N_out=4)
    hw = hw_dim(4, sp_kb=4, acc_kb=0.5)  # 32 accumulator rows
    mapping = tl("L3[WIO] N1 - L2[WI] K4X - L1[O] C4X - L0[W] P64")
    with pytest.raises(InfeasibleError):
        mapping.validate(layer, hw)
    nest = Nest(layer, mapping, 4)
    with pytest.raises(InfeasibleError, match=r"accumulator: .*64 rows.* 32 rows"):
        allocate(nest, IsaParams.from_hardware(hw))


def test_non_square_array_and_wrong_template_are_rejected():
    layer = Layer.gemm(M=4, K_red=4, N_out=4)
    with pytest.raises(ConfigError, match="square"):
        lower(layer, tl("L3[WIO] N1 - L2[WI] K4X - L1[O] C4X - L0[W] P4"),
              HardwareConfig(pe_rows=4, pe_cols=8))
    with pytest.raises(ConfigError, match="weight-stationary"):
        lower(layer, tl("L3[WIO] N1 - L2[WI] K4X - L1[O] C4X - L0[W] P4"), hw_dim(4),
              dataflow="os")


# --------------------------------------------------------------------------- epilogues
def test_epilogues_parse_and_reject():
    epi = parse_epilogue(("bias", "add", "relu"), acc_scale=0.5)
    assert (epi.bias, epi.residual, epi.relu, epi.acc_scale) == (True, True, True, 0.5)
    with pytest.raises(UnsupportedOpError, match="sigmoid"):
        parse_epilogue(("bias", "sigmoid"))
    with pytest.raises(UnsupportedOpError, match="last"):
        parse_epilogue(("relu", "add"))
    with pytest.raises(ConfigError, match="full_output"):
        parse_epilogue(("relu",), full_output=True)


def test_bias_and_residual_initialize_the_accumulator():
    layer = Layer.gemm(M=8, K_red=4, N_out=4, epilogue=("bias", "add", "relu"))
    low = lower(layer, tl("L3[WIO] N1 - L2[WI] K4X - L1[O] C4X - L0[W] P8"), hw_dim(4),
                acc_scale=0.25)
    lines = low.trace.to_text().splitlines()
    first_compute = next(i for i, l in enumerate(lines) if l.startswith("preload"))
    inits = [l for l in lines[:first_compute] if l.startswith("mvin3")]
    bias_at = low.layout["bias"].offset_bytes
    assert any(f"dram={bias_at:#x}" in l for l in inits)  # bias, stride 0
    # The residual goes to the scratchpad and enters as D of each row's first compute: no
    # mvin accumulates into the accumulator beside the computes (accel.sim.hazards).
    resid_at = low.layout["residual"].offset_bytes
    assert not any("+accumulate" in l for l in lines if l.startswith("mvin"))
    assert any(f"dram={resid_at:#x}" in l and "acc:" not in l for l in inits)
    assert any(l.startswith("compute_preloaded") and "bd=garbage" not in l for l in lines)
    assert all("+accumulate" in l for l in lines if l.startswith("preload"))
    st = [ins for ins in low.trace if ins.mnemonic == "config_st"][-1]
    assert field(st, "act") == 1 and field(st, "acc_scale") == 0.25


def test_without_init_the_first_compute_overwrites():
    layer = Layer.gemm(M=8, K_red=8, N_out=4)
    low = lower(layer, tl("L3[WIO] N1 - L2[WI] K4X - L1[O] C2 C4X - L0[W] P8"), hw_dim(4))
    flags = [field(ins, "c").accumulate for ins in low.trace if ins.mnemonic == "preload"]
    # two 4-row chunks per c-block: the first c-block overwrites, the second accumulates
    assert flags == [False, False, True, True]


# --------------------------------------------------------------------------- coverage check
def test_matching_matrices_accept_amos_example_and_reject_a_bad_one():
    loops = ("n", "k", "p", "q", "c", "r", "s")
    x = access_matrix(tuple(l.upper() for l in loops))
    good = np.array([[1, 0, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1]], bool)
    assert check_matching(x, good, GEMMINI_Z) == (True, "valid")
    bad = good.copy()
    bad[0, 1], bad[1, 1] = True, False  # n and k both on the rows (seed 000 §1.5)
    ok, why = check_matching(x, bad, GEMMINI_Z)
    assert not ok and "Z*Y != X" in why


def test_coverage_detects_a_missing_or_repeated_block():
    layer = Layer.conv2d(R=2, S=2, P=3, Q=3, C=4, K=4)
    low = lower(layer, tl("L3[WIO] R2 - L2[WI] S2 K4X - L1[O] P3 C4X - L0[W] Q3"), hw_dim(4))
    steps = list(low.steps)
    assert check_coverage(layer, 4, 4, steps, low.trace) > 0
    with pytest.raises(TraceError, match="computed 0 times"):
        last = steps[-1]
        trimmed = dataclasses.replace(last.template, records=last.template.records[:-1])
        cut = [i for i, ins in enumerate(low.trace) if ins.mnemonic.startswith("compute")][-1]
        dropped = Trace([ins for i, ins in enumerate(low.trace) if i != cut])
        check_coverage(layer, 4, 4, steps[:-1] + [dataclasses.replace(last, template=trimmed)],
                       dropped)
    with pytest.raises(TraceError, match="computed 2 times"):
        computes = [ins for ins in low.trace if ins.mnemonic.startswith("compute")]
        check_coverage(layer, 4, 4, steps + steps[:1],
                       Trace(list(low.trace) + computes[:len(steps[0].template.records)]))
    with pytest.raises(TraceError, match="do not match"):
        first = next(i for i, ins in enumerate(low.trace) if ins.mnemonic.startswith("compute"))
        short = low.trace[first].replace(a_rows=low.trace[first]["a_rows"] - 1)
        check_coverage(layer, 4, 4, steps,
                       Trace([short if i == first else ins for i, ins in enumerate(low.trace)]))


def test_tile_coverage_of_the_loop_ws_form():
    layer = Layer.gemm(M=10, K_red=12, N_out=8, batch=2)
    halves = [(0, r, 10, c, 6, k, 4) for r in (0, 10) for c in (0, 6) for k in (0, 4)]
    assert check_tile_coverage(layer, halves) > 0
    with pytest.raises(TraceError, match="covered 2 times"):
        check_tile_coverage(layer, halves + [(0, 3, 4, 6, 6, 0, 4)])
    with pytest.raises(TraceError, match="covered 0 times"):
        check_tile_coverage(layer, halves[:-1])


def test_matching_follows_the_mapping():
    layer = Layer.conv2d(R=3, S=3, P=4, Q=4, C=4, K=4)
    nest = Nest(layer, tl("L3[WIO] R3 S3 - L2[WI] K4X - L1[O] P4 C4X - L0[W] Q4"), 4)
    assert nest.matching() == (["P", "Q"], ["K"], ["C"])
    narrow = Nest(layer, tl("L3[WIO] R3 S3 C4 - L2[WI] K4X - L1[O] Q4 - L0[W] P4"), 4)
    assert narrow.matching() == (["P", "Q"], ["K"], [])
    assert check_matching(*matching_matrices(*narrow.matching()))[0]


# --------------------------------------------------------------------------- loop_ws
def test_loop_ws_form_follows_tiled_matmul_outer():
    layer = Layer.gemm(M=20, K_red=16, N_out=8, epilogue=("bias", "relu"))
    hw = hw_dim(4, sp_kb=4, acc_kb=4)
    mapping = tl("L3[WIO] P2 K2 C2 - L2[WI] K4X - L1[O] C2 C4X - L0[W] P10")
    low = lower(layer, mapping, hw, macro=True)
    names = [ins.mnemonic for ins in low.trace]
    groups = [i for i, n in enumerate(names) if n == "loop_ws"]
    assert len(groups) == 2 * 2 * 2
    for end in groups:
        assert names[end - 5:end + 1] == [
            "loop_ws_config_bounds", "loop_ws_config_addrs_ab", "loop_ws_config_addrs_dc",
            "loop_ws_config_strides_ab", "loop_ws_config_strides_dc", "loop_ws"]
    bounds = [low.trace[g - 5].fields() for g in groups]
    assert all((b["i"], b["j"], b["k"], b["pad_i"]) == (3, 1, 2, 2) for b in bounds)
    dc = [low.trace[g - 3].fields() for g in groups]
    run = [low.trace[g].fields() for g in groups]
    x = low.layout
    # reduction innermost: first of each pair loads the bias and keeps C, second stores
    for first, second, r1, r2 in zip(dc[::2], dc[1::2], run[::2], run[1::2]):
        assert x["bias"].offset_bytes <= first["d"] < x["bias"].offset_bytes + 64
        assert first["c"] == 0 and second["d"] == 0
        assert x["output"].offset_bytes <= second["c"] < x["output"].offset_bytes + 160
        assert r1["ex_accumulate"] and r2["ex_accumulate"] and not r2["full_c"]
    assert "partial" not in x
    with pytest.raises(ConfigError, match="GEMM"):
        lower(Layer.conv2d(R=3, S=3, P=4, Q=4, C=4, K=4),
              tl("L3[WIO] R3 S3 - L2[WI] K4X - L1[O] Q4 C4X - L0[W] P4"), hw, macro=True)


def test_loop_ws_spills_partials_when_the_reduction_is_outside():
    layer = Layer.gemm(M=8, K_red=8, N_out=4)
    low = lower(layer, tl("L3[WIO] C2 P2 - L2[WI] K4X - L1[O] C4X - L0[W] P4"), hw_dim(4),
                macro=True)
    groups = [i for i, ins in enumerate(low.trace) if ins.mnemonic == "loop_ws"]
    part = low.layout["partial"]
    dc = [low.trace[g - 3].fields() for g in groups]
    full = [low.trace[g].fields()["full_c"] for g in groups]
    assert full == [True, True, False, False]
    assert [part.offset_bytes <= d["c"] < part.offset_bytes + part.nbytes for d in dc] == \
        [True, True, False, False]
    assert [d["d"] != 0 for d in dc] == [False, False, True, True]
    assert low.stats.partial_spills == 2


def test_loop_ws_splits_batches_of_a_partial_row_range():
    """Rows n*P + p are contiguous only when a tile spans all of P: else one loop per batch,
    and a reduction loop outside those loops spills partial sums."""
    layer = Layer.gemm(M=6, K_red=8, N_out=4, batch=2)
    low = lower(layer, tl("L3[WIO] P2 C2 - L2[WI] K4X - L1[O] N2 C4X - L0[W] P3"), hw_dim(4),
                macro=True)
    groups = [i for i, ins in enumerate(low.trace) if ins.mnemonic == "loop_ws"]
    assert len(groups) == 2 * 2 * 2
    assert all(low.trace[g - 5]["i"] == 1 and low.trace[g - 5]["pad_i"] == 1 for g in groups)
    assert "partial" in low.layout and low.stats.partial_spills == 4


def test_loop_ws_tile_must_fit_half_the_scratchpad():
    """The FSM double-buffers, so a tile Mapping.validate accepts may still not fit."""
    layer = Layer.gemm(M=48, K_red=32, N_out=32)
    hw = hw_dim(4, sp_kb=4, acc_kb=32)
    mapping = tl("L3[WIO] N1 - L2[WI] K8 K4X - L1[O] C8 C4X - L0[W] P48")
    mapping.validate(layer, hw)
    lower(layer, mapping, hw)  # the unrolled form fits
    with pytest.raises(InfeasibleError, match=r"640 rows .* half the scratchpad, 512 rows"):
        lower(layer, mapping, hw, macro=True)
