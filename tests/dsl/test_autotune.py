"""@baco.autotune: one choice per key, scored by the analytical model or by simulated cycles,
and the launch runs the chosen blocks."""

from __future__ import annotations

import math

import numpy as np
import pytest

import baco
from baco.dsl.autotune import gemm_mapping
from workloads.errors import DSLError

CONFIGS = [baco.Config(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk)
           for bm, bn, bk in [(16, 16, 16), (32, 32, 32), (128, 64, 32), (4096, 4096, 16)]]
BLOCKS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K")


def _grid(meta):
    return (baco.cdiv(meta["M"], meta["BLOCK_SIZE_M"]) * baco.cdiv(meta["N"],
                                                                   meta["BLOCK_SIZE_N"]),)


@pytest.mark.parametrize("score", ["model", "sim"])
def test_autotune_picks_the_fastest_fitting_blocks_once_per_key(kernel, score):
    tuner = baco.autotune(CONFIGS, key=["M", "N", "K"], score=score,
                          gemm=lambda a: (a["M"], a["N"], a["K"]), blocks=BLOCKS)(
        kernel("matmul", "matmul_kernel"))
    rng = np.random.default_rng(0)
    m, n, k = 100, 45, 70
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    c = np.zeros((m, n), np.int32)
    tuner[_grid](a, b, c, m, n, k, k, 1, n, 1, n, 1)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
    scores = tuner.scores[(m, n, k)]
    assert math.isinf(scores[-1])                      # 4096 x 4096 does not fit
    assert all(math.isfinite(s) and s > 0 for s in scores[:-1])
    assert tuner.best[(m, n, k)] == CONFIGS[int(np.argmin(scores))]
    assert scores[0] > min(scores)                     # the blocks matter
    before = dict(tuner.scores)
    tuner[_grid](a, b, c, m, n, k, k, 1, n, 1, n, 1)   # cached: not scored again
    assert tuner.scores == before


def test_model_scoring_needs_the_gemm_and_block_names(kernel):
    with pytest.raises(DSLError, match="gemm="):
        baco.autotune(CONFIGS, key=["M"], score="model")(kernel("matmul", "matmul_kernel"))
    with pytest.raises(DSLError, match="above @baco.jit"):
        baco.autotune(CONFIGS, key=["M"])(lambda x: x)


def test_gemm_mapping_covers_the_padded_problem():
    mapping, padded = gemm_mapping(100, 45, 70, 32, 32, 32, 16)
    assert (padded.P, padded.K, padded.C) == (128, 64, 96)
    assert mapping.spatial[1, 4] == 16 and mapping.spatial[2, 5] == 16
    assert int(np.prod(mapping.temporal[:, 2])) == 128
