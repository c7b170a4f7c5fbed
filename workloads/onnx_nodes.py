"""A graph's nodes as the ONNX import reads them: attributes, operands, static shapes, and
errors that name the file (or model) and the node."""

from __future__ import annotations

import onnx
from onnx import helper

from workloads.errors import UnsupportedOpError, WorkloadError
from workloads.onnx_load import Shape, show
from workloads.onnx_ops import HINTS
from workloads.passes import DEFAULT_DOMAINS


def attributes(node: onnx.NodeProto) -> dict:
    values = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        values[attr.name] = value.decode() if isinstance(value, bytes) else value
    return values


def operand(node: onnx.NodeProto, position: int | None) -> str | None:
    if position is None or position >= len(node.input) or not node.input[position]:
        return None
    return node.input[position]


class NodeReader:
    """Static shapes of a graph's values, and errors about its nodes (``where`` names the file
    or model, ``index_of`` each node's index in it)."""

    def __init__(self, where: str, index_of: dict[str, int], shapes: dict[str, Shape]):
        self.where = where
        self.index_of = index_of
        self.shapes = shapes

    # -- messages
    def describe(self, node: onnx.NodeProto) -> str:
        index = self.index_of.get(node.name)
        at = f"#{index}, " if index is not None else ""
        return f"node {node.name!r} ({at}{node.op_type})"

    def error(self, node: onnx.NodeProto, message: str) -> WorkloadError:
        return WorkloadError(f"{self.where}: {self.describe(node)}: {message}")

    def unsupported(self, node: onnx.NodeProto, why: str = "",
                    hint: str = "") -> UnsupportedOpError:
        domain = node.domain or "ai.onnx"
        if not hint and node.domain not in DEFAULT_DOMAINS:
            hint = (f"it comes from the custom domain {domain!r}: export with standard ONNX ops "
                    f"only (e.g. without backend-specific fusions such as onnxruntime's)")
        hint = hint or HINTS.get(node.op_type, "export the model with this op decomposed into "
                                               "standard ONNX ops, or remove it from the graph")
        index = self.index_of.get(node.name)
        return UnsupportedOpError(
            f"{self.where}: node {node.name!r} (index {index}) is op {node.op_type!r} from "
            f"domain {domain!r}, {why or 'which baco cannot map onto the accelerator'}; {hint}")

    # -- shapes
    def static(self, node: onnx.NodeProto, name: str, role: str) -> tuple[int, ...]:
        shape = self.shapes.get(name)
        if shape is None or not all(isinstance(d, int) for d in shape):
            state = "unknown" if shape is None else f"not static: {show(shape)}"
            raise self.error(
                node, f"the shape of its {role} {name!r} is {state} after shape inference; "
                      f"give every graph input a static shape (input_shapes / --input-shape) "
                      f"and compute it with standard ONNX ops")
        return shape
