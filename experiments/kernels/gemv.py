"""GEMV ``y = x @ W`` (x int8 [K], W int8 [K, N], y int32 [N]): one program per BLOCK_N outputs,
x as a 1 x BLOCK_K block so the reduction runs on the array."""
import baco


@baco.jit
def gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_wk,
                BLOCK_N: baco.const, BLOCK_K: baco.const):
    pid = baco.program_id(0)
    offs_n = pid * BLOCK_N + baco.arange(0, BLOCK_N)
    offs_k = baco.arange(0, BLOCK_K)
    acc = baco.zeros((1, BLOCK_N), dtype=baco.int32)
    for k in range(0, K, BLOCK_K):
        x = baco.load(x_ptr + k + offs_k[None, :], mask=offs_k[None, :] < K - k, other=0)
        w_ptrs = w_ptr + (k + offs_k[:, None]) * stride_wk + offs_n[None, :]
        w = baco.load(w_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0)
        acc += baco.dot(x, w)
    baco.store(y_ptr + offs_n[None, :], acc, mask=offs_n[None, :] < N)
