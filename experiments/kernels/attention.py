"""``O = int8(softmax(Q @ K^T + mask) @ V * scale)``: attention for one head, two dots with
Gemmini's normalizer softmax between them (`baco.softmax`: 127 x the probabilities in int8).
On the simulator the scores stay on chip: their rows go through the normalizer's three passes
into the scratchpad (``mvout_spad``) and feed the second dot. One program per BLOCK_M query
rows; all the keys fit one block (BLOCK_L >= L: a row's softmax needs the whole row), as does
the head dimension (BLOCK_D >= D). K is given transposed (D x L), the mask one int32 value per
key, added to the scores in the accumulator."""
import baco


@baco.jit
def attention_kernel(q_ptr, kt_ptr, mask_ptr, v_ptr, o_ptr, M, D, L, scale,
                     BLOCK_M: baco.const, BLOCK_D: baco.const, BLOCK_L: baco.const):
    pid_m = baco.program_id(0)
    offs_m = pid_m * BLOCK_M + baco.arange(0, BLOCK_M)
    offs_d = baco.arange(0, BLOCK_D)
    offs_l = baco.arange(0, BLOCK_L)
    q = baco.load(q_ptr + offs_m[:, None] * D + offs_d[None, :],
                  mask=(offs_m[:, None] < M) & (offs_d[None, :] < D), other=0)
    kt = baco.load(kt_ptr + offs_d[:, None] * L + offs_l[None, :],
                   mask=(offs_d[:, None] < D) & (offs_l[None, :] < L), other=0)
    s = baco.zeros((BLOCK_M, BLOCK_L), dtype=baco.int32)
    s += baco.load(mask_ptr + offs_l[None, :], mask=offs_l[None, :] < L, other=0)
    s += baco.dot(q, kt)
    p = baco.softmax(s, mask=offs_l[None, :] < L)
    v = baco.load(v_ptr + offs_l[:, None] * D + offs_d[None, :],
                  mask=(offs_l[:, None] < L) & (offs_d[None, :] < D), other=0)
    o = baco.dot(p, v)
    baco.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], (o * scale).to(baco.int8),
               mask=(offs_m[:, None] < M) & (offs_d[None, :] < D))
