"""The ATFormer network in Flax (seed 001 §1.4), predicting a per-point scalar from tokens.

Kernel embedding (two dense layers with ReLU to ``width``), ``layers`` pre-norm self-attention
encoder blocks (``heads`` heads, ``width`` wide, an MLP of ``mlp_width``), a per-token
regression head (``width -> 1``) and the sum over unmasked tokens. Masking is by each token's
weight in [0, 1] (`perfmodels.atformer.features`): the sum is weighted by it, and attention
adds ``(weight - 1) * MASK_SCALE`` to the logits of the keys, so a masked token (weight 0) is
invisible and a relaxed one (fractional weight) is partly so, with bounded gradients.

Features are standardised inside the model by the training set's mean and std (``stats``), so a
checkpoint is self-contained.

>>> import jax, jax.numpy as jnp
>>> cfg = ModelConfig(width=16, heads=2, layers=1, mlp_width=16)
>>> net = ATFormer(cfg)
>>> x, w = jnp.ones((3, 5, 8)), jnp.ones((3, 5))
>>> params = net.init(jax.random.PRNGKey(0), x, w)
>>> net.apply(params, x, w).shape
(3,)
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
from flax import struct

__all__ = ["MASK_SCALE", "ATFormer", "ModelConfig"]

MASK_SCALE = 30.0
"""Attention-logit penalty of a fully masked key (weight 0): e^-30 of the attention mass."""


@struct.dataclass
class ModelConfig:
    """Hyperparameters (seed 001 §1.4 defaults: 512 wide, 4 heads, 2 encoder layers)."""

    width: int = 512
    heads: int = 4
    layers: int = 2
    mlp_width: int = 512

    def to_dict(self) -> dict[str, int]:
        return {"width": self.width, "heads": self.heads, "layers": self.layers,
                "mlp_width": self.mlp_width}


class SelfAttention(nn.Module):
    """Multi-head self-attention with a soft key mask (an additive logit bias)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, h: Any, bias: Any) -> Any:
        cfg = self.config
        head_dim = cfg.width // cfg.heads
        qkv = nn.DenseGeneral((3, cfg.heads, head_dim), name="qkv")(h)     # [B, T, 3, H, D]
        q, k, v = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]
        scale = 1.0 / jnp.sqrt(float(head_dim))
        # Batched matmuls: in BACO's descent (the hybrid residual's gradient for every layer
        # of every start) they took 30% less time than a broadcast-and-sum form, whose
        # gradient XLA fused into one slow strided loop; as fast in the surrogate's fits.
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
        attn = nn.softmax(logits + bias[:, None, None, :], axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", attn, v)
        return nn.DenseGeneral(cfg.width, axis=(-2, -1), name="out")(out)


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: attention, then an MLP, each with a residual."""

    config: ModelConfig

    @nn.compact
    def __call__(self, h: Any, bias: Any) -> Any:
        cfg = self.config
        h = h + SelfAttention(cfg)(nn.LayerNorm()(h), bias)
        y = nn.Dense(cfg.mlp_width)(nn.LayerNorm()(h))
        y = nn.Dense(cfg.width)(nn.relu(y))
        return h + y


class ATFormer(nn.Module):
    """Tokens ``[B, T, F]`` with weights ``[B, T]`` -> ``[B]``: the weighted sum of per-token
    outputs."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x: Any, weight: Any) -> Any:
        cfg = self.config
        h = nn.relu(nn.Dense(cfg.width, name="embed_0")(x))
        h = nn.relu(nn.Dense(cfg.width, name="embed_1")(h))
        bias = (weight - 1.0) * MASK_SCALE
        for i in range(cfg.layers):
            h = EncoderBlock(cfg, name=f"encoder_{i}")(h, bias)
        # A zero-initialised head: an untrained model predicts no residual at all.
        per_token = nn.Dense(1, kernel_init=nn.initializers.zeros, name="head")(
            nn.LayerNorm(name="head_norm")(h))[..., 0]
        return (per_token * weight).sum(-1)
