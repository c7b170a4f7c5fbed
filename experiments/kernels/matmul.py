"""The seed's Fig. 6.7 matmul kernel, its bugs fixed (integer pid split over num_pid_n, masks for
edge blocks, the value in `store`); int8 x int8 -> int32."""
import baco


@baco.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: baco.const, BLOCK_SIZE_N: baco.const, BLOCK_SIZE_K: baco.const):
    pid = baco.program_id(0)
    num_pid_n = baco.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_am = pid_m * BLOCK_SIZE_M + baco.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + baco.arange(0, BLOCK_SIZE_N)
    offs_k = baco.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = baco.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype="int32")
    for k in range(0, K, BLOCK_SIZE_K):
        a = baco.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k), other=0)
        b = baco.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_bn[None, :] < N), other=0)
        accumulator += baco.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to("int32")
    c_ptrs = c_ptr + stride_cm * offs_am[:, None] + stride_cn * offs_bn[None, :]
    baco.store(c_ptrs, c, mask=(offs_am[:, None] < M) & (offs_bn[None, :] < N))
