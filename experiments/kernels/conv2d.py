"""2-D convolution by implicit im2col: x int8 NHWC, w int8 [R, S, C, K], y int32 [N, P, Q, K].
A block row is one output pixel; the reduction walks (r, s, channel block); padding pixels
and channel tails are masked (zeros)."""
import baco


@baco.jit
def conv2d_kernel(x_ptr, w_ptr, y_ptr, NB, H, W, C, P, Q, K, stride_h, stride_w, pad_h, pad_w,
                  R: baco.const, S: baco.const,
                  BLOCK_M: baco.const, BLOCK_N: baco.const, BLOCK_C: baco.const):
    pid_m = baco.program_id(0)
    pid_n = baco.program_id(1)
    offs_m = pid_m * BLOCK_M + baco.arange(0, BLOCK_M)
    n = offs_m // (P * Q)
    p = offs_m // Q % P
    q = offs_m % Q
    offs_k = pid_n * BLOCK_N + baco.arange(0, BLOCK_N)
    offs_c = baco.arange(0, BLOCK_C)
    acc = baco.zeros((BLOCK_M, BLOCK_N), dtype=baco.int32)
    for r in range(R):
        for s in range(S):
            h = p * stride_h - pad_h + r
            w = q * stride_w - pad_w + s
            inside = (offs_m < NB * P * Q) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            pixels = ((n * H + h) * W + w) * C
            for c in range(0, C, BLOCK_C):
                a_mask = inside[:, None] & (offs_c[None, :] < C - c)
                a = baco.load(x_ptr + pixels[:, None] + c + offs_c[None, :], mask=a_mask, other=0)
                w_rows = (r * S + s) * C + c + offs_c[:, None]
                b_mask = (offs_c[:, None] < C - c) & (offs_k[None, :] < K)
                b = baco.load(w_ptr + w_rows * K + offs_k[None, :], mask=b_mask, other=0)
                acc += baco.dot(a, b)
    y_mask = (offs_m[:, None] < NB * P * Q) & (offs_k[None, :] < K)
    baco.store(y_ptr + offs_m[:, None] * K + offs_k[None, :], acc, mask=y_mask)
