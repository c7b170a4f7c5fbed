"""Padded batch sizes, so a jitted function called on batches of many sizes compiles a few
programs instead of one per size (JAX compiles once per shape)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["pad_leading", "row_bucket"]


def row_bucket(rows: int, least: int = 8) -> int:
    """The padded row count of `rows` rows: the next power of two, at least `least`.

    >>> [row_bucket(n) for n in (1, 8, 9, 100)]
    [8, 8, 16, 128]
    """
    return max(least, 1 << max(rows - 1, 0).bit_length())


def pad_leading(tree: Any, size: int) -> Any:
    """Every leaf of `tree` (numpy, leading axis of one length) with its last row repeated up
    to `size` rows: real rows, so the padded ones compute finite values the caller drops."""
    def pad(leaf: Any) -> np.ndarray:
        leaf = np.asarray(leaf)
        return np.concatenate([leaf, np.repeat(leaf[-1:], size - leaf.shape[0], 0)])
    return jax.tree_util.tree_map(pad, tree)
