"""The zoo: well-known networks, built in code as ONNX graphs and read by `from_onnx`.

Nothing is downloaded: each model module writes its graph with `workloads.zoo.builder`
(weights as static-shaped graph inputs), and `load` sends it through `from_onnx`, the road a
user's own ONNX file takes. A name may carry parameters, ``name:key=value,key=value``:

>>> from workloads.zoo import zoo_names, build_onnx
>>> "resnet50" in zoo_names()
True
>>> [i.name for i in build_onnx("llama2_7b:phase=decode,seq=16").graph.input][:2]
['inputs_embeds', 'attention_mask']
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import onnx

from workloads.errors import WorkloadError
from workloads.network import Network
from workloads.onnx_import import from_onnx
from workloads.zoo import bert, deepbench, llama, mobilenet, resnet, retinanet, unet, vgg
from workloads.zoo.builder import Param

__all__ = ["build_onnx", "describe", "load", "parse_name", "zoo_names"]


@dataclasses.dataclass(frozen=True)
class _Model:
    build: Callable[..., onnx.ModelProto]
    params: Mapping[str, Param]
    summary: str


def _entry(module: ModuleType) -> _Model:
    return _Model(module.build, module.PARAMS, module.__doc__.strip().splitlines()[0])


_MODELS: dict[str, _Model] = {
    "resnet50": _entry(resnet),
    "unet": _entry(unet),
    "retinanet": _entry(retinanet),
    "bert": _entry(bert),
    "deepbench": _entry(deepbench),
    "llama2_7b": _entry(llama),
    "mobilenet_v2": _entry(mobilenet),
    "vgg16": _entry(vgg),
}


def zoo_names() -> list[str]:
    """The model names `load` accepts."""
    return sorted(_MODELS)


def describe(name: str) -> str:
    """One model's summary and parameters, for help texts and error messages."""
    model = _lookup(name.split(":", 1)[0].strip())
    lines = [f"{name}: {model.summary}"]
    lines += [f"  {key}: {p.describe()}" for key, p in model.params.items()]
    return "\n".join(lines)


def _lookup(base: str) -> _Model:
    if base not in _MODELS:
        close = difflib.get_close_matches(base.lower(), zoo_names(), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise WorkloadError(f"unknown zoo model {base!r}{hint} Known models: "
                            f"{', '.join(zoo_names())}")
    return _MODELS[base]


def parse_name(name: str, **params: Any) -> tuple[str, dict[str, int | str]]:
    """Split ``model:key=value,...`` and merge ``params``; return the model and all its
    parameters (defaults filled in), each checked against the model's ranges.

    >>> parse_name("bert:seq=512")
    ('bert', {'seq': 512, 'batch': 1})
    """
    if not isinstance(name, str) or not name.strip():
        raise WorkloadError(f"zoo model name must be a non-empty string, got {name!r}")
    base, _, tail = name.partition(":")
    base = base.strip()
    model = _lookup(base)
    given: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in tail.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise WorkloadError(f"zoo name {name!r}: expected key=value, got {item!r}")
        if key in given:
            raise WorkloadError(f"zoo name {name!r}: parameter {key!r} given twice")
        given[key] = value
    for key, value in params.items():
        if key in given and str(given[key]).strip() != str(value):
            raise WorkloadError(f"zoo model {base!r}: parameter {key!r} given as "
                                f"{given[key]!r} in the name and {value!r} as an argument")
        given[key] = value
    unknown = sorted(set(given) - set(model.params))
    if unknown:
        known = ", ".join(f"{k}={p.default}" for k, p in model.params.items())
        raise WorkloadError(f"zoo model {base!r} has no parameter {unknown[0]!r}; "
                            f"its parameters (defaults): {known}")
    return base, {key: p.parse(base, key, given[key]) if key in given else p.default
                  for key, p in model.params.items()}


def _canonical(base: str, values: Mapping[str, int | str]) -> str:
    """``base`` plus the parameters that differ from their defaults, in declaration order."""
    model = _MODELS[base]
    extra = [f"{k}={v}" for k, v in values.items() if v != model.params[k].default]
    return f"{base}:{','.join(extra)}" if extra else base


def build_onnx(name: str, **params: Any) -> onnx.ModelProto:
    """The checked ONNX graph (opset 17, weights as graph inputs) of a zoo model."""
    base, values = parse_name(name, **params)
    model = _MODELS[base].build(**values)
    model.graph.name = _canonical(base, values)
    return model


def load(name: str, **params: Any) -> Network:
    """A zoo model as a `Network`, through `from_onnx`.

    >>> net = load("resnet50")
    >>> net.unique_layers, net.total_layers
    (24, 54)
    """
    base, values = parse_name(name, **params)
    model = _MODELS[base].build(**values)
    canonical = _canonical(base, values)
    model.graph.name = canonical
    return from_onnx(model, name=canonical)
