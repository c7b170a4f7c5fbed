"""Tests of the ONNX importer: every layer kind and attribute, epilogues, passes, bad input."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

from workloads import ImportSummary, Layer, UnsupportedOpError, WorkloadError, onnx_import
from workloads.onnx_import import from_onnx, layers_from_onnx, parse_input_shapes


def examples(n: int) -> settings:
    """Hypothesis settings for tests that take `builder`: a class, not a stateful fixture, so
    sharing it across examples is safe."""
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def only_layer(model, **kw) -> Layer:
    layers, _ = layers_from_onnx(model, **kw)
    assert len(layers) == 1
    return layers[0]


def assert_accounted(summary: ImportSummary) -> None:
    """Every node of the file ends up in exactly one bucket (folded BNs count as removed)."""
    assert sum(summary.ops.values()) == (
        sum(summary.layers.values()) + sum(summary.epilogues.values())
        + sum(summary.skipped.values()) + sum(summary.passes.values()))


# ------------------------------------------------------------------------------- conv
def conv_model(builder, x_shape, w_shape, weights="inputs", **attrs):
    g = builder(weights=weights)
    g.node("Conv", [g.input("x", x_shape), g.weight("w", w_shape)], "y", name="conv", **attrs)
    g.output("y", len(x_shape))
    return g.model()


@pytest.mark.parametrize("x_shape,w_shape,attrs,expected", [
    pytest.param((1, 8, 14, 14), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]},
                 {"R": 3, "S": 3, "P": 14, "Q": 14, "C": 8, "K": 16, "pads": (1, 1, 1, 1)},
                 id="3x3-same"),
    pytest.param((2, 4, 15, 16), (8, 4, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 3]},
                 {"P": 8, "Q": 9, "N": 2, "Hstride": 2, "Wstride": 2, "pads": (0, 1, 2, 3)},
                 id="strides-asymmetric-pads"),
    pytest.param((1, 4, 16, 16), (8, 4, 3, 3), {"dilations": [2, 3]},
                 {"P": 12, "Q": 10, "Hdilation": 2, "Wdilation": 3}, id="dilations"),
    pytest.param((1, 16, 8, 8), (32, 4, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]},
                 {"C": 4, "K": 8, "groups": 4, "P": 8}, id="groups"),
    pytest.param((1, 32, 8, 8), (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]},
                 {"C": 1, "K": 1, "groups": 32, "P": 8}, id="depthwise"),
    pytest.param((1, 4, 8, 8), (8, 4, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                 {"P": 4, "Q": 4, "pads": (0, 0, 1, 1)}, id="same-upper"),
    pytest.param((1, 4, 8, 8), (8, 4, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
                 {"P": 4, "Q": 4, "pads": (1, 1, 0, 0)}, id="same-lower"),
    pytest.param((1, 4, 7, 7), (8, 4, 3, 3), {"auto_pad": "SAME_UPPER"},
                 {"P": 7, "Q": 7, "pads": (1, 1, 1, 1)}, id="same-even-total"),
    pytest.param((1, 4, 8, 8), (8, 4, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]},
                 {"P": 3, "Q": 3, "pads": (0, 0, 0, 0)}, id="valid"),
    pytest.param((1, 4, 8, 8), (8, 4, 3, 3), {"auto_pad": "NOTSET", "pads": [2, 0, 0, 2]},
                 {"P": 8, "Q": 8, "pads": (2, 0, 0, 2)}, id="notset"),
])
def test_conv2d(builder, x_shape, w_shape, attrs, expected):
    layer = only_layer(conv_model(builder, x_shape, w_shape, **attrs))
    assert layer.kind == "conv2d" and layer.name == "conv"
    for field, value in expected.items():
        assert getattr(layer, field) == value, field


def test_conv1d_uses_the_h_axis(builder):
    layer = only_layer(conv_model(builder, (2, 4, 20), (6, 4, 5), strides=[2], pads=[2, 1]))
    assert (layer.kind, layer.R, layer.P, layer.S, layer.Q) == ("conv1d", 5, 10, 1, 1)
    assert (layer.C, layer.K, layer.N, layer.Hstride, layer.pads) == (4, 6, 2, 2, (2, 0, 1, 0))


def test_conv3d_is_unsupported_and_named(builder):
    with pytest.raises(UnsupportedOpError, match=r"'conv'.*3-D convolution"):
        from_onnx(conv_model(builder, (1, 2, 4, 4, 4), (3, 2, 1, 1, 1)))


@examples(40)
@given(size=st.integers(4, 20), k=st.integers(1, 4), s=st.integers(1, 3), d=st.integers(1, 2),
       pads=st.tuples(st.integers(0, 3), st.integers(0, 3)),
       auto_pad=st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
def test_conv_arithmetic_agrees_with_onnx_shape_inference(builder, size, k, s, d, pads,
                                                          auto_pad):
    """Property: our pad/output formula matches ONNX's (the importer raises if it does not),
    and the window reads the padded input up to less than one stride from its end."""
    padding = sum(pads) if auto_pad == "NOTSET" else 0
    assume(auto_pad.startswith("SAME") or (k - 1) * d + 1 <= size + padding)
    attrs = {"strides": [s, s], "dilations": [d, d], "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        attrs["pads"] = [pads[0], pads[0], pads[1], pads[1]]
    layer = only_layer(conv_model(builder, (1, 2, size, size), (3, 2, k, k), **attrs))
    padded = size + layer.pads[0] + layer.pads[2]
    assert padded - s < layer.input_height <= padded


# ------------------------------------------------------------------------------- conv transpose
def test_unet_upconv_is_the_stride_one_conv_over_the_zero_inserted_input(builder):
    g = builder(weights="inputs")  # 1024x512x2x2 weights: declared, never allocated
    x = g.input("x", [1, 1024, 28, 28])
    g.node("ConvTranspose", [x, g.weight("w", [1024, 512, 2, 2]), g.weight("b", [512])], "y",
           name="up", strides=[2, 2], kernel_shape=[2, 2])
    g.output("y")
    layer = only_layer(g.model())
    assert (layer.kind, layer.R, layer.S, layer.P, layer.Q) == ("conv_transpose", 2, 2, 56, 56)
    assert (layer.C, layer.K, layer.N, layer.upsample) == (1024, 512, 1, (2, 2))
    assert (layer.Hstride, layer.pads, layer.epilogue) == (1, (1, 1, 1, 1), ("bias",))
    assert layer.input_height == 2 * 28 - 1 + 2  # zero-inserted input plus its padding
    assert layer.macs == 56 * 56 * 1024 * 512 * 4  # the zeros count


@pytest.mark.parametrize("attrs,expected", [
    pytest.param({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
                 {"P": 16, "Q": 16, "pads": (1, 1, 2, 2)}, id="output-padding"),
    pytest.param({"strides": [2, 2], "output_shape": [16, 16]},
                 {"P": 16, "Q": 16, "pads": (1, 1, 2, 2)}, id="output-shape"),
    pytest.param({"strides": [2, 2], "auto_pad": "SAME_UPPER"},  # crops the end: (0, 1)
                 {"P": 16, "Q": 16, "pads": (2, 2, 1, 1)}, id="same-upper"),
    pytest.param({"strides": [2, 2], "auto_pad": "SAME_LOWER"},  # crops the start: (1, 0)
                 {"P": 16, "Q": 16, "pads": (1, 1, 2, 2)}, id="same-lower"),
    pytest.param({"strides": [2, 2], "dilations": [2, 2], "group": 2},
                 {"P": 19, "Q": 19, "C": 2, "K": 3, "groups": 2, "Hdilation": 2,
                  "pads": (4, 4, 4, 4)},
                 id="dilated-grouped"),
])
def test_conv_transpose(builder, attrs, expected):
    g = builder(weights="inputs")
    channels = 4
    g.node("ConvTranspose", [g.input("x", [1, channels, 8, 8]), g.weight("w", [4, 3, 3, 3])],
           "y", **attrs)
    g.output("y")
    layer = only_layer(g.model())
    assert layer.kind == "conv_transpose" and layer.upsample == (2, 2)
    for field, value in expected.items():
        assert getattr(layer, field) == value, field


def test_conv_transpose_1d(builder):
    g = builder(weights="inputs")
    g.node("ConvTranspose", [g.input("x", [1, 4, 10]), g.weight("w", [4, 2, 4])], "y",
           strides=[2], pads=[1, 1])
    g.output("y", 3)
    layer = only_layer(g.model())
    assert (layer.kind, layer.R, layer.P, layer.S, layer.Q) == ("conv_transpose", 4, 20, 1, 1)
    assert (layer.upsample, layer.pads) == ((2, 1), (2, 0, 2, 0))


def zero_inserted_conv(x: np.ndarray, w: np.ndarray, layer: Layer) -> np.ndarray:
    """The stride-1 conv `Layer` describes: zero-insert, pad, correlate with the flipped
    kernel (channels swapped, as ConvTranspose stores them (C_in, K, ...))."""
    n, c, h, wd = x.shape
    sh, sw = layer.upsample
    z = np.zeros((n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1))
    z[:, :, ::sh, ::sw] = x
    top, left, bottom, right = layer.pads
    z = np.pad(z, ((0, 0), (0, 0), (top, bottom), (left, right)))
    span = ((layer.R - 1) * layer.Hdilation + 1, (layer.S - 1) * layer.Wdilation + 1)
    win = sliding_window_view(z, span, axis=(2, 3))[..., ::layer.Hdilation, ::layer.Wdilation]
    kernel = np.flip(w, axis=(2, 3)).transpose(1, 0, 2, 3)
    return np.einsum("ncpqrs,kcrs->nkpq", win[:, :, :layer.P, :layer.Q], kernel)


@examples(25)
@given(size=st.integers(2, 6), k=st.integers(1, 3), s=st.integers(1, 3), d=st.integers(1, 2),
       data=st.data())
def test_conv_transpose_equals_its_zero_inserted_conv(builder, size, k, s, d, data):
    """Property: running ONNX's ConvTranspose equals running the conv our Layer describes."""
    crop = (d * (k - 1))  # larger cropping is modelled with clamped padding; not compared here
    begin, end = data.draw(st.integers(0, crop)), data.draw(st.integers(0, crop))
    out_pad = data.draw(st.integers(0, s - 1))  # onnx.reference rejects s <= out_pad < d
    assume(s * (size - 1) + out_pad + (k - 1) * d + 1 - begin - end >= 1)
    rng = np.random.default_rng(size * 100 + k * 10 + s)
    x = rng.standard_normal((1, 2, size, size)).astype(np.float32)
    w = rng.standard_normal((2, 3, k, k)).astype(np.float32)
    g = builder()
    g.node("ConvTranspose", [g.input("x", list(x.shape)), g.weight("w", w.shape, w)], "y",
           strides=[s, s], dilations=[d, d], pads=[begin, begin, end, end],
           output_padding=[out_pad, out_pad])
    g.output("y")
    model = g.model()
    layer = only_layer(model)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert expected.shape[2:] == (layer.P, layer.Q)
    np.testing.assert_allclose(zero_inserted_conv(x, w, layer), expected, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------- gemm / matmul
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_gemm_transposes_and_bias(builder, trans_a, trans_b, bias):
    g = builder(weights="inputs")
    a = g.input("a", [5, 3] if trans_a else [3, 5])
    b = g.weight("b", [4, 5] if trans_b else [5, 4])
    extra = [g.weight("c", [4])] if bias else []
    g.node("Gemm", [a, b, *extra], "y", transA=trans_a, transB=trans_b)
    g.output("y", 2)
    layer = only_layer(g.model())
    assert (layer.kind, layer.P, layer.C, layer.K, layer.N) == ("gemm", 3, 5, 4, 1)
    assert layer.epilogue == (("bias",) if bias else ())


@pytest.mark.parametrize("a_shape,b_shape,kind,M,K_red,N_out,batch", [
    pytest.param((3, 5), (5, 4), "gemm", 3, 5, 4, 1, id="2d"),
    pytest.param((2, 7, 5), (5, 4), "gemm", 14, 5, 4, 1, id="shared-weights-fold-into-M"),
    pytest.param((2, 3, 6, 5), (2, 3, 5, 4), "gemm", 6, 5, 4, 6, id="batched"),
    pytest.param((2, 1, 6, 5), (1, 3, 5, 4), "gemm", 6, 5, 4, 6, id="broadcast"),
    pytest.param((6, 5), (3, 5, 4), "gemm", 6, 5, 4, 3, id="batched-b-only"),
    pytest.param((1, 5), (5, 4), "gemv", 1, 5, 4, 1, id="gemv"),
    pytest.param((5,), (5, 4), "gemv", 1, 5, 4, 1, id="1d-a"),
    pytest.param((3, 5), (5,), "gemm", 3, 5, 1, 1, id="1d-b"),
    pytest.param((5,), (5,), "gemv", 1, 5, 1, 1, id="1d-both"),
    pytest.param((4, 1, 1, 5), (2, 5, 3), "gemm", 1, 5, 3, 8, id="batched-rows-of-one"),
])
def test_matmul_numpy_semantics(builder, a_shape, b_shape, kind, M, K_red, N_out, batch):
    g = builder(weights="inputs")
    g.node("MatMul", [g.input("a", list(a_shape)), g.weight("b", list(b_shape))], "y")
    g.output("y", np.matmul(np.zeros(a_shape), np.zeros(b_shape)).ndim)
    layer = only_layer(g.model())
    assert (layer.kind, layer.P, layer.C, layer.K, layer.N) == (kind, M, K_red, N_out, batch)


@examples(40)
@given(data=st.data())
def test_matmul_macs_match_numpy(builder, data):
    """Property: for any numpy-valid MatMul, MACs = output elements x reduction length."""
    draw = data.draw
    k, m, n = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = draw(st.lists(st.integers(1, 3), max_size=3))
    a_shape = [*(draw(st.sampled_from([1, d])) for d in batch), m, k]
    b_shape = [*(draw(st.sampled_from([1, d])) for d in batch), k, n]
    a_shape = a_shape[draw(st.integers(0, len(batch))):]  # batch dims align from the right
    b_shape = b_shape[draw(st.integers(0, len(batch))):]
    if draw(st.booleans()):
        a_shape = [k]
    if draw(st.booleans()):
        b_shape = [k]
    out = np.matmul(np.zeros(a_shape), np.zeros(b_shape))
    g = builder(weights="inputs")
    g.node("MatMul", [g.input("a", a_shape), g.weight("b", b_shape)], "y")
    g.output("y", out.ndim)
    layer = only_layer(g.model())
    assert layer.macs == math.prod(out.shape) * k


def test_quantized_ops_map_like_their_float_versions(builder):
    g = builder(weights="inputs", opset=21)
    u8, i8 = TensorProto.UINT8, TensorProto.INT8
    x = g.input("x", [1, 4, 8, 8], u8)
    scale, zero = g.const("scale", np.float32(0.1)), g.const("zero", np.uint8(0))
    w_zero = g.const("w_zero", np.int8(0))
    qconv = g.node("QLinearConv", [x, scale, zero, g.weight("qw", [8, 4, 3, 3], elem_type=i8),
                                   scale, w_zero, scale, zero,
                                   g.weight("qb", [8], elem_type=TensorProto.INT32)],
                   name="qconv", pads=[1, 1, 1, 1])
    iconv = g.node("ConvInteger", [qconv, g.weight("iw", [8, 8, 1, 1], elem_type=u8)],
                   name="iconv")
    flat = g.node("Flatten", [g.node("Cast", [iconv], to=u8)])
    imm = g.node("MatMulInteger", [flat, g.weight("mw", [512, 10], elem_type=u8)], name="imm")
    q8 = g.node("Cast", [imm], to=u8)
    g.node("QLinearMatMul", [q8, scale, zero, g.weight("qmw", [10, 6], elem_type=u8),
                             scale, zero, scale, zero], "y", name="qmm")
    g.output("y", 2, u8)
    layers, summary = layers_from_onnx(g.model())
    assert [(layer.name, layer.kind) for layer in layers] == [
        ("qconv", "conv2d"), ("iconv", "conv2d"), ("imm", "gemv"), ("qmm", "gemv")]
    assert (layers[0].C, layers[0].K, layers[0].P, layers[0].epilogue) == (4, 8, 8, ("bias",))
    assert (layers[2].C, layers[2].K, layers[3].C, layers[3].K) == (512, 10, 10, 6)
    assert summary.layers == {"QLinearConv": 1, "ConvInteger": 1, "MatMulInteger": 1,
                              "QLinearMatMul": 1}


# ------------------------------------------------------------------------------- epilogues
def test_elementwise_chain_joins_the_epilogue_in_order(builder):
    g = builder(weights="inputs")
    c = g.node("Conv", [g.input("x", [1, 4, 8, 8]), g.weight("w", [8, 4, 1, 1])])
    t = g.node("Add", [c, g.weight("shift", [8, 1, 1])])
    t = g.node("Relu", [t])
    g.node("Mul", [t, g.weight("gain", [1])], "y")
    g.output("y")
    layers, summary = layers_from_onnx(g.model())
    assert layers[0].epilogue == ("bias", "relu", "mul")   # a per-channel weight: a bias
    assert summary.epilogues == {"Add": 1, "Relu": 1, "Mul": 1} and not summary.skipped


def test_residual_add_goes_to_the_later_layer(builder):
    g = builder(weights="inputs")
    x = g.input("x", [1, 4, 8, 8])
    a = g.node("Conv", [x, g.weight("wa", [8, 4, 1, 1])], name="main")
    b = g.node("Conv", [x, g.weight("wb", [8, 4, 3, 3]), g.weight("bb", [8])], name="short",
               pads=[1, 1, 1, 1])
    g.node("Relu", [g.node("Add", [a, b])], "y")
    g.output("y")
    layers, _ = layers_from_onnx(g.model())
    assert [(layer.name, layer.epilogue) for layer in layers] == [
        ("main", ()), ("short", ("bias", "add", "relu"))]


def test_ops_that_cannot_fuse_are_skipped(builder):
    g = builder(weights="inputs")
    x = g.input("x", [1, 4, 8, 8])
    shared = g.node("Conv", [x, g.weight("w1", [8, 4, 1, 1])], name="shared")  # two readers
    g.node("Add", [g.node("Relu", [shared]), g.node("Sigmoid", [shared])], "y1")
    pooled = g.node("Conv", [g.node("GlobalAveragePool", [x]), g.weight("w2", [8, 4, 1, 1])],
                    name="pooled")
    g.node("Mul", [pooled, shared], "y2")  # broadcasts the 1x1 output up to 8x8: not fused
    g.node("Conv", [x, g.weight("w3", [8, 4, 1, 1])], "out", name="exposed")  # graph output
    g.node("Tanh", ["out"], "y3")
    for name in ("y1", "y2", "out", "y3"):
        g.output(name)
    layers, summary = layers_from_onnx(g.model())
    assert all(layer.epilogue == () for layer in layers)
    assert summary.epilogues == {}
    assert summary.skipped == {"Relu": 1, "Sigmoid": 1, "Add": 1, "GlobalAveragePool": 1,
                               "Mul": 1, "Tanh": 1}


UNARY = ["Abs", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
         "HardSwish", "Hardmax", "LeakyRelu", "Log", "LogSoftmax", "Mish", "Neg",
         "Reciprocal", "Relu", "Round", "Selu", "Celu", "Shrink", "Sigmoid", "Sign", "Sin",
         "Softmax", "Softplus", "Softsign", "Sqrt", "Swish", "Tanh", "ThresholdedRelu",
         "Acos", "Asin", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tan"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Min", "Max", "Sum", "Mean", "PRelu"]
COMPARE = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("op", UNARY + BINARY + COMPARE + ["Clip", "Where", "Mod",
                                                           "QuantizeLinear"])
def test_every_fusible_op_joins_the_epilogue(builder, op):
    g = builder(weights="inputs", opset=24)
    c = g.node("Conv", [g.input("x", [1, 4, 8, 8]), g.weight("w", [8, 4, 1, 1])])
    k = g.const("k", np.full((8, 1, 1), 0.5, np.float32))
    out_type = TensorProto.FLOAT
    if op in BINARY:
        g.node(op, [c, k], "y")
    elif op in COMPARE:
        g.node(op, [c, k], "y")
        out_type = TensorProto.BOOL
    elif op == "Clip":
        g.node(op, [c, g.const("lo", np.float32(0)), g.const("hi", np.float32(6))], "y")
    elif op == "Where":
        g.node(op, [g.const("cond", np.ones((8, 1, 1), bool)), c, k], "y")
    elif op == "Mod":
        g.node(op, [c, k], "y", fmod=1)
    elif op == "QuantizeLinear":
        g.node(op, [c, g.const("s", np.float32(0.1)), g.const("z", np.uint8(0))], "y")
        out_type = TensorProto.UINT8
    else:
        g.node(op, [c], "y")
    g.output("y", 4, out_type)
    layers, summary = layers_from_onnx(g.model())
    # Adding a per-channel constant right after the layer is its bias.
    assert layers[0].epilogue == (("bias",) if op == "Add" else (op.lower(),))
    assert summary.epilogues == {op: 1}


def _skipped_cases():
    """Op -> a function adding that op, reading the conv output ``c``; returns its outputs."""

    def i64(values):
        return np.array(values, np.int64)

    return {
        "MaxPool": lambda g, c: g.node("MaxPool", [c], "y", kernel_shape=[2, 2]),
        "AveragePool": lambda g, c: g.node("AveragePool", [c], "y", kernel_shape=[2, 2]),
        "LpPool": lambda g, c: g.node("LpPool", [c], "y", kernel_shape=[2, 2]),
        "GlobalAveragePool": lambda g, c: g.node("GlobalAveragePool", [c], "y"),
        "GlobalMaxPool": lambda g, c: g.node("GlobalMaxPool", [c], "y"),
        "Reshape": lambda g, c: g.node("Reshape", [c, g.const("s", i64([1, -1, 8, 8]))],
                                       "y"),
        "Flatten": lambda g, c: g.node("Unsqueeze", [g.node("Flatten", [c]),
                                                     g.const("a", i64([0, 1]))], "y"),
        "Transpose": lambda g, c: g.node("Transpose", [c], "y", perm=[0, 2, 3, 1]),
        "Squeeze": lambda g, c: g.node("Unsqueeze", [g.node("Squeeze", [c, g.const(
            "a", i64([0]))]), g.const("b", i64([0]))], "y"),
        "Concat": lambda g, c: g.node("Concat", [c, c], "y", axis=1),
        "Split": lambda g, c: g.node("Split", [c, g.const("s", i64([4, 4]))], ["y", "z"],
                                     axis=1),
        "Slice": lambda g, c: g.node("Slice", [c, *(g.const(n, i64(v)) for n, v in
                                                    (("b", [0]), ("e", [4]), ("a", [1])))], "y"),
        "Gather": lambda g, c: g.node("Gather", [c, g.const("i", i64([0, 1]))], "y",
                                      axis=1),
        "Expand": lambda g, c: g.node("Expand", [c, g.const("s", i64([2, 8, 8, 8]))],
                                      "y"),
        "Tile": lambda g, c: g.node("Tile", [c, g.const("r", i64([1, 1, 2, 2]))], "y"),
        "Pad": lambda g, c: g.node("Pad", [c, g.const("p", i64([0, 0, 1, 1] * 2))], "y"),
        "Resize": lambda g, c: g.node("Resize", [c, "", g.const(
            "s", np.array([1, 1, 2, 2], np.float32))], "y"),
        "DepthToSpace": lambda g, c: g.node("DepthToSpace", [c], "y", blocksize=2),
        "SpaceToDepth": lambda g, c: g.node("SpaceToDepth", [c], "y", blocksize=2),
        "ReduceMean": lambda g, c: g.node("ReduceMean", [c], "y", axes=[2, 3]),
        "ReduceSum": lambda g, c: g.node("ReduceSum", [c, g.const("a", i64([1]))], "y"),
        "ReduceMax": lambda g, c: g.node("ReduceMax", [c], "y", axes=[1]),
        "Cast": lambda g, c: g.node("Cast", [c], "y", to=TensorProto.FLOAT),
        "LayerNormalization": lambda g, c: g.node("LayerNormalization", [c, g.const(
            "s", np.ones(8, np.float32))], "y"),
        "InstanceNormalization": lambda g, c: g.node("InstanceNormalization", [c, g.const(
            "s", np.ones(8, np.float32)), g.const("b", np.zeros(8, np.float32))], "y"),
        "LRN": lambda g, c: g.node("LRN", [c], "y", size=3),
        "BatchNormalization": lambda g, c: g.node("BatchNormalization", [c, *(g.const(
            n, np.ones(8, np.float32)) for n in "sbmv")], "y"),
        "Dropout": lambda g, c: g.node("Dropout", [c, g.const("r", np.float32(0.5)),
                                                   g.const("t", np.array(True))], "y"),
    }


@pytest.mark.parametrize("op", sorted(_skipped_cases()))
def test_every_skipped_op_is_counted_and_skipped(builder, op):
    g = builder(weights="inputs")
    x = g.input("x", [1, 4, 8, 8])
    # The op reads a layer output with a second reader, so it is skipped however it is kind.
    c = g.node("Conv", [x, g.weight("w", [8, 4, 1, 1])])
    g.node("Relu", [c], "relu_out")
    g.output("relu_out")
    outputs = _skipped_cases()[op](g, c)
    for name in [outputs] if isinstance(outputs, str) else outputs:
        g.output(name)
    _, summary = layers_from_onnx(g.model())
    assert summary.skipped[op] == 1
    assert_accounted(summary)


@pytest.mark.parametrize("op,opset,rank,elem_type,build", [
    ("GroupNormalization", 21, 4, TensorProto.FLOAT, lambda g, x: g.node(
        "GroupNormalization", [x, *(g.const(n, np.ones(4, np.float32)) for n in "sb")], "y",
        num_groups=2)),
    ("Upsample", 9, 4, TensorProto.FLOAT, lambda g, x: g.node("Upsample", [x, g.const(
        "s", np.array([1, 1, 2, 2], np.float32))], "y")),
    ("Shape", 17, 1, TensorProto.INT64, lambda g, x: g.node("Shape", [x], "y")),
    ("Size", 17, 0, TensorProto.INT64, lambda g, x: g.node("Size", [x], "y")),
    ("ConstantOfShape", 17, 4, TensorProto.FLOAT, lambda g, x: g.node(
        "ConstantOfShape", [g.node("Shape", [x])], "y")),
    ("Range", 17, 1, TensorProto.FLOAT, lambda g, x: g.node("Range", [
        g.const(n, np.float32(v)) for n, v in (("a", 0), ("b", 4), ("d", 1))], "y")),
    ("Constant", 17, 0, TensorProto.FLOAT, lambda g, x: g.node("Constant", [], "y",
                                                              value_float=1.0)),
    ("Identity", 17, 4, TensorProto.FLOAT, lambda g, x: g.node("Identity", [x], "y")),
])
def test_skipped_ops_off_the_layer_path(builder, op, opset, rank, elem_type, build):
    g = builder(weights="inputs", opset=opset)
    x = g.input("x", [1, 4, 8, 8])
    g.node("Conv", [x, g.weight("w", [8, 4, 1, 1])], "c")
    g.output("c")
    build(g, x)
    g.output("y", rank, elem_type)
    _, summary = layers_from_onnx(g.model())
    assert summary.skipped[op] == 1
    assert_accounted(summary)


def test_supported_op_lists_name_real_onnx_ops_once():
    categories = [onnx_import.LAYER_OPS, onnx_import.ELEMENTWISE_OPS,
                  onnx_import.ACTIVATION_OPS, onnx_import.POOLING_OPS,
                  onnx_import.DATA_MOVEMENT_OPS, onnx_import.NORMALIZATION_OPS]
    assert sum(map(len, categories)) + 1 == len(onnx_import.SUPPORTED_OPS)  # + Dropout
    assert [op for op in onnx_import.SUPPORTED_OPS if not onnx.defs.has(op)] == []


# ------------------------------------------------------------------------------- passes, dedupe
def test_bn_folds_into_the_conv_and_its_bias_starts_the_epilogue(builder):
    g = builder()
    c = g.node("Conv", [g.input("x", [1, 3, 8, 8]), g.weight("w", [4, 3, 3, 3])], name="conv",
               pads=[1, 1, 1, 1])
    stats = [g.const(n, np.full(4, v, np.float32)) for n, v in zip("sbmv", (1, 0, 0, 1))]
    g.node("Relu", [g.node("BatchNormalization", [c, *stats], name="bn")], "y", name="relu")
    g.output("y")
    net = from_onnx(g.model())
    assert net.layers[0].epilogue == ("bias", "relu") and net.layers[0].name == "conv"
    assert (net.summary.folded, net.summary.passes["fold_batchnorm"]) == ({"Conv": 1}, 1)
    assert "BatchNormalization" not in net.summary.skipped
    assert_accounted(net.summary)


def test_cse_merges_a_duplicated_branch_before_layers_are_made(builder):
    g = builder(weights="inputs")
    x = g.input("x", [1, 4, 8, 8])
    w = g.weight("w", [8, 4, 3, 3])
    a = g.node("Relu", [g.node("Conv", [x, w], pads=[1, 1, 1, 1])])
    b = g.node("Relu", [g.node("Conv", [x, w], pads=[1, 1, 1, 1])])
    g.node("Concat", [a, b], "y", axis=1)
    g.output("y")
    net = from_onnx(g.model())
    assert net.total_layers == 1 and net.summary.passes["eliminate_common_subexpressions"] == 2
    assert net.summary.epilogues == {"Relu": 1}  # one reader (Concat) of the merged Relu
    assert net.summary.skipped == {"Concat": 1}
    assert_accounted(net.summary)


def test_dead_branch_is_dropped_even_with_unsupported_ops(builder):
    g = builder(weights="inputs")
    x = g.input("x", [1, 4, 8, 8])
    g.node("Conv", [x, g.weight("w", [8, 4, 1, 1])], "y")
    seq = g.node("Reshape", [x, g.const("s", np.array([1, 4, 64], np.int64))])
    g.node("LSTM", [seq, g.weight("lw", [1, 8, 64]), g.weight("lr", [1, 8, 2])], 1,
           hidden_size=2)
    g.output("y")
    net = from_onnx(g.model())
    assert net.summary.passes["eliminate_dead_code"] == 2 and net.total_layers == 1
    assert_accounted(net.summary)


def test_identical_layers_are_deduplicated_in_order(builder):
    g = builder(weights="inputs")
    t = g.input("x", [1, 8, 8, 8])
    for k in range(3):
        t = g.node("Conv", [t, g.weight(f"w{k}", [8, 8, 3, 3])], name=f"c{k}",
                   pads=[1, 1, 1, 1])
    g.node("Conv", [t, g.weight("w3", [16, 8, 1, 1])], "y", name="head")
    g.output("y")
    net = from_onnx(g.model())
    assert (net.unique_layers, net.total_layers, net.counts) == (2, 4, (3, 1))
    assert (net.order, net.names) == ((0, 0, 0, 1), ("c0", "c1", "c2", "head"))
    assert net.total_macs == 3 * 8 * 8 * 8 * 8 * 9 + 8 * 8 * 8 * 16


def test_unnamed_nodes_are_named_by_op_and_file_index(builder):
    g = builder(weights="inputs")
    x = g.input("x", [1, 4, 8, 8])
    g.node("Identity", [x], "dead")  # index 0, removed as dead code
    g.node("Conv", [x, g.weight("w", [8, 4, 1, 1])], "c")  # index 1
    g.node("Gemm", [g.node("Flatten", ["c"]), g.weight("fc", [512, 10])], "y", name="fc")
    g.output("y", 2)
    net = from_onnx(g.model())
    assert net.names == ("Conv_1", "fc")


# ------------------------------------------------------------------------------- ResNet-style
def test_resnet_style_graph_exported_with_initializers(builder):
    """Stem Conv+BN+ReLU, MaxPool, a bottleneck with projection shortcut, GAP, Flatten, Gemm:
    the shape of a PyTorch ResNet export, with its naming and BN statistics as initializers."""
    g = builder(name="resnet_tiny", seed=5)
    rng = np.random.default_rng(5)

    def conv_bn(x, prefix, c_in, c_out, k, stride=1, relu=True):
        conv = g.node("Conv", [x, g.weight(f"{prefix}.weight", [c_out, c_in, k, k])],
                      name=f"/{prefix}/Conv", kernel_shape=[k, k], strides=[stride] * 2,
                      pads=[k // 2] * 4)
        stats = [g.const(f"{prefix}.bn.{n}", v.astype(np.float32)) for n, v in (
            ("weight", rng.uniform(0.5, 2, c_out)), ("bias", rng.standard_normal(c_out)),
            ("running_mean", rng.standard_normal(c_out)),
            ("running_var", rng.uniform(0.5, 2, c_out)))]
        out = g.node("BatchNormalization", [conv, *stats], name=f"/{prefix}/bn/BatchNorm")
        return g.node("Relu", [out], name=f"/{prefix}/Relu") if relu else out

    x = g.input("input", [1, 3, 32, 32])
    stem = conv_bn(x, "conv1", 3, 16, 7, stride=2)
    pool = g.node("MaxPool", [stem], name="/maxpool/MaxPool", kernel_shape=[3, 3],
                  strides=[2, 2], pads=[1, 1, 1, 1])
    main = conv_bn(pool, "layer1.0.conv1", 16, 16, 1)
    main = conv_bn(main, "layer1.0.conv2", 16, 16, 3)
    main = conv_bn(main, "layer1.0.conv3", 16, 64, 1, relu=False)
    short = conv_bn(pool, "layer1.0.downsample", 16, 64, 1, relu=False)
    block = g.node("Relu", [g.node("Add", [main, short], name="/layer1.0/Add")],
                   name="/layer1.0/Relu")
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [block], name="/avgpool/GAP")],
                  name="/Flatten")
    g.node("Gemm", [flat, g.weight("fc.weight", [10, 64]), g.weight("fc.bias", [10])],
           "logits", name="/fc/Gemm", transB=1)
    g.output("logits", 2)
    model = g.model()

    layers, summary = layers_from_onnx(model)
    expected = [
        Layer.conv2d(R=7, S=7, P=16, Q=16, C=3, K=16, Hstride=2, Wstride=2, pads=(3,) * 4),
        Layer.conv2d(R=1, S=1, P=8, Q=8, C=16, K=16),
        Layer.conv2d(R=3, S=3, P=8, Q=8, C=16, K=16, pads=(1,) * 4),
        Layer.conv2d(R=1, S=1, P=8, Q=8, C=16, K=64),
        Layer.conv2d(R=1, S=1, P=8, Q=8, C=16, K=64),
        Layer.gemm(M=1, K_red=64, N_out=10),
    ]
    assert layers == expected  # compares the loop nests only
    assert [(layer.name, layer.epilogue) for layer in layers] == [
        ("/conv1/Conv", ("bias", "relu")),
        ("/layer1.0.conv1/Conv", ("bias", "relu")),
        ("/layer1.0.conv2/Conv", ("bias", "relu")),
        ("/layer1.0.conv3/Conv", ("bias",)),
        ("/layer1.0.downsample/Conv", ("bias", "add", "relu")),  # the later of the two
        ("/fc/Gemm", ("bias",)),
    ]
    assert layers[-1].kind == "gemv"
    assert summary.to_dict() == {
        "ops": {"Conv": 5, "BatchNormalization": 5, "Relu": 4, "MaxPool": 1, "Add": 1,
                "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1},
        "layers": {"Conv": 5, "Gemm": 1},
        "epilogues": {"Relu": 4, "Add": 1},
        "skipped": {"MaxPool": 1, "GlobalAveragePool": 1, "Flatten": 1},
        "folded": {"Conv": 5},
        "passes": {"eliminate_identities": 0, "eliminate_dead_code": 0,
                   "eliminate_common_subexpressions": 0, "fold_batchnorm": 5},
    }
    assert_accounted(summary)

    net = from_onnx(model)
    assert net.name == "resnet_tiny"
    assert (net.unique_layers, net.total_layers, net.counts) == (5, 6, (1, 1, 1, 2, 1))
    assert net.order == (0, 1, 2, 3, 3, 4)
    assert net.total_macs == sum(layer.macs for layer in expected)


def test_initializers_also_listed_as_inputs_are_weights_not_inputs(builder):
    """Older exporters (keep_initializers_as_inputs) declare every initializer as an input."""
    g = builder()
    c = g.node("Conv", [g.input("x", [1, 3, 8, 8]), g.weight("w", [4, 3, 3, 3])])
    stats = [g.const(n, np.full(4, 2.0, np.float32)) for n in "sbmv"]
    g.node("BatchNormalization", [c, *stats], "y")
    g.output("y")
    model = g.model()
    model.graph.input.extend(onnx.helper.make_tensor_value_info(
        t.name, t.data_type, [None] * len(t.dims)) for t in model.graph.initializer)
    with pytest.raises(WorkloadError, match="'x'"):
        from_onnx(model, input_shapes={"w": (4, 3, 3, 3)})  # not an input one may shape
    net = from_onnx(model)
    assert net.summary.folded == {"Conv": 1} and net.layers[0].epilogue == ("bias",)


def test_output_shape_that_disagrees_with_conv_arithmetic_is_reported(builder):
    """ONNX shape inference normally rules this out; the guard catches a divergence between
    ONNX's inference and the spec's formula, so it is driven directly here."""
    g = builder(weights="inputs")
    g.node("Conv", [g.input("x", [1, 3, 8, 8]), g.weight("w", [4, 3, 3, 3])], "y", name="c",
           pads=[1, 1, 1, 1])
    g.output("y", (1, 4, 7, 7))  # the formula gives 8x8
    converter = onnx_import._Converter(g.model().graph, "ONNX model 'g'", {"c": 0})
    with pytest.raises(WorkloadError, match=r"'c' \(#0, Conv\): the inferred output shape "
                                            r"\(1, 4, 7, 7\) disagrees with the \(1, 4, 8, 8\)"):
        converter.run()


# ------------------------------------------------------------------------------- sources, names
def test_file_and_proto_sources_and_names(builder, tmp_path):
    model = conv_model(builder, (1, 4, 8, 8), (8, 4, 3, 3))
    model.graph.name = "graphname"
    before = model.SerializeToString()
    assert from_onnx(model).name == "graphname"
    assert model.SerializeToString() == before  # the caller's proto is untouched
    path = tmp_path / "my_net.onnx"
    onnx.save(model, path)
    assert from_onnx(path).name == "my_net"
    assert from_onnx(str(path), name="custom").name == "custom"


def test_external_data_is_found_next_to_the_file(builder, tmp_path, monkeypatch):
    g = builder()
    c = g.node("Conv", [g.input("x", [1, 3, 8, 8]), g.weight("w", [4, 3, 3, 3])])
    stats = [g.const(n, np.full(4, 2.0, np.float32)) for n in "sbmv"]
    g.node("BatchNormalization", [c, *stats], "y")
    g.output("y")
    path = tmp_path / "ext.onnx"
    onnx.save(g.model(), path, save_as_external_data=True, location="ext.bin",
              size_threshold=0)
    monkeypatch.chdir(tmp_path.parent)  # external paths resolve against the model, not cwd
    net = from_onnx(path)
    assert net.summary.folded == {"Conv": 1} and net.layers[0].K == 4


# ------------------------------------------------------------------------------- bad input
@pytest.fixture
def model_file(builder, tmp_path):
    path = tmp_path / "good.onnx"
    onnx.save(conv_model(builder, (1, 4, 8, 8), (8, 4, 3, 3), weights="initializers"), path)
    return path


def test_missing_file(tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(WorkloadError, match=r"nope\.onnx.*no such file"):
        from_onnx(path)


def test_truncated_file(model_file):
    data = model_file.read_bytes()
    model_file.write_bytes(data[: len(data) // 2])
    with pytest.raises(WorkloadError, match=r"good\.onnx.*cannot be read.*truncated"):
        from_onnx(model_file)


@pytest.mark.parametrize("content,match", [
    (b"This is a README, not a model.\n", r"text\.onnx.*cannot be read as an ONNX model"),
    (b"", r"text\.onnx.*holds no ONNX graph"),
])
def test_non_onnx_file(tmp_path, content, match):
    path = tmp_path / "text.onnx"
    path.write_bytes(content)
    with pytest.raises(WorkloadError, match=match):
        from_onnx(path)


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(WorkloadError, match="not a regular file"):
        from_onnx(tmp_path)


def test_model_failing_the_checker(builder, tmp_path):
    g = builder()
    g.node("Relu", ["undefined_value"], "y", name="broken")
    g.input("x", [1, 4])
    g.output("y", 2)
    path = tmp_path / "bad.onnx"
    onnx.save(g.model(), path)
    with pytest.raises(WorkloadError, match=r"bad\.onnx.*checker.*undefined_value"):
        from_onnx(path)


@pytest.mark.parametrize("op,domain,hint", [
    ("LSTM", "", "unroll the recurrence"),
    ("Einsum", "", "MatMul"),
    ("FancyConv", "com.example", "custom domain 'com.example'"),
])
def test_unsupported_op_on_a_compute_path(builder, op, domain, hint):
    g = builder(weights="inputs", opset=21)
    x = g.input("x", [1, 8, 16])
    if op == "LSTM":
        t = g.node(op, [x, g.weight("w", [1, 32, 16]), g.weight("r", [1, 32, 8])], 1,
                   name="rnn", hidden_size=8)
        t = g.node("Squeeze", [t, g.const("ax", np.array([1], np.int64))])
    elif op == "Einsum":
        t = g.node(op, [x, g.weight("e", [16, 8])], name="rnn", equation="bij,jk->bik")
    else:
        t = g.node(op, [x], name="rnn", domain=domain)
    g.node("MatMul", [t, g.weight("m", [8, 4])], "y")
    g.output("y", 3)
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(g.model())
    message = str(info.value)
    shown_domain = domain or "ai.onnx"
    for part in ("'rnn'", "index 0", f"'{op}'", f"'{shown_domain}'", hint):
        assert part in message


def test_unsupported_unnamed_node_is_named_by_index(builder):
    g = builder(weights="inputs", opset=21)
    x = g.input("x", [1, 8])
    t = g.node("Relu", [x])
    t = g.node("Einsum", [t, g.weight("e", [8, 8])], equation="ij,jk->ik")
    g.node("MatMul", [t, g.weight("m", [8, 4])], "y")
    g.output("y", 2)
    with pytest.raises(UnsupportedOpError, match=r"'Einsum_1' \(index 1\)"):
        from_onnx(g.model())


def test_dynamic_batch_needs_input_shapes(builder, tmp_path):
    g = builder(weights="inputs")
    g.node("Conv", [g.input("image", ["batch", 3, 8, 8]), g.weight("w", [4, 3, 3, 3])], "y")
    g.output("y")
    path = tmp_path / "dyn.onnx"
    onnx.save(g.model(), path)
    with pytest.raises(WorkloadError) as info:
        from_onnx(path)
    message = str(info.value)
    for part in ("dyn.onnx", "'image'", "dim 0", "'batch'", "--input-shape image=1x3x8x8",
                 "input_shapes={'image': (1, 3, 8, 8)}"):
        assert part in message
    net = from_onnx(path, input_shapes={"image": (4, 3, 8, 8)})
    assert (net.layers[0].N, net.layers[0].P) == (4, 6)
    net = from_onnx(path, input_shapes=parse_input_shapes(["image=2x3x8x8"]))
    assert net.layers[0].N == 2


def test_input_shapes_may_restate_a_static_shape(builder):
    g = builder(weights="inputs")
    g.node("Relu", [g.node("Conv", [g.input("x", [1, 3, 8, 8]), g.weight("w", [4, 3, 3, 3])],
                           "c")], "y")
    g.output("y", (1, 4, 6, 6))
    model = onnx.shape_inference.infer_shapes(g.model())  # records c: (1, 4, 6, 6)
    layer = only_layer(model, input_shapes={"x": [2, 3, 16, 16]})
    assert (layer.N, layer.P, layer.Q) == (2, 14, 14)


@pytest.mark.parametrize("shapes,match", [
    ({"images": (1, 3, 8, 8)}, r"'images', which is not a graph input; the inputs are 'x'"),
    ({"x": (1, 3, 8)}, r"input 'x' the shape \(1, 3, 8\), but it has rank 4"),
    ({"x": "1x3x8x8"}, r"input_shapes\['x'\].*positive integers"),
    ({"x": (1, 0, 8, 8)}, r"input_shapes\['x'\].*positive integers"),
    ({"x": (1, 4, 8, 8)}, (r"'conv' \(#0, Conv\): input \(1, 4, 8, 8\) and weight "
                          r"\(4, 3, 3, 3\) do not fit group=1")),
])
def test_bad_input_shapes(builder, shapes, match):
    model = conv_model(builder, ("n", 3, 8, 8), (4, 3, 3, 3))
    with pytest.raises(WorkloadError, match=match):
        from_onnx(model, input_shapes=shapes)


def test_shapes_that_do_not_fit_fail_shape_inference(builder):
    g = builder(weights="inputs")
    c = g.node("Conv", [g.input("x", ["n", 3, 8, 8]), g.weight("w", [4, 3, 3, 3])])
    g.node("Add", [c, g.weight("residual", [1, 4, 6, 6])], "y")
    g.output("y")
    with pytest.raises(WorkloadError, match=r"'g': ONNX shape inference fails.*Add"):
        from_onnx(g.model(), input_shapes={"x": (1, 3, 10, 10)})


def test_unknown_shape_of_a_compute_operand_names_the_node(builder):
    g = builder(weights="inputs")
    shape = g.input("shape", [2], TensorProto.INT64)  # data-dependent: cannot be inferred
    t = g.node("Reshape", [g.input("x", [4, 6]), shape])
    g.node("MatMul", [t, g.weight("w", [6, 2])], "y", name="proj")
    g.output("y", 2)
    with pytest.raises(WorkloadError, match=r"'proj' \(#1, MatMul\).*input A.*not static"):
        from_onnx(g.model())


def test_graph_without_layers_is_an_error(builder):
    g = builder()
    g.node("Relu", [g.input("x", [1, 4])], "y")
    g.output("y", 2)
    with pytest.raises(WorkloadError, match="nothing for the accelerator to run"):
        from_onnx(g.model())


def test_source_of_the_wrong_type():
    with pytest.raises(WorkloadError, match=r"path or an onnx\.ModelProto, got int"):
        from_onnx(42)


# ------------------------------------------------------------------------------- input shapes
def test_parse_input_shapes():
    assert parse_input_shapes(["input=1x3x224x224", "ids = 1,128", "a=b=2"]) == {
        "input": (1, 3, 224, 224), "ids": (1, 128), "a=b": (2,)}


@pytest.mark.parametrize("item", ["input", "=1x3", "x=", "x=1xx3", "x=1x-3", "x=0x3", "x=ax3",
                                  "x=1.5"])
def test_parse_input_shapes_rejects_malformed_items(item):
    with pytest.raises(WorkloadError, match=f"input shape {item!r}"):
        parse_input_shapes([item])


def test_parse_input_shapes_rejects_a_repeated_name():
    with pytest.raises(WorkloadError, match="given twice"):
        parse_input_shapes(["x=1", "x=2"])


@given(name=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                    max_size=12),
       dims=st.lists(st.integers(1, 4096), min_size=1, max_size=6))
def test_parse_input_shapes_round_trips(name, dims):
    assert parse_input_shapes([f"{name}={'x'.join(map(str, dims))}"]) == {name: tuple(dims)}


def test_a_matmul_bias_add_and_erf_gelu_join_the_epilogue_as_bias_and_gelu():
    """torch's Linear on N-D inputs is MatMul + Add(bias): the Add is the layer's bias; exact
    GELU exported before opset 20 is five nodes, one "gelu" (its constants checked), and the
    FFN block chains through it."""
    from workloads.onnx_import import from_onnx
    from workloads.zoo.builder import GraphBuilder

    b = GraphBuilder("ffn")
    x = b.input("x", (2, 8, 16))
    h = b.gelu(b.linear(x, 32, name="up"))
    b.output(b.add(b.linear(h, 16, name="down"), x))
    net = from_onnx(b.build())
    assert [layer.epilogue for layer in net.layers] == [("bias", "gelu"), ("bias", "add")]
    assert net.summary.epilogues == {"Add": 4, "Div": 1, "Erf": 1, "Mul": 2}
    (chain,) = net.chains
    assert chain.between == ("add", "div", "erf", "add", "mul", "mul")

    # Another constant (x / 2, not x / sqrt 2) is not GELU: the nodes stay apart.
    b = GraphBuilder("not_gelu")
    x = b.input("x", (8, 16))
    y = b.linear(x, 32, name="up")
    e = b._node("Erf", [b.div(y, b.scalar(2.0))], b.shape(y))
    b.output(b.mul(b.mul(y, b.add(e, b.scalar(1.0))), b.scalar(0.5)))
    (layer,) = from_onnx(b.build()).layers
    assert layer.epilogue == ("bias",)
    # A per-row vector is no bias.
    b = GraphBuilder("rows")
    x = b.input("x", (8, 16))
    b.output(b.add(b.linear(x, 32, bias=False, name="fc"), b.weight("r", (8, 1))))
    (layer,) = from_onnx(b.build()).layers
    assert layer.epilogue == ("add",)


def _scores(name: str, mask_shape, scale: str = "div", axis: int = -1, softmax: bool = True):
    """q @ k -> (/ or *) 8 -> + mask -> softmax(axis) -> @ v, BERT's self-attention."""
    from workloads.zoo.builder import GraphBuilder

    b = GraphBuilder(name)
    q, k, v = b.input("q", (1, 2, 8, 4)), b.input("k", (1, 2, 4, 8)), b.input("v", (1, 2, 8, 4))
    s = b.matmul(q, k, name="qk")
    s = b.div(s, b.scalar(8.0)) if scale == "div" else b.mul(s, b.scalar(0.125))
    if mask_shape:
        s = b.add(b.input("mask", mask_shape), s)    # the mask first, as some exporters do
    if softmax:
        s = b.softmax(s, axis=axis)
    b.output(b.matmul(s, v, name="av"))
    return b.build()


@pytest.mark.parametrize("scale", ["div", "mul"])
def test_scaled_masked_softmax_joins_as_bias_and_softmax(scale):
    """Attention's scores: the scalar is part of the softmax's input scale, the mask (one value
    per key) the layer's bias; the chain qk -> av lists the nodes between."""
    from workloads.onnx_import import from_onnx

    net = from_onnx(_scores("attn", (1, 1, 1, 8), scale))
    assert [layer.epilogue for layer in net.layers] == [("bias", "softmax"), ()]
    assert net.summary.epilogues == {"Add": 1, "Softmax": 1, scale.title(): 1}
    assert_accounted(net.summary)
    (chain,) = net.chains
    assert chain.between == (scale, "add", "softmax")
    # Without a mask, the softmax alone.
    assert from_onnx(_scores("nomask", None, scale)).layers[0].epilogue == ("softmax",)


@pytest.mark.parametrize("mask_shape,axis,softmax,expected", [
    pytest.param((1, 1, 8, 8), -1, True, ("div", "add", "softmax"), id="mask-per-row"),
    pytest.param((1, 1, 1, 8), 2, True, ("div", "add", "softmax_axis"), id="other-axis"),
    pytest.param((1, 1, 1, 8), -1, False, ("div", "add"), id="no-softmax"),
])
def test_other_score_patterns_keep_their_ops(mask_shape, axis, softmax, expected):
    """A mask that differs per query row is no bias, a softmax over the rows is no row
    softmax, and a scale without a softmax after it stays a division."""
    from workloads.onnx_import import from_onnx

    net = from_onnx(_scores("other", mask_shape, axis=axis, softmax=softmax))
    assert net.layers[0].epilogue == expected
