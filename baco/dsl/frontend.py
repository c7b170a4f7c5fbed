"""The front end: a kernel's Python AST, type-checked into the block IR.

The visitor evaluates what it can at compile time (constants, ``baco.const`` parameters, Python
arithmetic on them, static ``if``) and emits typed IR ops for the rest, so every block shape is
known and checked here: a shape mismatch in ``dot``, a non-constant block size or a statement
the DSL does not have is a `DSLError` naming the kernel's ``file:line`` and what to change.
Statements are visited here; expressions in `frontend_exprs`, typed arithmetic in
`frontend_arith`, the ``baco.*`` primitives in `frontend_builtins` and `frontend_memory`, IR
construction in `frontend_builder`.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from baco.dsl.frontend_arith import ARITH, binary
from baco.dsl.frontend_builder import PY_NUMBER
from baco.dsl.frontend_exprs import ExpressionVisitor, Method
from baco.dsl.ir import Function, Op, Param, Region, Value
from baco.dsl.types import Type, int32
from workloads.errors import DSLError


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


class FrontEnd(ExpressionVisitor):
    """One kernel specialized on (argument types, constants), visited into a `Function`."""

    def __init__(self, fn: Callable, node: ast.FunctionDef, file: str) -> None:
        super().__init__(file, node.lineno, fn.__globals__)
        self.fn = fn
        self.node = node

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
            op = ARITH.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not supported")
            self.env[node.target.id] = binary(self, op, old, self.expr(node.value), node)
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
            if isinstance(value, Method):
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
            if not isinstance(v, (Value,) + PY_NUMBER):
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


def build_ir(fn: Callable, params: list[tuple[str, Type | None, Any]]) -> Function:
    """The IR of kernel ``fn`` for ``params``: (name, run-time type or None, constant value)."""
    node, file, _ = kernel_source(fn)
    return FrontEnd(fn, node, file).build(params)


__all__ = ["FrontEnd", "build_ir", "kernel_source"]
