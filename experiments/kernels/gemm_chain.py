"""``E = int8((int8(A @ B * s1)) @ D * s2)``: two dots in a chain, as in attention. On the
simulator the intermediate block moves from the accumulator into the scratchpad
(``mvout_spad``, requantized as an mvout stores it) and never reaches DRAM. One program per
BLOCK_M rows; N fits one block (E stays in the accumulator over the L loop)."""
import baco


@baco.jit
def gemm_chain_kernel(a_ptr, b_ptr, d_ptr, e_ptr, M, K, L, N, scale1, scale2,
                      BLOCK_M: baco.const, BLOCK_K: baco.const, BLOCK_L: baco.const,
                      BLOCK_N: baco.const):
    pid_m = baco.program_id(0)
    offs_m = pid_m * BLOCK_M + baco.arange(0, BLOCK_M)
    offs_n = baco.arange(0, BLOCK_N)
    e = baco.zeros((BLOCK_M, BLOCK_N), dtype=baco.int32)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + baco.arange(0, BLOCK_L)
        c = baco.zeros((BLOCK_M, BLOCK_L), dtype=baco.int32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + baco.arange(0, BLOCK_K)
            a = baco.load(a_ptr + offs_m[:, None] * K + offs_k[None, :],
                          mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0)
            b = baco.load(b_ptr + offs_k[:, None] * L + offs_l[None, :],
                          mask=(offs_k[:, None] < K) & (offs_l[None, :] < L), other=0)
            c += baco.dot(a, b)
        c8 = (c * scale1).to(baco.int8)
        d = baco.load(d_ptr + offs_l[:, None] * N + offs_n[None, :],
                      mask=(offs_l[:, None] < L) & (offs_n[None, :] < N), other=0)
        e += baco.dot(c8, d)
    out = (e * scale2).to(baco.int8)
    baco.store(e_ptr + offs_m[:, None] * N + offs_n[None, :], out,
               mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
