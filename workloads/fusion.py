"""Fusable operator chains: which producer-consumer pairs of layers a fused kernel could run.

Two kinds of fusion are planned on top of this (seed-000-ai-chip-compilation.md §1.2 and
seed-002-004-apollo-pitaya-cim.md §1): Chimera/TileFlow fuse a *chain* of compute-heavy
operators so the intermediate stays on chip (Chimera's Tables 3.5 and 3.6: a BMM chain
GEMM -> GEMM, a conv chain conv -> conv), and APOLLO aggregates memory-bound operators by their
dataflow class. This module finds and lists the chains; it plans no tiling.

Op classes (APOLLO, Def. 1-4, 002:89-92): over the relations from each input to the output,
after broadcasting, an op is *element-wise* when every relation is bijective, *broadcast* when
one stretches an extent-1 axis (injective), *reduction* when one collapses an axis
(surjective), and *opaque* otherwise; Reshape, (batch) matmul and conv are opaque (002:94).
`OP_CLASSES` writes that as a table by ONNX op type; compound ops that reduce and then map back
(Softmax, LayerNormalization, ...) are filed as reductions, as APOLLO's "open compound ops"
split them into a reduction plus element-wise primitives (002:60-73). With shapes, `op_class`
refines an element-wise entry to broadcast when one operand is stretched; a one-element operand
(a scale, a clip bound) is an immediate and stretches nothing.

A `Chain` is two layers, producer first, that `find_chains` links when

* both are GEMM-like (gemm/gemv: a ``gemm_chain``) or both convs of one kind (conv2d or
  conv1d: a ``conv_chain``), and their loop nests meet as Chimera's tables lay them out: same
  batch, the consumer's rows are the producer's (GEMM) and its reduced channels the producer's
  output channels;
* the producer's output reaches the consumer's data operand (its first input, as in ONNX's
  Conv, Gemm and MatMul) only through memory-bound ops that keep the intermediate's shape
  (element-wise, broadcast, or reductions that map back such as Softmax: APOLLO's classes),
  and, for GEMM chains, order-keeping reshapes (`LAYOUT_OPS`). A Transpose stops a chain: the
  consumer would reduce along another axis than the producer wrote, a different fused dataflow
  from Chimera's. Conv chains pass element-wise activations only;
* no value on that path (the producer's output included) is read by anything else (a Shape
  or Size reads no data and does not count) or is a graph output, and no other layer feeds
  it: the path's other operands are weights, constants or graph inputs (an attention mask),
  never another layer's output (a residual, a gate).

A layer may end one chain and start the next (ResNet's 1x1 -> 3x3 -> 1x1); a fusion planner
picks among overlapping chains.

>>> conv = Layer.conv2d(R=3, S=3, P=8, Q=8, C=16, K=16, pads=(1, 1, 1, 1))
>>> nodes = [OpNode("Conv", ("x", "w1"), ("a",), layer=0), OpNode("Relu", ("a",), ("b",)),
...          OpNode("Conv", ("b", "w2"), ("y",), layer=1)]
>>> shapes = {"a": (1, 16, 8, 8), "b": (1, 16, 8, 8)}
>>> [c.to_dict() for c in find_chains(nodes, [conv, conv], graph_outputs={"y"}, shapes=shapes)]
[{'kind': 'conv_chain', 'positions': [0, 1], 'names': ['', ''], 'between': ['relu']}]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from workloads.errors import WorkloadError
from workloads.layer import Layer

ELEMENTWISE, BROADCAST, REDUCTION, OPAQUE = "elementwise", "broadcast", "reduction", "opaque"

# APOLLO's op classes by ONNX op type; an op not listed is opaque. Binary element-wise ops turn
# broadcast when given shapes that stretch an operand (see `op_class`).
OP_CLASSES: Mapping[str, str] = {
    **dict.fromkeys((
        "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift",
        "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Cast", "CastLike", "Ceil",
        "Celu", "Clip", "Cos", "Cosh", "DequantizeLinear", "Div", "Dropout", "Elu", "Equal",
        "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish",
        "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean",
        "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "QuantizeLinear",
        "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
        "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Swish", "Tan", "Tanh",
        "ThresholdedRelu", "Where", "Xor",
    ), ELEMENTWISE),
    "Expand": BROADCAST,
    **dict.fromkeys((
        "ArgMax", "ArgMin", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Hardmax",
        "GroupNormalization", "InstanceNormalization", "LayerNormalization", "LogSoftmax",
        "LpNormalization", "MeanVarianceNormalization", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
        "ReduceSumSquare", "RMSNormalization", "Softmax",
    ), REDUCTION),
}

# Data movement that keeps the elements' order (APOLLO files Reshape as opaque): a GEMM chain
# may pass it, since the consumer then reads the intermediate as the producer wrote it.
LAYOUT_OPS = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
# Ops that read only a tensor's shape: they neither keep a chain's intermediate alive nor make
# their output depend on its values (a reshape target computed by Shape -> Gather -> Concat).
METADATA_OPS = frozenset({"Shape", "Size"})

CHAIN_KINDS = ("gemm_chain", "conv_chain")
_GEMM_KINDS = ("gemm", "gemv")
_CONV_KINDS = ("conv2d", "conv1d")

Shape = tuple


def op_class(op_type: str, input_shapes: Sequence[Shape | None] = (),
             output_shape: Shape | None = None) -> str:
    """APOLLO's class of an ONNX op: "elementwise", "broadcast", "reduction" or "opaque".

    >>> op_class("Relu"), op_class("Softmax"), op_class("MatMul")
    ('elementwise', 'reduction', 'opaque')
    >>> op_class("Add", [(1, 12, 128, 128), (1, 1, 1, 128)], (1, 12, 128, 128))
    'broadcast'
    >>> op_class("Div", [(1, 12, 128, 128), ()], (1, 12, 128, 128))
    'elementwise'
    """
    base = OP_CLASSES.get(op_type, OPAQUE)
    if base == ELEMENTWISE and output_shape is not None and any(
            _stretched(shape, output_shape) for shape in input_shapes if shape is not None):
        return BROADCAST
    return base


def _stretched(shape: Shape, out: Shape) -> bool:
    """Whether broadcasting stretches ``shape`` (of more than one element) up to ``out``."""
    if math.prod(d if isinstance(d, int) else 2 for d in shape) <= 1:
        return False
    return (1,) * (len(out) - len(shape)) + tuple(shape) != tuple(out)


@dataclasses.dataclass(frozen=True)
class Chain:
    """Two layers a fused kernel could run back to back, producer first.

    ``positions`` index `Network.order` (and `Network.names`); ``names`` are the layers' node
    names; ``between`` the op types on the path from producer to consumer, lowercase as in
    epilogues, in graph order (they may also sit in the producer's epilogue).
    """

    kind: str
    positions: tuple[int, ...]
    names: tuple[str, ...]
    between: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in CHAIN_KINDS:
            raise WorkloadError(f"chain {self.names}: unknown kind {self.kind!r}; expected one "
                                f"of {CHAIN_KINDS}")
        object.__setattr__(self, "positions", tuple(self.positions))
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "between", tuple(self.between))
        if len(self.positions) != 2 or any(
                isinstance(p, bool) or not isinstance(p, int) for p in self.positions):
            raise WorkloadError(f"chain {self.names}: positions must be two layer positions "
                                f"(producer, consumer), got {self.positions}")
        if len(self.names) != len(self.positions):
            raise WorkloadError(f"chain {self.names}: one name per position is needed, got "
                                f"{len(self.names)} names for {len(self.positions)} positions")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "positions": list(self.positions), "names": list(self.names),
                "between": list(self.between)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Chain:
        unknown = set(data) - {"kind", "positions", "names", "between"}
        if unknown:
            raise WorkloadError(f"chain record has unknown fields {sorted(unknown)}")
        return cls(kind=data["kind"], positions=tuple(data["positions"]),
                   names=tuple(data["names"]), between=tuple(data.get("between", ())))


def chain_kind(producer: Layer, consumer: Layer, classes: Iterable[str] = ()) -> str | None:
    """The chain two layers form when ops of ``classes`` lie between them, or None.

    ``classes`` are `op_class` values; `LAYOUT_OPS` count as opaque.

    >>> chain_kind(Layer.gemm(M=64, K_red=32, N_out=48), Layer.gemm(M=64, K_red=48, N_out=8))
    'gemm_chain'
    """
    classes = tuple(classes)
    if producer.kind in _GEMM_KINDS and consumer.kind in _GEMM_KINDS:
        same = (producer.N, producer.P, producer.K) == (consumer.N, consumer.P, consumer.C)
        return "gemm_chain" if same else None
    if producer.kind == consumer.kind and producer.kind in _CONV_KINDS:
        same = (producer.N == consumer.N
                and producer.K * producer.groups == consumer.C * consumer.groups)
        return "conv_chain" if same and all(c == ELEMENTWISE for c in classes) else None
    return None


@dataclasses.dataclass(frozen=True)
class OpNode:
    """One operator of a dataflow graph as `find_chains` reads it; ``layer`` is the position
    in `Network.order` of the Layer the node became (None for the others)."""

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    layer: int | None = None


def find_chains(nodes: Sequence[OpNode], layers: Sequence[Layer], *,
                graph_outputs: Collection[str] = (),
                shapes: Mapping[str, Shape | None] | None = None) -> tuple[Chain, ...]:
    """The chains of a graph, by producer position (rules in the module docstring).

    Args:
      nodes: every operator, in topological order; empty input names are absent operands.
      layers: the Layer at each position of `Network.order`.
      graph_outputs: values the graph returns (they must reach memory, so end any chain).
      shapes: value shapes; an op on a path must keep its input's shape, so an op whose shapes
        are unknown ends the chain.
    """
    return _ChainFinder(nodes, layers, frozenset(graph_outputs), shapes or {}).run()


class _ChainFinder:
    def __init__(self, nodes: Sequence[OpNode], layers: Sequence[Layer],
                 graph_outputs: frozenset[str], shapes: Mapping[str, Shape | None]):
        self.nodes, self.layers = nodes, layers
        self.graph_outputs, self.shapes = graph_outputs, shapes
        self.readers: dict[str, list[tuple[int, int]]] = {}
        # Values computed from some layer's output: a path must take no other operand of those.
        self.from_layers: set[str] = set()
        for k, node in enumerate(nodes):
            if node.op_type in METADATA_OPS:
                continue
            for slot, name in enumerate(node.inputs):
                if name:
                    self.readers.setdefault(name, []).append((k, slot))
            if node.layer is not None or any(i in self.from_layers for i in node.inputs):
                self.from_layers.update(o for o in node.outputs if o)

    def run(self) -> tuple[Chain, ...]:
        chains = [self._follow(k) for k, node in enumerate(self.nodes) if node.layer is not None]
        return tuple(c for c in chains if c is not None)

    def _follow(self, start: int) -> Chain | None:
        """The chain starting at layer node ``start``, or None: walk every reader of its output
        and of the ops on the path, which must all lead to one consumer's data operand."""
        first = self.nodes[start].outputs[0]
        inside, stack = {first}, [first]
        path: dict[int, str] = {}  # node index -> op class
        consumer = None
        while stack:
            value = stack.pop()
            if value in self.graph_outputs:
                return None
            for k, slot in self.readers.get(value, ()):
                node = self.nodes[k]
                if node.layer is not None:
                    if slot != 0 or consumer not in (None, k):
                        return None
                    consumer = k
                elif k not in path:
                    cls = self._class(node, value)
                    if cls is None:
                        return None
                    path[k] = cls
                    outputs = [o for o in node.outputs if o]
                    inside.update(outputs)
                    stack.extend(outputs)
        if consumer is None:
            return None
        operands = [i for k in path for i in self.nodes[k].inputs if i and i not in inside]
        if any(i in self.from_layers for i in operands) or any(
                i in inside for i in self.nodes[consumer].inputs[1:]):
            return None
        producer, target = self.nodes[start].layer, self.nodes[consumer].layer
        order = sorted(path)
        kind = chain_kind(self.layers[producer], self.layers[target], [path[k] for k in order])
        if kind is None:
            return None
        return Chain(kind, (producer, target),
                     (self.layers[producer].name, self.layers[target].name),
                     tuple(self.nodes[k].op_type.lower() for k in order))

    def _class(self, node: OpNode, value: str) -> str | None:
        """The op class of a node that reads ``value`` on a path, or None when a chain may not
        pass it: opaque, or changing the shape of the value."""
        if node.op_type in LAYOUT_OPS:
            return OPAQUE
        out = self.shapes.get(node.outputs[0]) if node.outputs else None
        if out is None or self.shapes.get(value) != out:
            return None
        cls = op_class(node.op_type, [self.shapes.get(i) for i in node.inputs if i], out)
        return None if cls == OPAQUE else cls
