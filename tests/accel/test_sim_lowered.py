"""Property test: random layers, random valid mappings, random hardware, lowered and simulated,
must reproduce numpy exactly.

Cases come from a seeded generator (each seed is one reproducible case: call `_case(seed)`),
run batched per hardware point with `run_batch`. The default run covers a few hundred cases;
``-m slow`` a few thousand.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.lower import lower
from accel.lower.check import expected_output, random_inputs
from accel.mapping import Mapping
from accel.sim import run_batch
from workloads.errors import InfeasibleError
from workloads.layer import Layer

# Small memories so that tiling, spills and padding all happen; few shapes, few compilations.
HARDWARE = (
    HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2),
    HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=8, acc_kb=4),
    HardwareConfig.preset("gemmini_default"),
)
BATCH = 8
MAX_INSTRUCTIONS = 3000


def _layer(rng: np.random.Generator) -> Layer:
    kind = rng.choice(["gemm", "gemm", "conv2d", "conv2d", "conv2d", "gemv", "conv1d",
                       "grouped", "transposed"])
    epi = tuple(e for e in ("bias", "add") if rng.random() < 0.3)
    epi += ("relu",) if rng.random() < 0.3 else ()
    small = lambda hi: int(rng.integers(1, hi))
    if kind == "gemm":
        return Layer.gemm(M=small(33), K_red=small(33), N_out=small(33), batch=small(3),
                          epilogue=epi)
    if kind == "gemv":
        return Layer(kind="gemv", C=small(40), K=small(40), epilogue=epi)
    if kind == "conv1d":
        return Layer.conv1d(R=small(4), P=small(12), C=small(12), K=small(12), N=small(3),
                            stride=small(3), dilation=small(3),
                            pads=(small(3) - 1, 0, small(3) - 1, 0), epilogue=epi)
    if kind == "transposed":
        return Layer(kind="conv_transpose", R=small(4), S=small(4), P=small(8), Q=small(8),
                     C=small(6), K=small(6), upsample=(small(3), small(3)),
                     pads=tuple(int(x) for x in rng.integers(0, 3, 4)), epilogue=epi)
    groups = int(rng.choice([2, 3])) if kind == "grouped" else 1
    return Layer.conv2d(R=small(4), S=small(4), P=small(7), Q=small(7), C=small(9),
                        K=small(9), N=small(3), Hstride=small(3), Wstride=small(3),
                        Hdilation=small(3), Wdilation=small(3),
                        pads=tuple(int(x) for x in rng.integers(0, 3, 4)), groups=groups,
                        epilogue=epi)


def _case(seed: int):
    """One random (layer, mapping, hardware) lowered, with its inputs and expected output."""
    rng = np.random.default_rng(seed)
    hw = HARDWARE[int(rng.integers(len(HARDWARE)))]
    for _ in range(20):
        layer = _layer(rng)
        try:
            mapping = Mapping.random(layer, hw, rng, tries=50)
            macro = layer.kind in ("gemm", "gemv") and "add" not in layer.epilogue \
                and rng.random() < 0.3
            full = rng.random() < 0.15 and "relu" not in layer.epilogue
            scale = 1.0 if full else float(rng.choice([1.0, 0.1, 0.013, 0.5]))
            low = lower(layer, mapping, hw, macro=macro, acc_scale=scale, full_output=full,
                        check=False)
        except InfeasibleError:
            continue
        if len(low.trace) > MAX_INSTRUCTIONS:
            continue
        arrays, image, initialized = random_inputs(low, rng)
        return low, image, initialized, expected_output(low, arrays)
    raise AssertionError(f"seed {seed}: no feasible case in 20 draws")


def _check(seeds) -> int:
    cases = collections.defaultdict(list)
    for seed in seeds:
        low, image, init, want = _case(seed)
        cases[low.hw].append((seed, low, image, init, want))
    checked = 0
    for hw, group in cases.items():
        group.sort(key=lambda c: len(c[1].trace))  # lockstep batches of similar length
        for start in range(0, len(group), BATCH):
            part = group[start:start + BATCH]
            padded = part + [part[-1]] * (BATCH - len(part))
            results = run_batch([c[1].trace for c in padded], hw, [c[2] for c in padded],
                                initialized=[c[3] for c in padded])
            for (seed, low, _, _, want), res in zip(part, results):
                got = low.layout.read(res.dram, "output")
                assert np.array_equal(got, want), (
                    f"seed {seed}: {low.layer.config_str()} {low.layer.kind} on {hw.pe_rows}x"
                    f"{hw.pe_cols}, mapping {low.mapping.to_timeloop()}, macro={low.macro}: "
                    f"{int(np.sum(got != want))} of {got.size} outputs differ")
                assert res.macs == low.stats.block_macs, f"seed {seed}"
                checked += 1
    return checked


def test_lowered_layers_match_numpy():
    """64 random cases by default; `test_lowered_layers_match_numpy_many` (slow) runs 2,000."""
    assert _check(range(64)) == 64


@pytest.mark.slow
def test_lowered_layers_match_numpy_many():
    assert _check(range(200, 2200)) == 2000
