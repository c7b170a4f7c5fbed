"""Exact refinement of a rounded design: local moves on the layers that matter most.

Gradient descent converges on the relaxed objective, and rounding to divisors loses part of
what it found (the relaxed optimum sits between integer points). The last part of the budget
therefore goes to exact local search around the best rounded design, and this is where the
importance scheduler (`baco.importance`, seed 001 §6.5) decides where samples go: every round
it picks the layers whose next round is expected to lower the network EDP most (Eq. 6.7-6.9),
each picked layer gets ``moves`` neighbouring programs, every neighbour (the whole network
with that one layer changed, its minimal hardware re-inferred) is scored exactly -- one sample
each -- and the best improvement is kept. Layers that stop improving are abandoned (§6.5).

A neighbour of a layer's program changes one thing:

* a prime factor of a dim moves between two of its slots (spatial or temporal, any level);
* one level's loop order becomes one of the candidate orders, or two adjacent loops swap;
* one level's pipeline stages go up or down by one.

Each round also scores whole-network moves (`global_moves`): changes to every layer at once
that the coupled hardware makes unreachable one layer at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from accel.arch import MAX_STAGES
from accel.design import Design
from baco.rounding import Rounder, divisors

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
GLOBAL_MOVES = 32
"""Most whole-network moves (`global_moves`) per refinement round."""


def _primes(n: int) -> list[int]:
    out, x, p = [], n, 2
    while p * p <= x:
        if x % p == 0:
            out.append(p)
            while x % p == 0:
                x //= p
        p += 1
    if x > 1:
        out.append(x)
    return out


def layer_moves(rounder: Rounder, design: Design, b: int, candidate_orders: np.ndarray
                ) -> list[Arrays]:
    """Every neighbour of layer `b`'s program in `design`, as per-layer arrays
    ``(temporal, spatial, order, stages)`` of that layer (``[level, dim]``, ``[level, 7]``
    outermost first, ``[level]``). `candidate_orders` is ``[cand, 7]``, innermost first."""
    t0, s0 = design.temporal[b], design.spatial[b]
    o0, st0 = design.order[b], design.stages[b]
    n_levels = t0.shape[0]
    pe_cap = rounder.fan_cap
    out: list[Arrays] = []

    def slots(d: int) -> list[tuple[int, str]]:
        found = []
        for l in range(n_levels):
            if rounder.s_mask[l, d]:
                found.append((l, "s"))
            if rounder.t_mask[l, d] or l == n_levels - 1:
                found.append((l, "t"))
        return found

    for d in range(t0.shape[1]):
        places = slots(d)
        for i, (la, ka) in enumerate(places):
            src = (s0 if ka == "s" else t0)[la, d]
            if src == 1:
                continue
            for p in _primes(int(src)):
                for j, (lb, kb) in enumerate(places):
                    if j == i:
                        continue
                    t, s = t0.copy(), s0.copy()
                    (s if ka == "s" else t)[la, d] //= p
                    (s if kb == "s" else t)[lb, d] *= p
                    if kb == "s" and np.prod(s[lb]) > pe_cap[lb] + 1e-9:
                        continue
                    out.append((t, s, o0, st0))
    for l in range(1, n_levels):
        for cand in candidate_orders:
            order = o0.copy()
            order[l] = np.asarray(cand)[::-1]
            if not np.array_equal(order[l], o0[l]):
                out.append((t0, s0, order, st0))
        real = [d for d in o0[l] if t0[l, d] > 1]
        for a, c in itertools.pairwise(real):
            order = o0.copy()
            row = list(order[l])
            ia, ic = row.index(a), row.index(c)
            row[ia], row[ic] = row[ic], row[ia]
            order[l] = row
            out.append((t0, s0, order, st0))
    for l in range(n_levels - 1):
        for delta in (-1, 1):
            value = int(st0[l]) + delta
            if 1 <= value <= MAX_STAGES:
                stages = st0.copy()
                stages[l] = value
                out.append((t0, s0, o0, stages))
    return out


def global_moves(rounder: Rounder, design: Design, candidate_orders: np.ndarray
                 ) -> list[Arrays]:
    """Whole-network neighbours that no one-layer move reaches (the hardware couples the
    layers: the PE array is as wide as the widest layer needs): every layer's array axes
    filled from any loop of the dim (`fill_moves`), the whole array narrowed to the power of
    two below (`narrow_moves`), every layer's fan-out on an array axis narrowed or widened by
    a prime (its loop at that level taking up the difference; tiles unchanged), one level's
    stages up or down everywhere, one level's loop order set to a candidate everywhere."""
    T0, S0, O0, ST0 = design.temporal, design.spatial, design.order, design.stages
    n_levels = T0.shape[1]
    out: list[Arrays] = fill_moves(rounder, design) + narrow_moves(rounder, design)
    for level in range(n_levels):
        for d in range(T0.shape[2]):
            if not rounder.s_mask[level, d]:
                continue
            widest = int(S0[:, level, d].max())
            for p in _primes(widest):
                T, S = T0.copy(), S0.copy()
                hit = S[:, level, d] == widest
                S[hit, level, d] //= p
                T[hit, level, d] *= p
                out.append((T, S, O0, ST0))
            T, S = T0.copy(), S0.copy()
            changed = False
            for b in range(T.shape[0]):
                extent = int(T[b, level, d] * S[b, level, d])
                room = rounder.fan_cap[level] / max(1.0, np.prod(S[b, level]) / S[b, level, d])
                wider = [x for x in divisors(extent)
                         if S[b, level, d] < x <= min(room, 2 * widest) + 1e-9]
                if wider:
                    S[b, level, d] = wider[0]
                    T[b, level, d] = extent // wider[0]
                    changed = True
            if changed:
                out.append((T, S, O0, ST0))
    for level in range(n_levels - 1):
        for delta in (-1, 1):
            ST = ST0.copy()
            ST[:, level] = np.clip(ST[:, level] + delta, 1, MAX_STAGES)
            if not np.array_equal(ST, ST0):
                out.append((T0, S0, O0, ST))
    for level in range(1, n_levels):
        for cand in candidate_orders:
            O = O0.copy()
            O[:, level] = np.asarray(cand)[::-1]
            if not np.array_equal(O, O0):
                out.append((T0, S0, O, ST0))
    return out


def fill_moves(rounder: Rounder, design: Design) -> list[Arrays]:
    """Every layer's array axes filled from the dim's loop at any level
    (`Rounder.fill_array` with ``any_loop``), as one move; none if nothing widens."""
    T, S = design.temporal.copy(), design.spatial.copy()
    rounder.fill_array(T[None], S[None], any_loop=True)
    return [] if np.array_equal(S, design.spatial) else [(T, S, design.order, design.stages)]


def narrow_moves(rounder: Rounder, design: Design) -> list[Arrays]:
    """The whole array narrowed to the largest power of two below its dim: every layer's
    fan-out on every array axis capped there, the loop at the same level taking the rest
    (`Rounder.narrow`), as one move; none if the array is 1 wide or fixed, or nothing
    changes. A 128-wide design's 64-wide neighbour, which a move on one axis does not reach:
    the array is as wide as its widest axis."""
    dim = max(design.hw.pe_rows, design.hw.pe_cols)
    if dim <= 1 or not rounder.pe_axes or rounder.hw_mode == "fixed":
        return []
    T, S = design.temporal.copy(), design.spatial.copy()
    rounder.narrow(T, S, 1 << ((dim - 1).bit_length() - 1), rounder.pe_axes)
    return [] if np.array_equal(S, design.spatial) else [(T, S, design.order, design.stages)]


def neighbours(rounder: Rounder, design: Design, layers: Sequence[int], moves: int,
               rng: np.random.Generator, candidate_orders: np.ndarray
               ) -> tuple[list[int], Arrays]:
    """Up to `moves` random neighbours of each of `layers`: ``(layer of each, stacked whole-
    network arrays [n, layer, ...])``."""
    owners: list[int] = []
    parts: list[Arrays] = []
    for b in layers:
        options = layer_moves(rounder, design, int(b), candidate_orders)
        if len(options) > moves:
            pick = rng.choice(len(options), size=moves, replace=False)
            options = [options[i] for i in sorted(pick)]
        for t, s, o, st in options:
            T, S, O, ST = (design.temporal.copy(), design.spatial.copy(), design.order.copy(),
                           design.stages.copy())
            T[b], S[b], O[b], ST[b] = t, s, o, st
            parts.append((T, S, O, ST))
            owners.append(int(b))
    if not parts:
        return [], tuple(np.zeros((0,) + a.shape, a.dtype) for a in (
            design.temporal, design.spatial, design.order, design.stages))
    return owners, tuple(np.stack([p[i] for p in parts]) for i in range(4))


def round_moves(rounder: Rounder, design: Design, layers: Sequence[int], moves: int,
                rng: np.random.Generator, candidate_orders: np.ndarray, free_bandwidth: bool
                ) -> tuple[list[int], Arrays, np.ndarray]:
    """One refinement round's moves around `design`: `neighbours` of the chosen `layers`,
    then at most `GLOBAL_MOVES` whole-network moves, then (`free_bandwidth`) the same programs
    with the DRAM bandwidth halved and doubled. Returns ``(layer of each move, -1 for a
    whole-network one; stacked arrays; each move's DRAM words/cycle)``."""
    owners, arrays = neighbours(rounder, design, layers, moves, rng, candidate_orders)
    extra = global_moves(rounder, design, candidate_orders)[:GLOBAL_MOVES]
    bw = design.hw.dram_bw_words
    bw_moves = [] if not free_bandwidth else [
        x for x in rounder.round_bandwidth([bw / 2, bw * 2]) if x != bw]
    extra += [(design.temporal, design.spatial, design.order, design.stages)] * len(bw_moves)
    if extra:
        owners = owners + [-1] * len(extra)
        arrays = tuple(np.concatenate([a, np.stack([x[i] for x in extra])])
                       for i, a in enumerate(arrays))
    bws = np.concatenate([np.full(len(owners) - len(bw_moves), bw), bw_moves])
    return owners, arrays, bws


__all__ = ["GLOBAL_MOVES", "fill_moves", "global_moves", "layer_moves", "narrow_moves",
           "neighbours", "round_moves"]
