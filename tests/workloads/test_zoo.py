"""The zoo: every model is valid ONNX and imports to the published layer tables and MACs.

Expected values are computed here from the architectures and the reference tables (DOSA's
layer_count.yaml files, DeepBench's conv_problems.h), not taken from the implementation.
"""

from __future__ import annotations

import math
from collections import Counter

import onnx
import pytest

from workloads.errors import WorkloadError
from workloads.zoo import build_onnx, describe, load, parse_name, zoo_names
from workloads.zoo.builder import GraphBuilder

REQUIRED = {"resnet50", "unet", "retinanet", "bert", "deepbench", "llama2_7b", "mobilenet_v2",
            "vgg16"}
VARIANTS = ["resnet50", "unet", "retinanet", "bert", "bert:seq=512,batch=2", "deepbench",
            "deepbench:set=face,split=train", "llama2_7b", "llama2_7b:phase=decode,batch=8,seq=512",
            "mobilenet_v2", "vgg16"]


# ----------------------------------------------------------------------------- ONNX graphs
def test_zoo_names():
    assert REQUIRED <= set(zoo_names())
    assert zoo_names() == sorted(zoo_names())


@pytest.mark.parametrize("name", VARIANTS)
def test_graphs_are_checked_opset17_with_weights_as_static_inputs(name):
    model = build_onnx(name)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert len(model.graph.initializer) == 0
    onnx.checker.check_model(model, full_check=True)
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        assert dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), value.name


def test_graph_stays_small_for_the_largest_model():
    # Weights are declared, not stored: 7B parameters cost well under a megabyte of protobuf.
    model = build_onnx("llama2_7b", phase="decode", batch=8, seq=512)
    weights = sum(math.prod(d.dim_value for d in v.type.tensor_type.shape.dim)
                  for v in model.graph.input if v.name.endswith(".weight"))
    assert 6.5e9 < weights < 7.0e9
    assert model.ByteSize() < 1_000_000


def test_builder_rejects_a_graph_without_outputs_and_a_wrong_shape():
    b = GraphBuilder("broken")
    b.conv(b.input("x", (1, 3, 8, 8)), 4, 3)
    with pytest.raises(WorkloadError, match="no outputs"):
        b.build()
    b = GraphBuilder("wrong")
    y = b.conv(b.input("x", (1, 3, 8, 8)), 4, 3)
    b.output(b.relu(y))
    b._shapes[y] = (1, 4, 8, 8)  # as if a shape rule were wrong: the unpadded conv gives 6x6
    with pytest.raises(WorkloadError, match=r"\(1, 4, 6, 6\) by ONNX inference but "
                                            r"\(1, 4, 8, 8\) by the builder"):
        b.build()


# ----------------------------------------------------------------------------- names
def test_parse_name_fills_defaults_and_merges_keywords():
    assert parse_name("bert:seq=512") == ("bert", {"seq": 512, "batch": 1})
    assert parse_name("llama2_7b:phase=decode,batch=8,seq=256") == (
        "llama2_7b", {"phase": "decode", "batch": 8, "seq": 256})
    assert parse_name("llama2_7b", phase="decode", seq=3) == (
        "llama2_7b", {"phase": "decode", "batch": 1, "seq": 3})
    assert parse_name(" deepbench : set = face ") == (
        "deepbench", {"set": "face", "split": "inference"})


@pytest.mark.parametrize("name, params, message", [
    ("resnet5", {}, r"unknown zoo model 'resnet5'; did you mean 'resnet50'\?.*vgg16"),
    ("alexnet", {}, r"Known models: bert, deepbench"),
    ("bert:heads=16", {}, r"no parameter 'heads'.*seq=128, batch=1"),
    ("bert", {"layers": 3}, r"no parameter 'layers'"),
    ("bert:seq=1024", {}, r"seq'=1024 is out of range; allowed 1\.\.512"),
    ("llama2_7b:batch=9", {}, r"batch'=9 is out of range; allowed 1\.\.8"),
    ("llama2_7b:seq=0", {}, r"out of range"),
    ("llama2_7b:phase=train", {}, r"one of \['prefill', 'decode'\]"),
    ("deepbench:set=speech", {}, r"one of \['ocr', 'face'\]"),
    ("bert:seq=long", {}, r"must be an integer"),
    ("bert", {"seq": True}, r"must be an integer"),
    ("bert:seq=128,seq=256", {}, r"given twice"),
    ("bert:seq", {}, r"expected key=value"),
    ("bert:seq=128", {"seq": 256}, r"given as '128' in the name and 256"),
    ("", {}, r"non-empty"),
])
def test_bad_names_raise_clear_errors(name, params, message):
    with pytest.raises(WorkloadError, match=message):
        parse_name(name, **params)


def test_describe_lists_parameters():
    text = describe("llama2_7b")
    assert "Llama-2-7B" in text and "phase: prefill|decode (default prefill)" in text
    assert "batch: 1..8 (default 1)" in text


def test_network_name_records_non_default_parameters():
    assert build_onnx("bert:seq=128").graph.name == "bert"
    assert load("bert", seq=64).name == "bert:seq=64"


# ----------------------------------------------------------------------------- helpers
def _table(net) -> Counter:
    """config_str (DOSA's key: R_S_P_Q_C_K_N_strides_dilations) -> repeat count."""
    return Counter({layer.config_str(): count for layer, count in net})


def _order(net):
    return [net.layers[j] for j in net.order]


def _gemm_tokens(layer) -> int:
    """Rows of a weight GEMM, however the importer splits them between N and P."""
    return layer.N * layer.P


# ----------------------------------------------------------------------------- ResNet-50
# dosa-gemmini-isa.md §A.10 (DOSA resnet50/layer_count.yaml): R=S, P=Q, C, K, stride, count.
RESNET50 = [(7, 112, 3, 64, 2, 1), (1, 56, 64, 64, 1, 1), (3, 56, 64, 64, 1, 3),
            (1, 56, 64, 256, 1, 4), (1, 56, 256, 64, 1, 2), (1, 56, 256, 128, 1, 1),
            (3, 28, 128, 128, 2, 1), (1, 28, 128, 512, 1, 4), (1, 28, 256, 512, 2, 1),
            (1, 28, 512, 128, 1, 3), (3, 28, 128, 128, 1, 3), (1, 28, 512, 256, 1, 1),
            (3, 14, 256, 256, 2, 1), (1, 14, 256, 1024, 1, 6), (1, 14, 512, 1024, 2, 1),
            (1, 14, 1024, 256, 1, 5), (3, 14, 256, 256, 1, 5), (1, 14, 1024, 512, 1, 1),
            (3, 7, 512, 512, 2, 1), (1, 7, 512, 2048, 1, 3), (1, 7, 1024, 2048, 2, 1),
            (1, 7, 2048, 512, 1, 2), (3, 7, 512, 512, 1, 2), (1, 1, 2048, 1000, 1, 1)]


def test_resnet50_matches_dosa_exactly():
    net = load("resnet50")
    assert (net.unique_layers, net.total_layers) == (24, 54)
    expected = Counter({f"{r}_{r}_{p}_{p}_{c}_{k}_1_{s}_{s}_1_1": n
                        for r, p, c, k, s, n in RESNET50})
    assert _table(net) == expected
    macs = sum(r * r * p * p * c * k * n for r, p, c, k, s, n in RESNET50)
    assert net.total_macs == macs
    assert abs(macs / 4.09e9 - 1) < 0.005
    # v1.5 (the table's 1x1 256->128 at P=56, stride 1): the stride is on the 3x3 conv.
    strided = {(l.R, l.P, l.C) for l in net.layers if l.Hstride == 2 and l.R != 7}
    assert strided == {(3, 28, 128), (3, 14, 256), (3, 7, 512),
                       (1, 28, 256), (1, 14, 512), (1, 7, 1024)}


def test_resnet50_batch_scales_n():
    net = load("resnet50", batch=4)
    convs = [layer for layer, _ in net if layer.kind == "conv2d"]
    assert len(convs) == 23 and all(layer.N == 4 for layer in convs)
    (fc,) = [layer for layer, _ in net if layer.kind != "conv2d"]
    assert (_gemm_tokens(fc), fc.C, fc.K) == (4, 2048, 1000)
    assert net.total_macs == 4 * load("resnet50").total_macs


# ----------------------------------------------------------------------------- U-Net
# DOSA unet/layer_count.yaml (ucb-bar/dosa @d3f101c): config_str -> layer name, count 1 each.
UNET = {"3_3_570_570_1_64": "0_0_conv", "3_3_568_568_64_64": "0_1_conv",
        "3_3_282_282_64_128": "1_0_conv", "3_3_280_280_128_128": "1_1_conv",
        "3_3_138_138_128_256": "2_0_conv", "3_3_136_136_256_256": "2_1_conv",
        "3_3_66_66_256_512": "3_0_conv", "3_3_64_64_512_512": "3_1_conv",
        "3_3_30_30_512_1024": "4_0_conv", "3_3_28_28_1024_1024": "4_1_conv",
        "2_2_56_56_1024_512": "4_2_upconv", "3_3_54_54_1024_512": "5_0_conv",
        "3_3_52_52_512_512": "5_1_conv", "2_2_104_104_512_256": "5_2_upconv",
        "3_3_102_102_512_256": "6_0_conv", "3_3_100_100_256_256": "6_1_conv",
        "2_2_200_200_256_128": "6_2_upconv", "3_3_198_198_256_128": "7_0_conv",
        "3_3_196_196_128_128": "7_1_conv", "2_2_392_392_128_64": "7_2_upconv",
        "3_3_390_390_128_64": "8_0_conv", "3_3_388_388_64_64": "8_1_conv",
        "1_1_388_388_64_2": "8_2_conv"}


def test_unet_matches_dosa_exactly():
    net = load("unet")
    assert (net.unique_layers, net.total_layers) == (23, 23)
    assert _table(net) == Counter({f"{k}_1_1_1_1_1": 1 for k in UNET})
    by_key = {layer.config_str(): layer for layer in net.layers}
    for key, name in UNET.items():
        layer = by_key[f"{key}_1_1_1_1_1"]
        assert layer.name == name
        assert layer.kind == ("conv_transpose" if "upconv" in name else "conv2d")
        if layer.kind == "conv_transpose":
            assert layer.upsample == (2, 2)


# ----------------------------------------------------------------------------- RetinaNet
# DOSA retinanet/layer_count.yaml (ucb-bar/dosa @d3f101c): config_str -> count.
RETINANET = {"1_1_14_14_1024_256_1_1_1_1_1": 1, "1_1_28_28_512_256_1_1_1_1_1": 1,
             "1_1_2_2_256_256_1_1_1_1_1": 1, "1_1_4_4_256_256_1_1_1_1_1": 1,
             "1_1_7_7_2048_256_1_1_1_1_1": 1, "3_3_14_14_256_256_1_1_1_1_1": 2,
             "3_3_14_14_256_36_1_1_1_1_1": 1, "3_3_14_14_256_720_1_1_1_1_1": 1,
             "3_3_28_28_256_256_1_1_1_1_1": 2, "3_3_28_28_256_36_1_1_1_1_1": 1,
             "3_3_28_28_256_720_1_1_1_1_1": 1, "3_3_2_2_256_256_1_1_1_1_1": 2,
             "3_3_2_2_256_256_1_2_2_1_1": 1, "3_3_2_2_256_36_1_1_1_1_1": 1,
             "3_3_2_2_256_720_1_1_1_1_1": 1, "3_3_4_4_2048_256_1_2_2_1_1": 1,
             "3_3_4_4_256_256_1_1_1_1_1": 2, "3_3_4_4_256_36_1_1_1_1_1": 1,
             "3_3_4_4_256_720_1_1_1_1_1": 1, "3_3_7_7_256_256_1_1_1_1_1": 2,
             "3_3_7_7_256_36_1_1_1_1_1": 1, "3_3_7_7_256_720_1_1_1_1_1": 1}


def test_retinanet_matches_dosa_exactly():
    net = load("retinanet")
    assert (net.unique_layers, net.total_layers) == (22, 27)
    assert _table(net) == Counter(RETINANET)
    names = set(net.names)
    for level in range(3, 8):
        assert {f"p{level}_1", f"p{level}_2", f"p{level}_head_layer",
                f"p{level}_classification_out", f"p{level}_regression_out"} <= names
    assert {"p6", "p7"} <= names


# ----------------------------------------------------------------------------- VGG-16
def test_vgg16():
    net = load("vgg16")
    assert (net.unique_layers, net.total_layers) == (12, 16)
    convs = [(224, 3, 64), (224, 64, 64), (112, 64, 128), (112, 128, 128), (56, 128, 256),
             (56, 256, 256), (56, 256, 256), (28, 256, 512), (28, 512, 512), (28, 512, 512),
             (14, 512, 512), (14, 512, 512), (14, 512, 512)]
    fcs = [(512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)]
    macs = sum(9 * p * p * c * k for p, c, k in convs) + sum(c * k for c, k in fcs)
    assert net.total_macs == macs == 15_470_264_320
    assert [(l.P, l.C, l.K) for l in _order(net)[:13]] == convs


# ----------------------------------------------------------------------------- MobileNetV2
def _mobilenet_v2_layers():
    """(R, P, C_per_group, K_per_group, groups, stride) of every layer, from Table 2."""
    layers = [(3, 112, 3, 32, 1, 2)]
    size, channels = 112, 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = channels * t
            if t != 1:
                layers.append((1, size, channels, hidden, 1, 1))
            size = (size + 2 - 3) // stride + 1
            layers.append((3, size, 1, 1, hidden, stride))
            layers.append((1, size, hidden, c, 1, 1))
            channels = c
    layers.append((1, size, channels, 1280, 1, 1))
    layers.append((1, 1, 1280, 1000, 1, 1))
    return layers


def test_mobilenet_v2():
    net = load("mobilenet_v2")
    expected = _mobilenet_v2_layers()
    assert net.total_layers == len(expected) == 53
    macs = sum(r * r * p * p * c * k * g for r, p, c, k, g, _ in expected)
    assert net.total_macs == macs
    assert abs(macs / 300e6 - 1) < 0.01  # the paper's 300M multiply-adds
    got = [(l.R, l.P, l.C, l.K, l.groups, l.Hstride) for l in _order(net)]
    assert got == expected
    assert net.unique_layers == len(set(expected))


# ----------------------------------------------------------------------------- BERT
def _bert_macs(seq, batch):
    per_layer = 4 * seq * 768 * 768 + 2 * 12 * seq * seq * 64 + 2 * seq * 768 * 3072
    return batch * 12 * per_layer


def test_bert_base_seq128():
    net = load("bert")
    assert (net.unique_layers, net.total_layers) == (5, 96)
    assert net.total_macs == _bert_macs(128, 1)
    assert abs(net.total_macs / 11.2e9 - 1) < 0.01


def test_bert_attention_puts_heads_times_batch_in_n():
    net = load("bert", seq=512, batch=2)
    assert net.total_macs == _bert_macs(512, 2)
    attention = [l for l in _order(net) if 64 in (l.C, l.K)]
    assert Counter((l.P, l.C, l.K, l.N) for l in attention) == Counter(
        {(512, 64, 512, 24): 12, (512, 512, 64, 24): 12})  # QK^T and attention x V
    weights = [l for l in _order(net) if 64 not in (l.C, l.K)]
    assert Counter((l.C, l.K) for l in weights) == Counter(
        {(768, 768): 48, (768, 3072): 12, (3072, 768): 12})
    assert all(_gemm_tokens(l) == 2 * 512 for l in weights)


# ----------------------------------------------------------------------------- Llama-2-7B
def _llama_macs(phase, batch, seq):
    tokens, keys = (seq, seq) if phase == "prefill" else (1, seq + 1)
    rows = batch * tokens
    layer = 4 * rows * 4096 ** 2 + 3 * rows * 4096 * 11008 + 2 * batch * 32 * tokens * keys * 128
    return 32 * layer + rows * 4096 * 32000


@pytest.mark.parametrize("phase, batch, seq", [("prefill", 1, 128), ("prefill", 2, 77),
                                               ("decode", 8, 256), ("decode", 1, 1)])
def test_llama2_7b(phase, batch, seq):
    net = load("llama2_7b", phase=phase, batch=batch, seq=seq)
    assert net.total_layers == 32 * 9 + 1
    assert net.total_macs == _llama_macs(phase, batch, seq)
    tokens, keys = (seq, seq) if phase == "prefill" else (1, seq + 1)
    attention = [l for l in _order(net) if l.N == 32 * batch and l.C in (128, keys)
                 and l.K in (128, keys) and _gemm_tokens(l) == 32 * batch * tokens]
    assert len(attention) == 64
    assert {(l.P, l.C, l.K) for l in attention} == {(tokens, 128, keys), (tokens, keys, 128)}
    weights = Counter((l.C, l.K) for l in _order(net) if l not in attention)
    assert weights == Counter({(4096, 4096): 128, (4096, 11008): 64, (11008, 4096): 32,
                               (4096, 32000): 1})
    assert all(_gemm_tokens(l) == batch * tokens for l in _order(net) if l not in attention)


def test_llama2_7b_single_sequence_decode_projections_are_gemv():
    net = load("llama2_7b", phase="decode", batch=1, seq=64)
    kinds = Counter(l.kind for l in _order(net) if l.N == 1)
    assert kinds == Counter({"gemv": 32 * 7 + 1})


# ----------------------------------------------------------------------------- DeepBench
# baidu-research/DeepBench code/kernels/conv_problems.h @e54214f, inference_server_set and
# training_set: (w, h, c, n_train, k, filter_w, filter_h, pad_w, pad_h, wstride, hstride).
DEEPBENCH = {
    "ocr": [(480, 48, 1, 16, 16, 3, 3, 1, 1, 1, 1), (240, 24, 16, 16, 32, 3, 3, 1, 1, 1, 1),
            (120, 12, 32, 16, 64, 3, 3, 1, 1, 1, 1), (60, 6, 64, 16, 128, 3, 3, 1, 1, 1, 1)],
    "face": [(108, 108, 3, 8, 64, 3, 3, 1, 1, 2, 2), (54, 54, 64, 8, 64, 3, 3, 1, 1, 1, 1),
             (27, 27, 128, 8, 128, 3, 3, 1, 1, 1, 1), (14, 14, 128, 8, 256, 3, 3, 1, 1, 1, 1),
             (7, 7, 256, 8, 512, 3, 3, 1, 1, 1, 1)],
}


@pytest.mark.parametrize("which", ["ocr", "face"])
@pytest.mark.parametrize("split", ["inference", "train"])
def test_deepbench(which, split):
    net = load("deepbench", set=which, split=split)
    expected = []
    for w, h, c, n, k, s, r, pw, ph, sw, sh in DEEPBENCH[which]:
        n = n if split == "train" else 1
        p, q = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1
        expected.append((r, s, p, q, c, k, n, sh, sw))
    got = [(l.R, l.S, l.P, l.Q, l.C, l.K, l.N, l.Hstride, l.Wstride) for l in _order(net)]
    assert got == expected
    assert net.counts == (1,) * len(expected)
    assert net.total_macs == sum(r * s * p * q * c * k * n for r, s, p, q, c, k, n, _, _
                                 in expected)


# ----------------------------------------------------------------------------- suites vs zoo
def test_suite_conv_channels_and_strides_come_from_the_zoo_networks():
    from workloads.suites import CONV_CHANNELS, CONV_STRIDED
    for name, channels in CONV_CHANNELS.items():
        layers = [l for l in _order(load(name)) if l.kind in ("conv2d", "conv_transpose")]
        seen = {c for l in layers for c in (l.C, l.K)}
        assert set(channels) == {c for c in seen if 16 <= c <= 2048 and c & (c - 1) == 0}
        for k in (1, 3):
            sized = [l for l in layers if l.R == k and l.kind == "conv2d"]
            assert CONV_STRIDED[(name, k)] == (sum(l.Hstride == 2 for l in sized), len(sized))
