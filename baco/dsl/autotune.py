"""``@baco.autotune``: pick a kernel's block sizes per problem size, as Triton's autotuner does.

Each config is scored once per ``key`` (the values of the named arguments, e.g. M, N, K), by the
simulator's cycles (``score="sim"``: the launch compiled to a trace and timed, on copies of the
arrays) or by the analytical model (``score="model"``: the blocks as a Gemmini mapping of the
kernel's GEMM, `perfmodels.analytic.exact`'s cycles). The best config is cached per key and
used for every launch with that key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from baco.dsl.jit import JITFunction
from workloads.errors import BacoError, DSLError

SCORES = ("sim", "model")


@dataclasses.dataclass(frozen=True)
class Config:
    """One candidate: constant arguments (block sizes) for the kernel, Triton's Config."""

    kwargs: dict[str, Any]

    def __init__(self, kwargs: dict[str, Any] | None = None, **more: Any) -> None:
        object.__setattr__(self, "kwargs", {**(kwargs or {}), **more})

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) + ")"


def gemm_mapping(m: int, n: int, k: int, bm: int, bn: int, bk: int, dim: int):
    """The Gemmini mapping that one ``bm x bn`` accumulator tile per program, reduced in ``bk``
    steps, is; and the padded GEMM layer it covers exactly."""
    from accel.mapping import Mapping
    from workloads.layer import Layer

    def largest_divisor(x: int) -> int:
        return max(d for d in range(1, min(dim, x) + 1) if x % d == 0)

    cs, ks = largest_divisor(bk), largest_divisor(bn)
    pm, pk, pn = (math.ceil(m / bm) * bm, math.ceil(k / bk) * bk, math.ceil(n / bn) * bn)
    text = (f"L3[WIO] P{pm // bm} K{pn // bn} C{pk // bk} - L2[WI] K{ks}X - "
            f"L1[O] K{bn // ks} C{bk // cs} P{bm} C{cs}X - L0[W] N1")
    return Mapping.from_timeloop(text), Layer.gemm(M=pm, K_red=pk, N_out=pn)


class Autotuner:
    """A kernel plus its configs; launched like the kernel, ``tuner[grid](*args, **kw)``."""

    def __init__(self, kernel: JITFunction, configs: Sequence[Config], key: Sequence[str],
                 score: str, hw: Any, gemm: Callable[[dict], tuple] | None,
                 blocks: Sequence[str] | None) -> None:
        if not isinstance(kernel, JITFunction):
            raise DSLError("@baco.autotune goes above @baco.jit")
        if not configs:
            raise DSLError("@baco.autotune needs at least one Config")
        if score not in SCORES:
            raise DSLError(f"autotune: score must be one of {SCORES}, got {score!r}")
        if score == "model" and (gemm is None or blocks is None or len(blocks) != 3):
            raise DSLError("autotune(score='model') needs gemm=lambda args: (M, N, K) and "
                           "blocks=(BLOCK_M name, BLOCK_N name, BLOCK_K name)")
        self.kernel = kernel
        self.configs = [c if isinstance(c, Config) else Config(c) for c in configs]
        self.key = tuple(key)
        self.score = score
        self.hw = hw
        self.gemm = gemm
        self.blocks = tuple(blocks) if blocks else None
        self.best: dict[tuple, Config] = {}
        self.scores: dict[tuple, list[float]] = {}
        functools.update_wrapper(self, kernel.fn)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return functools.partial(self.run, grid=grid)

    def _named(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        params = list(self.kernel.signature.parameters)
        named = dict(zip(params, args))
        named.update(kwargs)
        missing = [k for k in self.key if k not in named]
        if missing:
            raise DSLError(f"autotune: key arguments {missing} are not among the launch's "
                           "arguments")
        return named

    def score_config(self, config: Config, args: tuple, kwargs: dict, grid: Any,
                     named: dict[str, Any]) -> float:
        """Cycles of one config (inf if it does not fit the hardware)."""
        from baco.dsl.sim_backend import CapacityError, resolve_hw, simulate

        hw = resolve_hw(self.hw)
        if self.score == "model":
            from perfmodels.analytic import exact

            m, n, k = (int(v) for v in self.gemm(named))
            bm, bn, bk = (int(config.kwargs[b]) for b in self.blocks)
            mapping, padded = gemm_mapping(m, n, k, bm, bn, bk, hw.pe_rows)
            try:
                return float(exact(padded, hw, mapping).cycles)
            except BacoError:
                return math.inf
        copies = tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in args)
        bound = self.kernel.bind(copies, {**kwargs, **config.kwargs})
        fn = self.kernel.specialize(bound)
        try:
            # A functional run on copies: it shares the compiled simulator with real launches.
            report = simulate(fn, bound.runtime, self.kernel.grid_of(grid, bound.named), hw)
        except CapacityError:
            return math.inf
        return float(report.cycles)

    def run(self, *args, grid: Any, **kwargs) -> Any:
        named = self._named(args, kwargs)
        key = tuple(named[k] for k in self.key)
        if key not in self.best:
            launch = {k: v for k, v in kwargs.items() if k not in ("backend", "hw")}
            scores = [self.score_config(c, args, launch, grid, named) for c in self.configs]
            if not np.isfinite(min(scores)):
                raise DSLError(f"autotune: no config fits {self.hw} for key {key}: "
                               f"{self.configs}")
            self.scores[key] = scores
            self.best[key] = self.configs[int(np.argmin(scores))]
        return self.kernel.run(*args, grid=grid, **kwargs, **self.best[key].kwargs)


def autotune(configs: Sequence[Config], key: Sequence[str], *, score: str = "sim",
             hw: Any = "gemmini_default", gemm: Callable[[dict], tuple] | None = None,
             blocks: Sequence[str] | None = None) -> Callable[[JITFunction], Autotuner]:
    """Decorator over ``@baco.jit``: choose among ``configs`` per value of the ``key`` args.

    ``score="sim"`` times each config on the simulator for ``hw``; ``score="model"`` scores
    the GEMM ``gemm(args) -> (M, N, K)`` tiled by the config's ``blocks`` (names of its BLOCK_M,
    BLOCK_N, BLOCK_K constants) with the analytical model.
    """
    return lambda kernel: Autotuner(kernel, configs, key, score, hw, gemm, blocks)


__all__ = ["SCORES", "Autotuner", "Config", "autotune", "gemm_mapping"]
