"""Epilogues: the elementwise ops and activations that join the layer whose output they
post-process, with the GELU and scaled-softmax patterns; `workloads.onnx_import` states the
rules."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import onnx

from workloads.layer import Layer
from workloads.onnx_load import Shape
from workloads.onnx_nodes import attributes
from workloads.passes import constant_value


class EpilogueFuser:
    """The layers of a graph so far, each with its epilogue, and which values they compute."""

    def __init__(self, graph: onnx.GraphProto, shapes: dict[str, Shape], opset: int):
        self.graph = graph
        self.shapes = shapes
        self.opset = opset
        self.outputs = {o.name for o in graph.output}
        self.readers: dict[str, set[int]] = {}
        for k, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, set()).add(k)
        self.producer_op = {o: node.op_type for node in graph.node for o in node.output}
        self.layers: list[Layer] = []
        self.epilogues: list[list[str]] = []
        self.owner: dict[str, int] = {}  # value -> index of the layer whose epilogue made it
        self.absorbed: set[int] = set()  # the rest of a pattern (erf GELU, scaled softmax)
        # whose first node joined an epilogue

    def add_layer(self, node: onnx.NodeProto, layer: Layer, bias: bool) -> None:
        """Record ``node``'s layer; a bias operand starts its epilogue."""
        self.owner[node.output[0]] = len(self.layers)
        self.layers.append(layer)
        self.epilogues.append(["bias"] if bias else [])

    def finished(self) -> list[Layer]:
        """The layers, in order, each with its epilogue."""
        return [dataclasses.replace(layer, epilogue=tuple(tail))
                for layer, tail in zip(self.layers, self.epilogues)]

    def fuse(self, node: onnx.NodeProto, k: int) -> bool:
        """Attach ``node``, the graph's ``k``-th, to the epilogue of a layer it post-processes."""
        if len(node.output) != 1:
            return False
        if k in self.absorbed:
            self.owner[node.output[0]] = next(self.owner[n] for n in node.input
                                              if n in self.owner)
            return True
        out_shape = self.shapes.get(node.output[0])
        gelu = self._gelu(node, k)
        candidates = [
            self.owner[name] for name in set(node.input)
            if name in self.owner and (self.readers.get(name) == {k} or gelu)
            and name not in self.outputs and out_shape is not None
            and self.shapes.get(name) == out_shape
        ]
        if not candidates:
            return False
        j = max(candidates)
        softmax = self._scaled_softmax(node, j)
        if gelu:
            self.absorbed.update(gelu)
            self.epilogues[j].append("gelu")
        elif softmax:
            ops, nodes = softmax
            self.absorbed.update(nodes)
            self.epilogues[j].extend(ops)
        elif node.op_type == "Add" and self._is_bias(node, j):
            self.epilogues[j].append("bias")
        elif node.op_type == "Softmax" and not self._last_axis(node):
            self.epilogues[j].append("softmax_axis")
        else:
            self.epilogues[j].append(node.op_type.lower())
        self.owner[node.output[0]] = j
        return True

    def _is_bias(self, node: onnx.NodeProto, j: int) -> bool:
        """An Add first after a layer whose other operand is a weight (no node computes it)
        holding one value per output channel: a MatMul's bias, as torch exports Linear on N-D
        inputs."""
        if self.epilogues[j]:
            return False
        layer = self.layers[j]
        out = self.shapes.get(node.output[0])
        for name in node.input:
            if not self._is_weight(name):
                continue
            shape = self.shapes.get(name)
            if out is None or shape is None or len(shape) > len(out):
                return False
            shape = (1,) * (len(out) - len(shape)) + tuple(shape)
            axis = len(out) - 1 if layer.kind in ("gemm", "gemv") else 1
            return (shape[axis] == layer.groups * layer.K
                    and all(d == 1 for i, d in enumerate(shape) if i != axis))
        return False

    def _only_reader(self, value: str, op: str | None = None) -> int | None:
        """The index of the one node reading ``value`` (not a graph output), of type ``op``
        if given, if there is one."""
        readers = self.readers.get(value, set())
        if len(readers) != 1 or value in self.outputs:
            return None
        (r,) = readers
        return r if op is None or self.graph.node[r].op_type == op else None

    def _last_axis(self, node: onnx.NodeProto) -> bool:
        """Whether a Softmax normalizes over the last axis alone (opset < 13: the axes from
        ``axis`` on, default 1)."""
        shape = self.shapes.get(node.output[0])
        if shape is None:
            return False
        axis = attributes(node).get("axis", -1 if self.opset >= 13 else 1)
        return axis % len(shape) == len(shape) - 1

    def _per_column(self, name: str, out: Sequence[int], columns: int) -> bool:
        """A weight or graph input broadcasting to one value per output column."""
        shape = self.shapes.get(name)
        if not self._is_weight(name) or shape is None or len(shape) > len(out):
            return False
        shape = (1,) * (len(out) - len(shape)) + tuple(shape)
        return shape[-1] == columns and all(d == 1 for d in shape[:-1])

    def _scaled_softmax(self, node: onnx.NodeProto, j: int
                        ) -> tuple[list[str], tuple[int, ...]] | None:
        """Attention's ``Softmax(Add(Div(x, c), mask))`` (`workloads.onnx_import`) when ``node`` is
        its Div or Mul right after GEMM layer ``j``: the epilogue ops and the other nodes."""
        layer = self.layers[j]
        if (node.op_type not in ("Div", "Mul") or self.epilogues[j] or len(node.input) != 2
                or layer.kind not in ("gemm", "gemv")):
            return None
        scalars = [n for n in node.input if self._is_weight(n)]
        value = constant_value(self.graph, scalars[0]) if len(scalars) == 1 else None
        if value is None or value.size != 1 or not float(value.ravel()[0]):
            return None
        if node.op_type == "Div" and node.input[1] != scalars[0]:
            return None  # c / x is no scale
        out = self.shapes.get(node.output[0])
        ops: list[str] = []
        nodes: list[int] = []
        add = self._only_reader(node.output[0], "Add")
        if add is not None and out is not None:
            add_node = self.graph.node[add]
            if (self.shapes.get(add_node.output[0]) == out
                    and any(self._per_column(n, out, layer.groups * layer.K)
                            for n in add_node.input if n != node.output[0])):
                ops.append("bias")
                nodes.append(add)
        last = self.graph.node[nodes[-1]].output[0] if nodes else node.output[0]
        softmax = self._only_reader(last, "Softmax")
        if softmax is None or not self._last_axis(self.graph.node[softmax]):
            return None
        return [*ops, "softmax"], (*nodes, softmax)

    def _is_weight(self, name: str) -> bool:
        """No node but a Constant computes it: an initializer, a graph input or a constant."""
        return self.producer_op.get(name, "Constant") == "Constant"

    def _gelu(self, node: onnx.NodeProto, k: int) -> tuple[int, ...]:
        """The other nodes of exact GELU as torch exports it at opset < 20 when ``node`` is
        its Div: ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)`` (each op's operands in
        either order, the constants weights), each inner value read once; else ``()``."""
        if node.op_type != "Div" or len(node.input) != 2:
            return ()
        x = node.input[0]
        only_reader = self._only_reader
        erf = only_reader(node.output[0], "Erf")
        add = None if erf is None else only_reader(self.graph.node[erf].output[0], "Add")
        mul = None if add is None else only_reader(self.graph.node[add].output[0], "Mul")
        if mul is None or x not in self.graph.node[mul].input or self.readers.get(x) != {k, mul}:
            return ()
        half = only_reader(self.graph.node[mul].output[0], "Mul")
        if half is None:
            return ()
        for at, value in ((k, math.sqrt(2.0)), (add, 1.0), (half, 0.5)):
            other = [n for n in self.graph.node[at].input if self._is_weight(n)]
            got = None if len(other) != 1 else constant_value(self.graph, other[0])
            if got is None or got.size != 1 or not math.isclose(float(got.ravel()[0]), value,
                                                                rel_tol=1e-3):
                return ()
        return erf, add, mul, half
