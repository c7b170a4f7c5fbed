"""ONNX import: a model becomes the `Network` of loop nests an accelerator maps.

`from_onnx` loads and checks the model, gives its inputs static shapes, infers every other shape,
runs the graph passes of `workloads.passes`, and then walks the nodes in topological order:

* Conv, ConvTranspose, Gemm, MatMul and their int8 forms (ConvInteger, QLinearConv,
  MatMulInteger, QLinearMatMul) become `Layer`s, following the conventions of `workloads.layer`;
* elementwise ops and activations that only post-process a layer's output join that layer's
  ``epilogue`` (see "Epilogues" below); the others are skipped, like pooling, data movement
  (reshapes, slices, reductions...), normalization and Dropout, which carry no MACs worth
  mapping;
* any other op raises `UnsupportedOpError`: it is on the way to an output (dead code is gone),
  so dropping it silently would misstate the workload.

Every node is counted in the `ImportSummary`: ``ops`` as in the file; ``layers``,
``epilogues`` and ``skipped`` after the passes; ``passes`` the nodes each pass removed and
``folded`` the BatchNormalizations folded, by the op that absorbed them. Hence
``sum(ops) == sum(layers) + sum(epilogues) + sum(skipped) + sum(passes)``.

Epilogues: an elementwise op or activation joins the epilogue of a layer when one of its inputs
is that layer's output (or the output of an op already in its epilogue), the op is the only
reader of that value, the value is not a graph output, and the op's output has the same shape
(it does not broadcast the layer's output up). A Conv's, QLinearConv's or Gemm's bias input
starts the epilogue as ``"bias"``, and so does an Add right after a layer whose other operand
is a weight with one value per output channel (a MatMul's bias, as torch exports Linear on N-D
inputs). Exact GELU as torch exports it before opset 20 (``Mul(Mul(x, Add(Erf(Div(x, sqrt
2)), 1)), 0.5)``, its constants checked) joins as one ``"gelu"``, as ONNX's Gelu does.
Attention's scaled softmax right after a layer, ``Softmax(Add(Div(x, c), mask))`` over the last
axis (Div or Mul by a scalar constant; the Add optional, its other operand a weight or graph
input with one value per output column), joins as ``"bias", "softmax"`` (or ``"softmax"``): the
scalar is part of the softmax's input scale and the mask, times ``c``, is the layer's bias. A
Softmax over another axis joins as ``"softmax_axis"``. Other
ops join as their lowercase op type. When both inputs of a
binary op qualify (a residual Add of two layers' outputs), the layer later in topological order
gets it: it is the last to be computed, so the other operand already exists when it writes its
output. In a ResNet projection block exported from PyTorch, that is the shortcut conv, which
comes after the main branch.

Chains: after conversion, every node (layers, epilogue ops, skipped ops) goes to
`workloads.fusion.find_chains` as the graph's dataflow, with the inferred shapes, and the
result is ``Network.chains``: the producer-consumer pairs of layers (positions in the layer
order) whose intermediate passes only shape-keeping memory-bound ops (and, between GEMMs,
order-keeping reshapes) read by nothing else; `workloads.fusion` states the rules. Softmax is
an activation here, so in attention it joins the QK^T layer's epilogue (with the scale and the
mask add) when it is the only reader; the chain QK^T -> AV lists the ops in ``between``.
A Softmax reached through a reshape is skipped instead, and a GEMM chain still passes it.

>>> from onnx import TensorProto, helper
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])
>>> w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [16, 3, 3, 3])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])
>>> graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
...                            helper.make_node("Relu", ["c"], ["y"])], "tiny", [x, w], [y])
>>> net = from_onnx(helper.make_model(graph))
>>> layer = net.layers[0]
>>> layer.kind, layer.P, layer.C, layer.K, layer.epilogue, layer.name
('conv2d', 32, 3, 16, ('relu',), 'Conv_0')
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from workloads.errors import UnsupportedOpError, WorkloadError
from workloads.fusion import Chain, OpNode, find_chains
from workloads.layer import Layer
from workloads.network import ImportSummary, Network
from workloads.passes import DEFAULT_DOMAINS, constant_value, run_passes

# ----------------------------------------------------------------------------- op categories
# Ops that become Layers, with the input positions of (data, weight, bias); None: no such input.
CONV_OPS = {"Conv": (0, 1, 2), "ConvInteger": (0, 1, None), "QLinearConv": (0, 3, 8)}
CONV_TRANSPOSE_OPS = {"ConvTranspose": (0, 1, 2)}
GEMM_OPS = {"Gemm": (0, 1, 2)}
MATMUL_OPS = {"MatMul": (0, 1, None), "MatMulInteger": (0, 1, None),
              "QLinearMatMul": (0, 3, None)}
LAYER_OPERANDS = {**CONV_OPS, **CONV_TRANSPOSE_OPS, **GEMM_OPS, **MATMUL_OPS}
LAYER_OPS = frozenset(LAYER_OPERANDS)

ELEMENTWISE_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift",
    "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Ceil", "Cos", "Cosh",
    "DequantizeLinear", "Div", "Equal", "Exp", "Floor", "Greater", "GreaterOrEqual", "IsInf",
    "IsNaN", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not",
    "Or", "Pow", "QuantizeLinear", "Reciprocal", "Round", "Sign", "Sin", "Sinh", "Sqrt", "Sub",
    "Sum", "Tan", "Where", "Xor",
})
ACTIVATION_OPS = frozenset({
    "Celu", "Clip", "Elu", "Erf", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "LeakyRelu",
    "LogSoftmax", "Mish", "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softmax", "Softplus",
    "Softsign", "Swish", "Tanh", "ThresholdedRelu",
})
POOLING_OPS = frozenset({
    "AveragePool", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "LpPool", "MaxPool",
    "MaxRoiPool", "MaxUnpool", "RoiAlign",
})
DATA_MOVEMENT_OPS = frozenset({
    "ArgMax", "ArgMin", "Cast", "CastLike", "CenterCropPad", "Compress", "Concat", "Constant",
    "ConstantOfShape", "CumSum", "DepthToSpace", "DynamicQuantizeLinear", "Expand", "EyeLike",
    "Flatten", "Gather", "GatherElements", "GatherND", "Identity", "NonMaxSuppression",
    "NonZero", "OneHot", "Pad", "Range", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Reshape", "Resize", "ReverseSequence", "ScatterElements", "ScatterND",
    "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "TopK", "Transpose",
    "Trilu", "Unique", "Unsqueeze", "Upsample",
})
NORMALIZATION_OPS = frozenset({
    "BatchNormalization", "GroupNormalization", "InstanceNormalization", "LRN",
    "LayerNormalization", "LpNormalization", "MeanVarianceNormalization", "RMSNormalization",
})
SKIPPED_OPS = POOLING_OPS | DATA_MOVEMENT_OPS | NORMALIZATION_OPS | {"Dropout"}
FUSIBLE_OPS = ELEMENTWISE_OPS | ACTIVATION_OPS
SUPPORTED_OPS = LAYER_OPS | FUSIBLE_OPS | SKIPPED_OPS

_HINTS = {
    **dict.fromkeys(("LSTM", "GRU", "RNN"),
                    "unroll the recurrence at export (a fixed number of steps, as MatMul/Gemm "
                    "and elementwise ops)"),
    **dict.fromkeys(("Loop", "If", "Scan"),
                    "export with static control flow (e.g. a traced torch.onnx.export with "
                    "fixed shapes) so the body is unrolled into plain ops"),
    "Einsum": "export the contraction as MatMul/Transpose/Reshape ops",
}

Shape = tuple  # dims are ints when static, a symbol name (str) or None when not


# ----------------------------------------------------------------------------- public API
def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x224x224`` items (as given to ``--input-shape``) into a shape map.

    Dims are separated by ``x`` (or commas); the last ``=`` splits the name from the shape, so
    names may contain ``=``.

    >>> parse_input_shapes(["input=1x3x224x224", "mask=1,128"])
    {'input': (1, 3, 224, 224), 'mask': (1, 128)}
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = str(item).rpartition("=")
        name, fields = name.strip(), dims.replace(",", "x").split("x")
        if not sep or not name or not all(f.strip().isdecimal() for f in fields):
            raise WorkloadError(
                f"input shape {item!r} is malformed; write NAME=DIMS with positive integer "
                f"dims separated by 'x', e.g. input=1x3x224x224")
        shape = tuple(int(f) for f in fields)
        if 0 in shape:
            raise WorkloadError(f"input shape {item!r} has a zero dim; dims must be positive")
        if name in shapes:
            raise WorkloadError(f"input shape {item!r}: input {name!r} is given twice")
        shapes[name] = shape
    return shapes


def from_onnx(source: str | os.PathLike | onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None,
              name: str | None = None) -> Network:
    """Import an ONNX model as a `Network` of unique layers with repeat counts.

    Args:
      source: a path to an ``.onnx`` file, or an `onnx.ModelProto` (left unmodified). Weights
        may be initializers or plain typed graph inputs (shape-only models, as the zoo builds).
      input_shapes: full static shapes for graph inputs, by name; needed for every input with a
        dynamic or symbolic dim (e.g. ``{"input": (1, 3, 224, 224)}``). Giving a static input a
        different shape re-derives every intermediate shape from the inputs.
      name: the network's name; defaults to the file's stem or the graph's name.

    Returns:
      The deduplicated `Network`, with an `ImportSummary` of what happened to every node.

    Raises:
      WorkloadError: the file is missing or not an ONNX model, the checker or shape inference
        rejects it, an input shape is dynamic or malformed, or a compute node's shapes are
        unknown or inconsistent. The message names the file, input or node.
      UnsupportedOpError: an op outside the supported lists is on the way to an output.
    """
    layers, summary, chains, default_name = _import(source, input_shapes)
    return Network.from_layers(name or default_name, layers, summary, chains)


def layers_from_onnx(source: str | os.PathLike | onnx.ModelProto,
                     input_shapes: Mapping[str, Sequence[int]] | None = None,
                     ) -> tuple[list[Layer], ImportSummary]:
    """Like `from_onnx`, but every layer in topological order, before deduplication.

    A `Network` keeps the name and epilogue of the first of identical layers only; this list
    keeps each node's own.
    """
    layers, summary, _, _ = _import(source, input_shapes)
    return layers, summary


def _import(source, input_shapes) -> tuple[list[Layer], ImportSummary, tuple[Chain, ...], str]:
    model, where, base_dir, default_name = _load(source)
    ops = Counter(node.op_type for node in model.graph.node)
    index_of = _name_nodes(model.graph)
    _pin_initializer_inputs(model.graph)
    if input_shapes:
        _apply_input_shapes(model.graph, input_shapes, where)
    _require_static_inputs(model.graph, where)
    model = _infer_shapes(model, where)
    model, passes, folded = run_passes(model, base_dir)
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 13)
    converter = _Converter(model.graph, where, index_of, opset)
    layers, layer_ops, epilogue_ops, skipped_ops = converter.run()
    if not layers:
        raise WorkloadError(
            f"{where}: no Conv, ConvTranspose, Gemm or MatMul node reaches an output, so there "
            f"is nothing for the accelerator to run; check that this is the intended model")
    summary = ImportSummary(ops=dict(ops), layers=layer_ops, epilogues=epilogue_ops,
                            skipped=skipped_ops, folded=folded, passes=passes)
    chains = find_chains(converter.dataflow, layers, graph_outputs=converter.outputs,
                         shapes=converter.shapes)
    return layers, summary, chains, default_name


# ----------------------------------------------------------------------------- loading
def _load(source) -> tuple[onnx.ModelProto, str, str, str]:
    """Load and check ``source``: (model copy, name for messages, external-data dir, name)."""
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        where = f"ONNX model {model.graph.name or '(unnamed)'!r}"
        if not model.HasField("graph"):
            raise WorkloadError(f"{where}: the ModelProto holds no graph; build or load a "
                                f"complete model")
        _check(model, where)
        return model, where, "", model.graph.name or "model"
    if not isinstance(source, (str, os.PathLike)):
        raise WorkloadError(f"from_onnx takes a file path or an onnx.ModelProto, got "
                            f"{type(source).__name__}")
    path = Path(source)
    where = f"ONNX file '{path}'"
    if not path.exists():
        raise WorkloadError(f"{where}: no such file; check the path")
    if not path.is_file():
        raise WorkloadError(f"{where}: not a regular file; give the path of an .onnx file")
    try:
        # External data (big weights) stays on disk: only shapes are needed, and BN folding
        # reads the few tensors it changes from the model's directory.
        model = onnx.load(path, load_external_data=False)
    except (DecodeError, OSError, ValueError, UnicodeDecodeError) as exc:
        raise WorkloadError(
            f"{where}: cannot be read as an ONNX model ({exc}); it may be truncated or not an "
            f"ONNX file: re-export or re-download it") from exc
    if not model.HasField("graph"):
        raise WorkloadError(f"{where}: holds no ONNX graph (an empty or non-ONNX file); "
                            f"re-export or re-download it")
    _check(str(path), where)
    return model, where, str(path.parent), path.stem


def _check(target: onnx.ModelProto | str, where: str) -> None:
    # A path lets the checker find external data and handle models over 2 GB.
    try:
        onnx.checker.check_model(target)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise WorkloadError(
            f"{where}: the ONNX checker rejects the model: {str(exc).strip()}; fix the exporter "
            f"or the graph (the message names the offending node or field)") from exc


def _name_nodes(graph: onnx.GraphProto) -> dict[str, int]:
    """Name each unnamed node ``f"{op_type}_{index}"`` (its index in the file); name -> index."""
    index_of: dict[str, int] = {}
    for k, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{k}"
        index_of.setdefault(node.name, k)
    return index_of


# ----------------------------------------------------------------------------- shapes
def _dims(info: onnx.ValueInfoProto) -> Shape | None:
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in tensor.shape.dim)


def _show(shape: Shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (old exports list weights as inputs too)."""
    initialized = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in initialized]


def _pin_initializer_inputs(graph: onnx.GraphProto) -> None:
    """Give inputs that double as initializers (older exports) the initializer's shape, so
    shape inference does not take a looser declared shape over the weight's real one."""
    dims = {t.name: t.dims for t in graph.initializer}
    for info in graph.input:
        if info.name in dims and info.type.HasField("tensor_type"):
            shape = info.type.tensor_type.shape
            del shape.dim[:]
            for d in dims[info.name]:
                shape.dim.add().dim_value = d


def _listing(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _as_shape(value) -> tuple[int, ...] | None:
    """``value`` as a tuple of positive ints, or None when it is not a sequence of them."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return None
    values = list(value)
    if not values or any(isinstance(d, bool) for d in values):
        return None
    try:
        dims = tuple(operator.index(d) for d in values)
    except TypeError:
        return None
    return dims if all(d >= 1 for d in dims) else None


def _apply_input_shapes(graph: onnx.GraphProto, input_shapes: Mapping[str, Sequence[int]],
                        where: str) -> None:
    """Set the given inputs' shapes; a changed static dim invalidates the recorded shapes."""
    inputs = {v.name: v for v in _real_inputs(graph)}
    restated = False
    for name, shape in input_shapes.items():
        if name not in inputs:
            raise WorkloadError(f"{where}: input_shapes names {name!r}, which is not a graph "
                                f"input; the inputs are {_listing(list(inputs))}")
        dims = _as_shape(shape)
        if dims is None:
            raise WorkloadError(f"{where}: input_shapes[{name!r}] = {shape!r} is not a "
                                f"sequence of positive integers")
        info = inputs[name]
        if not info.type.HasField("tensor_type"):
            raise WorkloadError(f"{where}: input {name!r} is not a tensor; only tensor inputs "
                                f"take a shape")
        declared = _dims(info)
        if declared is not None and len(declared) != len(dims):
            raise WorkloadError(f"{where}: input_shapes gives input {name!r} the shape {dims}, "
                                f"but it has rank {len(declared)}: {_show(declared)}")
        restated |= declared is not None and any(
            isinstance(d, int) and d != g for d, g in zip(declared, dims))
        tensor_shape = info.type.tensor_type.shape
        del tensor_shape.dim[:]
        for d in dims:
            tensor_shape.dim.add().dim_value = d
    if restated:
        # Recorded intermediate and output shapes follow the old input shape; infer anew.
        del graph.value_info[:]
        for out in graph.output:
            if out.type.HasField("tensor_type"):
                out.type.tensor_type.ClearField("shape")


def _require_static_inputs(graph: onnx.GraphProto, where: str) -> None:
    for info in _real_inputs(graph):
        if not info.type.HasField("tensor_type"):
            raise WorkloadError(f"{where}: input {info.name!r} is a {info.type.WhichOneof('value')}"
                                f", not a tensor; baco imports models with tensor inputs only")
        shape = _dims(info)
        if shape is None:
            raise WorkloadError(
                f"{where}: input {info.name!r} declares no shape; give it one: pass "
                f"--input-shape {info.name}=1x3x224x224 (CLI) or input_shapes={{{info.name!r}: "
                f"(1, 3, 224, 224)}} (API), with its real dims")
        for axis, dim in enumerate(shape):
            if not isinstance(dim, int):
                example = tuple(d if isinstance(d, int) else 1 for d in shape)
                symbol = f"{dim!r}" if dim else "unnamed"
                raise WorkloadError(
                    f"{where}: input {info.name!r} has a dynamic dim {axis} ({symbol}) in shape "
                    f"{_show(shape)}; give it a static size: pass --input-shape "
                    f"{info.name}={'x'.join(map(str, example))} (CLI) or "
                    f"input_shapes={{{info.name!r}: {example}}} (API), with your sizes")


def _infer_shapes(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                 data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError,
            ValueError) as exc:
        raise WorkloadError(
            f"{where}: ONNX shape inference fails: {str(exc).strip()}; the graph does not fit "
            f"its input shapes: check input_shapes, or re-export the model") from exc


def _shape_table(graph: onnx.GraphProto) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        dims = _dims(info)
        if dims is not None:
            shapes[info.name] = dims
    for tensor in graph.initializer:
        shapes[tensor.name] = tuple(tensor.dims)
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    shapes[node.output[0]] = tuple(attr.t.dims)
    return shapes


# ----------------------------------------------------------------------------- conv arithmetic
def _half(total: int) -> int:
    """``total / 2`` rounded toward zero, as the ONNX spec's C arithmetic does."""
    return total // 2 if total >= 0 else -(-total // 2)


def _conv_pads(auto_pad: str, sizes: Sequence[int], kernel: Sequence[int],
               strides: Sequence[int], dilations: Sequence[int],
               pads: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """(begin, end) input padding of a Conv per spatial axis, as the ONNX spec defines it."""
    n = len(sizes)
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else big)
            ends.append(big if auto_pad == "SAME_UPPER" else small)
        return begins, ends
    pads = list(pads) if pads else [0] * (2 * n)
    return pads[:n], pads[n:]


def _conv_transpose_pads(auto_pad: str, sizes: Sequence[int], kernel: Sequence[int],
                         strides: Sequence[int], dilations: Sequence[int],
                         out_pads: Sequence[int], pads: Sequence[int] | None,
                         output_shape: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """(begin, end) output cropping of a ConvTranspose per spatial axis (ONNX spec)."""
    n = len(sizes)
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        targets = (list(output_shape)[-n:] if output_shape
                   else [size * s for size, s in zip(sizes, strides)])
        begins, ends = [], []
        for size, k, s, d, op, out in zip(sizes, kernel, strides, dilations, out_pads, targets):
            total = s * (size - 1) + op + (k - 1) * d + 1 - out
            if auto_pad == "SAME_UPPER":
                begins.append(_half(total))
                ends.append(total - _half(total))
            else:
                begins.append(total - _half(total))
                ends.append(_half(total))
        return begins, ends
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    pads = list(pads) if pads else [0] * (2 * n)
    return pads[:n], pads[n:]


# ----------------------------------------------------------------------------- conversion
def _attrs(node: onnx.NodeProto) -> dict:
    values = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        values[attr.name] = value.decode() if isinstance(value, bytes) else value
    return values


def _operand(node: onnx.NodeProto, position: int | None) -> str | None:
    if position is None or position >= len(node.input) or not node.input[position]:
        return None
    return node.input[position]


class _Converter:
    """Turns the nodes of a checked, shape-inferred, passed graph into Layers and counts."""

    def __init__(self, graph: onnx.GraphProto, where: str, index_of: dict[str, int],
                 opset: int = 13):
        self.graph = graph
        self.opset = opset
        self.where = where
        self.index_of = index_of
        self.shapes = _shape_table(graph)
        self.outputs = {o.name for o in graph.output}
        self.readers: dict[str, set[int]] = {}
        for k, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, set()).add(k)
        self.layers: list[Layer] = []
        self.epilogues: list[list[str]] = []
        self.owner: dict[str, int] = {}  # value -> index of the layer whose epilogue made it
        self.producer_op = {o: node.op_type for node in graph.node for o in node.output}
        self.absorbed: set[int] = set()  # the rest of a pattern (erf GELU, scaled softmax)
        # whose first node joined an epilogue
        self.dataflow: list[OpNode] = []  # every node, for `find_chains`
        self.counts = {"layers": Counter(), "epilogues": Counter(), "skipped": Counter()}

    def run(self) -> tuple[list[Layer], dict[str, int], dict[str, int], dict[str, int]]:
        for k, node in enumerate(self.graph.node):
            op = node.op_type
            if node.domain not in DEFAULT_DOMAINS or op not in SUPPORTED_OPS:
                raise self._unsupported(node)
            self.dataflow.append(OpNode(op, tuple(node.input), tuple(node.output),
                                        len(self.layers) if op in LAYER_OPS else None))
            if op in LAYER_OPS:
                self._add_layer(node)
            elif op in FUSIBLE_OPS and self._fuse(node, k):
                self.counts["epilogues"][op] += 1
            else:
                self.counts["skipped"][op] += 1
        layers = [dataclasses.replace(layer, epilogue=tuple(tail))
                  for layer, tail in zip(self.layers, self.epilogues)]
        return layers, *(dict(self.counts[key]) for key in ("layers", "epilogues", "skipped"))

    # -- messages
    def _describe(self, node: onnx.NodeProto) -> str:
        index = self.index_of.get(node.name)
        at = f"#{index}, " if index is not None else ""
        return f"node {node.name!r} ({at}{node.op_type})"

    def _error(self, node: onnx.NodeProto, message: str) -> WorkloadError:
        return WorkloadError(f"{self.where}: {self._describe(node)}: {message}")

    def _unsupported(self, node: onnx.NodeProto, why: str = "",
                     hint: str = "") -> UnsupportedOpError:
        domain = node.domain or "ai.onnx"
        if not hint and node.domain not in DEFAULT_DOMAINS:
            hint = (f"it comes from the custom domain {domain!r}: export with standard ONNX ops "
                    f"only (e.g. without backend-specific fusions such as onnxruntime's)")
        hint = hint or _HINTS.get(node.op_type, "export the model with this op decomposed into "
                                                "standard ONNX ops, or remove it from the graph")
        index = self.index_of.get(node.name)
        return UnsupportedOpError(
            f"{self.where}: node {node.name!r} (index {index}) is op {node.op_type!r} from "
            f"domain {domain!r}, {why or 'which baco cannot map onto the accelerator'}; {hint}")

    # -- shapes
    def _static(self, node: onnx.NodeProto, name: str, role: str) -> tuple[int, ...]:
        shape = self.shapes.get(name)
        if shape is None or not all(isinstance(d, int) for d in shape):
            state = "unknown" if shape is None else f"not static: {_show(shape)}"
            raise self._error(
                node, f"the shape of its {role} {name!r} is {state} after shape inference; "
                      f"give every graph input a static shape (input_shapes / --input-shape) "
                      f"and compute it with standard ONNX ops")
        return shape

    # -- layers
    def _add_layer(self, node: onnx.NodeProto) -> None:
        op = node.op_type
        data, weight, bias = LAYER_OPERANDS[op]
        if op in CONV_OPS:
            layer = self._conv(node, data, weight)
        elif op in CONV_TRANSPOSE_OPS:
            layer = self._conv_transpose(node, data, weight)
        elif op in GEMM_OPS:
            layer = self._gemm(node, data, weight)
        else:
            layer = self._matmul(node, data, weight)
        self.owner[node.output[0]] = len(self.layers)
        self.layers.append(layer)
        self.epilogues.append(["bias"] if _operand(node, bias) else [])
        self.counts["layers"][op] += 1

    def _make(self, node: onnx.NodeProto, **fields) -> Layer:
        try:
            return Layer(name=node.name, **fields)
        except WorkloadError as exc:
            raise self._error(node, f"{exc}; the graph's shapes make no valid loop nest") from exc

    def _conv_geometry(self, node: onnx.NodeProto, x_at: int, w_at: int):
        x = self._static(node, node.input[x_at], "input")
        w = self._static(node, node.input[w_at], "weight")
        y = self._static(node, node.output[0], "output")
        spatial = len(x) - 2
        if spatial not in (1, 2) or len(w) != len(x) or len(y) != len(x):
            raise self._unsupported(
                node, f"a {spatial}-D convolution (input {_show(x)}, weight {_show(w)}), and "
                      f"baco maps 1-D and 2-D convolutions only",
                "fold the extra spatial axis into the batch or channels at export (e.g. as "
                "2-D convolutions), or remove the op")
        attrs = _attrs(node)
        kernel = tuple(w[2:])
        if tuple(attrs.get("kernel_shape", kernel)) != kernel:
            raise self._error(node, f"kernel_shape {attrs['kernel_shape']} disagrees with the "
                                    f"weight shape {_show(w)}")
        ones = [1] * spatial
        return (x, w, y, attrs, kernel, list(attrs.get("strides", ones)),
                list(attrs.get("dilations", ones)), int(attrs.get("group", 1)))

    def _check_output(self, node, what: str, got: Sequence[int], expected: Sequence[int],
                      detail: str) -> None:
        if tuple(got) != tuple(expected):
            raise self._error(
                node, f"the inferred {what} {_show(tuple(got))} disagrees with the "
                      f"{_show(tuple(expected))} that {detail} give; the model's recorded "
                      f"shapes are stale: re-export it or strip its value_info")

    def _conv(self, node: onnx.NodeProto, x_at: int, w_at: int) -> Layer:
        x, w, y, attrs, kernel, strides, dilations, group = self._conv_geometry(node, x_at, w_at)
        n_batch, c_in, sizes = x[0], x[1], x[2:]
        k_out, c_group = w[0], w[1]
        if c_in != c_group * group or k_out % group:
            raise self._error(node, f"input {_show(x)} and weight {_show(w)} do not fit "
                                    f"group={group}")
        begins, ends = _conv_pads(attrs.get("auto_pad", "NOTSET"), sizes, kernel, strides,
                                  dilations, attrs.get("pads"))
        out = [(size + b + e - d * (k - 1) - 1) // s + 1 for size, b, e, k, s, d
               in zip(sizes, begins, ends, kernel, strides, dilations)]
        self._check_output(node, "output shape", y, (n_batch, k_out, *out),
                           f"input {_show(x)}, kernel {kernel}, strides {tuple(strides)}, "
                           f"dilations {tuple(dilations)} and pads {tuple(begins + ends)}")
        common = {"C": c_group, "K": k_out // group, "N": n_batch, "groups": group}
        if len(sizes) == 1:
            return self._make(node, kind="conv1d", R=kernel[0], P=out[0], Hstride=strides[0],
                              Hdilation=dilations[0], pads=(begins[0], 0, ends[0], 0), **common)
        return self._make(node, kind="conv2d", R=kernel[0], S=kernel[1], P=out[0], Q=out[1],
                          Hstride=strides[0], Wstride=strides[1], Hdilation=dilations[0],
                          Wdilation=dilations[1], pads=(begins[0], begins[1], ends[0], ends[1]),
                          **common)

    def _conv_transpose(self, node: onnx.NodeProto, x_at: int, w_at: int) -> Layer:
        x, w, y, attrs, kernel, strides, dilations, group = self._conv_geometry(node, x_at, w_at)
        n_batch, c_in, sizes = x[0], x[1], x[2:]
        k_group = w[1]
        if w[0] != c_in or c_in % group:
            raise self._error(node, f"input {_show(x)} and weight {_show(w)} do not fit "
                                    f"group={group}")
        out_pads = list(attrs.get("output_padding", [0] * len(sizes)))
        begins, ends = _conv_transpose_pads(
            attrs.get("auto_pad", "NOTSET"), sizes, kernel, strides, dilations, out_pads,
            attrs.get("pads"), attrs.get("output_shape"))
        out = [s * (size - 1) + op + (k - 1) * d + 1 - b - e for size, s, op, k, d, b, e
               in zip(sizes, strides, out_pads, kernel, dilations, begins, ends)]
        self._check_output(node, "output shape", y, (n_batch, k_group * group, *out),
                           f"input {_show(x)}, kernel {kernel}, strides {tuple(strides)}, "
                           f"dilations {tuple(dilations)}, output_padding {tuple(out_pads)} "
                           f"and pads {tuple(begins + ends)}")
        # The equivalent stride-1 conv reads the zero-inserted input padded by d*(k-1) minus
        # the cropping on each side (plus output_padding at the end). Where the cropping
        # exceeds that, the window never reads those rows, so the padding is 0.
        conv_begins = [max(0, d * (k - 1) - b) for k, d, b in zip(kernel, dilations, begins)]
        conv_ends = [max(0, d * (k - 1) - e + op)
                     for k, d, e, op in zip(kernel, dilations, ends, out_pads)]
        common = {"kind": "conv_transpose", "C": c_in // group, "K": k_group, "N": n_batch,
                      "groups": group}
        if len(sizes) == 1:
            return self._make(node, R=kernel[0], P=out[0], Hdilation=dilations[0],
                              pads=(conv_begins[0], 0, conv_ends[0], 0),
                              upsample=(strides[0], 1), **common)
        return self._make(node, R=kernel[0], S=kernel[1], P=out[0], Q=out[1],
                          Hdilation=dilations[0], Wdilation=dilations[1],
                          pads=(conv_begins[0], conv_begins[1], conv_ends[0], conv_ends[1]),
                          upsample=(strides[0], strides[1]), **common)

    def _gemm(self, node: onnx.NodeProto, a_at: int, b_at: int) -> Layer:
        a = self._static(node, node.input[a_at], "input A")
        b = self._static(node, node.input[b_at], "input B")
        y = self._static(node, node.output[0], "output")
        if len(a) != 2 or len(b) != 2:
            raise self._error(node, f"Gemm takes 2-D inputs, got A {_show(a)} and B {_show(b)}")
        attrs = _attrs(node)
        m, k_a = (a[1], a[0]) if attrs.get("transA", 0) else a
        k_b, n_out = (b[1], b[0]) if attrs.get("transB", 0) else b
        if k_a != k_b:
            raise self._error(node, f"A {_show(a)} and B {_show(b)} do not multiply "
                                    f"(transA={attrs.get('transA', 0)}, "
                                    f"transB={attrs.get('transB', 0)})")
        self._check_output(node, "output shape", y, (m, n_out), f"A {_show(a)} and B {_show(b)}")
        return self._make_gemm(node, M=m, K_red=k_a, N_out=n_out)

    def _matmul(self, node: onnx.NodeProto, a_at: int, b_at: int) -> Layer:
        a = self._static(node, node.input[a_at], "input A")
        b = self._static(node, node.input[b_at], "input B")
        y = self._static(node, node.output[0], "output")
        if not a or not b:
            raise self._error(node, f"MatMul takes operands of rank >= 1, got {_show(a)} "
                                    f"and {_show(b)}")
        # numpy semantics: a 1-D A is a row (1, K), a 1-D B a column (K, 1).
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        try:
            if a2[-1] != b2[-2]:
                raise ValueError("the reduction dims differ")
            batch_dims = np.broadcast_shapes(a2[:-2], b2[:-2])
        except ValueError as exc:
            raise self._error(node, f"A {_show(a)} and B {_show(b)} do not multiply: "
                                    f"{exc}") from exc
        if len(b2) == 2:  # shared weights: every leading dim of A is a row of one GEMM
            m, batch = math.prod(a2[:-1]), 1
        else:
            m, batch = a2[-2], math.prod(batch_dims)
        if math.prod(y) != batch * m * b2[-1]:
            raise self._error(node, f"the inferred output shape {_show(y)} does not match "
                                    f"A {_show(a)} @ B {_show(b)}; the recorded shapes are "
                                    f"stale: re-export the model or strip its value_info")
        return self._make_gemm(node, M=m, K_red=a2[-1], N_out=b2[-1], batch=batch)

    def _make_gemm(self, node: onnx.NodeProto, **dims: int) -> Layer:
        try:
            return Layer.gemm(name=node.name, **dims)
        except WorkloadError as exc:
            raise self._error(node, f"{exc}; the graph's shapes make no valid loop nest") from exc

    # -- epilogues
    def _fuse(self, node: onnx.NodeProto, k: int) -> bool:
        """Attach ``node`` to the epilogue of a layer it post-processes; see the module doc."""
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
        axis = _attrs(node).get("axis", -1 if self.opset >= 13 else 1)
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
        """Attention's ``Softmax(Add(Div(x, c), mask))`` (module docstring) when ``node`` is
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
