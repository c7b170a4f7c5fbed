"""The front end: a kernel's Python AST, type-checked into the block IR.

The visitor evaluates what it can at compile time (constants, ``baco.const`` parameters, Python
arithmetic on them, static ``if``) and emits typed IR ops for the rest, so every block shape is
known and checked here: a shape mismatch in ``dot``, a non-constant block size or a statement
the DSL does not have is a `DSLError` naming the kernel's ``file:line`` and what to change.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import textwrap
from collections.abc import Callable
from typing import Any

from baco.dsl import core
from baco.dsl.ir import Function, Loc, Op, Param, Region, Value
from baco.dsl.types import (
    DType,
    Type,
    broadcast_shapes,
    dtype_of,
    float32,
    int1,
    int8,
    int32,
    promote,
)
from workloads.errors import DSLError

_ARITH = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.Div: "truediv", ast.BitAnd: "and", ast.BitOr: "or",
          ast.BitXor: "xor"}
_CMP = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_OP = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "floordiv": operator.floordiv, "mod": operator.mod, "truediv": operator.truediv,
          "and": operator.and_, "or": operator.or_, "xor": operator.xor, "lt": operator.lt,
          "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
          "ne": operator.ne}
_PURE_BUILTINS = {builtins.min, builtins.max, builtins.abs, builtins.int, builtins.float,
                  builtins.len, builtins.bool}
_PY_NUMBER = (bool, int, float)


class _Method:
    """``value.to`` before it is called."""

    def __init__(self, value: Value, name: str) -> None:
        self.value, self.name = value, name


def kernel_source(fn: Callable) -> tuple[ast.FunctionDef, str, int]:
    """The kernel's FunctionDef (decorators dropped), its file, and its first line's number."""
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or "<kernel>"
    except (OSError, TypeError) as exc:
        raise DSLError(f"cannot read the source of {fn.__qualname__}: {exc}; define "
                            "kernels in a file (or exec source with a registered linecache "
                            "entry)") from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise DSLError(f"{file}:{first}: @baco.jit decorates a plain function (def)")
    return node, file, first


class FrontEnd:
    """One kernel specialized on (argument types, constants), visited into a `Function`."""

    def __init__(self, fn: Callable, node: ast.FunctionDef, file: str) -> None:
        self.fn = fn
        self.node = node
        self.file = file
        self.globals = fn.__globals__
        self.env: dict[str, Any] = {}
        self.loop_locals: set[str] = set()
        self.ops: list[Op] = []
        self._next = 0

    # ------------------------------------------------------------------ helpers
    def loc(self, node: ast.AST) -> Loc:
        return Loc(self.file, getattr(node, "lineno", self.node.lineno))

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
        if isinstance(value, _PY_NUMBER):
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

    # ------------------------------------------------------------------ entry
    def build(self, params: list[tuple[str, Type | None, Any]]) -> Function:
        out = []
        for name, type_, const in params:
            if type_ is None:
                self.env[name] = const
                out.append(Param(name, const=const))
            else:
                value = self.new(type_, name)
                self.env[name] = value
                out.append(Param(name, value=value))
        body = self.node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # docstring
        if body and isinstance(body[-1], ast.Return) and body[-1].value is None:
            body = body[:-1]
        for stmt in body:
            self.statement(stmt)
        return Function(self.node.name, out, self.ops, self.loc(self.node))

    # ------------------------------------------------------------------ statements
    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise self.error(node, "chained assignment (a = b = ...) is not supported; "
                                 "assign one name at a time")
            self.assign(node.targets[0], self.expr(node.value), node)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise self.error(node, "augmented assignment needs a plain name on the left")
            old = self.lookup(node.target.id, node.target)
            op = _ARITH.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not supported")
            self.env[node.target.id] = self.binary(op, old, self.expr(node.value), node)
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return
            self.expr(node.value)
        elif isinstance(node, ast.For):
            self.for_loop(node)
        elif isinstance(node, ast.If):
            test = self.expr(node.test)
            if isinstance(test, Value):
                raise self.error(node, "`if` on a run-time value is not supported: branch on "
                                 "baco.const parameters only, and use masks or baco.where "
                                 "for data-dependent choices")
            for stmt in node.body if test else node.orelse:
                self.statement(stmt)
        elif isinstance(node, ast.Pass):
            return
        elif isinstance(node, ast.Return):
            raise self.error(node, "`return` is only allowed (without a value) as the last "
                             "statement; kernels write results with baco.store")
        else:
            raise self.error(node, f"unsupported statement `{type(node).__name__}`: kernels "
                             "may use assignments, `for ... in range(...)`, static `if` and "
                             "calls")

    def assign(self, target: ast.expr, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, _Method):
                raise self.error(node, f"call the method: `{value.name}(...)`")
            self.env[target.id] = value
            self.loop_locals.discard(target.id)
        elif isinstance(target, ast.Tuple) and isinstance(value, tuple) \
                and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        else:
            raise self.error(node, "assign to a name (or unpack a tuple of the same length); "
                             "subscript and attribute targets are not supported — use "
                             "baco.store to write memory")

    def for_loop(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "`for ... else` is not supported")
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "the loop variable must be a single name")
        it = node.iter
        if not (isinstance(it, ast.Call) and self.expr(it.func) is builtins.range
                and not it.keywords and 1 <= len(it.args) <= 3):
            raise self.error(node, "only `for i in range(start, stop, step)` loops are "
                             "supported")
        bounds = [self.expr(a) for a in it.args]
        if len(bounds) == 1:
            bounds = [0, bounds[0], 1]
        elif len(bounds) == 2:
            bounds.append(1)
        if isinstance(bounds[2], int) and bounds[2] == 0:
            raise self.error(node, "range() step must not be zero")
        for b in bounds:
            t = self.type_of(b)
            if t is None or t.shape or not t.dtype.is_int or t.ptr:
                raise self.error(node, f"range() bounds must be integer scalars, got {b!r}")
        lo, hi, step = (self.runtime(b, node, "range bound") for b in bounds)
        name = node.target.id
        assigned = {n.id for stmt in node.body for n in ast.walk(stmt)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        carried = sorted(n for n in assigned if n in self.env and n != name
                         and n not in self.loop_locals)
        inits = []
        for n in carried:
            v = self.env[n]
            if not isinstance(v, (Value,) + _PY_NUMBER):
                raise self.error(node, f"`{n}` is reassigned in the loop but holds {v!r}, "
                                 "which is not a kernel value")
            inits.append(self.runtime(v, node, n))
        saved_env, saved_ops, saved_locals = dict(self.env), self.ops, set(self.loop_locals)
        self.ops = []
        iv = self.new(Type(int32), name)
        args = [self.new(v.type, n) for n, v in zip(carried, inits)]
        self.env[name] = iv
        for n, a in zip(carried, args):
            self.env[n] = a
        for stmt in node.body:
            self.statement(stmt)
        yields = []
        for n, init in zip(carried, inits):
            v = self.runtime(self.env[n], node, n)
            if v.type != init.type:
                raise self.error(node, f"`{n}` changes type in the loop: {init.type} before, "
                                 f"{v.type} after one iteration; give it its final type "
                                 "before the loop (e.g. baco.zeros((BM, BN), dtype=...))")
            yields.append(v)
        body_ops = self.ops
        new_locals = {n for n in assigned if n not in carried}
        self.ops, self.env, self.loop_locals = saved_ops, saved_env, saved_locals | new_locals
        self.env.pop(name, None)
        for n in new_locals:
            self.env.pop(n, None)
        results = [self.new(v.type, n) for n, v in zip(carried, inits)]
        self.ops.append(Op("for", results, [lo, hi, step, *inits], {}, self.loc(node),
                           Region([iv, *args], body_ops, yields)))
        for n, r in zip(carried, results):
            self.env[n] = r

    # ------------------------------------------------------------------ expressions
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
            op = _ARITH.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not supported")
            return self.binary(op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.error(node, "chained comparisons (a < b < c) are not supported; "
                                 "combine two comparisons with &")
            op = _CMP.get(type(node.ops[0]))
            if op is None:
                raise self.error(node, f"comparison {type(node.ops[0]).__name__} is not "
                                 "supported")
            return self.binary(op, self.expr(node.left), self.expr(node.comparators[0]), node)
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
                return _Method(obj, "to")
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

    # ------------------------------------------------------------------ typed operators
    def binary(self, op: str, left: Any, right: Any, node: ast.AST) -> Any:
        lt, rt = self.type_of(left), self.type_of(right)
        if lt is None or rt is None:
            if isinstance(left, Value) or isinstance(right, Value):
                bad = left if lt is None else right
                raise self.error(node, f"cannot apply `{op}` to {bad!r}")
            try:
                return _PY_OP[op](left, right)
            except (ArithmeticError, TypeError, ValueError) as exc:
                raise self.error(node, f"constant expression failed: {exc}") from None
        if not isinstance(left, Value) and not isinstance(right, Value):
            return _PY_OP[op](left, right)
        shape = broadcast_shapes(lt.shape, rt.shape) if not (lt.block_ptr or rt.block_ptr) \
            else None
        if lt.block_ptr or rt.block_ptr:
            raise self.error(node, "block pointers move with baco.advance(ptr, offsets), not "
                             "arithmetic")
        if shape is None:
            raise self.error(node, f"shapes do not broadcast in `{op}`: {lt} and {rt}; add "
                             "axes with x[:, None] / x[None, :]")
        if lt.ptr or rt.ptr:
            ptr_t, other_t = (lt, rt) if lt.ptr else (rt, lt)
            ok = op == "add" or (op == "sub" and lt.ptr)
            if not ok or other_t.ptr or not other_t.dtype.is_int:
                raise self.error(node, f"pointer arithmetic is `pointer + int` or `pointer - "
                                 f"int`; got `{op}` on {lt} and {rt}")
            result = Type(ptr_t.dtype, shape, ptr=True)
        elif op == "truediv" and lt.dtype.is_int and rt.dtype.is_int:
            raise self.error(node, "`/` on integers: use `//` for integer division (the seed's "
                             "Fig. 6.7 bug), or convert with .to(baco.float32)")
        elif op in ("lt", "le", "gt", "ge", "eq", "ne"):
            result = Type(int1, shape)
        elif op in ("and", "or", "xor"):
            if lt.dtype.is_float or rt.dtype.is_float:
                raise self.error(node, f"bitwise `{op}` needs integers or masks")
            dt = int1 if lt.dtype == rt.dtype == int1 else int32
            result = Type(dt, shape)
        elif op == "truediv":
            result = Type(float32, shape)
        else:
            result = Type(promote(lt.dtype, rt.dtype), shape)
        a = self.runtime(left, node, op)
        b = self.runtime(right, node, op)
        return self.emit(op, node, [a, b], result)

    # ------------------------------------------------------------------ calls
    def call(self, node: ast.Call) -> Any:
        fn = self.expr(node.func)
        args = [self.expr(a) for a in node.args]
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, "*args in calls are not supported")
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(fn, _Method):
            return self.cast(fn.value, args, kwargs, node)
        tag = getattr(fn, core.BUILTIN_TAG, None)
        if tag is not None:
            handler = getattr(self, f"b_{tag}")
            try:
                bound = inspect.signature(fn).bind(*args, **kwargs)
            except TypeError as exc:
                raise self.error(node, f"baco.{tag}: {exc}") from None
            bound.apply_defaults()
            return handler(node, **bound.arguments)
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

    def cast(self, value: Value, args: list, kwargs: dict, node: ast.AST) -> Value:
        target = args[0] if args else kwargs.get("dtype")
        dt = dtype_of(target)
        if dt is None:
            raise self.error(node, f".to(): unknown dtype {target!r}; use baco.int8, "
                             "baco.int32 or baco.float32")
        if value.type.ptr or value.type.block_ptr:
            raise self.error(node, ".to() does not apply to pointers")
        return self.emit("cast", node, [value], Type(dt, value.type.shape), dtype=dt.name)

    def _axis(self, node, axis) -> int:
        axis = self.constant_int(axis, node, "axis")
        if axis not in (0, 1, 2):
            raise self.error(node, f"axis must be 0, 1 or 2, got {axis}")
        return axis

    def b_program_id(self, node, axis):
        return self.emit("program_id", node, [], Type(int32), "pid", axis=self._axis(node, axis))

    def b_num_programs(self, node, axis):
        return self.emit("num_programs", node, [], Type(int32), axis=self._axis(node, axis))

    def b_arange(self, node, start, end):
        start = self.constant_int(start, node, "arange start")
        end = self.constant_int(end, node, "arange end")
        if end <= start:
            raise self.error(node, f"arange({start}, {end}) is empty")
        return self.emit("arange", node, [], Type(int32, (end - start,)), start=start, end=end)

    def _dtype(self, node, dtype) -> DType:
        dt = dtype_of(dtype)
        if dt is None:
            raise self.error(node, f"unknown dtype {dtype!r}; use baco.int8, baco.int32 or "
                             "baco.float32")
        return dt

    def b_zeros(self, node, shape, dtype):
        shape = self.shape_of(shape, node, "zeros")
        return self.emit("full", node, [], Type(self._dtype(node, dtype), shape), value=0)

    def b_full(self, node, shape, value, dtype):
        shape = self.shape_of(shape, node, "full")
        if isinstance(value, Value) or not isinstance(value, _PY_NUMBER):
            raise self.error(node, "baco.full needs a constant fill value")
        return self.emit("full", node, [], Type(self._dtype(node, dtype), shape), value=value)

    def _pointer(self, node, pointer, what) -> Value:
        if not isinstance(pointer, Value) or not (pointer.type.ptr or pointer.type.block_ptr):
            raise self.error(node, f"{what} needs a pointer (an array argument plus offsets) or "
                             f"a block pointer, got {pointer!r}")
        return pointer

    def _mask(self, node, mask, shape, what) -> Value | None:
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

    def _boundary(self, node, ptr: Value, boundary_check, what) -> tuple[int, ...]:
        check = tuple(self.constant_int(b, node, "boundary_check axis")
                      for b in (boundary_check or ()))
        if check and not ptr.type.block_ptr:
            raise self.error(node, f"{what}: boundary_check applies to block pointers; use "
                             "mask= with pointer blocks")
        if any(not 0 <= b < len(ptr.type.shape) for b in check):
            raise self.error(node, f"{what}: boundary_check axes must be < {len(ptr.type.shape)}")
        return check

    def b_load(self, node, pointer, mask, other, boundary_check):
        ptr = self._pointer(node, pointer, "baco.load")
        shape = ptr.type.shape
        m = self._mask(node, mask, shape, "baco.load")
        if m is not None and ptr.type.block_ptr:
            raise self.error(node, "baco.load: a block pointer takes boundary_check=, not mask=")
        check = self._boundary(node, ptr, boundary_check, "baco.load")
        if isinstance(other, Value) or not isinstance(other, _PY_NUMBER):
            raise self.error(node, "baco.load: `other` must be a constant number")
        ops = [ptr] + ([m] if m is not None else [])
        attrs = {"other": other, **({"boundary_check": check} if check else {})}
        return self.emit("load", node, ops, Type(ptr.type.dtype, shape), **attrs)

    def b_store(self, node, pointer, value, mask, boundary_check):
        ptr = self._pointer(node, pointer, "baco.store")
        shape = ptr.type.shape
        val = self.runtime(value, node, "baco.store value")
        if val.type.ptr or val.type.block_ptr:
            raise self.error(node, "baco.store: cannot store a pointer")
        if val.type.dtype != ptr.type.dtype:
            raise self.error(node, f"baco.store: the value is {val.type.dtype} but the pointer "
                             f"is ptr<{ptr.type.dtype}>; convert it with "
                             f"value.to({ptr.type.dtype!r})")
        if broadcast_shapes(val.type.shape, shape) != shape:
            raise self.error(node, f"baco.store: value {val.type} does not broadcast to the "
                             f"pointer block {shape}")
        m = self._mask(node, mask, shape, "baco.store")
        if m is not None and ptr.type.block_ptr:
            raise self.error(node, "baco.store: a block pointer takes boundary_check=, not "
                             "mask=")
        check = self._boundary(node, ptr, boundary_check, "baco.store")
        ops = [ptr, val] + ([m] if m is not None else [])
        self.emit("store", node, ops, None, **({"boundary_check": check} if check else {}))

    def b_dot(self, node, a, b, acc):
        for name, v in (("a", a), ("b", b)):
            if not isinstance(v, Value) or not v.type.is_data or len(v.type.shape) != 2:
                raise self.error(node, f"baco.dot: `{name}` must be a 2-D block, got "
                                 f"{getattr(v, 'type', v)}")
        (m, k1), (k2, n) = a.type.shape, b.type.shape
        if k1 != k2:
            raise self.error(node, f"baco.dot: shape mismatch: a is {m}x{k1} and b is {k2}x{n}; "
                             "the inner dimensions must agree (load both with the same "
                             "BLOCK_K)")
        pair = (a.type.dtype, b.type.dtype)
        if pair == (int8, int8):
            out = int32
        elif pair == (float32, float32):
            out = float32
        else:
            raise self.error(node, f"baco.dot: operands are {pair[0]} and {pair[1]}; use two "
                             "int8 blocks (int32 result) or two float32 blocks")
        rtype = Type(out, (m, n))
        ops = [a, b]
        if acc is not None:
            acc = self.runtime(acc, node, "baco.dot acc")
            if acc.type != rtype:
                raise self.error(node, f"baco.dot: acc is {acc.type}, expected {rtype}")
            ops.append(acc)
        return self.emit("dot", node, ops, rtype)

    def b_cdiv(self, node, a, b):
        if not isinstance(a, Value) and not isinstance(b, Value):
            return -(-a // b)
        return self.binary("floordiv", self.binary("sub", self.binary("add", a, b, node), 1,
                                                   node), b, node)

    def _elementwise(self, node, name, x, y) -> Value:
        tx, ty = self.type_of(x), self.type_of(y)
        if tx is None or ty is None or tx.ptr or ty.ptr or tx.block_ptr or ty.block_ptr:
            raise self.error(node, f"baco.{name}: operands must be numbers or blocks")
        shape = broadcast_shapes(tx.shape, ty.shape)
        if shape is None:
            raise self.error(node, f"baco.{name}: shapes {tx} and {ty} do not broadcast")
        dt = tx.dtype if tx.dtype == ty.dtype else promote(tx.dtype, ty.dtype)
        return self.emit(name, node, [self.runtime(x, node, name), self.runtime(y, node, name)],
                         Type(dt, shape))

    def b_maximum(self, node, x, y):
        if not isinstance(x, Value) and not isinstance(y, Value):
            return max(x, y)
        return self._elementwise(node, "maximum", x, y)

    def b_gelu(self, node, x):
        t = self.type_of(x)
        if not isinstance(x, Value) or t is None or t.ptr or t.block_ptr or t.dtype != int32:
            raise self.error(node, "baco.gelu: the operand must be an int32 block (an "
                             "accumulator, before its scale)")
        return self.emit("gelu", node, [x], t)

    def b_softmax(self, node, x, mask):
        t = self.type_of(x)
        if (not isinstance(x, Value) or t is None or t.ptr or t.block_ptr or t.dtype != int32
                or len(t.shape) != 2):
            raise self.error(node, "baco.softmax: the operand must be a 2-D int32 block (an "
                             "accumulator, before any scale)")
        m = self._mask(node, mask, t.shape, "baco.softmax")
        return self.emit("softmax", node, [x] + ([m] if m is not None else []),
                         Type(int8, t.shape))

    def b_minimum(self, node, x, y):
        if not isinstance(x, Value) and not isinstance(y, Value):
            return min(x, y)
        return self._elementwise(node, "minimum", x, y)

    def b_where(self, node, condition, x, y):
        c = self.runtime(condition, node, "baco.where condition")
        if c.type.dtype != int1:
            raise self.error(node, "baco.where: the condition must be a mask (i1)")
        v = self._elementwise(node, "where", x, y)
        shape = broadcast_shapes(c.type.shape, v.type.shape)
        if shape is None:
            raise self.error(node, f"baco.where: condition {c.type} does not broadcast to "
                             f"{v.type}")
        op = self.ops.pop()
        return self.emit("where", node, [c, *op.operands], v.type.with_shape(shape))

    def b_make_block_ptr(self, node, base, shape, strides, offsets, block_shape, order):
        if not isinstance(base, Value) or not base.type.ptr or base.type.shape:
            raise self.error(node, "baco.make_block_ptr: base must be an array argument")
        block = self.shape_of(block_shape, node, "make_block_ptr block_shape")
        rank = len(block)
        parts = []
        for what, items in (("shape", shape), ("strides", strides), ("offsets", offsets)):
            items = tuple(items) if isinstance(items, (tuple, list)) else (items,)
            if len(items) != rank:
                raise self.error(node, f"baco.make_block_ptr: {what} has {len(items)} entries "
                                 f"for a rank-{rank} block")
            for v in items:
                t = self.type_of(v)
                if t is None or t.shape or not t.dtype.is_int or t.ptr:
                    raise self.error(node, f"baco.make_block_ptr: {what} must be integer "
                                     f"scalars, got {v!r}")
            parts += [self.runtime(v, node, what) for v in items]
        order = tuple(order) if order is not None else tuple(reversed(range(rank)))
        if sorted(order) != list(range(rank)):
            raise self.error(node, f"baco.make_block_ptr: order {order} is not a permutation")
        return self.emit("make_block_ptr", node, [base, *parts],
                         Type(base.type.dtype, block, block_ptr=True), order=order)

    def b_advance(self, node, block_ptr, offsets):
        if not isinstance(block_ptr, Value) or not block_ptr.type.block_ptr:
            raise self.error(node, "baco.advance needs a block pointer (baco.make_block_ptr)")
        items = tuple(offsets) if isinstance(offsets, (tuple, list)) else (offsets,)
        if len(items) != len(block_ptr.type.shape):
            raise self.error(node, "baco.advance: one offset per axis")
        vals = [self.runtime(v, node, "advance offset") for v in items]
        for v in vals:
            if v.type.shape or not v.type.dtype.is_int:
                raise self.error(node, "baco.advance: offsets must be integer scalars")
        return self.emit("advance", node, [block_ptr, *vals], block_ptr.type)


def build_ir(fn: Callable, params: list[tuple[str, Type | None, Any]]) -> Function:
    """The IR of kernel ``fn`` for ``params``: (name, run-time type or None, constant value)."""
    node, file, _ = kernel_source(fn)
    return FrontEnd(fn, node, file).build(params)


__all__ = ["FrontEnd", "build_ir", "kernel_source"]
