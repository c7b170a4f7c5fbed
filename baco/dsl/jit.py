"""``@baco.jit``: binding a launch's arguments, specializing the IR, and picking a backend.

``kernel[grid](*args, **consts)`` is ``__getitem__`` returning the launcher, as in Triton. Array
arguments become pointers (their dtype is part of the specialization), ints and floats become
run-time scalars, ``baco.const`` parameters are baked into the IR; one IR is built and cached
per (argument types, constants).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from baco.dsl import core
from baco.dsl.frontend import build_ir
from baco.dsl.ir import Function
from baco.dsl.machine import Interpreter
from baco.dsl.types import Type, dtype_of, float32, int1, int32
from workloads.errors import DSLError

BACKENDS = ("interpreter", "sim")
_LAUNCH_OPTIONS = ("backend", "hw")


@dataclasses.dataclass(frozen=True)
class Bound:
    """One launch's arguments: the specialization key, the IR's params, run-time values."""

    key: tuple
    params: list[tuple[str, Type | None, Any]]
    runtime: list[Any]
    named: dict[str, Any]


def _is_const(annotation: Any, globals_: dict) -> bool:
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, globals_)
        except (NameError, AttributeError, SyntaxError):
            return annotation.split(".")[-1] == "const"
    return annotation is core.const


def _runtime_type(name: str, value: Any) -> Type:
    if isinstance(value, np.ndarray):
        dt = dtype_of(value.dtype)
        if dt is None or dt == int1:
            raise DSLError(f"argument `{name}`: arrays must be int8, int32 or float32, got "
                           f"{value.dtype}; convert with .astype(np.int8) (or np.int32, "
                           "np.float32)")
        if not value.flags.c_contiguous or not value.flags.writeable:
            raise DSLError(f"argument `{name}`: arrays must be C-contiguous and writeable; pass "
                           "np.ascontiguousarray(x)")
        return Type(dt, ptr=True)
    if isinstance(value, (bool, np.bool_)):
        return Type(int1)
    if isinstance(value, (int, np.integer)):
        return Type(int32)
    if isinstance(value, (float, np.floating)):
        return Type(float32)
    raise DSLError(f"argument `{name}`: expected a numpy array, an int or a float, got "
                   f"{type(value).__name__}; mark compile-time parameters `: baco.const`")


class JITFunction:
    """A ``@baco.jit`` kernel: ``kernel[grid](*args, **kwargs)`` runs it, ``.ir(...)`` shows it."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.consts = {name for name, p in self.signature.parameters.items()
                       if p.annotation is not inspect.Parameter.empty
                       and _is_const(p.annotation, fn.__globals__)}
        for name, p in self.signature.parameters.items():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise DSLError(f"kernel {fn.__qualname__}: parameter `{name}`: *args and "
                               "**kwargs are not supported")
        self._cache: dict[tuple, Function] = {}
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<baco.jit {self.fn.__qualname__}>"

    def __call__(self, *args, **kwargs):
        raise DSLError(f"launch {self.fn.__qualname__} as kernel[grid](*args): a kernel runs "
                       "once per program instance of a grid")

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return functools.partial(self.run, grid=grid)

    # ------------------------------------------------------------------ binding
    def bind(self, args: tuple, kwargs: dict) -> Bound:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise DSLError(f"kernel {self.fn.__qualname__}: {exc}") from None
        bound.apply_defaults()
        params, runtime, key = [], [], []
        for name, value in bound.arguments.items():
            if name in self.consts:
                if isinstance(value, np.ndarray):
                    raise DSLError(f"argument `{name}` is a baco.const; pass a number, not an "
                                   "array")
                params.append((name, None, value))
                key.append((name, repr(value)))
            else:
                t = _runtime_type(name, value)
                params.append((name, t, None))
                runtime.append(value)
                key.append((name, str(t)))
        return Bound(tuple(key), params, runtime, dict(bound.arguments))

    def specialize(self, bound: Bound) -> Function:
        fn = self._cache.get(bound.key)
        if fn is None:
            fn = self._cache[bound.key] = build_ir(self.fn, bound.params)
        return fn

    def ir(self, *args, **kwargs) -> Function:
        """The block IR for these arguments (``str()`` it for the text form)."""
        return self.specialize(self.bind(args, kwargs))

    # ------------------------------------------------------------------ launching
    @staticmethod
    def grid_of(grid: Any, named: dict[str, Any]) -> tuple[int, ...]:
        if callable(grid):
            grid = grid(named)
        grid = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
        if not 1 <= len(grid) <= 3 or any(int(g) < 0 for g in grid):
            raise DSLError(f"grid must be 1 to 3 non-negative ints, got {grid}")
        return tuple(int(g) for g in grid)

    def run(self, *args, grid: Any, backend: str = "interpreter", hw: Any = "gemmini_default",
            **kwargs) -> Any:
        """Launch on ``backend``: ``"interpreter"`` (numpy; returns None) or ``"sim"`` (a
        Gemmini trace on `accel.sim`; returns a `baco.dsl.sim_backend.SimReport`)."""
        if backend not in BACKENDS:
            raise DSLError(f"unknown backend {backend!r}; use one of {BACKENDS}")
        bound = self.bind(args, kwargs)
        fn = self.specialize(bound)
        shape = self.grid_of(grid, bound.named)
        if backend == "interpreter":
            Interpreter(fn, bound.runtime, shape).run()
            return None
        from baco.dsl.sim_backend import simulate
        return simulate(fn, bound.runtime, shape, hw)


def jit(fn: Callable | None = None) -> Any:
    """Decorator: make ``fn`` a block-DSL kernel (see `baco.dsl`)."""
    if fn is None:
        return jit
    if isinstance(fn, JITFunction):
        return fn
    return JITFunction(fn)


__all__ = ["BACKENDS", "Bound", "JITFunction", "jit"]
