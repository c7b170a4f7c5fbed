"""A search's checkpoint: its state, a tree of frozen dataclasses, named tuples, containers and
arrays, saved as it is into one ``.npz`` (the arrays, and the tree's shape as JSON), written
atomically; loading gives the same tree back, array for array and type for type."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from workloads.errors import ConfigError
from workloads.files import write_atomic

__all__ = ["decode_tree", "encode_tree", "load_checkpoint", "save_checkpoint"]

_PACKAGES = ("accel", "baco", "perfmodels", "workloads", "optax", "flax")
"""The packages whose dataclasses and named tuples a checkpoint may name (nothing else is
imported when one is read)."""

_TREE = "__tree__"


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(name: str) -> type:
    module, _, qualname = name.partition(":")
    if module.split(".")[0] not in _PACKAGES:
        raise ValueError(f"type {name} is not one a checkpoint may hold")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def encode_tree(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    """`tree` as JSON, its arrays added to `arrays` under the names the JSON refers to."""
    if isinstance(tree, (np.ndarray, np.generic, jax.Array)):    # np.float64 is a float too
        name = f"a{len(arrays)}"
        arrays[name] = np.asarray(tree)
        return {"array": name, "jax": isinstance(tree, jax.Array),
                "scalar": isinstance(tree, np.generic)}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):          # a NamedTuple
        return {"type": _type_name(tree),
                "fields": {k: encode_tree(v, arrays) for k, v in zip(tree._fields, tree)}}
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return {"type": _type_name(tree),
                "fields": {f.name: encode_tree(getattr(tree, f.name), arrays)
                           for f in dataclasses.fields(tree) if f.init}}
    if isinstance(tree, (tuple, list)):
        return {"tuple" if isinstance(tree, tuple) else "list":
                [encode_tree(v, arrays) for v in tree]}
    if isinstance(tree, frozenset):
        return {"frozenset": sorted(encode_tree(v, arrays) for v in tree)}
    if isinstance(tree, dict) and all(isinstance(k, str) for k in tree):
        return {"dict": {k: encode_tree(v, arrays) for k, v in tree.items()}}
    raise TypeError(f"checkpoint: cannot save a {type(tree).__name__}")


def decode_tree(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The tree `encode_tree` wrote."""
    if not isinstance(node, dict):
        return node
    if "array" in node:
        value = arrays[node["array"]]
        if node["scalar"]:
            return value[()]
        return jnp.asarray(value) if node["jax"] else value
    if "type" in node:
        cls = _resolve(node["type"])
        return cls(**{k: decode_tree(v, arrays) for k, v in node["fields"].items()})
    (kind, items), = node.items()
    if kind == "dict":
        return {k: decode_tree(v, arrays) for k, v in items.items()}
    values = [decode_tree(v, arrays) for v in items]
    return {"tuple": tuple, "list": list, "frozenset": frozenset}[kind](values)


def save_checkpoint(path: str | os.PathLike, tree: Any) -> None:
    """Write `tree` to `path` (``.npz``) atomically: a temp file, then `os.replace`."""
    arrays: dict[str, np.ndarray] = {}
    shape = json.dumps(encode_tree(tree, arrays))
    arrays[_TREE] = np.frombuffer(shape.encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(path, buffer.getvalue())


def load_checkpoint(path: str | os.PathLike, only: Sequence[str] | None = None) -> Any:
    """The tree `save_checkpoint` wrote to `path`; with `only`, of a tree that is a dict, just
    those of its entries that it holds (the arrays of the others are not read)."""
    try:
        with np.load(path) as data:
            if _TREE not in data.files:
                raise ConfigError(f"checkpoint {path}: written by an older baco, which saved "
                                  "its search another way; delete it to start over")
            tree = json.loads(data[_TREE].tobytes().decode())
            if only is not None:
                entries = tree["dict"]
                tree = {"dict": {k: entries[k] for k in only if k in entries}}
            return decode_tree(tree, data)
    except ConfigError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError) as exc:
        raise ConfigError(f"checkpoint {path}: cannot read ({exc}); delete it to start over"
                          ) from None
