"""The dims the co-design searches: an awkward layer dim padded to a nearby smooth size.

A dim that is mostly one large prime has almost no exact tiles: a GEMM with K = 2729 (a
prime) can put K on one PE column or on 2729 of them, and an exact-divisor search ends on a
1-wide array axis or one huge tile. Gemmini's library pads such dims with zero-filled edge
tiles; the co-design does the same. A dim is awkward when its 7-smooth part (the product of
its factors 2, 3, 5 and 7) is smaller than the rest (2729, 6074 = 2 x 3037, 568 = 8 x 71; not
11008 = 256 x 43 nor 570 = 30 x 19, whose tiles are fine), and it is then searched grown to
the smallest 7-smooth size within ``codesign.pad_fraction`` of it (2729 -> 2744 = 2^3 7^3,
+0.5%). Nothing else changes: a mapping is scored on the layer it covers
(`baco.rounding.common_score`), so the padded work is counted, and the lowering zero-fills the
edge (`accel.lower`), so the programs compute the real layer.
"""

from __future__ import annotations

import dataclasses

from workloads.layer import Layer

__all__ = ["PAD_FRACTION", "PADDED_DIMS", "search_layer", "smooth_size"]

SMOOTH_PRIMES = (2, 3, 5, 7)

PAD_FRACTION = 0.0625
"""The default ``codesign.pad_fraction``: within 6.25% every awkward dim above ~100 finds a
7-smooth size (near 1000 they are at most 2% apart)."""

PADDED_DIMS = ("N", "P", "Q", "C", "K")
"""The dims that may be padded: not the window R, S (a padded window only adds work)."""


def _rough_part(n: int) -> int:
    """`n` without its factors 2, 3, 5 and 7."""
    for p in SMOOTH_PRIMES:
        while n % p == 0:
            n //= p
    return n


def _is_smooth(n: int) -> bool:
    return _rough_part(n) == 1


def smooth_size(n: int, max_fraction: float) -> int:
    """The smallest 7-smooth size >= `n` and <= ``n * (1 + max_fraction)`` when `n` is
    awkward (its 7-smooth part smaller than the rest); else, or when there is none, `n`.

    >>> smooth_size(2729, 0.0625), smooth_size(11008, 0.0625), smooth_size(13, 0.0625)
    (2744, 11008, 13)
    """
    rough = _rough_part(n)
    if rough * rough <= n:          # smooth part >= rough part: tiles enough
        return n
    limit = int(n * (1.0 + max_fraction))
    for size in range(n, limit + 1):
        if _is_smooth(size):
            return size
    return n


def search_layer(layer: Layer, max_fraction: float) -> Layer:
    """`layer` with each of its `PADDED_DIMS` grown to `smooth_size` (the layer itself with
    ``max_fraction`` 0, or for a grouped convolution, whose channels the lowering splits by
    group)."""
    if max_fraction <= 0 or layer.groups != 1:
        return layer
    dims = layer.dims
    changes = {d: smooth_size(dims[d], max_fraction) for d in PADDED_DIMS}
    if all(changes[d] == dims[d] for d in PADDED_DIMS):
        return layer
    return dataclasses.replace(layer, **changes)
