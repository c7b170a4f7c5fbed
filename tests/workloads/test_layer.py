"""Layer and Network arithmetic: unit and property tests."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads import Layer, Network, WorkloadError

small = st.integers(min_value=1, max_value=64)


@st.composite
def conv_layers(draw):
    return Layer.conv2d(
        R=draw(st.integers(1, 7)), S=draw(st.integers(1, 7)), P=draw(small), Q=draw(small),
        C=draw(small), K=draw(small), N=draw(st.integers(1, 8)),
        Hstride=draw(st.integers(1, 4)), Wstride=draw(st.integers(1, 4)),
        Hdilation=draw(st.integers(1, 3)), Wdilation=draw(st.integers(1, 3)),
        groups=draw(st.integers(1, 4)))


@given(conv_layers())
def test_macs_is_the_product_of_the_loop_nest(layer):
    assert layer.macs == layer.groups * math.prod(
        [layer.R, layer.S, layer.P, layer.Q, layer.C, layer.K, layer.N])


@given(conv_layers())
def test_to_gemm_keeps_macs_and_output_size(layer):
    gemm = layer.to_gemm()
    assert gemm.kind in ("gemm", "gemv")
    assert (gemm.R, gemm.S, gemm.Q) == (1, 1, 1)
    assert gemm.macs == layer.macs
    assert gemm.output_words == layer.output_words
    assert gemm.weight_words == layer.weight_words
    assert (gemm.P, gemm.C, gemm.K) == (layer.N * layer.P * layer.Q,
                                        layer.C * layer.R * layer.S, layer.K)


@given(conv_layers())
def test_input_footprint_covers_the_sliding_window(layer):
    # The last output row reads input row (P-1)*stride + (R-1)*dilation, zero-based.
    assert layer.input_height == (layer.P - 1) * layer.Hstride + (layer.R - 1) * layer.Hdilation + 1
    assert layer.input_words == (layer.groups * layer.N * layer.C
                                 * layer.input_height * layer.input_width)
    assert layer.output_words == layer.groups * layer.N * layer.K * layer.P * layer.Q


@given(conv_layers(), st.text(max_size=8), st.lists(st.sampled_from(["relu", "add"]), max_size=2))
def test_identity_ignores_name_and_epilogue(layer, name, epilogue):
    import dataclasses

    other = dataclasses.replace(layer, name=name, epilogue=tuple(epilogue))
    assert other == layer and hash(other) == hash(layer) and other.key() == layer.key()
    assert Layer.from_dict(other.to_dict()) == other
    assert Layer.from_dict(other.to_dict()).epilogue == tuple(epilogue)


def test_gemm_and_gemv_conventions():
    gemm = Layer.gemm(M=128, K_red=768, N_out=3072)
    assert (gemm.kind, gemm.P, gemm.C, gemm.K, gemm.N) == ("gemm", 128, 768, 3072, 1)
    assert gemm.macs == 128 * 768 * 3072
    gemv = Layer.gemm(M=1, K_red=4096, N_out=11008)
    assert (gemv.kind, gemv.P, gemv.N) == ("gemv", 1, 1)
    batched = Layer.gemm(M=128, K_red=64, N_out=128, batch=12)
    assert batched.N == 12 and batched.macs == 12 * 128 * 64 * 128


def test_config_str_is_dosas_key():
    layer = Layer.conv2d(R=7, S=7, P=112, Q=112, C=3, K=64, Hstride=2, Wstride=2)
    assert layer.config_str() == "7_7_112_112_3_64_1_2_2_1_1"


@pytest.mark.parametrize("bad, field", [
    (dict(kind="conv2d", R=0), "R"),
    (dict(kind="conv2d", C=2.5), "C"),
    (dict(kind="conv2d", K=True), "K"),
    (dict(kind="conv3d"), "kind"),
    (dict(kind="gemm", R=3), "R=S=Q=1"),
    (dict(kind="gemv", P=4), "N=P=1"),
    (dict(kind="conv1d", Q=4), "S=Q=1"),
    (dict(kind="conv2d", pads=(1, 1)), "pads"),
])
def test_bad_layers_name_the_field(bad, field):
    with pytest.raises(WorkloadError, match=field.replace("=", "=")):
        Layer(name="x", **bad)


def test_network_dedupes_and_keeps_order():
    a = Layer.conv2d(R=3, S=3, P=8, Q=8, C=4, K=4, name="a")
    b = Layer.conv2d(R=1, S=1, P=8, Q=8, C=4, K=16, name="b")
    a2 = Layer.conv2d(R=3, S=3, P=8, Q=8, C=4, K=4, name="a2", epilogue=("relu",))
    net = Network.from_layers("toy", [a, b, a2, b])
    assert net.layers == (a, b)
    assert net.layers[0].name == "a"  # the first occurrence is kept
    assert net.counts == (2, 2)
    assert net.order == (0, 1, 0, 1)
    assert net.names == ("a", "b", "a2", "b")
    assert net.epilogues == ((), (), ("relu",), ())
    assert net.total_layers == 4 and net.unique_layers == 2
    assert net.total_macs == 2 * a.macs + 2 * b.macs
    assert Network.from_dict(net.to_dict()) == net


@given(st.lists(conv_layers(), min_size=1, max_size=12))
def test_network_counts_sum_to_layers(layers):
    net = Network.from_layers("n", layers)
    assert sum(net.counts) == len(layers)
    assert net.total_macs == sum(layer.macs for layer in layers)
    assert [net.layers[j] for j in net.order] == layers


def test_network_rejects_inconsistent_counts():
    layer = Layer.gemm(M=2, K_red=2, N_out=2)
    with pytest.raises(WorkloadError, match="counts"):
        Network(name="bad", layers=(layer,), counts=(2,), order=(0,), names=("x",))
