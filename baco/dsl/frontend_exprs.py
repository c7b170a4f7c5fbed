"""Expressions in the front end: names, constants, operators, attributes, indexing and calls,
evaluated at compile time where they can be and emitted as typed IR ops where they cannot."""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
from typing import Any

from baco.dsl import core
from baco.dsl.frontend_arith import ARITH, CMP, binary, cast
from baco.dsl.frontend_builder import Builder
from baco.dsl.frontend_builtins import HANDLERS
from baco.dsl.ir import Value
from baco.dsl.types import Type, float32, int1, int32

_PURE_BUILTINS = {builtins.min, builtins.max, builtins.abs, builtins.int, builtins.float,
                  builtins.len, builtins.bool}


class Method:
    """``value.to`` before it is called."""

    def __init__(self, value: Value, name: str) -> None:
        self.value, self.name = value, name


class ExpressionVisitor(Builder):
    """Evaluates a kernel's expressions against its names: the kernel's own (``env``), then
    its module's globals, then Python's builtins."""

    def __init__(self, file: str, line: int, globals_: dict[str, Any]) -> None:
        super().__init__(file, line)
        self.globals = globals_
        self.env: dict[str, Any] = {}
        self.loop_locals: set[str] = set()

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.env:
            return self.env[name]
        if name in self.loop_locals:
            raise self.error(node, f"`{name}` is only defined inside a loop; assign it before "
                             "the loop to use it afterwards")
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.error(node, f"undefined name `{name}`")

    def expr(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id, node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.expr(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.BinOp):
            op = ARITH.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not supported")
            return binary(self, op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.error(node, "chained comparisons (a < b < c) are not supported; "
                                 "combine two comparisons with &")
            op = CMP.get(type(node.ops[0]))
            if op is None:
                raise self.error(node, f"comparison {type(node.ops[0]).__name__} is not "
                                 "supported")
            return binary(self, op, self.expr(node.left), self.expr(node.comparators[0]), node)
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v) for v in node.values]
            if any(isinstance(v, Value) for v in values):
                raise self.error(node, "`and`/`or` on kernel values: use `&` / `|` on masks")
            out = values[0]
            for v in values[1:]:
                out = (out and v) if isinstance(node.op, ast.And) else (out or v)
            return out
        if isinstance(node, ast.IfExp):
            test = self.expr(node.test)
            if isinstance(test, Value):
                raise self.error(node, "a conditional expression needs a constant test; use "
                                 "baco.where(cond, x, y)")
            return self.expr(node.body if test else node.orelse)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.error(node, f"unsupported expression `{type(node).__name__}`")

    def attribute(self, node: ast.Attribute) -> Any:
        obj = self.expr(node.value)
        if isinstance(obj, Value):
            if node.attr == "to":
                return Method(obj, "to")
            if node.attr == "shape":
                return obj.type.shape
            if node.attr == "dtype":
                return obj.type.dtype
            raise self.error(node, f"kernel values have no attribute `{node.attr}` (they have "
                             ".to(dtype), .shape and .dtype)")
        try:
            return getattr(obj, node.attr)
        except AttributeError:
            raise self.error(node, f"{obj!r} has no attribute `{node.attr}`") from None

    def unary(self, node: ast.UnaryOp) -> Any:
        v = self.expr(node.operand)
        if not isinstance(v, Value):
            ops = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                   ast.Invert: operator.invert}
            return ops[type(node.op)](v)
        if v.type.ptr or v.type.block_ptr:
            raise self.error(node, "unary operators do not apply to pointers")
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.USub):
            dt = float32 if v.type.dtype.is_float else int32
            return self.emit("neg", node, [v], Type(dt, v.type.shape))
        if isinstance(node.op, ast.Invert) and v.type.dtype == int1:
            return self.emit("not", node, [v], v.type)
        raise self.error(node, "`not`/`~` on kernel values: use `~mask` on i1 masks, or "
                         "compare (x == 0)")

    def subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        if not isinstance(base, Value):
            index = self.expr(node.slice)
            if isinstance(index, Value):
                raise self.error(node, "indexing a constant with a run-time value")
            return base[index]
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        shape, axes, kept = [], [], 0
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                axes.append(len(shape))
                shape.append(1)
            elif isinstance(item, ast.Slice) and item.lower is None and item.upper is None \
                    and item.step is None:
                if kept >= len(base.type.shape):
                    raise self.error(node, f"too many `:` for a {base.type} value")
                shape.append(base.type.shape[kept])
                kept += 1
            else:
                raise self.error(node, "blocks are indexed only to add axes: x[:, None], "
                                 "x[None, :]; element access is not supported")
        if kept != len(base.type.shape):
            raise self.error(node, f"index every axis of the {base.type} value with `:`")
        return self.emit("expand_dims", node, [base], base.type.with_shape(tuple(shape)),
                         axes=tuple(axes))

    def call(self, node: ast.Call) -> Any:
        fn = self.expr(node.func)
        args = [self.expr(a) for a in node.args]
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, "*args in calls are not supported")
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(fn, Method):
            return cast(self, fn.value, args, kwargs, node)
        tag = getattr(fn, core.BUILTIN_TAG, None)
        if tag is not None:
            handler = HANDLERS[tag]
            try:
                bound = inspect.signature(fn).bind(*args, **kwargs)
            except TypeError as exc:
                raise self.error(node, f"baco.{tag}: {exc}") from None
            bound.apply_defaults()
            return handler(self, node, **bound.arguments)
        if fn in _PURE_BUILTINS:
            if any(isinstance(a, Value) for a in [*args, *kwargs.values()]):
                raise self.error(node, f"{fn.__name__}() on kernel values: use baco.minimum "
                                 "/ baco.maximum / .to(dtype)")
            return fn(*args, **kwargs)
        if fn is builtins.range:
            raise self.error(node, "range() is only allowed as the iterable of a for loop")
        name = getattr(fn, "__name__", repr(fn))
        raise self.error(node, f"calls to `{name}` are not supported inside a kernel; use the "
                         "baco primitives (see baco.dsl)")


__all__ = ["ExpressionVisitor", "Method"]
