"""Hand-written Gemmini programs: a tiled GEMM in the canonical weight-stationary sequence and a
convolution by implicit im2col addressing, each with its DRAM image.

They are independent of `accel.lower` (which turns a `Mapping` into a trace) and serve as
known-good traces for the simulator's tests and as readable examples of the ISA. The GEMM follows
``tiled_matmul_outer`` / ``sp_tiled_matmul_ws`` in ``gemmini.h`` (dosa-gemmini-isa.md §B.6):
outer tiles ``i0, j0, k0`` (k0 innermost, partial sums staying in the accumulator), inside a
tile ``k, j, i`` with A and B moved in up to MAX_BLOCK_LEN blocks at a time, B preloaded once
per ``(k, j)`` and reused for every ``i`` (compute_accumulated), bias moved into the accumulator
by mvin3, and the epilogue (scale, ReLU, saturation) done by mvout.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from accel.isa import Instruction, LocalAddr
from accel.sim.memory import DramImage
from accel.trace import Trace
from workloads.errors import ConfigError

GARBAGE = LocalAddr.garbage()


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """A trace, the DRAM image it runs on, the name of its output tensor, and its MACs."""

    trace: Trace
    image: DramImage
    output: str
    macs: int


def _valid(total: int, block: int, dim: int) -> int:
    """Elements of DIM-block ``block`` that lie inside a dimension of ``total`` elements."""
    return max(0, min(dim, total - block * dim))


def _span(total: int, first: int, blocks: int, dim: int) -> int:
    """Elements covered by ``blocks`` consecutive DIM-blocks from block ``first``."""
    return min(total, (first + blocks) * dim) - first * dim


def _auto_tiles(i: int, j: int, k: int, dim: int, sp_rows: int, acc_rows: int,
                halves: int) -> tuple[int, int, int]:
    """Largest outer tile (in DIM-blocks) whose A + B fit one scratchpad share and whose C
    fits one accumulator share, grown greedily (j, then i, then k) as tiled_matmul_auto does."""
    sp_budget, acc_budget = sp_rows // halves, acc_rows // halves
    ti = tj = tk = 1

    def fits(a: int, b: int, c: int) -> bool:
        return (a * c + c * b) * dim <= sp_budget and a * b * dim <= acc_budget

    if not fits(1, 1, 1):
        raise ConfigError("gemm_ws: one DIM x DIM tile does not fit the memories")
    grew = True
    while grew:
        grew = False
        for axis in ("j", "i", "k"):
            a, b, c = ti + (axis == "i"), tj + (axis == "j"), tk + (axis == "k")
            if a <= i and b <= j and c <= k and fits(a, b, c):
                ti, tj, tk, grew = a, b, c, True
    return ti, tj, tk


def gemm_ws(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, *,
            scale: float = 1.0, relu: bool = False, full_output: bool = False, dim: int = 16,
            tiles: tuple[int, int, int] | None = None, double_buffer: bool = True,
            sp_rows: int = 16384, acc_rows: int = 1024, dma_max_bytes: int = 64,
            base: int = 0) -> Program:
    """``C = epilogue(A @ B + bias)`` as a weight-stationary Gemmini program.

    ``a`` int8 [M, K], ``b`` int8 [K, N]; ``bias`` int32 [N] (repeated on every row) or [M, N];
    ``full_output`` stores the int32 accumulators instead of the int8 epilogue. ``tiles`` are
    the outer tile sizes in DIM-blocks (default: the largest that fits); ``double_buffer``
    alternates two halves of the scratchpad and accumulator between outer tiles so the next
    tile's loads can overlap the current tile's computes.
    """
    a, b = np.asarray(a, np.int8), np.asarray(b, np.int8)
    m, k_dim = a.shape
    k2, n = b.shape
    if k_dim != k2:
        raise ConfigError(f"gemm_ws: A is {a.shape} but B is {b.shape}")
    d = dim
    blocks_i, blocks_j, blocks_k = (math.ceil(x / d) for x in (m, n, k_dim))
    halves = 2 if double_buffer else 1
    ti, tj, tk = tiles or _auto_tiles(blocks_i, blocks_j, blocks_k, d, sp_rows, acc_rows, halves)
    max_blocks = max(1, dma_max_bytes // d)  # MAX_BLOCK_LEN
    max_blocks_acc = max(1, dma_max_bytes // (4 * d))  # MAX_BLOCK_LEN_ACC
    image = DramImage(base=base)
    a_addr = image.add("A", a)
    b_addr = image.add("B", b)
    c_elem = 4 if full_output else 1
    c_addr = image.reserve("C", (m, n), np.int32 if full_output else np.int8)
    repeating = bias is not None and np.asarray(bias).ndim == 1
    if bias is not None:
        bias_arr = np.asarray(bias, np.int32).reshape(1 if repeating else m, n)
        d_addr = image.add("bias", bias_arr)

    ins = [
        Instruction.config_ex("ws", "none"),
        Instruction.config_st(n * c_elem, act="relu" if relu else "none", acc_scale=scale),
        Instruction.config_ld(k_dim, id=0, block_stride=d),
        Instruction.config_ld(n, id=1, block_stride=d),
        Instruction.config_ld(0 if repeating else n * 4, id=2, block_stride=d),
    ]
    sp_share, acc_share = sp_rows // halves, acc_rows // halves
    sp_turn = acc_turn = 0
    for i0 in range(0, blocks_i, ti):
        for j0 in range(0, blocks_j, tj):
            ni, nj = min(ti, blocks_i - i0), min(tj, blocks_j - j0)
            acc_base = (acc_turn % halves) * acc_share
            acc_turn += 1
            if ni * nj * d > acc_share:
                raise ConfigError("gemm_ws: the C tile does not fit the accumulator")

            def c_row(i: int, j: int) -> int:
                return acc_base + (i * nj + j) * d  # noqa: B023  (used within this tile)

            if bias is not None:
                for i in range(ni):
                    for j in range(0, nj, max_blocks_acc):
                        gi, gj = i0 + i, j0 + j
                        nb = min(max_blocks_acc, nj - j)
                        row = 0 if repeating else gi * d
                        ins.append(Instruction.mvin3(
                            d_addr + (row * n + gj * d) * 4, LocalAddr.accumulator(c_row(i, j)),
                            _valid(m, gi, d), _span(n, gj, nb, d)))
            for k0 in range(0, blocks_k, tk):
                nk = min(tk, blocks_k - k0)
                sp_base = (sp_turn % halves) * sp_share
                sp_turn += 1
                a_sp, b_sp = sp_base, sp_base + ni * nk * d
                if (ni * nk + nk * nj) * d > sp_share:
                    raise ConfigError("gemm_ws: the A and B tiles do not fit the scratchpad")
                for k in range(nk):
                    for j in range(nj):
                        for i in range(ni):
                            gi, gj, gk = i0 + i, j0 + j, k0 + k
                            if j == 0 and k % max_blocks == 0:
                                nb = min(max_blocks, nk - k)
                                ins.append(Instruction.mvin(
                                    a_addr + gi * d * k_dim + gk * d, a_sp + (i * nk + k) * d,
                                    _valid(m, gi, d), _span(k_dim, gk, nb, d)))
                            if i == 0 and j % max_blocks == 0:
                                nb = min(max_blocks, nj - j)
                                ins.append(Instruction.mvin2(
                                    b_addr + gk * d * n + gj * d, b_sp + (k * nj + j) * d,
                                    _valid(k_dim, gk, d), _span(n, gj, nb, d)))
                            accumulate = bias is not None or k0 > 0 or k > 0
                            rows_i, rows_k, cols_j = (_valid(m, gi, d), _valid(k_dim, gk, d),
                                                      _valid(n, gj, d))
                            ins.append(Instruction.preload(
                                b_sp + (k * nj + j) * d if i == 0 else GARBAGE,
                                LocalAddr.accumulator(c_row(i, j), accumulate=accumulate),
                                rows_k, cols_j, rows_i, cols_j))
                            make = (Instruction.compute_preloaded if i == 0
                                    else Instruction.compute_accumulated)
                            ins.append(make(a_sp + (i * nk + k) * d, GARBAGE, rows_i, rows_k,
                                            d, d))
            c_blocks = max_blocks_acc if full_output else max_blocks
            for i in range(ni):
                for j in range(0, nj, c_blocks):
                    gi, gj = i0 + i, j0 + j
                    nb = min(c_blocks, nj - j)
                    ins.append(Instruction.mvout(
                        c_addr + (gi * d * n + gj * d) * c_elem,
                        LocalAddr.accumulator(c_row(i, j), full=full_output),
                        _valid(m, gi, d), _span(n, gj, nb, d)))
    ins.append(Instruction.fence())
    return Program(Trace(ins), image, "C", m * n * k_dim)


def conv_ws(x: np.ndarray, w: np.ndarray, *, stride: tuple[int, int] = (1, 1),
            padding: tuple[int, int, int, int] = (0, 0, 0, 0), bias: np.ndarray | None = None,
            scale: float = 1.0, relu: bool = False, dim: int = 16, sp_rows: int = 16384,
            acc_rows: int = 1024, dma_max_bytes: int = 64, base: int = 0) -> Program:
    """A 2-D convolution by implicit im2col addressing, weight-stationary.

    ``x`` int8 [N, H, W, C] (stored zero-padded in DRAM, as ``X``), ``w`` int8 [R, S, C, K]
    (stored as the [R*S*C, K] matrix ``W``), ``bias`` int32 [K]; ``padding`` is (top, left,
    bottom, right). Output ``Y`` int8 [N, P, Q, K]. A row of an A tile is one output pixel's
    input pixel: 16 consecutive output pixels of an output row are 16 input pixels ``stride``
    apart, so one mvin with DRAM stride ``stride * C`` bytes gathers them; the reduction runs
    over (r, s, channel block).
    """
    x, w = np.asarray(x, np.int8), np.asarray(w, np.int8)
    n_b, h, wd, c = x.shape
    r_k, s_k, c2, k_out = w.shape
    if c != c2:
        raise ConfigError(f"conv_ws: input has {c} channels, weights {c2}")
    top, left, bottom, right = padding
    xp = np.zeros((n_b, h + top + bottom, wd + left + right, c), np.int8)
    xp[:, top:top + h, left:left + wd] = x
    hp, wp = xp.shape[1:3]
    sh, sw = stride
    p_out, q_out = (hp - r_k) // sh + 1, (wp - s_k) // sw + 1
    if p_out < 1 or q_out < 1:
        raise ConfigError("conv_ws: the kernel is larger than the padded input")
    d = dim
    blocks_c, blocks_k = math.ceil(c / d), math.ceil(k_out / d)
    max_blocks = max(1, dma_max_bytes // d)
    image = DramImage(base=base)
    x_addr = image.add("X", xp)
    w_addr = image.add("W", w.reshape(r_k * s_k * c, k_out))
    y_addr = image.reserve("Y", (n_b, p_out, q_out, k_out), np.int8)
    if bias is not None:
        b_addr = image.add("bias", np.asarray(bias, np.int32).reshape(1, k_out))

    reduction = [(rs, cb) for rs in range(r_k * s_k) for cb in range(blocks_c)]
    w_rows = len(reduction) * blocks_k * d
    a_rows = len(reduction) * d
    if w_rows + 2 * a_rows > sp_rows or 2 * d > acc_rows:
        raise ConfigError("conv_ws: the weights and two A tiles do not fit the scratchpad")
    ins = [
        Instruction.config_ex("ws", "none"),
        Instruction.config_st(k_out, act="relu" if relu else "none", acc_scale=scale),
        Instruction.config_ld(sw * c, id=0, block_stride=d),
        Instruction.config_ld(k_out, id=1, block_stride=d),
        Instruction.config_ld(0, id=2, block_stride=d),
    ]

    def w_sp(t: int, j: int) -> int:
        return (t * blocks_k + j) * d

    for t, (rs, cb) in enumerate(reduction):
        for j in range(0, blocks_k, max_blocks):
            nb = min(max_blocks, blocks_k - j)
            ins.append(Instruction.mvin2(w_addr + (rs * c + cb * d) * k_out + j * d, w_sp(t, j),
                                         _valid(c, cb, d), _span(k_out, j, nb, d)))
    turn = 0
    for nn in range(n_b):
        for p in range(p_out):
            for q0 in range(0, q_out, d):
                nq = min(d, q_out - q0)
                a_base = w_rows + (turn % 2) * a_rows
                acc_base = (turn % 2) * (acc_rows // 2)
                turn += 1
                for rs in range(r_k * s_k):
                    r, s = divmod(rs, s_k)
                    pixel = (nn * hp + p * sh + r) * wp + q0 * sw + s
                    for cb in range(0, blocks_c, max_blocks):
                        nb = min(max_blocks, blocks_c - cb)
                        ins.append(Instruction.mvin(
                            x_addr + pixel * c + cb * d, a_base + (rs * blocks_c + cb) * d,
                            nq, _span(c, cb, nb, d)))
                for j in range(blocks_k):
                    cols_j = _valid(k_out, j, d)
                    c_row = acc_base + (j % max(1, (acc_rows // 2) // d)) * d
                    if bias is not None:
                        ins.append(Instruction.mvin3(b_addr + j * d * 4,
                                                     LocalAddr.accumulator(c_row), nq, cols_j))
                    for t, (rs, cb) in enumerate(reduction):
                        rows_c = _valid(c, cb, d)
                        ins.append(Instruction.preload(
                            w_sp(t, j), LocalAddr.accumulator(
                                c_row, accumulate=bias is not None or t > 0),
                            rows_c, cols_j, nq, cols_j))
                        ins.append(Instruction.compute_preloaded(
                            a_base + (rs * blocks_c + cb) * d, GARBAGE, nq, rows_c, d, d))
                    ins.append(Instruction.mvout(
                        y_addr + ((nn * p_out + p) * q_out + q0) * k_out + j * d,
                        LocalAddr.accumulator(c_row), nq, cols_j))
    ins.append(Instruction.fence())
    macs = n_b * p_out * q_out * k_out * r_k * s_k * c
    return Program(Trace(ins), image, "Y", macs)


__all__ = ["Program", "conv_ws", "gemm_ws"]
