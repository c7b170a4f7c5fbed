"""Graph passes over ONNX models: identity elimination, dead code, CSE and BatchNorm folding.

Each public pass is a pure function: it leaves its argument untouched and returns a `PassResult`
holding a new model, the number of nodes the pass removed and a breakdown of them by op type.
`run_passes` applies them in the order the importer uses, copying the model only once.

The passes work on the main graph. Names that subgraphs (the bodies of If, Loop, Scan) read from
the outer scope count as uses, and renames reach into subgraphs, so no pass breaks a subgraph.
Graph inputs and outputs keep their names: a pass never changes the model's interface, except
that a structural BatchNorm fold may declare a new bias input (see `fold_batchnorm`). Node order
stays topological.

>>> import onnx
>>> from onnx import TensorProto, helper
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
>>> graph = helper.make_graph(
...     [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
...     "g", [x], [y])
>>> result = eliminate_identities(helper.make_model(graph))
>>> result.removed, result.by_op, [n.op_type for n in result.model.graph.node]
(1, {'Identity': 1}, ['Relu'])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

DEFAULT_DOMAINS = ("", "ai.onnx")

# Ops whose two evaluations on the same inputs may differ: CSE must never merge them.
NONDETERMINISTIC_OPS = frozenset({
    "Bernoulli", "Dropout", "Multinomial", "RandomNormal", "RandomNormalLike",
    "RandomUniform", "RandomUniformLike",
})

# Producers a BatchNormalization can fold into: their output channel is the BN's axis 1.
FOLD_TARGETS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


class PassResult(NamedTuple):
    """What a pass returns.

    Attributes:
      model: the transformed copy of the input model.
      removed: how many nodes the pass removed.
      by_op: ``removed`` broken down by op type; for `fold_batchnorm`, whose removed nodes are
        all BatchNormalization, the folded BNs by the op type of the node that absorbed them.
    """

    model: onnx.ModelProto
    removed: int
    by_op: dict[str, int]


# --------------------------------------------------------------------------- graph helpers
def _is_default(node: onnx.NodeProto) -> bool:
    return node.domain in DEFAULT_DOMAINS


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _defined(graph: onnx.GraphProto) -> set[str]:
    """Names a graph defines: its inputs, initializers and node outputs."""
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names.update(o for node in graph.node for o in node.output if o)
    return names


def _outer_refs(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads but does not define: values it takes from enclosing scopes."""
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(_uses(node))
    return used - _defined(graph)


def _uses(node: onnx.NodeProto) -> set[str]:
    """Every value a node reads, including what its subgraphs read from the outer scope."""
    used = {i for i in node.input if i}
    for sub in _subgraphs(node):
        used |= _outer_refs(sub)
    return used


def _resolve(alias: dict[str, str], name: str) -> str:
    while name in alias:
        name = alias[name]
    return name


def _rename_uses(graph: onnx.GraphProto, alias: dict[str, str]) -> None:
    """Make every reader of a key of ``alias`` read its value (following chains), here and in
    subgraphs that do not define that name themselves; one walk for any number of renames."""
    if not alias:
        return
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in alias:
                node.input[k] = _resolve(alias, name)
        for sub in _subgraphs(node):
            defined = _defined(sub)
            inner = {old: new for old, new in alias.items() if old not in defined}
            _rename_uses(sub, inner)
            for out in sub.output:
                if out.name in inner:
                    out.name = _resolve(alias, out.name)


def _consumers(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Value name -> indices of the nodes that read it (once per node)."""
    readers: dict[str, list[int]] = {}
    for k, node in enumerate(graph.node):
        for name in _uses(node):
            readers.setdefault(name, []).append(k)
    return readers


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {o: node for node in graph.node for o in node.output if o}


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = _defined(graph) | {v.name for v in graph.value_info} | {o.name for o in graph.output}
    for node in graph.node:
        for sub in _subgraphs(node):
            names |= _all_names(sub)
    return names


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _replace_nodes(graph: onnx.GraphProto, keep: list[onnx.NodeProto]) -> None:
    kept = [onnx.NodeProto() for _ in keep]
    for dst, src in zip(kept, keep):
        dst.CopyFrom(src)
    del graph.node[:]
    graph.node.extend(kept)


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove initializers nothing reads (those doubling as graph inputs stay: interface)."""
    used = {o.name for o in graph.output} | {v.name for v in graph.input}
    for node in graph.node:
        used |= _uses(node)
    keep = [t for t in graph.initializer if t.name in used]
    if len(keep) != len(graph.initializer):
        kept = [onnx.TensorProto() for _ in keep]
        for dst, src in zip(kept, keep):
            dst.CopyFrom(src)
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _drop_stale_value_info(graph: onnx.GraphProto) -> None:
    defined = _defined(graph)
    keep = [v for v in graph.value_info if v.name in defined]
    if len(keep) != len(graph.value_info):
        kept = [onnx.ValueInfoProto() for _ in keep]
        for dst, src in zip(kept, keep):
            dst.CopyFrom(src)
        del graph.value_info[:]
        graph.value_info.extend(kept)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            value = helper.get_attribute_value(attr)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _run_pure(inplace: Callable[..., Counter], model: onnx.ModelProto, *args) -> PassResult:
    """Run an in-place pass (returning removed nodes by op) on a copy of ``model``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    by_op = inplace(copy, *args)
    return PassResult(copy, sum(by_op.values()), dict(by_op))


# --------------------------------------------------------------------------- identities
def _is_inference_dropout(node: onnx.NodeProto, graph: onnx.GraphProto,
                          readers: dict[str, list[int]], outputs: set[str],
                          alias: dict[str, str]) -> bool:
    if node.op_type != "Dropout" or not _is_default(node):
        return False
    if _attr(node, "is_test", 1) == 0:  # opset < 7: is_test=0 means training
        return False
    if len(node.output) > 1 and node.output[1]:
        mask = node.output[1]
        if mask in outputs or readers.get(mask):
            return False
    if len(node.input) > 2 and node.input[2]:
        training = constant_value(graph, _resolve(alias, node.input[2]))
        if training is None or bool(np.asarray(training).any()):
            return False
    return True


def _eliminate_identities(model: onnx.ModelProto) -> Counter:
    """In-place `eliminate_identities`; returns the removed nodes by op type."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    interface = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    readers = _consumers(graph)
    producers = _producers(graph)
    alias: dict[str, str] = {}  # removed value -> the value its readers read instead
    removed: Counter = Counter()
    keep = []
    for node in graph.node:
        is_identity = node.op_type == "Identity" and _is_default(node)
        if not (is_identity or _is_inference_dropout(node, graph, readers, outputs,
                                                             alias)):
            keep.append(node)
            continue
        src, dst = _resolve(alias, node.input[0]), node.output[0]
        if dst not in outputs:
            alias[dst] = src
        elif src not in interface and src not in outputs and src in producers:
            producer = producers[src]
            producer.output[list(producer.output).index(src)] = dst
            producers[dst] = producer
            alias[src] = dst
        else:
            keep.append(node)
            continue
        removed[node.op_type] += 1
    if removed:
        _replace_nodes(graph, keep)
        _rename_uses(graph, alias)
        _drop_stale_value_info(graph)
    return removed


# --------------------------------------------------------------------------- dead code
def _eliminate_dead_code(model: onnx.ModelProto) -> Counter:
    """In-place `eliminate_dead_code`; returns the removed nodes by op type."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    live = []
    removed: Counter = Counter()
    for node in reversed(graph.node):
        if any(o in needed for o in node.output if o):
            live.append(node)
            needed |= _uses(node)
        else:
            removed[node.op_type] += 1
    if removed:
        _replace_nodes(graph, live[::-1])
    _drop_unused_initializers(graph)
    _drop_stale_value_info(graph)
    return removed


# --------------------------------------------------------------------------- CSE
def _cse_key(node: onnx.NodeProto) -> tuple | None:
    if (not _is_default(node) or node.op_type in NONDETERMINISTIC_OPS
            or any(True for _ in _subgraphs(node))):
        return None
    attrs = tuple(sorted((a.name, _attribute_value(a)) for a in node.attribute))
    return (node.op_type, tuple(node.input), tuple(bool(o) for o in node.output), attrs)


def _attribute_value(attr: onnx.AttributeProto) -> bytes:
    """An attribute's value as bytes, without the names of its tensors (which carry no value:
    two Constant nodes holding the same number are the same expression)."""
    attr = onnx.AttributeProto.FromString(attr.SerializeToString())
    if attr.HasField("t"):
        attr.t.name = ""
    for tensor in attr.tensors:
        tensor.name = ""
    return attr.SerializeToString(deterministic=True)


def _eliminate_common_subexpressions(model: onnx.ModelProto) -> Counter:
    """In-place `eliminate_common_subexpressions`; returns the removed nodes by op type.

    Sweeping in topological order while renaming makes one sweep reach the fixed point on a
    sorted graph; the loop makes sure of it for any order.
    """
    graph = model.graph
    outputs = {o.name for o in graph.output}
    alias: dict[str, str] = {}  # merged-away output -> the surviving node's output
    removed: Counter = Counter()
    nodes = list(graph.node)
    while True:
        seen: dict[tuple, onnx.NodeProto] = {}
        keep = []
        for node in nodes:
            for k, name in enumerate(node.input):  # read the survivors before comparing
                if name in alias:
                    node.input[k] = _resolve(alias, name)
            key = _cse_key(node)
            first = seen.setdefault(key, node) if key is not None else node
            if first is node or any(o in outputs for o in node.output):
                keep.append(node)
                continue
            alias.update((old, new) for old, new in zip(node.output, first.output) if old)
            removed[node.op_type] += 1
        if len(keep) == len(nodes):
            break
        nodes = keep
    if removed:
        _replace_nodes(graph, nodes)
        _rename_uses(graph, alias)  # reaches subgraphs, which the sweep does not
        _drop_stale_value_info(graph)
    return removed


# --------------------------------------------------------------------------- BN folding
def constant_value(graph: onnx.GraphProto, name: str, base_dir: str = "") -> np.ndarray | None:
    """The value of an initializer or Constant output, else None (external data is read)."""
    for tensor in graph.initializer:
        if tensor.name == name:
            return numpy_helper.to_array(tensor, base_dir=base_dir)
    for node in graph.node:
        if node.op_type == "Constant" and _is_default(node) and name in node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t, base_dir=base_dir)
                if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
                    return np.asarray(helper.get_attribute_value(attr))
            return None
    return None


def _graph_input(graph: onnx.GraphProto, name: str) -> onnx.ValueInfoProto | None:
    """The declaration of ``name`` if it is a graph input without an initializer."""
    if any(t.name == name for t in graph.initializer):
        return None
    return next((v for v in graph.input if v.name == name), None)


def _rank(graph: onnx.GraphProto, name: str) -> int | None:
    for tensor in graph.initializer:
        if tensor.name == name:
            return len(tensor.dims)
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name == name and info.type.tensor_type.HasField("shape"):
            return len(info.type.tensor_type.shape.dim)
    return None


def _operands(node: onnx.NodeProto) -> tuple[str, str | None]:
    """(weight, bias) input names of a fold target; bias None when absent."""
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    return node.input[1], bias


def _channels(node: onnx.NodeProto, weight_shape: tuple[int, ...]) -> int:
    """Output channels (the BN's axis 1) of a fold target with this weight shape."""
    if node.op_type == "Conv":
        return weight_shape[0]
    if node.op_type == "ConvTranspose":
        return weight_shape[1] * int(_attr(node, "group", 1))
    if node.op_type == "Gemm" and _attr(node, "transB", 0):
        return weight_shape[0]
    return weight_shape[-1]


def _weight_shape(graph: onnx.GraphProto, name: str) -> tuple[int, ...] | None:
    for tensor in graph.initializer:
        if tensor.name == name:
            return tuple(tensor.dims)
    for info in (*graph.input, *graph.value_info):
        if info.name == name and info.type.tensor_type.HasField("shape"):
            dims = info.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return tuple(d.dim_value for d in dims)
    value = constant_value(graph, name)
    return None if value is None else value.shape


def _folded_numbers(node: onnx.NodeProto, w: np.ndarray, b: np.ndarray | None,
                    s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weights and bias of ``node`` followed by ``y -> s * y + t`` on its channel axis."""
    if node.op_type == "Conv":
        w2 = w * s.reshape(-1, *([1] * (w.ndim - 1)))
    elif node.op_type == "ConvTranspose":
        g = int(_attr(node, "group", 1))
        grouped = w.reshape(g, w.shape[0] // g, w.shape[1], *w.shape[2:])
        w2 = (grouped * s.reshape(g, 1, w.shape[1], *([1] * (w.ndim - 2)))).reshape(w.shape)
    elif node.op_type == "Gemm" and _attr(node, "transB", 0):
        w2 = w * s[:, None]
    else:  # Gemm with transB=0, MatMul: weights are (K_red, N_out)
        w2 = w * s[None, :]
    if node.op_type == "Gemm":
        beta = float(_attr(node, "beta", 1.0))
        b2 = t if b is None else beta * b * s + t
    else:
        b2 = t if b is None else b * s + t
    return w2, b2


def _fold_batchnorm(model: onnx.ModelProto, base_dir: str = "") -> Counter:
    """Fold BatchNormalizations into their producers in place; see `fold_batchnorm`."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    readers = _consumers(graph)
    producers = _producers(graph)
    taken = _all_names(graph)
    folded: Counter = Counter()
    drop: set[int] = set()
    for index, bn in enumerate(graph.node):
        if bn.op_type != "BatchNormalization" or not _is_default(bn):
            continue
        x = bn.input[0]
        target = producers.get(x)
        if (target is None or target.op_type not in FOLD_TARGETS or not _is_default(target)
                or x in outputs or len(readers.get(x, ())) != 1):
            continue
        if _attr(bn, "training_mode", 0) or _attr(bn, "spatial", 1) == 0:
            continue
        if any(o and (o in outputs or readers.get(o)) for o in bn.output[1:]):
            continue
        # A MatMul's output channel is the BN's axis 1 only when it is 2-D (unknown: no fold).
        if target.op_type == "MatMul" and (_rank(graph, target.input[0]) != 2
                                           or _rank(graph, target.input[1]) != 2):
            continue
        weight, bias = _operands(target)
        w_shape = _weight_shape(graph, weight)
        if w_shape is None:
            continue
        channels = _channels(target, w_shape)
        stats = [constant_value(graph, name, base_dir) for name in bn.input[1:5]]
        w = constant_value(graph, weight, base_dir)
        b = None if bias is None else constant_value(graph, bias, base_dir)
        numeric = (w is not None and np.issubdtype(w.dtype, np.floating)
                   and (bias is None or b is not None)
                   and all(v is not None and v.size == channels for v in stats))
        structural = (_graph_input(graph, weight) is not None
                      and (bias is None or _graph_input(graph, bias) is not None))
        if not (numeric or structural):
            continue

        if numeric:
            scale, shift, mean, var = (v.astype(np.float64).reshape(-1) for v in stats)
            s = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
            w2, b2 = _folded_numbers(target, w.astype(np.float64),
                                     None if b is None else b.astype(np.float64),
                                     s, shift - mean * s)
            weight = _fresh(f"{weight}_bnfold", taken)
            new_bias = _fresh(f"{bias or bn.output[0]}_bnfold_bias", taken)
            graph.initializer.extend([numpy_helper.from_array(w2.astype(w.dtype), weight),
                                      numpy_helper.from_array(b2.astype(w.dtype), new_bias)])
            bias = new_bias
        elif bias is None:
            elem_type = _graph_input(graph, weight).type.tensor_type.elem_type
            bias = _fresh(f"{bn.output[0]}_bnfold_bias", taken)
            graph.input.append(helper.make_tensor_value_info(bias, elem_type, [channels]))

        folded[target.op_type] += 1
        if target.op_type == "MatMul":
            target.op_type = "Gemm"
        target.input[1] = weight
        if len(target.input) > 2:
            target.input[2] = bias
        else:
            target.input.append(bias)
        for attr in target.attribute:
            if target.op_type == "Gemm" and attr.name == "beta":
                attr.f = 1.0
        target.output[0] = bn.output[0]
        producers[bn.output[0]] = target
        drop.add(index)
    if drop:
        _replace_nodes(graph, [n for k, n in enumerate(graph.node) if k not in drop])
        _drop_unused_initializers(graph)
        _drop_stale_value_info(graph)
    return folded


# --------------------------------------------------------------------------- public passes
def eliminate_identities(model: onnx.ModelProto) -> PassResult:
    """Remove Identity nodes and inference-mode Dropouts whose mask nobody reads.

    Readers of the removed node's output read its input instead. When that output is a graph
    output, the producer of the input takes the output's name instead; when that is impossible
    (the input is a graph input, an initializer or itself a graph output) the node stays.
    """
    return _run_pure(_eliminate_identities, model)


def eliminate_dead_code(model: onnx.ModelProto) -> PassResult:
    """Remove nodes none of whose outputs reaches a graph output, and unused initializers.

    Graph inputs stay even when nothing reads them: they are the model's interface.
    """
    return _run_pure(_eliminate_dead_code, model)


def eliminate_common_subexpressions(model: onnx.ModelProto) -> PassResult:
    """Merge nodes with the same op type, inputs and attributes, until no two are alike.

    The first node of each group survives and the readers of the others read its outputs. Random
    ops, Dropout, ops with subgraphs and ops from custom domains (whose purity is unknown) are
    never merged, nor is a duplicate whose output is a graph output (its name is interface).
    """
    return _run_pure(_eliminate_common_subexpressions, model)


def fold_batchnorm(model: onnx.ModelProto, base_dir: str = "") -> PassResult:
    """Fold each BatchNormalization into the Conv, ConvTranspose, Gemm or MatMul feeding it.

    A BN folds when its input is such a producer's output that nothing else reads and that is
    not a graph output, and the BN runs in inference mode. With ``s = scale / sqrt(var + eps)``
    and ``t = B - mean * s``, the producer's weights are scaled by ``s`` per output channel and
    its bias becomes ``b * s + t`` (a Gemm's becomes ``beta * C * s + t`` with beta set to 1; a
    MatMul, which has no bias, becomes a Gemm):

    * numeric fold, when the producer's weight and bias and the BN's statistics are all
      constants (initializers or Constant nodes): the new numbers are new initializers, so the
      folded model computes what the original did (a MatMul folds only when both operands are
      known to be 2-D: run shape inference first);
    * structural fold, when the producer's weight (and bias, if any) are graph inputs, as in a
      shape-only model whose parameters the caller supplies: the BN disappears, the parameters
      keep their input names (the caller supplies folded values) and, if the producer had no
      bias, a bias input named after the BN's output is declared;
    * otherwise (constant weights with BN statistics from graph inputs, weights computed by
      other nodes, integer weights) the BN stays.

    Args:
      model: the model; not modified.
      base_dir: the directory of initializers stored as external data (the model's folder).

    Returns:
      A `PassResult` whose ``by_op`` counts the folded BNs by the op type that absorbed them.
    """
    return _run_pure(_fold_batchnorm, model, base_dir)


# The importer's order: identities first (they hide duplicates and block folds), dead code
# before CSE and folding (a dead reader blocks a fold), CSE before folding (a fold gives each
# copy of a duplicated conv its own new weights, so they would no longer merge), and dead code
# again for what folding orphaned (Constant nodes that held BN statistics).
PIPELINE = (
    ("eliminate_identities", _eliminate_identities),
    ("eliminate_dead_code", _eliminate_dead_code),
    ("eliminate_common_subexpressions", _eliminate_common_subexpressions),
    ("fold_batchnorm", _fold_batchnorm),
    ("eliminate_dead_code", _eliminate_dead_code),
)


def run_passes(model: onnx.ModelProto,
               base_dir: str = "") -> tuple[onnx.ModelProto, dict[str, int], dict[str, int]]:
    """Apply `PIPELINE` to a copy of ``model``.

    Returns:
      The new model, the nodes removed per pass name, and the folded BNs by absorbing op type.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    removed: Counter = Counter()
    folded: Counter = Counter()
    for name, inplace in PIPELINE:
        by_op = inplace(copy, base_dir) if inplace is _fold_batchnorm else inplace(copy)
        removed[name] += sum(by_op.values())
        if inplace is _fold_batchnorm:
            folded.update(by_op)
    return copy, {name: removed[name] for name, _ in PIPELINE}, dict(folded)
