"""The graph a zoo builder writes: fresh names, nodes, declared tensors with their static
shapes, and `GraphRecord.build`, which checks the model against ONNX before handing it out.

The builder computes each tensor's shape itself (it needs them to size the next weight);
`build` runs ``onnx.checker`` and ONNX's strict shape inference and compares every inferred
shape with its own, so a builder bug cannot slip through silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto, helper

from workloads.errors import WorkloadError

OPSET = 17
Shape = tuple[int, ...]


class GraphRecord:
    """One ONNX graph under construction; `workloads.zoo.builder.GraphBuilder` adds the
    operators. Weights are static-shaped graph inputs, small index constants ``Constant``
    nodes."""

    def __init__(self, name: str, dtype: int = TensorProto.FLOAT):
        self.name = name
        self.dtype = dtype
        self._nodes: list[onnx.NodeProto] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._weights: list[onnx.ValueInfoProto] = []
        self._outputs: list[str] = []
        self._shapes: dict[str, Shape] = {}
        self._used: set[str] = set()
        self._serial = 0

    def shape(self, x: str) -> Shape:
        return self._shapes[x]

    def _fresh(self, base: str) -> str:
        """A tensor or node name not used before (``base``, then ``base_1``...)."""
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f"{base}_{i}"
        self._used.add(name)
        return name

    def _auto(self, op: str) -> str:
        self._serial += 1
        return f"{op.lower()}_{self._serial}"

    def _node(self, op: str, inputs: Sequence[str], shape: Shape, name: str | None = None,
              **attrs) -> str:
        node_name = self._fresh(name or self._auto(op))
        out = self._fresh(f"{node_name}.out")
        self._nodes.append(helper.make_node(op, list(inputs), [out], name=node_name, **attrs))
        self._shapes[out] = tuple(int(d) for d in shape)
        return out

    def input(self, name: str, shape: Sequence[int]) -> str:
        """An activation fed to the network (an image, token embeddings, a KV cache)."""
        name = self._fresh(name)
        self._inputs.append(helper.make_tensor_value_info(name, self.dtype, list(shape)))
        self._shapes[name] = tuple(int(d) for d in shape)
        return name

    def weight(self, name: str, shape: Sequence[int]) -> str:
        """A parameter, declared as a static-shaped graph input (never allocated)."""
        name = self._fresh(name)
        self._weights.append(helper.make_tensor_value_info(name, self.dtype, list(shape)))
        self._shapes[name] = tuple(int(d) for d in shape)
        return name

    def const(self, values: Sequence[int | float], dtype: int = TensorProto.INT64) -> str:
        """A small 1-D constant (a shape, slice bounds, a scalar) as a ``Constant`` node."""
        values = list(values)
        node_name = self._fresh(self._auto("const"))
        out = self._fresh(f"{node_name}.out")
        tensor = helper.make_tensor(f"{node_name}.value", dtype, [len(values)], values)
        self._nodes.append(helper.make_node("Constant", [], [out], name=node_name, value=tensor))
        self._shapes[out] = (len(values),)
        return out

    def scalar(self, value: float) -> str:
        """A 0-d float constant for elementwise ops (scale factors, epsilons)."""
        node_name = self._fresh(self._auto("const"))
        out = self._fresh(f"{node_name}.out")
        tensor = helper.make_tensor(f"{node_name}.value", self.dtype, [], [float(value)])
        self._nodes.append(helper.make_node("Constant", [], [out], name=node_name, value=tensor))
        self._shapes[out] = ()
        return out

    def output(self, x: str) -> None:
        """Mark a tensor as a graph output (keeps its producers alive through DCE)."""
        self._outputs.append(x)

    def build(self) -> onnx.ModelProto:
        """The checked ModelProto (opset 17), with inferred shapes for every tensor."""
        if not self._outputs:
            raise WorkloadError(f"graph {self.name!r} has no outputs")
        outputs = [helper.make_tensor_value_info(o, self.dtype, list(self._shapes[o]))
                   for o in self._outputs]
        graph = helper.make_graph(self._nodes, self.name, self._inputs + self._weights, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="baco.zoo")
        try:
            onnx.checker.check_model(model, full_check=True)
            inferred = onnx.shape_inference.infer_shapes(model, check_type=True,
                                                         strict_mode=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            raise WorkloadError(f"zoo graph {self.name!r} is not valid ONNX: {exc}") from exc
        for vi in inferred.graph.value_info:
            dims = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            if vi.name in self._shapes and dims != self._shapes[vi.name]:
                raise WorkloadError(
                    f"zoo graph {self.name!r}: tensor {vi.name!r} has shape {dims} by ONNX "
                    f"inference but {self._shapes[vi.name]} by the builder")
        return inferred
