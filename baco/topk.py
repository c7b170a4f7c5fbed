"""A search's best few distinct designs by its own score, as a value.

Every search (BACO's ledger, the DOSA-style incumbent, the random and BO trackers) keeps its
`DEFAULT_TOP_K` best rounded designs, not only its best, so that the final pick
(`baco.final_pick`) can simulate them and return the one the simulator prefers. A top list
is a tuple of ``(score, key, design)`` entries, lowest score first, each key once: pure data,
so BACO's checkpoint saves it as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from accel.design import Design

__all__ = ["DEFAULT_TOP_K", "Entry", "design_key", "offer", "would_enter"]

DEFAULT_TOP_K = 4
"""Designs a search keeps for the final pick unless told otherwise (``final_pick.top_k``; as
many as ``codesign.sim_top_k`` simulates each round)."""

Entry = tuple[float, str, Any]
"""``(score, key, design)``: the search's own score (lower is better), a key that names the
design (`design_key`), and the design."""


def design_key(design: Design) -> str:
    """A stable identity of a design (hardware and every layer's integer arrays)."""
    h = hashlib.sha1(json.dumps(design.hw.to_dict(), sort_keys=True).encode())
    for a in (design.temporal, design.spatial, design.order, design.stages):
        h.update(np.ascontiguousarray(a, np.int64).tobytes())
    return h.hexdigest()


def would_enter(top: tuple[Entry, ...], score: float, k: int) -> bool:
    """Whether a design of `score` could enter `top` (a finite score under the k-th)."""
    return bool(np.isfinite(score)) and (len(top) < k or score < top[-1][0])


def offer(top: tuple[Entry, ...], entries: Iterable[Entry], k: int) -> tuple[Entry, ...]:
    """`top` with `entries` added: the `k` lowest scores, each key once (the first entry of a
    key stays; on equal scores the earlier entry comes first), non-finite scores left out.

    >>> offer((), [(3.0, "a", None), (1.0, "b", None), (2.0, "a", None)], 2)
    ((1.0, 'b', None), (3.0, 'a', None))
    """
    kept = list(top)
    known = {key for _, key, _ in kept}
    for score, key, design in entries:
        if key in known or not would_enter(tuple(kept), score, k):
            continue
        known.add(key)
        kept.append((float(score), key, design))
        kept.sort(key=lambda e: e[0])
        if len(kept) > k:
            known.discard(kept.pop()[1])
    return tuple(kept)
