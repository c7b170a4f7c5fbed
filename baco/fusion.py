"""Planning a fused GEMM chain: the tiles the model says move least, among those the lowering
can hold.

`accel.lower.chain.lower_gemm_chain` runs a chain as one trace (order mlkn: E resident for all
of N) and, by itself, picks tiles greedily. Here every DIM-multiple (T_M, T_K, T_L) with the
n tile spanning N is scored with `perfmodels.fusion.chain_data_volume` (whose traffic equals
the bytes that trace moves, `tests/perfmodels/test_fusion.py`), those whose buffers overflow
the scratchpad or accumulator (`accel.lower.chain.footprint`) are dropped, and the least
traffic wins (ties: the largest tiles, the fewest instructions).
"""

from __future__ import annotations

import itertools

import numpy as np

from accel.arch import HardwareConfig
from accel.isa import IsaParams
from accel.lower.chain import TILE_DIMS, chain_dims, choose_tiles, footprint
from perfmodels.fusion import ChainDims, chain_data_volume
from workloads.layer import Layer


def plan_chain_tiles(first: Layer, second: Layer, hw: HardwareConfig) -> dict[str, int]:
    """Tiles for ``lower_gemm_chain(first, second, hw, tiles, "mlkn")`` with the least DRAM
    traffic by the model; the lowering's own greedy choice when no tile with the n tile
    spanning N fits (its `InfeasibleError` if nothing does)."""
    params = IsaParams.from_hardware(hw)
    dim = params.dim
    batch, m, k, l_, n = chain_dims(first, second)
    span = {d: -(-x // dim) * dim for d, x in zip(TILE_DIMS, (m, k, l_, n))}
    fitting = []
    for tm, tk, tl in itertools.product(*(range(dim, span[d] + 1, dim) for d in "mkl")):
        tiles = {"m": tm, "k": tk, "l": tl, "n": span["n"]}
        sp, acc = footprint(tiles, n, "mlkn", dim)
        if sum(sp.values()) <= params.sp_rows and sum(acc.values()) <= params.acc_rows:
            fitting.append(tiles)
    if not fitting:
        return choose_tiles(first, second, params)
    grid = np.array([[t[d] for d in TILE_DIMS] for t in fitting], np.float32)
    dv, _ = chain_data_volume(ChainDims(batch, m, k, l_, n), grid, "mlkn")
    dv = np.asarray(dv, np.float64)
    size = grid[:, :3].prod(axis=1)
    best = min(range(len(fitting)), key=lambda i: (dv[i], -size[i]))
    return fitting[best]


__all__ = ["plan_chain_tiles"]
