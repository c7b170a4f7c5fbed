"""An ONNX ResNet-50 written the way a PyTorch export writes it imports to the zoo's layers.

The graph here shares no code with the zoo: it uses onnx.helper directly, weights and BN
statistics as initializers (random, so BN folding runs on real numbers), a Gemm with transB=1
and a bias, and torchvision v1.5's structure.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workloads


class Export:
    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def _name(self, prefix):
        self.n += 1
        return f"/{prefix}_{self.n}"

    def _init(self, shape):
        name = f"onnx::W_{len(self.inits)}"
        # float16 keeps the ResNet-50 export small while the numbers stay real.
        self.inits.append(numpy_helper.from_array(
            self.rng.standard_normal(shape).astype(np.float16) * np.float16(0.1), name))
        return name

    def node(self, op, inputs, **attrs):
        out = self._name(op)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride=1, relu=True):
        w = self._init((cout, cin, k, k))
        y = self.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4, dilations=[1, 1], group=1)
        stats = [self._init((cout,)) for _ in range(3)]
        var = numpy_helper.from_array(np.full(cout, 1.5, np.float16), f"onnx::V_{len(self.inits)}")
        self.inits.append(var)
        y = self.node("BatchNormalization", [y, *stats, var.name], epsilon=1e-5)
        return self.node("Relu", [y]) if relu else y


def resnet50_export():
    e = Export(np.random.default_rng(0))
    x = e.conv_bn("input", 3, 64, 7, stride=2)
    x = e.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for blocks, width, stride in ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)):
        for j in range(blocks):
            s = stride if j == 0 else 1
            y = e.conv_bn(x, cin, width, 1)
            y = e.conv_bn(y, width, width, 3, stride=s)
            y = e.conv_bn(y, width, 4 * width, 1, relu=False)
            shortcut = e.conv_bn(x, cin, 4 * width, 1, stride=s, relu=False) if j == 0 else x
            x = e.node("Relu", [e.node("Add", [y, shortcut])])
            cin = 4 * width
    x = e.node("Flatten", [e.node("GlobalAveragePool", [x])], axis=1)
    logits = e.node("Gemm", [x, e._init((1000, 2048)), e._init((1000,))],
                    alpha=1.0, beta=1.0, transB=1)
    graph = helper.make_graph(
        e.nodes, "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT16, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT16, ["batch", 1000])],
        initializer=e.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "resnet50_export.onnx"
    onnx.save(resnet50_export(), path)
    return path


def test_independent_export_imports_to_the_zoo_layers(exported):
    net = workloads.from_onnx(exported, input_shapes={"input": (1, 3, 224, 224)})
    zoo = workloads.load("resnet50")
    assert (net.unique_layers, net.total_layers) == (24, 54)
    assert [layer.key() for layer in net.layers] == [layer.key() for layer in zoo.layers]
    assert net.counts == zoo.counts
    assert net.order == zoo.order
    assert net.total_macs == zoo.total_macs
    assert net.summary.folded == {"Conv": 53}
    assert net.summary.skipped == {"MaxPool": 1, "GlobalAveragePool": 1, "Flatten": 1}
    # Each bottleneck's residual Add and final Relu ride on a conv, not on their own.
    assert net.summary.epilogues == {"Add": 16, "Relu": 49}


def test_independent_export_needs_its_batch_dim(exported):
    with pytest.raises(workloads.WorkloadError, match="input.*batch"):
        workloads.from_onnx(exported)
