"""The example kernels on sizes that are not multiples of their blocks: the interpreter,
the simulator and numpy agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest


def _i8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def _both(launch, out: np.ndarray):
    """Run ``launch(out, backend)`` on both backends into copies of ``out``; return them."""
    results = {}
    for backend in ("interpreter", "sim"):
        buf = out.copy()
        report = launch(buf, backend)
        results[backend] = (buf, report)
    return results


@pytest.mark.parametrize("blocks", [(32, 32, 32), (16, 48, 64)])
def test_matmul_100x70x45_matches_numpy_on_both_backends(blocks, kernel):
    kernel = kernel("matmul", "matmul_kernel")
    rng = np.random.default_rng(0)
    m, k, n = 100, 70, 45
    a, b = _i8(rng, (m, k)), _i8(rng, (k, n))
    want = a.astype(np.int32) @ b.astype(np.int32)
    bm, bn, bk = blocks
    grid = lambda meta: (-(-m // meta["BLOCK_SIZE_M"]) * -(-n // meta["BLOCK_SIZE_N"]),)
    runs = _both(lambda c, be: kernel[grid](a, b, c, m, n, k, k, 1, n, 1, n, 1, backend=be,
                                            BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn,
                                            BLOCK_SIZE_K=bk), np.zeros((m, n), np.int32))
    np.testing.assert_array_equal(runs["interpreter"][0], want)
    np.testing.assert_array_equal(runs["sim"][0], want)
    report = runs["sim"][1]
    assert report.result.macs == m * n * k  # useful MACs: padding is not counted
    assert report.cycles > 0 and report.instructions["fence"] == 1


def test_gemv_matches_numpy_on_both_backends(kernel):
    kernel = kernel("gemv", "gemv_kernel")
    rng = np.random.default_rng(1)
    n, k = 70, 100
    x, w = _i8(rng, k), _i8(rng, (k, n))
    want = x.astype(np.int32) @ w.astype(np.int32)
    runs = _both(lambda y, be: kernel[(-(-n // 32),)](x, w, y, n, k, n, BLOCK_N=32, BLOCK_K=64,
                                                      backend=be), np.zeros(n, np.int32))
    for backend, (y, _) in runs.items():
        np.testing.assert_array_equal(y, want, err_msg=backend)


def test_matmul_bias_relu_scale_rounds_and_saturates_like_gemmini(kernel):
    kernel = kernel("matmul_bias_relu", "matmul_bias_relu_kernel")
    rng = np.random.default_rng(2)
    m, k, n, scale = 100, 70, 45, 0.0123
    a, b = _i8(rng, (m, k)), _i8(rng, (k, n))
    bias = rng.integers(-30000, 30000, n).astype(np.int32)
    acc = a.astype(np.int32) @ b.astype(np.int32) + bias
    scaled = np.maximum(acc, 0).astype(np.float32) * np.float32(scale)
    want = np.clip(np.rint(scaled), -128, 127).astype(np.int8)
    assert (want == 127).any() and (want == 0).any()   # saturation and relu both happen
    runs = _both(lambda c, be: kernel[(4, 2)](a, b, bias, c, m, n, k, scale, BLOCK_M=32,
                                              BLOCK_N=32, BLOCK_K=32, backend=be),
                 np.zeros((m, n), np.int8))
    for backend, (c, _) in runs.items():
        np.testing.assert_array_equal(c, want, err_msg=backend)


def _conv_reference(x, w, stride, pad):
    nb, h, wd, _ = x.shape
    r, s, _, k = w.shape
    p, q = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((nb, p, q, k), np.int64)
    for i in range(r):
        for j in range(s):
            win = xp[:, i:i + (p - 1) * stride + 1:stride, j:j + (q - 1) * stride + 1:stride]
            out += np.einsum("npqc,ck->npqk", win, w[i, j].astype(np.int64))
    return out.astype(np.int32)


@pytest.mark.parametrize("stride, pad, blocks", [(2, 1, (16, 16, 16)), (1, 0, (32, 16, 8))])
def test_conv2d_im2col_matches_numpy_on_both_backends(stride, pad, blocks, kernel):
    kernel = kernel("conv2d", "conv2d_kernel")
    rng = np.random.default_rng(3)
    nb, h, wd, c, k, r, s = 2, 9, 7, 5, 20, 3, 3
    x, w = _i8(rng, (nb, h, wd, c)), _i8(rng, (r, s, c, k))
    want = _conv_reference(x, w, stride, pad)
    _, p, q, _ = want.shape
    bm, bn, bc = blocks
    grid = (-(-nb * p * q // bm), -(-k // bn))
    runs = _both(lambda y, be: kernel[grid](x, w, y, nb, h, wd, c, p, q, k, stride, stride, pad,
                                            pad, R=r, S=s, BLOCK_M=bm, BLOCK_N=bn, BLOCK_C=bc,
                                            backend=be), np.zeros(want.shape, np.int32))
    for backend, (y, _) in runs.items():
        np.testing.assert_array_equal(y, want, err_msg=backend)


def test_matmul_kernel_is_under_40_lines(kernel):
    source = kernel("matmul", "matmul_kernel").fn.__code__.co_filename
    with open(source) as fh:
        assert len(fh.read().splitlines()) < 40


def test_a_chain_of_two_dots_keeps_its_intermediate_on_chip(kernel):
    """The attention-like kernel: both backends equal numpy's requantized chain bit for bit,
    and the simulated trace moves the intermediate by mvout_spad, never through DRAM: its
    mvouts write E's rows and nothing else."""
    kernel = kernel("gemm_chain", "gemm_chain_kernel")
    rng = np.random.default_rng(5)
    m, k, l_, n, s1, s2 = 50, 40, 70, 24, 0.01, 0.02

    def requantize(x, scale):
        return np.clip(np.rint(x.astype(np.float32) * np.float32(scale)), -128, 127
                       ).astype(np.int8)

    a, b, d = _i8(rng, (m, k)), _i8(rng, (k, l_)), _i8(rng, (l_, n))
    c = requantize(a.astype(np.int32) @ b.astype(np.int32), s1)
    want = requantize(c.astype(np.int32) @ d.astype(np.int32), s2)
    runs = _both(lambda e, be: kernel[(-(-m // 32),)](a, b, d, e, m, k, l_, n, s1, s2,
                                                      BLOCK_M=32, BLOCK_K=32, BLOCK_L=32,
                                                      BLOCK_N=32, backend=be),
                 np.zeros((m, n), np.int8))
    for backend, (e, _) in runs.items():
        np.testing.assert_array_equal(e, want, err_msg=backend)
    report = runs["sim"][1]
    counts = report.instructions
    assert counts["mvout_spad"] > 0
    stored = sum(ins["rows"] for ins in report.trace if ins.mnemonic == "mvout")
    assert stored == m                # E's rows only: C is never written to DRAM


def test_attention_with_the_normalizer_softmax_matches_numpy_on_both_backends(kernel):
    """One attention head: Q @ K^T + mask, Gemmini's softmax (the normalizer's passes), @ V.
    Both backends equal numpy's (`accel.sim.reference.softmax_rows` over the valid keys) bit
    for bit; the scores move on chip (mvout_spad, statistics passes included) and only O's
    rows reach DRAM."""
    from accel.lower import iexp_constants
    from accel.sim.reference import softmax_rows

    kernel = kernel("attention", "attention_kernel")
    rng = np.random.default_rng(9)
    m, d, l_, scale = 40, 24, 50, 1 / 64
    # Scores of a few units of ln 2 at the softmax's input scale (1/64), so rows spread.
    q, kt = (rng.integers(-16, 17, s).astype(np.int8) for s in ((m, d), (d, l_)))
    v = _i8(rng, (l_, d))
    mask = rng.integers(-300, 1, l_).astype(np.int32)
    scores = q.astype(np.int32) @ kt.astype(np.int32) + mask
    p = softmax_rows(scores, iexp_constants())
    assert len(np.unique(p)) > 10                 # not one-hot: the check means something
    o = p.astype(np.int32) @ v.astype(np.int32)
    want = np.clip(np.rint(o.astype(np.float32) * np.float32(scale)), -128, 127).astype(np.int8)
    runs = _both(lambda out, be: kernel[(-(-m // 16),)](q, kt, mask, v, out, m, d, l_, scale,
                                                        BLOCK_M=16, BLOCK_D=32, BLOCK_L=64,
                                                        backend=be),
                 np.zeros((m, d), np.int8))
    for backend, (out, _) in runs.items():
        np.testing.assert_array_equal(out, want, err_msg=backend)
    report = runs["sim"][1]
    norms = {ins["src"].norm for ins in report.trace if ins.mnemonic == "mvout_spad"}
    assert norms == {0, 5, 6, 7}
    assert sum(ins["rows"] for ins in report.trace if ins.mnemonic == "mvout") == m
