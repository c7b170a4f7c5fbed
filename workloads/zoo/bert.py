"""BERT-base encoder: 12 layers, hidden 768, 12 heads of 64, FFN 3072.

Architecture: Devlin et al., "BERT" (NAACL 2019), BERT-BASE (L=12, H=768, A=12, FFN 4H), laid
out as Hugging Face's ``BertModel`` exports to ONNX: per layer, the query/key/value
projections (MatMul + bias Add on [batch, seq, 768]), the heads split by Reshape/Transpose,
QK^T and attention x V as batched MatMuls over [batch, 12] (so batch x heads becomes the
loop nest's N), the 1/sqrt(64) scale, the additive attention mask, Softmax, the output
projection, residual + LayerNorm, the FFN with exact (erf) GELU, residual + LayerNorm.

The graph starts at the embeddings' output (token/position/segment lookups are gathers, no
MACs) and stops at the last encoder layer (no pooler), so the MACs are the encoder's:
12 x (4 x seq x 768^2 + 2 x 12 x seq^2 x 64 + 2 x seq x 768 x 3072), 11.17 GMAC at seq 128.
DOSA's ``bert`` set (mm_0 .. mm_5, dosa-gemmini-isa.md §A.10) is one block with one head; this
is the whole encoder.
"""

from __future__ import annotations

import math

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "seq": Param(128, "tokens per sequence (BERT's position table has 512)", low=1, high=512),
    "batch": Param(1, "sequences per inference", low=1, high=64),
}

LAYERS = 12
HIDDEN = 768
HEADS = 12
HEAD_DIM = HIDDEN // HEADS
FFN = 3072


def _heads(b: GraphBuilder, x: str, batch: int, seq: int, perm: tuple[int, ...]) -> str:
    return b.transpose(b.reshape(x, (batch, seq, HEADS, HEAD_DIM)), perm)


def _layer(b: GraphBuilder, x: str, mask: str, batch: int, seq: int, name: str) -> str:
    q = b.linear(x, HIDDEN, name=f"{name}.attention.self.query")
    k = b.linear(x, HIDDEN, name=f"{name}.attention.self.key")
    v = b.linear(x, HIDDEN, name=f"{name}.attention.self.value")
    q = _heads(b, q, batch, seq, (0, 2, 1, 3))                       # [B, A, S, 64]
    k = _heads(b, k, batch, seq, (0, 2, 3, 1))                       # [B, A, 64, S]
    v = _heads(b, v, batch, seq, (0, 2, 1, 3))                       # [B, A, S, 64]
    scores = b.matmul(q, k, name=f"{name}.attention.self.qk")         # [B, A, S, S]
    scores = b.add(b.div(scores, b.scalar(math.sqrt(HEAD_DIM))), mask)
    ctx = b.matmul(b.softmax(scores), v, name=f"{name}.attention.self.av")
    ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch, seq, HIDDEN))
    o = b.linear(ctx, HIDDEN, name=f"{name}.attention.output.dense")
    x = b.layernorm(b.add(o, x), name=f"{name}.attention.output.LayerNorm")
    h = b.gelu(b.linear(x, FFN, name=f"{name}.intermediate.dense"))
    o = b.linear(h, HIDDEN, name=f"{name}.output.dense")
    return b.layernorm(b.add(o, x), name=f"{name}.output.LayerNorm")


def build(seq: int = 128, batch: int = 1) -> onnx.ModelProto:
    b = GraphBuilder("bert")
    x = b.input("embeddings", (batch, seq, HIDDEN))
    mask = b.input("extended_attention_mask", (batch, 1, 1, seq))
    x = b.layernorm(x, name="embeddings.LayerNorm")
    for i in range(LAYERS):
        x = _layer(b, x, mask, batch, seq, name=f"encoder.layer.{i}")
    b.output(x)
    return b.build()
