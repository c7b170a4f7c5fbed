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

The steps live beside this module: `workloads.onnx_load` reads, checks and shapes the model,
`workloads.onnx_ops` lists the ops by category, `workloads.onnx_layers` converts the layer ops,
`workloads.onnx_epilogues` decides the epilogues, and `workloads.onnx_nodes` words the errors.

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

import os
from collections import Counter
from collections.abc import Mapping, Sequence

import onnx

from workloads.errors import WorkloadError
from workloads.fusion import Chain, OpNode, find_chains
from workloads.layer import Layer
from workloads.network import ImportSummary, Network
from workloads.onnx_epilogues import EpilogueFuser
from workloads.onnx_layers import convert_layer
from workloads.onnx_load import (
    apply_input_shapes,
    infer_shapes,
    load_model,
    name_nodes,
    parse_input_shapes,
    pin_initializer_inputs,
    require_static_inputs,
    shape_table,
)
from workloads.onnx_nodes import NodeReader, operand
from workloads.onnx_ops import (
    ACTIVATION_OPS,
    CONV_OPS,
    CONV_TRANSPOSE_OPS,
    DATA_MOVEMENT_OPS,
    ELEMENTWISE_OPS,
    FUSIBLE_OPS,
    GEMM_OPS,
    LAYER_OPERANDS,
    LAYER_OPS,
    MATMUL_OPS,
    NORMALIZATION_OPS,
    POOLING_OPS,
    SKIPPED_OPS,
    SUPPORTED_OPS,
)
from workloads.passes import DEFAULT_DOMAINS, run_passes

__all__ = [
    "ACTIVATION_OPS", "CONV_OPS", "CONV_TRANSPOSE_OPS", "DATA_MOVEMENT_OPS", "ELEMENTWISE_OPS",
    "FUSIBLE_OPS", "GEMM_OPS", "LAYER_OPERANDS", "LAYER_OPS", "MATMUL_OPS", "NORMALIZATION_OPS",
    "POOLING_OPS", "SKIPPED_OPS", "SUPPORTED_OPS", "from_onnx", "layers_from_onnx",
    "parse_input_shapes",
]


# ----------------------------------------------------------------------------- public API
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
    model, where, base_dir, default_name = load_model(source)
    ops = Counter(node.op_type for node in model.graph.node)
    index_of = name_nodes(model.graph)
    pin_initializer_inputs(model.graph)
    if input_shapes:
        apply_input_shapes(model.graph, input_shapes, where)
    require_static_inputs(model.graph, where)
    model = infer_shapes(model, where)
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


# ----------------------------------------------------------------------------- conversion
class _Converter:
    """Turns the nodes of a checked, shape-inferred, passed graph into Layers and counts."""

    def __init__(self, graph: onnx.GraphProto, where: str, index_of: dict[str, int],
                 opset: int = 13):
        self.graph = graph
        self.shapes = shape_table(graph)
        self.nodes = NodeReader(where, index_of, self.shapes)
        self.fuser = EpilogueFuser(graph, self.shapes, opset)
        self.outputs = self.fuser.outputs
        self.dataflow: list[OpNode] = []  # every node, for `find_chains`
        self.counts = {"layers": Counter(), "epilogues": Counter(), "skipped": Counter()}

    def run(self) -> tuple[list[Layer], dict[str, int], dict[str, int], dict[str, int]]:
        for k, node in enumerate(self.graph.node):
            op = node.op_type
            if node.domain not in DEFAULT_DOMAINS or op not in SUPPORTED_OPS:
                raise self.nodes.unsupported(node)
            self.dataflow.append(OpNode(op, tuple(node.input), tuple(node.output),
                                        len(self.fuser.layers) if op in LAYER_OPS else None))
            if op in LAYER_OPS:
                bias = operand(node, LAYER_OPERANDS[op][2])
                self.fuser.add_layer(node, convert_layer(self.nodes, node), bool(bias))
                self.counts["layers"][op] += 1
            elif op in FUSIBLE_OPS and self.fuser.fuse(node, k):
                self.counts["epilogues"][op] += 1
            else:
                self.counts["skipped"][op] += 1
        layers = self.fuser.finished()
        return layers, *(dict(self.counts[key]) for key in ("layers", "epilogues", "skipped"))
