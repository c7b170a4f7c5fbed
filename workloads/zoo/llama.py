"""Llama-2-7B decoder, prefill or one decode step: the GEMMs and attention MatMuls.

Architecture: Touvron et al., "Llama 2" (2023), 7B: 32 layers, hidden 4096, 32 heads of 128
(multi-head, no grouped-query attention at 7B), SwiGLU FFN of 11008 (gate, up, down), RMSNorm,
vocabulary 32000, no biases - the values of the released ``config.json``
(hidden_size 4096, intermediate_size 11008, num_attention_heads 32, num_hidden_layers 32,
vocab_size 32000), laid out as Hugging Face's ``LlamaForCausalLM`` exports to ONNX.

``phase=prefill`` runs ``seq`` prompt tokens; ``phase=decode`` runs one new token against a
KV cache of ``seq`` past tokens (``past_key_values`` inputs, concatenated with the new key and
value, so attention spans seq + 1 positions). QK^T and attention x V are batched MatMuls over
[batch, 32] (batch x heads is the loop nest's N). The LM head runs on every position of the
step, as ``LlamaForCausalLM`` does by default (for prefill, ``seq`` rows).
Left out, because they are elementwise and carry no MACs: the rotary position embedding on
Q and K, and the embedding lookup (the graph starts at ``inputs_embeds``).

The ranges (batch 1-8, seq 1-512) are the LLM settings of the seed thesis's Table 6.4 sources
("input sequence lengths range from 1 to 512, ... batch sizes range from 1 to 8").
"""

from __future__ import annotations

import math

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "phase": Param("prefill", "prefill: seq prompt tokens; decode: 1 token, KV cache of seq",
                   choices=("prefill", "decode")),
    "batch": Param(1, "sequences per step", low=1, high=8),
    "seq": Param(128, "prompt tokens (prefill) or cached tokens (decode)", low=1, high=512),
}

LAYERS = 32
HIDDEN = 4096
HEADS = 32
HEAD_DIM = HIDDEN // HEADS
FFN = 11008
VOCAB = 32000


def _layer(b: GraphBuilder, x: str, mask: str, batch: int, tokens: int, past: int,
           index: int) -> str:
    name = f"model.layers.{index}"
    h = b.rmsnorm(x, name=f"{name}.input_layernorm")
    q, k, v = (b.linear(h, HIDDEN, bias=False, name=f"{name}.self_attn.{p}_proj")
               for p in ("q", "k", "v"))
    q, k, v = (b.transpose(b.reshape(t, (batch, tokens, HEADS, HEAD_DIM)), (0, 2, 1, 3))
               for t in (q, k, v))                                   # [B, A, T, 128]
    if past:
        k = b.concat([b.input(f"past_key_values.{index}.key", (batch, HEADS, past, HEAD_DIM)),
                      k], axis=2)
        v = b.concat([b.input(f"past_key_values.{index}.value", (batch, HEADS, past, HEAD_DIM)),
                      v], axis=2)
    scores = b.matmul(q, b.transpose(k, (0, 1, 3, 2)), name=f"{name}.self_attn.qk")
    scores = b.add(b.div(scores, b.scalar(math.sqrt(HEAD_DIM))), mask)
    ctx = b.matmul(b.softmax(scores), v, name=f"{name}.self_attn.av")  # [B, A, T, 128]
    ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch, tokens, HIDDEN))
    x = b.add(x, b.linear(ctx, HIDDEN, bias=False, name=f"{name}.self_attn.o_proj"))
    h = b.rmsnorm(x, name=f"{name}.post_attention_layernorm")
    gate = b.silu(b.linear(h, FFN, bias=False, name=f"{name}.mlp.gate_proj"))
    up = b.linear(h, FFN, bias=False, name=f"{name}.mlp.up_proj")
    down = b.linear(b.mul(gate, up), HIDDEN, bias=False, name=f"{name}.mlp.down_proj")
    return b.add(x, down)


def build(phase: str = "prefill", batch: int = 1, seq: int = 128) -> onnx.ModelProto:
    tokens, past = (seq, 0) if phase == "prefill" else (1, seq)
    b = GraphBuilder(f"llama2_7b_{phase}")
    x = b.input("inputs_embeds", (batch, tokens, HIDDEN))
    # Causal (prefill) or padding (decode) mask, added to the scores as HF does.
    mask = b.input("attention_mask", (batch, 1, tokens, past + tokens))
    for i in range(LAYERS):
        x = _layer(b, x, mask, batch, tokens, past, index=i)
    x = b.rmsnorm(x, name="model.norm")
    b.output(b.linear(x, VOCAB, bias=False, name="lm_head"))
    return b.build()
