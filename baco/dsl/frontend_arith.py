"""Typed arithmetic in the front end: binary operators on numbers, blocks and pointers, casts,
and the math primitives (``dot``, ``cdiv``, ``maximum``/``minimum``, ``where``, ``gelu``,
``softmax``). Compile-time operands fold in Python; the rest become IR ops with checked
shapes and dtypes."""

from __future__ import annotations

import ast
import operator
from typing import Any

from baco.dsl.frontend_builder import Builder
from baco.dsl.ir import Value
from baco.dsl.types import Type, broadcast_shapes, dtype_of, float32, int1, int8, int32, promote

ARITH = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
         ast.Mod: "mod", ast.Div: "truediv", ast.BitAnd: "and", ast.BitOr: "or",
         ast.BitXor: "xor"}
CMP = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_OP = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "floordiv": operator.floordiv, "mod": operator.mod, "truediv": operator.truediv,
          "and": operator.and_, "or": operator.or_, "xor": operator.xor, "lt": operator.lt,
          "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
          "ne": operator.ne}


def binary(bld: Builder, op: str, left: Any, right: Any, node: ast.AST) -> Any:
    """``left op right``: folded when both are constants, else an op of the result's type."""
    lt, rt = bld.type_of(left), bld.type_of(right)
    if lt is None or rt is None:
        if isinstance(left, Value) or isinstance(right, Value):
            bad = left if lt is None else right
            raise bld.error(node, f"cannot apply `{op}` to {bad!r}")
        try:
            return _PY_OP[op](left, right)
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise bld.error(node, f"constant expression failed: {exc}") from None
    if not isinstance(left, Value) and not isinstance(right, Value):
        return _PY_OP[op](left, right)
    shape = broadcast_shapes(lt.shape, rt.shape) if not (lt.block_ptr or rt.block_ptr) \
        else None
    if lt.block_ptr or rt.block_ptr:
        raise bld.error(node, "block pointers move with baco.advance(ptr, offsets), not "
                        "arithmetic")
    if shape is None:
        raise bld.error(node, f"shapes do not broadcast in `{op}`: {lt} and {rt}; add "
                        "axes with x[:, None] / x[None, :]")
    if lt.ptr or rt.ptr:
        ptr_t, other_t = (lt, rt) if lt.ptr else (rt, lt)
        ok = op == "add" or (op == "sub" and lt.ptr)
        if not ok or other_t.ptr or not other_t.dtype.is_int:
            raise bld.error(node, f"pointer arithmetic is `pointer + int` or `pointer - "
                            f"int`; got `{op}` on {lt} and {rt}")
        result = Type(ptr_t.dtype, shape, ptr=True)
    elif op == "truediv" and lt.dtype.is_int and rt.dtype.is_int:
        raise bld.error(node, "`/` on integers: use `//` for integer division (the seed's "
                        "Fig. 6.7 bug), or convert with .to(baco.float32)")
    elif op in ("lt", "le", "gt", "ge", "eq", "ne"):
        result = Type(int1, shape)
    elif op in ("and", "or", "xor"):
        if lt.dtype.is_float or rt.dtype.is_float:
            raise bld.error(node, f"bitwise `{op}` needs integers or masks")
        dt = int1 if lt.dtype == rt.dtype == int1 else int32
        result = Type(dt, shape)
    elif op == "truediv":
        result = Type(float32, shape)
    else:
        result = Type(promote(lt.dtype, rt.dtype), shape)
    a = bld.runtime(left, node, op)
    b = bld.runtime(right, node, op)
    return bld.emit(op, node, [a, b], result)


def cast(bld: Builder, value: Value, args: list, kwargs: dict, node: ast.AST) -> Value:
    """``value.to(dtype)``."""
    target = args[0] if args else kwargs.get("dtype")
    dt = dtype_of(target)
    if dt is None:
        raise bld.error(node, f".to(): unknown dtype {target!r}; use baco.int8, "
                        "baco.int32 or baco.float32")
    if value.type.ptr or value.type.block_ptr:
        raise bld.error(node, ".to() does not apply to pointers")
    return bld.emit("cast", node, [value], Type(dt, value.type.shape), dtype=dt.name)


def b_dot(bld: Builder, node, a, b, acc):
    for name, v in (("a", a), ("b", b)):
        if not isinstance(v, Value) or not v.type.is_data or len(v.type.shape) != 2:
            raise bld.error(node, f"baco.dot: `{name}` must be a 2-D block, got "
                            f"{getattr(v, 'type', v)}")
    (m, k1), (k2, n) = a.type.shape, b.type.shape
    if k1 != k2:
        raise bld.error(node, f"baco.dot: shape mismatch: a is {m}x{k1} and b is {k2}x{n}; "
                        "the inner dimensions must agree (load both with the same "
                        "BLOCK_K)")
    pair = (a.type.dtype, b.type.dtype)
    if pair == (int8, int8):
        out = int32
    elif pair == (float32, float32):
        out = float32
    else:
        raise bld.error(node, f"baco.dot: operands are {pair[0]} and {pair[1]}; use two "
                        "int8 blocks (int32 result) or two float32 blocks")
    rtype = Type(out, (m, n))
    ops = [a, b]
    if acc is not None:
        acc = bld.runtime(acc, node, "baco.dot acc")
        if acc.type != rtype:
            raise bld.error(node, f"baco.dot: acc is {acc.type}, expected {rtype}")
        ops.append(acc)
    return bld.emit("dot", node, ops, rtype)


def b_cdiv(bld: Builder, node, a, b):
    if not isinstance(a, Value) and not isinstance(b, Value):
        return -(-a // b)
    return binary(bld, "floordiv", binary(bld, "sub", binary(bld, "add", a, b, node), 1,
                                          node), b, node)


def _elementwise(bld: Builder, node, name, x, y) -> Value:
    tx, ty = bld.type_of(x), bld.type_of(y)
    if tx is None or ty is None or tx.ptr or ty.ptr or tx.block_ptr or ty.block_ptr:
        raise bld.error(node, f"baco.{name}: operands must be numbers or blocks")
    shape = broadcast_shapes(tx.shape, ty.shape)
    if shape is None:
        raise bld.error(node, f"baco.{name}: shapes {tx} and {ty} do not broadcast")
    dt = tx.dtype if tx.dtype == ty.dtype else promote(tx.dtype, ty.dtype)
    return bld.emit(name, node, [bld.runtime(x, node, name), bld.runtime(y, node, name)],
                    Type(dt, shape))


def b_maximum(bld: Builder, node, x, y):
    if not isinstance(x, Value) and not isinstance(y, Value):
        return max(x, y)
    return _elementwise(bld, node, "maximum", x, y)


def b_gelu(bld: Builder, node, x):
    t = bld.type_of(x)
    if not isinstance(x, Value) or t is None or t.ptr or t.block_ptr or t.dtype != int32:
        raise bld.error(node, "baco.gelu: the operand must be an int32 block (an "
                        "accumulator, before its scale)")
    return bld.emit("gelu", node, [x], t)


def b_softmax(bld: Builder, node, x, mask):
    t = bld.type_of(x)
    if (not isinstance(x, Value) or t is None or t.ptr or t.block_ptr or t.dtype != int32
            or len(t.shape) != 2):
        raise bld.error(node, "baco.softmax: the operand must be a 2-D int32 block (an "
                        "accumulator, before any scale)")
    m = bld.mask_of(node, mask, t.shape, "baco.softmax")
    return bld.emit("softmax", node, [x] + ([m] if m is not None else []),
                    Type(int8, t.shape))


def b_minimum(bld: Builder, node, x, y):
    if not isinstance(x, Value) and not isinstance(y, Value):
        return min(x, y)
    return _elementwise(bld, node, "minimum", x, y)


def b_where(bld: Builder, node, condition, x, y):
    c = bld.runtime(condition, node, "baco.where condition")
    if c.type.dtype != int1:
        raise bld.error(node, "baco.where: the condition must be a mask (i1)")
    v = _elementwise(bld, node, "where", x, y)
    shape = broadcast_shapes(c.type.shape, v.type.shape)
    if shape is None:
        raise bld.error(node, f"baco.where: condition {c.type} does not broadcast to "
                        f"{v.type}")
    op = bld.ops.pop()
    return bld.emit("where", node, [c, *op.operands], v.type.with_shape(shape))


__all__ = ["ARITH", "CMP", "b_cdiv", "b_dot", "b_gelu", "b_maximum", "b_minimum", "b_softmax",
           "b_where", "binary", "cast"]
