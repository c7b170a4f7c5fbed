"""``C = int8(relu(A @ B + bias) * scale)``: the fused GEMM epilogue Gemmini runs on mvout
(bias added in the accumulator; relu, float32 scale, round-half-even and saturation on the way
out). Uses block pointers for A and B."""
import baco


@baco.jit
def matmul_bias_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, scale,
                            BLOCK_M: baco.const, BLOCK_N: baco.const, BLOCK_K: baco.const):
    pid_m = baco.program_id(0)
    pid_n = baco.program_id(1)
    a_blocks = baco.make_block_ptr(a_ptr, shape=(M, K), strides=(K, 1),
                                   offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K),
                                   order=(1, 0))
    b_blocks = baco.make_block_ptr(b_ptr, shape=(K, N), strides=(N, 1),
                                   offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N),
                                   order=(1, 0))
    acc = baco.zeros((BLOCK_M, BLOCK_N), dtype=baco.int32)
    for k in range(0, K, BLOCK_K):
        a = baco.load(a_blocks, boundary_check=(0, 1))
        b = baco.load(b_blocks, boundary_check=(0, 1))
        acc += baco.dot(a, b)
        a_blocks = baco.advance(a_blocks, (0, BLOCK_K))
        b_blocks = baco.advance(b_blocks, (BLOCK_K, 0))
    offs_m = pid_m * BLOCK_M + baco.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + baco.arange(0, BLOCK_N)
    bias = baco.load(bias_ptr + offs_n, mask=offs_n < N, other=0)
    acc += bias[None, :]
    c = (baco.maximum(acc, 0) * scale).to(baco.int8)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    baco.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], c, mask=mask)
