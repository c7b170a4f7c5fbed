"""Fixtures for the workloads tests: a small builder of ONNX models with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Builds a small ONNX model node by node.

    Weights are initializers filled with seeded random numbers (as a PyTorch export has them)
    or, with ``weights="inputs"``, static-shaped graph inputs (as the zoo declares them, so no
    parameter tensor is allocated). Graph outputs declare only their rank unless a shape is
    given, so shape inference fills them in.
    """

    def __init__(self, name: str = "g", opset: int = 17, weights: str = "initializers",
                 seed: int = 0):
        assert weights in ("initializers", "inputs")
        self.name, self.opset, self.weights = name, opset, weights
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.domains: dict[str, int] = {}

    def input(self, name: str, shape, elem_type: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def weight(self, name: str, shape, value: np.ndarray | None = None,
               elem_type: int = TensorProto.FLOAT) -> str:
        """A parameter: an initializer (``value`` or random) or a typed graph input."""
        if self.weights == "inputs" and value is None:
            return self.input(name, shape, elem_type)
        if value is None:
            value = self.rng.standard_normal(shape).astype(np.float32)
        return self.const(name, value)

    def const(self, name: str, value) -> str:
        """Always an initializer (shape tensors, quantization parameters, BN statistics)."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs, outputs=1, *, name: str = "", domain: str = "", **attrs):
        """Add a node; ``outputs`` is a name, a list of names, or a count of fresh names."""
        if isinstance(outputs, int):
            outputs = [f"{op.lower()}{len(self.nodes)}_{k}" for k in range(outputs)]
        elif isinstance(outputs, str):
            outputs = [outputs]
        if domain:
            self.domains.setdefault(domain, 1)
        self.nodes.append(helper.make_node(op, list(inputs), outputs, name=name,
                                           domain=domain or None, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def output(self, name: str, shape=4, elem_type: int = TensorProto.FLOAT) -> str:
        """Declare a graph output: ``shape`` is a tuple, or a rank with unknown dims."""
        dims = [None] * shape if isinstance(shape, int) else shape
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, dims))
        return name

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  initializer=self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in self.domains.items()]
        return helper.make_model(graph, opset_imports=opsets)


@pytest.fixture
def builder():
    """The `GraphBuilder` class (a class, not an instance, so hypothesis tests can use it)."""
    return GraphBuilder
