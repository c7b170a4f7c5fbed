"""Numpy references with Gemmini's arithmetic, to check simulated outputs bit for bit.

int8 operands, int32 accumulation (wrapping, as the accumulator does), optional int32 bias,
then the mvout epilogue: optionally Gemmini's I-GELU on the int32 value (`igelu`), then
``float32(acc) * float32(scale)`` rounded half to even, saturated to int8, optionally ReLU'd.
The normalizer's softmax (`softmax_rows`): I-BERT's integer exp (`iexp`) of each element minus
its row's maximum, times ``127 / sum`` in float32.
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


def _wrap32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.int64).astype(np.int32)  # numpy integer casts wrap


def iexp(q: np.ndarray, qln2: int, qln2_inv: int, qb: int, qc: int) -> np.ndarray:
    """I-BERT's integer exp as Gemmini's ``AccumulatorScale.iexp`` spells it in its
    commented-out body (the body Gemmini compiles today repeats I-GELU's, so its hardware's
    softmax is not an exp; ours is), on int32 values (``q <= 0`` in use), every step wrapping
    to 32 bits:
    ``z = ((-q) * qln2_inv) >> 16`` (bits 16-47 of the 64-bit product), ``qp = z * qln2 + q``,
    ``q_poly = (qp + qb)^2 + qc``, then ``q_poly >> z`` as an unsigned 32-bit shift, which is 0
    once ``z`` >= 32 (the hardware saturates z to 32 when any of its bits 5-15 is set, and a
    larger z shifts everything out too). Constants: `accel.lower.iexp_constants`."""
    q = np.asarray(q, np.int32).astype(np.int64)
    # -q in int64 (2**31 for INT32_MIN, where the hardware's wrapped -q gives -2**31): bits
    # 16-47 of the two products are multiples of 2**15 that are 0 together, so the result is
    # the same.
    z = (((-q) * np.int64(_wrap32(qln2_inv))) >> 16) & 0xFFFFFFFF
    live = z < 32
    z = np.where(live, z, 0)
    qp = _wrap32(z * np.int64(_wrap32(qln2)) + q).astype(np.int64)
    t = _wrap32(qp + np.int64(_wrap32(qb))).astype(np.int64)
    poly = (t * t + np.int64(_wrap32(qc))) & 0xFFFFFFFF
    return _wrap32(np.where(live, poly >> z, 0))


def softmax_rows(acc: np.ndarray, consts: tuple[int, int, int, int],
                 acc_scale: float = 1.0) -> np.ndarray:
    """int32 ``[rows, cols]`` -> int8: what Gemmini's normalizer writes for each row after its
    three passes (MAX; SUM_EXP ending in INV_SUM_EXP; RESET with the softmax activation).

    With ``consts = (qln2, qln2_inv, qb, qc)``: ``m = max(row)``, ``e = iexp(x - m)`` (the
    difference wrapping), ``sum = sum(e)`` wrapping to int32, ``inv = float32(127) /
    float32(sum) * float32(acc_scale)`` (``acc_scale``: ``config_st``'s scale during the
    INV_SUM_EXP pass), and each output ``float32(e) * inv`` rounded half to even and saturated
    to int8 (no ReLU; a NaN, 0 * inf after a zero sum, gives 0). How a row is split into moves
    and blocks does not matter: max and wrapping int32 sums are associative."""
    acc = np.asarray(acc, np.int32)
    if acc.ndim != 2:
        raise ValueError(f"softmax_rows takes a [rows, cols] array, got shape {acc.shape}")
    if acc.shape[1] == 0:
        return np.zeros(acc.shape, np.int8)
    qln2, qln2_inv, qb, qc = consts
    top = acc.max(axis=1, keepdims=True).astype(np.int64)
    e = iexp(_wrap32(acc.astype(np.int64) - top), qln2, qln2_inv, qb, qc)
    total = _wrap32(e.astype(np.int64).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (np.float32(127) / total.astype(np.float32)) * np.float32(acc_scale)
        y = np.round(e.astype(np.float32) * inv.astype(np.float32)[:, None])
    y = np.clip(np.where(np.isnan(y), 0, y), -128, 127)
    return y.astype(np.int8)


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


__all__ = ["conv", "conv_acc", "gemm", "gemm_acc", "iexp", "igelu", "requantize",
           "softmax_rows"]
