"""Numpy references with Gemmini's arithmetic, to check simulated outputs bit for bit.

int8 operands, int32 accumulation (wrapping, as the accumulator does), optional int32 bias,
then the mvout epilogue: optionally Gemmini's I-GELU on the int32 value (`igelu`), then
``float32(acc) * float32(scale)`` rounded half to even, saturated to int8, optionally ReLU'd.
"""

from __future__ import annotations

import numpy as np


def igelu(q: np.ndarray, qb: int, qc: int) -> np.ndarray:
    """Gemmini's I-GELU (`AccumulatorScale.igelu`, I-BERT's second-order erf) on int32 values,
    every step wrapping to 32 bits as the hardware's ``withWidthOf``:
    ``q * (sign(q) * (qc + (min(|q|, -qb) + qb)^2) + qc)``."""
    q = np.asarray(q, np.int32)
    with np.errstate(over="ignore"):
        clipped = np.minimum(np.abs(q), np.int32(-qb)) + np.int32(qb)
        poly = np.int32(qc) + clipped * clipped
        erf = np.where(q < 0, -poly, poly).astype(np.int32)
        return (q * (erf + np.int32(qc))).astype(np.int32)


def requantize(acc: np.ndarray, scale: float = 1.0, relu: bool = False,
               gelu: tuple[int, int] | None = None) -> np.ndarray:
    """int32 accumulator values -> int8 as an mvout from the accumulator produces them;
    ``gelu``: the I-GELU constants ``(qb, qc)`` to apply first."""
    acc = np.asarray(acc, np.int32)
    if gelu is not None:
        acc = igelu(acc, *gelu)
    y = np.round(acc.astype(np.float32) * np.float32(scale))
    y = np.clip(y, -128, 127)
    if relu:
        y = np.maximum(y, 0)
    return y.astype(np.int8)


def gemm_acc(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """``a @ b (+ bias)`` in int32 with wrap-around: ``a`` int8 [M, K], ``b`` int8 [K, N],
    ``bias`` int32 broadcastable to [M, N]."""
    acc = a.astype(np.int64) @ b.astype(np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64)
    return acc.astype(np.int32)  # wraps like int32 hardware


def gemm(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, scale: float = 1.0,
         relu: bool = False) -> np.ndarray:
    """int8 GEMM with Gemmini's epilogue."""
    return requantize(gemm_acc(a, b, bias), scale, relu)


def conv_acc(x: np.ndarray, w: np.ndarray, stride: tuple[int, int] = (1, 1),
             padding: tuple[int, int, int, int] = (0, 0, 0, 0),
             bias: np.ndarray | None = None, dilation: tuple[int, int] = (1, 1)) -> np.ndarray:
    """Direct convolution in int32: ``x`` int8 [N, H, W, C], ``w`` int8 [R, S, C, K];
    ``padding`` is (top, left, bottom, right). Returns int32 [N, P, Q, K]."""
    n, h, wd, c = x.shape
    r, s, c2, k = w.shape
    if c != c2:
        raise ValueError(f"channels differ: input {c}, weights {c2}")
    top, left, bottom, right = padding
    xp = np.zeros((n, h + top + bottom, wd + left + right, c), np.int64)
    xp[:, top:top + h, left:left + wd] = x
    p = (xp.shape[1] - (r - 1) * dilation[0] - 1) // stride[0] + 1
    q = (xp.shape[2] - (s - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, p, q, k), np.int64)
    w64 = w.astype(np.int64)
    for i in range(r):
        for j in range(s):
            h0, w0 = i * dilation[0], j * dilation[1]
            patch = xp[:, h0:h0 + (p - 1) * stride[0] + 1:stride[0],
                       w0:w0 + (q - 1) * stride[1] + 1:stride[1]]
            out += np.einsum("npqc,ck->npqk", patch, w64[i, j])
    if bias is not None:
        out = out + np.asarray(bias, np.int64)
    return out.astype(np.int32)


def conv(x: np.ndarray, w: np.ndarray, stride: tuple[int, int] = (1, 1),
         padding: tuple[int, int, int, int] = (0, 0, 0, 0), bias: np.ndarray | None = None,
         scale: float = 1.0, relu: bool = False, dilation: tuple[int, int] = (1, 1)
         ) -> np.ndarray:
    """int8 convolution with Gemmini's epilogue: int8 [N, P, Q, K]."""
    return requantize(conv_acc(x, w, stride, padding, bias, dilation), scale, relu)


__all__ = ["conv", "conv_acc", "gemm", "gemm_acc", "requantize"]
