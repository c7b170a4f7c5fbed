"""The ``baco.*`` primitives a kernel calls, by name: the program's place in the grid, new
blocks (``arange``, ``zeros``, ``full``), and the memory and math handlers. Each handler takes
the `Builder` and the call's node, then the primitive's own arguments by name."""

from __future__ import annotations

from collections.abc import Callable

from baco.dsl import frontend_arith as arith
from baco.dsl import frontend_memory as memory
from baco.dsl.frontend_builder import PY_NUMBER, Builder
from baco.dsl.ir import Value
from baco.dsl.types import DType, Type, dtype_of, int32


def _axis(bld: Builder, node, axis) -> int:
    axis = bld.constant_int(axis, node, "axis")
    if axis not in (0, 1, 2):
        raise bld.error(node, f"axis must be 0, 1 or 2, got {axis}")
    return axis


def b_program_id(bld: Builder, node, axis):
    return bld.emit("program_id", node, [], Type(int32), "pid", axis=_axis(bld, node, axis))


def b_num_programs(bld: Builder, node, axis):
    return bld.emit("num_programs", node, [], Type(int32), axis=_axis(bld, node, axis))


def b_arange(bld: Builder, node, start, end):
    start = bld.constant_int(start, node, "arange start")
    end = bld.constant_int(end, node, "arange end")
    if end <= start:
        raise bld.error(node, f"arange({start}, {end}) is empty")
    return bld.emit("arange", node, [], Type(int32, (end - start,)), start=start, end=end)


def _dtype(bld: Builder, node, dtype) -> DType:
    dt = dtype_of(dtype)
    if dt is None:
        raise bld.error(node, f"unknown dtype {dtype!r}; use baco.int8, baco.int32 or "
                        "baco.float32")
    return dt


def b_zeros(bld: Builder, node, shape, dtype):
    shape = bld.shape_of(shape, node, "zeros")
    return bld.emit("full", node, [], Type(_dtype(bld, node, dtype), shape), value=0)


def b_full(bld: Builder, node, shape, value, dtype):
    shape = bld.shape_of(shape, node, "full")
    if isinstance(value, Value) or not isinstance(value, PY_NUMBER):
        raise bld.error(node, "baco.full needs a constant fill value")
    return bld.emit("full", node, [], Type(_dtype(bld, node, dtype), shape), value=value)


HANDLERS: dict[str, Callable] = {
    "program_id": b_program_id,
    "num_programs": b_num_programs,
    "arange": b_arange,
    "zeros": b_zeros,
    "full": b_full,
    "load": memory.b_load,
    "store": memory.b_store,
    "make_block_ptr": memory.b_make_block_ptr,
    "advance": memory.b_advance,
    "dot": arith.b_dot,
    "cdiv": arith.b_cdiv,
    "where": arith.b_where,
    "maximum": arith.b_maximum,
    "minimum": arith.b_minimum,
    "gelu": arith.b_gelu,
    "softmax": arith.b_softmax,
}
"""The handler of each primitive, by its builtin tag (`baco.dsl.core.BUILTIN_TAG`)."""

__all__ = ["HANDLERS"]
