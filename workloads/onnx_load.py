"""Reading an ONNX model for import: load and check it, pin its input shapes, infer the rest.

Every error names the file (or the model) and the input at fault, and says how to fix it.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from workloads.errors import WorkloadError

Shape = tuple  # dims are ints when static, a symbol name (str) or None when not


# ----------------------------------------------------------------------------- loading
def load_model(source) -> tuple[onnx.ModelProto, str, str, str]:
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


def name_nodes(graph: onnx.GraphProto) -> dict[str, int]:
    """Name each unnamed node ``f"{op_type}_{index}"`` (its index in the file); name -> index."""
    index_of: dict[str, int] = {}
    for k, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{k}"
        index_of.setdefault(node.name, k)
    return index_of


# ----------------------------------------------------------------------------- input shapes
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


def _real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (old exports list weights as inputs too)."""
    initialized = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in initialized]


def pin_initializer_inputs(graph: onnx.GraphProto) -> None:
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


def apply_input_shapes(graph: onnx.GraphProto, input_shapes: Mapping[str, Sequence[int]],
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
                                f"but it has rank {len(declared)}: {show(declared)}")
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


def require_static_inputs(graph: onnx.GraphProto, where: str) -> None:
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
                    f"{show(shape)}; give it a static size: pass --input-shape "
                    f"{info.name}={'x'.join(map(str, example))} (CLI) or "
                    f"input_shapes={{{info.name!r}: {example}}} (API), with your sizes")


# ----------------------------------------------------------------------------- shape inference
def infer_shapes(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                 data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError,
            ValueError) as exc:
        raise WorkloadError(
            f"{where}: ONNX shape inference fails: {str(exc).strip()}; the graph does not fit "
            f"its input shapes: check input_shapes, or re-export the model") from exc


def shape_table(graph: onnx.GraphProto) -> dict[str, Shape]:
    """Every known shape: declared or inferred values, initializers and Constants."""
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


def _dims(info: onnx.ValueInfoProto) -> Shape | None:
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in tensor.shape.dim)


def show(shape: Shape) -> str:
    """A shape for messages, unknown dims as ``?``."""
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"
