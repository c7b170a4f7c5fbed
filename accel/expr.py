"""`Expr`: a template quantity, a number or a small arithmetic expression over the hardware
parameters (``2 * pe_cols``, ``acc_kb / pe_cols``).

Expressions are checked when parsed, so a template file cannot run code, and evaluated with
`jax.numpy` or `numpy`, so relaxed (continuous, traced) hardware goes through the same formulas
as a discrete `accel.arch.HardwareConfig`.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import operator
from collections.abc import Mapping as AbcMapping
from typing import Any

import jax.numpy as jnp

from workloads.errors import ConfigError

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}


FUNCS = ("min", "max", "sqrt")
"""The functions an expression may call."""


def _call(name: str, args: list[Any], xp: Any) -> Any:
    if name == "sqrt":
        return xp.sqrt(*args)
    return functools.reduce(xp.minimum if name == "min" else xp.maximum, args)


@functools.lru_cache(maxsize=None)
def _compiled(text: str) -> ast.AST:
    return ast.parse(text, mode="eval").body


@dataclasses.dataclass(frozen=True)
class Expr:
    """A number or an arithmetic expression over hardware parameters, from a template field.

    Only ``+ - * / **``, parentheses, numbers, parameter names and ``min``/``max``/``sqrt``
    are allowed, so a template file cannot run code. Evaluation works on Python numbers and on
    traced JAX values alike.

    >>> Expr.parse("2 * pe_cols", "f", ("pe_cols",)).evaluate({"pe_cols": 16})
    32
    """

    text: str
    names: tuple[str, ...]

    @classmethod
    def parse(cls, value: Any, where: str, allowed: tuple[str, ...]) -> Expr:
        if isinstance(value, bool) or value is None:
            raise ConfigError(f"{where}: expected a number or an expression, got {value!r}")
        text = str(value).strip()
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as exc:
            raise ConfigError(f"{where}: cannot parse expression {text!r}: {exc.msg}") from None
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
                continue
            if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
                continue
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                    and not isinstance(node.value, bool):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in FUNCS and not node.keywords:
                continue
            if isinstance(node, ast.Name):
                if node.id in FUNCS:
                    continue
                if node.id not in allowed:
                    close = difflib.get_close_matches(node.id, allowed, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise ConfigError(f"{where}: unknown name {node.id!r} in {text!r}{hint} "
                                      f"(known: {', '.join(allowed)})")
                names.append(node.id)
                continue
            raise ConfigError(f"{where}: {type(node).__name__} is not allowed in {text!r}; "
                              "use numbers, parameter names, + - * / ** and min/max/sqrt")
        return cls(text=text, names=tuple(sorted(set(names))))

    def evaluate(self, env: AbcMapping[str, Any], xp: Any = jnp) -> Any:
        """Value at `env`; `xp` (numpy or jax.numpy) supplies min/max/sqrt."""
        return _eval_node(_compiled(self.text), env, xp)


def _eval_node(node: ast.AST, env: AbcMapping[str, Any], xp: Any) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval_node(node.left, env, xp),
                                      _eval_node(node.right, env, xp))
    if isinstance(node, ast.UnaryOp):
        value = _eval_node(node.operand, env, xp)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        return _call(node.func.id, [_eval_node(a, env, xp) for a in node.args], xp)
    raise AssertionError(f"unexpected node {node!r}")  # Expr.parse rejects everything else


__all__ = ["FUNCS", "Expr"]
