"""The DSL's element types and value types, shared by the front end, the IR and both backends.

A value is a scalar (``i32``), a block (``block<32x16xi8>``), a pointer or a block of pointers
(``block<32x16xptr<i8>>``: pointer arithmetic on an array argument), or a block pointer
(``bptr<i8,32x16>``, from `make_block_ptr`). Block shapes are compile-time constants; scalars
may be run-time values (array sizes, strides, the program id).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class DType:
    """An element type: ``i1`` (mask), ``i8``, ``i32`` or ``f32``."""

    name: str

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(_NUMPY[self.name])

    @property
    def is_int(self) -> bool:
        return self.name in ("i8", "i32")

    @property
    def is_float(self) -> bool:
        return self.name == "f32"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"baco.{_PUBLIC[self.name]}"


_NUMPY = {"i1": np.bool_, "i8": np.int8, "i32": np.int32, "f32": np.float32}
_PUBLIC = {"i1": "int1", "i8": "int8", "i32": "int32", "f32": "float32"}

int1 = DType("i1")
int8 = DType("i8")
int32 = DType("i32")
float32 = DType("f32")

_BY_NAME = {"int1": int1, "bool": int1, "int8": int8, "int32": int32, "float32": float32,
            "i1": int1, "i8": int8, "i32": int32, "f32": float32}


def dtype_of(value: object) -> DType | None:
    """A `DType` from a DType, its name (``"int32"``), or a numpy dtype; None if not one."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return _BY_NAME.get(value)
    try:
        np_dtype = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        return None
    for dt in (int1, int8, int32, float32):
        if dt.numpy == np_dtype:
            return dt
    return None


def promote(a: DType, b: DType) -> DType:
    """Arithmetic result type: f32 if either is, else i32 (i1 and i8 widen, as in C)."""
    return float32 if (a.is_float or b.is_float) else int32


@dataclasses.dataclass(frozen=True)
class Type:
    """A value's type: element dtype, block shape (``()`` for a scalar), pointer-ness."""

    dtype: DType
    shape: tuple[int, ...] = ()
    ptr: bool = False
    block_ptr: bool = False

    @property
    def is_scalar(self) -> bool:
        return not self.shape and not self.block_ptr

    @property
    def is_data(self) -> bool:
        return not self.ptr and not self.block_ptr

    def with_shape(self, shape: tuple[int, ...]) -> Type:
        return dataclasses.replace(self, shape=tuple(shape))

    def __str__(self) -> str:
        elem = f"ptr<{self.dtype}>" if self.ptr else str(self.dtype)
        if self.block_ptr:
            return f"bptr<{self.dtype},{'x'.join(map(str, self.shape))}>"
        if not self.shape:
            return elem
        return f"block<{'x'.join(map(str, self.shape))}x{elem}>"


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy broadcasting of two static shapes; None if they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


__all__ = [
    "DType",
    "Type",
    "broadcast_shapes",
    "dtype_of",
    "float32",
    "int1",
    "int8",
    "int32",
    "promote",
]
