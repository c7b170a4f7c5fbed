"""Random inputs for a lowered layer and the numpy answer its trace must leave in DRAM.

Used by `baco simulate --check` and the property tests. The answer comes from an independent
direct convolution (`accel.sim.reference`) wherever the layer is a plain one (no groups, no
transposed or zero-inserted input, no residual); the rest use the lowering's own numpy
reference (`accel.lower.reference`), which shares the im2col layout with the trace.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accel.lower.chain import LoweredChain
from accel.lower.core import Lowered
from accel.lower.layout import reference as lowering_reference


def random_arrays(low: Lowered, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """int8 input and weights, and the int32 bias and int8 residual when the epilogue has
    them, in the layout's shapes."""
    lay = low.layout
    arrays = {"input": rng.integers(-128, 128, lay["input"].shape).astype(np.int8),
              "weight": rng.integers(-128, 128, lay["weight"].shape).astype(np.int8)}
    if "bias" in lay:
        arrays["bias"] = rng.integers(-5000, 5000, lay["bias"].shape).astype(np.int32)
    if "residual" in lay:
        arrays["residual"] = rng.integers(-128, 128, lay["residual"].shape).astype(np.int8)
    return arrays


def pack_inputs(low: Lowered, arrays: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(image, initialized)``: the packed DRAM image and which of its bytes hold data (the
    output and partial-sum regions start unwritten, so the simulator reports any read of
    them before a write)."""
    lay = low.layout
    image = lay.pack(arrays)
    initialized = np.ones(image.size, bool)
    for name in ("output", "partial"):
        if name in lay:
            t = lay[name]
            initialized[t.offset_bytes:t.offset_bytes + t.nbytes] = False
    return image, initialized


def random_inputs(low: Lowered, rng: np.random.Generator
                  ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``(arrays, image, initialized)``: `random_arrays` and `pack_inputs` together."""
    arrays = random_arrays(low, rng)
    return (arrays, *pack_inputs(low, arrays))


def expected_output(low: Lowered, arrays: dict[str, Any]) -> np.ndarray:
    """The output tensor the trace must produce from ``arrays`` (int8, or int32 for a
    full-width output)."""
    from accel.sim import conv_acc, requantize

    layer, epi = low.layer, low.epilogue
    plain = layer.groups == 1 and layer.upsample == (1, 1) and layer.kind != "conv_transpose"
    if plain and not epi.residual:
        acc = conv_acc(
            arrays["input"], arrays["weight"][0], (layer.Hstride, layer.Wstride),
            layer.pads, arrays.get("bias"), (layer.Hdilation, layer.Wdilation))
        acc = acc[:, :layer.P, :layer.Q]  # pads wider than the window add no output pixels
        return acc if epi.full_output else requantize(acc, epi.acc_scale, epi.relu, epi.gelu)
    return lowering_reference(layer, arrays["input"], arrays["weight"], arrays.get("bias"),
                              arrays.get("residual"), acc_scale=epi.acc_scale, relu=epi.relu,
                              full_output=epi.full_output, gelu=epi.gelu)


def check_scales(first_k: int, second_k: int, softmax: bool = False) -> tuple[float, float]:
    """Accumulator scales that keep random int8 products in int8 range (about 85 of 128 for
    one standard deviation), so a check compares values, not saturated ones; 1 for a first
    GEMM's softmax, whose 127 / sum already maps probabilities to int8."""
    first, second = (1.0 / (64.0 * math.sqrt(max(1, k))) for k in (first_k, second_k))
    return (1.0 if softmax else first), second


def random_chain_inputs(low: LoweredChain, rng: np.random.Generator
                        ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``(arrays, image, initialized)`` for a fused chain: int8 A, B and D, the epilogues'
    int32 biases and int8 residual; E unwritten."""
    lay = low.layout
    arrays = {name: rng.integers(-128, 128, lay[name].shape).astype(np.int8)
              for name in ("A", "B", "D", "residual") if name in lay}
    arrays.update({name: rng.integers(-5000, 5000, lay[name].shape).astype(np.int32)
                   for name in ("bias_C", "bias_E") if name in lay})
    image = lay.pack(arrays)
    initialized = np.ones(image.size, bool)
    e = lay["E"]
    initialized[e.offset_bytes:e.offset_bytes + e.nbytes] = False
    return arrays, image, initialized


def expected_chain_output(low: LoweredChain, arrays: dict[str, Any]) -> np.ndarray:
    """E = requant(requant(A @ B + bias_C) @ D + bias_E + residual) per batch (each epilogue
    term where the chain has it; the first requant the normalizer's softmax where the chain
    has one), as the fused trace must leave it."""
    from accel.sim import gemm_acc, requantize, softmax_rows

    a, b, d = arrays["A"], arrays["B"], arrays["D"]
    batch = a.shape[0]
    b = b if b.ndim == 3 else np.broadcast_to(b, (batch, *b.shape))
    d = d if d.ndim == 3 else np.broadcast_to(d, (batch, *d.shape))
    first, second = low.epilogues
    out = []
    for i in range(batch):
        acc = gemm_acc(a[i], b[i], arrays.get("bias_C"))
        c = (softmax_rows(acc, first.softmax, first.acc_scale) if first.softmax else
             requantize(acc, first.acc_scale, first.relu, first.gelu))
        e = gemm_acc(c, d[i], arrays.get("bias_E"))
        if second.residual:
            e = (e.astype(np.int64) + arrays["residual"][i]).astype(np.int32)
        out.append(requantize(e, second.acc_scale, second.relu, second.gelu))
    return np.stack(out)


__all__ = ["check_scales", "expected_chain_output", "expected_output", "pack_inputs",
           "random_arrays", "random_chain_inputs", "random_inputs"]
