"""Tests of fusable-chain detection: APOLLO op classes, ONNX graphs, the zoo, suites, the CLI."""

from __future__ import annotations

import json

import pytest

from baco.cli import main
from workloads import Chain, Layer, Network, WorkloadError, from_onnx, load, op_class, suite


@pytest.mark.parametrize("op, inputs, output, expected", [
    ("Relu", (), None, "elementwise"),
    ("Erf", (), None, "elementwise"),
    ("Cast", (), None, "elementwise"),
    ("Div", [(2, 8, 8), ()], (2, 8, 8), "elementwise"),           # a scalar scale: immediate
    ("Mul", [(2, 8, 8), (2, 8, 8)], (2, 8, 8), "elementwise"),
    ("Add", [(2, 8, 8), (8,)], (2, 8, 8), "broadcast"),           # a bias row is stretched
    ("Add", [(1, 12, 8, 8), (1, 1, 1, 8)], (1, 12, 8, 8), "broadcast"),
    ("Expand", (), None, "broadcast"),
    ("ReduceMean", (), None, "reduction"),
    ("ReduceSum", (), None, "reduction"),
    ("Softmax", (), None, "reduction"),
    ("LayerNormalization", (), None, "reduction"),
    ("Reshape", (), None, "opaque"),
    ("MatMul", (), None, "opaque"),
    ("Conv", (), None, "opaque"),
    ("NoSuchOp", (), None, "opaque"),
])
def test_op_classes(op, inputs, output, expected):
    assert op_class(op, inputs, output) == expected


# ------------------------------------------------------------------------------- ONNX graphs
def attention(builder, extra_reader: str | None = None):
    """x @ w1 -> Softmax -> @ w2, optionally with a second reader of a chain value."""
    g = builder(weights="inputs")
    s = g.node("MatMul", [g.input("x", [4, 16]), g.weight("w1", [16, 8])], "s", name="qk")
    p = g.node("Softmax", [s], "p", name="softmax", axis=-1)
    g.node("MatMul", [p, g.weight("w2", [8, 32])], "y", name="av")
    g.output("y", 2)
    if extra_reader:
        g.node("Relu", [extra_reader], "r", name="other")
        g.output("r", 2)
    return g.model()


def test_matmul_softmax_matmul_is_one_gemm_chain(builder):
    net = from_onnx(attention(builder))
    assert net.chains == (Chain("gemm_chain", (0, 1), ("qk", "av"), ("softmax",)),)
    assert net.epilogues[0] == ("softmax",)  # the importer also fused it into qk's epilogue


def test_a_skipped_softmax_still_links_a_chain(builder):
    """Behind a reshape the Softmax is not an epilogue (the importer skips it); the chain
    passes it all the same."""
    g = builder(weights="inputs")
    s = g.node("MatMul", [g.input("x", [2, 4, 16]), g.weight("w1", [2, 16, 4])], "s")
    t = g.node("Reshape", [s, g.const("flat", [8, 4])], "t")
    p = g.node("Softmax", [t], "p", axis=-1)
    u = g.node("Reshape", [p, g.const("heads", [2, 4, 4])], "u")
    g.node("MatMul", [u, g.weight("w2", [2, 4, 8])], "y")
    g.output("y", 3)
    net = from_onnx(g.model())
    assert net.summary.skipped["Softmax"] == 1 and net.epilogues == ((), ())
    assert [c.between for c in net.chains] == [("reshape", "softmax", "reshape")]


@pytest.mark.parametrize("reader", ["s", "p"])
def test_a_second_reader_of_the_intermediate_breaks_the_chain(builder, reader):
    assert from_onnx(attention(builder, extra_reader=reader)).chains == ()


def test_a_producer_read_by_two_layers_starts_no_chain(builder):
    g = builder(weights="inputs")
    s = g.node("MatMul", [g.input("x", [4, 16]), g.weight("w1", [16, 8])], "s")
    g.node("MatMul", [s, g.weight("w2", [8, 32])], "y")
    g.node("MatMul", [s, g.weight("w3", [8, 32])], "z")
    g.output("y", 2)
    g.output("z", 2)
    assert from_onnx(g.model()).chains == ()


def test_a_graph_output_on_the_path_breaks_the_chain(builder):
    g = builder(weights="inputs")
    s = g.node("MatMul", [g.input("x", [4, 16]), g.weight("w1", [16, 8])], "s")
    g.node("MatMul", [s, g.weight("w2", [8, 32])], "y")
    g.output("s", 2)
    g.output("y", 2)
    assert from_onnx(g.model()).chains == ()


def conv_pair(builder, between: str):
    g = builder(weights="inputs")
    x = g.input("x", [1, 8, 16, 16])
    c = g.node("Conv", [x, g.weight("w1", [16, 8, 3, 3])], "c", name="conv1", pads=[1] * 4)
    if between == "relu":
        c = g.node("Relu", [c], "a", name="relu")
    elif between == "channel_scale":
        c = g.node("Mul", [c, g.weight("scale", [16, 1, 1])], "a", name="scale")
    elif between == "maxpool":
        c = g.node("MaxPool", [c], "a", kernel_shape=[2, 2], strides=[2, 2])
    g.node("Conv", [c, g.weight("w2", [4, 16, 1, 1])], "y", name="conv2")
    g.output("y", 4)
    return g.model()


def test_conv_relu_conv_is_one_conv_chain(builder):
    net = from_onnx(conv_pair(builder, "relu"))
    assert net.chains == (Chain("conv_chain", (0, 1), ("conv1", "conv2"), ("relu",)),)
    assert net.to_dict()["chains"] == [{"kind": "conv_chain", "positions": [0, 1],
                                        "names": ["conv1", "conv2"], "between": ["relu"]}]


@pytest.mark.parametrize("between", ["channel_scale", "maxpool"])
def test_conv_chains_pass_elementwise_activations_only(builder, between):
    """A per-channel scale broadcasts; pooling is opaque: neither is an activation."""
    assert from_onnx(conv_pair(builder, between)).chains == ()


def test_a_second_layer_on_the_path_breaks_the_chain(builder):
    """SwiGLU's gate: (x @ w1) * (x @ w2) feeds w3, so w3's operand has two producers."""
    g = builder(weights="inputs")
    x = g.input("x", [4, 16])
    gate = g.node("MatMul", [x, g.weight("w1", [16, 8])], "gate")
    up = g.node("MatMul", [x, g.weight("w2", [16, 8])], "up")
    h = g.node("Mul", [gate, up], "h")
    g.node("MatMul", [h, g.weight("w3", [8, 16])], "y")
    g.output("y", 2)
    assert from_onnx(g.model()).chains == ()


def test_reshape_passes_but_transpose_stops_a_gemm_chain(builder):
    def model(op):
        g = builder(weights="inputs")
        s = g.node("MatMul", [g.input("x", [2, 4, 16]), g.weight("w1", [2, 16, 4])], "s")
        if op == "Reshape":
            t = g.node("Reshape", [s, g.const("shape", [2, 4, 4])], "t")
        else:
            t = g.node("Transpose", [s], "t", perm=[0, 2, 1])
        g.node("MatMul", [t, g.weight("w2", [2, 4, 8])], "y")
        g.output("y", 3)
        return g.model()

    chains = from_onnx(model("Reshape")).chains
    assert [(c.kind, c.between) for c in chains] == [("gemm_chain", ("reshape",))]
    assert from_onnx(model("Transpose")).chains == ()


# ------------------------------------------------------------------------------- networks
def test_network_round_trip_keeps_chains(builder):
    net = from_onnx(conv_pair(builder, "relu"))
    again = Network.from_dict(json.loads(json.dumps(net.to_dict())))
    assert again == net and again.chains == net.chains and again.chains


def test_a_record_without_chains_loads_with_none(builder):
    data = from_onnx(conv_pair(builder, "relu")).to_dict()
    del data["chains"]
    assert Network.from_dict(data).chains == ()


@pytest.mark.parametrize("positions, message", [
    ((0, 2), "out of range"),
    ((1, 0), "producer must come before"),
    ((0, 0), "producer must come before"),
])
def test_bad_chain_positions_name_the_network(positions, message):
    a, b = Layer.gemm(M=4, K_red=8, N_out=8, name="a"), Layer.gemm(M=4, K_red=8, N_out=2,
                                                                   name="b")
    names = tuple("ab"[p] if p < 2 else "c" for p in positions)
    with pytest.raises(WorkloadError, match=f"network 'toy'.*{message}"):
        Network.from_layers("toy", [a, b], chains=[Chain("gemm_chain", positions, names)])


def test_chain_names_must_match_the_layers():
    a, b = Layer.gemm(M=4, K_red=8, N_out=8, name="a"), Layer.gemm(M=4, K_red=8, N_out=2,
                                                                   name="b")
    with pytest.raises(WorkloadError, match="network 'toy'.*names"):
        Network.from_layers("toy", [a, b], chains=[Chain("gemm_chain", (0, 1), ("a", "x"))])


def test_unknown_chain_kind_is_rejected():
    with pytest.raises(WorkloadError, match="unknown kind"):
        Chain("pool_chain", (0, 1), ("a", "b"))


def test_bert_has_one_attention_chain_per_encoder_layer():
    net = load("bert:seq=16")
    attention = [c for c in net.chains if "softmax" in c.between]
    assert len(attention) == 12
    for i, chain in enumerate(attention):
        prefix = f"encoder.layer.{i}.attention.self"
        assert chain.kind == "gemm_chain"
        assert chain.names == (f"{prefix}.qk", f"{prefix}.av")
        assert chain.between == ("div", "add", "softmax")
        assert tuple(net.names[p] for p in chain.positions) == chain.names
    ffn = [c for c in net.chains if "softmax" not in c.between]
    assert [c.names for c in ffn] == [(f"encoder.layer.{i}.intermediate.dense",
                                       f"encoder.layer.{i}.output.dense") for i in range(12)]


@pytest.mark.parametrize("name, kind, count", [("bmm_chain", "gemm_chain", 12),
                                               ("conv_chain", "conv_chain", 8)])
def test_every_suite_chain_network_has_one_chain(name, kind, count):
    nets = suite(name)
    assert len(nets) == count
    for net in nets:
        assert net.chains == (Chain(kind, (0, 1), net.names),)


def test_cli_show_lists_chains(capsys):
    assert main(["workloads", "show", "bert", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    attention = [c for c in data["chains"] if c["between"] == ["div", "add", "softmax"]]
    assert len(attention) == 12 and len(data["chains"]) == 24
    assert all(c["kind"] == "gemm_chain" and data["names"][c["positions"][0]] == c["names"][0]
               for c in data["chains"])
    assert main(["workloads", "show", "bert:seq=16"]) == 0
    out = capsys.readouterr().out
    assert ("chain 0: gemm_chain  encoder.layer.0.attention.self.qk -> div -> add -> softmax "
            "-> encoder.layer.0.attention.self.av") in out
    assert "codesign.fusion can fuse 24 of 24 chains\n" in out
    assert main(["workloads", "show", "bmm_chain/G10"]) == 0
    assert "codesign.fusion can fuse 1 of 1 chains\n" in capsys.readouterr().out
    assert main(["workloads", "show", "resnet50"]) == 0
    assert ("codesign.fusion can fuse 0 of 32 chains; 32 apart: a convolution with a window"
            in capsys.readouterr().out)
