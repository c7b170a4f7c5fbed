"""Building the block IR: numbered values, ops that remember the kernel line they came from,
and the checks that turn compile-time numbers and block sizes into typed operands (a mistake is
a `DSLError` naming that line)."""

from __future__ import annotations

import ast
from typing import Any

from baco.dsl.ir import Loc, Op, Value
from baco.dsl.types import Type, broadcast_shapes, float32, int1, int32
from workloads.errors import DSLError

PY_NUMBER = (bool, int, float)


class Builder:
    """The ops of a kernel under construction (a loop body swaps in its own list)."""

    def __init__(self, file: str, line: int) -> None:
        self.file = file
        self.line = line  # where a node without a line of its own points
        self.ops: list[Op] = []
        self._next = 0

    def loc(self, node: ast.AST) -> Loc:
        return Loc(self.file, getattr(node, "lineno", self.line))

    def error(self, node: ast.AST, message: str) -> DSLError:
        return self.loc(node).error(message)

    def new(self, type_: Type, hint: str = "") -> Value:
        self._next += 1
        return Value(self._next, type_, hint)

    def emit(self, name: str, node: ast.AST, operands: list[Value], type_: Type | None,
             hint: str = "", **attrs: Any) -> Value | None:
        result = self.new(type_, hint) if type_ is not None else None
        self.ops.append(Op(name, [result] if result else [], operands, attrs, self.loc(node)))
        return result

    def const(self, value: Any, node: ast.AST) -> Value:
        """A compile-time number as an IR value (bool -> i1, int -> i32, float -> f32)."""
        if isinstance(value, Value):
            return value
        if isinstance(value, bool):
            dt = int1
        elif isinstance(value, int):
            dt = int32
        elif isinstance(value, float):
            dt = float32
        else:
            raise self.error(node, f"{value!r} is not a number and cannot be a kernel value")
        return self.emit("const", node, [], Type(dt), value=value)

    @staticmethod
    def type_of(value: Any) -> Type | None:
        if isinstance(value, Value):
            return value.type
        if isinstance(value, bool):
            return Type(int1)
        if isinstance(value, int):
            return Type(int32)
        if isinstance(value, float):
            return Type(float32)
        return None

    def runtime(self, value: Any, node: ast.AST, what: str) -> Value:
        if isinstance(value, Value):
            return value
        if isinstance(value, PY_NUMBER):
            return self.const(value, node)
        raise self.error(node, f"{what}: expected a kernel value or a number, got {value!r}")

    def constant_int(self, value: Any, node: ast.AST, what: str) -> int:
        """A compile-time int (block sizes, axes); a run-time value is the classic mistake."""
        if isinstance(value, Value):
            raise self.error(node, f"non-constant {what}: block sizes must be compile-time "
                             "constants; annotate the parameter as `NAME: baco.const` (or use "
                             "a literal)")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(node, f"{what} must be an int, got {value!r}")
        return value

    def shape_of(self, value: Any, node: ast.AST, what: str) -> tuple[int, ...]:
        items = value if isinstance(value, (tuple, list)) else (value,)
        shape = tuple(self.constant_int(v, node, f"block size in {what}") for v in items)
        if any(s < 1 for s in shape):
            raise self.error(node, f"{what}: block sizes must be positive, got {shape}")
        return shape

    def mask_of(self, node: ast.AST, mask: Any, shape: tuple[int, ...], what: str
                ) -> Value | None:
        """A load's, store's or softmax's ``mask=``: an i1 block that broadcasts to ``shape``."""
        if mask is None:
            return None
        if isinstance(mask, bool):
            mask = self.const(mask, node)
        if not isinstance(mask, Value) or mask.type.dtype != int1 or mask.type.ptr:
            raise self.error(node, f"{what}: the mask must be a comparison result (i1), got "
                             f"{mask!r}")
        if broadcast_shapes(mask.type.shape, shape) != shape:
            raise self.error(node, f"{what}: mask {mask.type} does not broadcast to the "
                             f"pointer block {shape}")
        return mask


__all__ = ["PY_NUMBER", "Builder"]
