"""Checks that a lowered program computes the layer: AMOS's matching matrices and coverage.

`check_matching` is AMOS's validation (seed 000 §1.5, Algorithm 4): with boolean matrices
``X`` (tensors x software loops: which loops index each tensor), ``Y`` (intrinsic loops x
software loops: which software loops a compute instruction's loops enumerate) and ``Z``
(operands x intrinsic loops), a matching is valid iff ``Z * Y == X`` and ``X * Y^T == Z`` under
boolean matrix product, restricted to the software loops the instruction enumerates (the others
stay outer loops) and to the intrinsic loops that enumerate some software loop.

`check_coverage` is the exactly-once test on the blocked iteration space: the iteration space
of the layer cut into (group, n, p, q, k-block, c-block, r, s) blocks of ``Ks`` output channels
by ``Cs`` input channels, where each row of each compute instruction claims one block. Every
block must be claimed exactly once, with the block's full column extents (``Cs``, ``Ks``, or
what is left of C and K at the edge) -- then every output element receives every reduction
term exactly once. The claims come from the lowering's records and are matched, in order,
against the rows and columns of the compute instructions actually in the trace.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accel.isa import Funct
from accel.trace import Trace
from workloads.errors import TraceError
from workloads.layer import DIMS

TENSORS = ("input", "weight", "output")
INTRINSIC = ("i1", "i2", "r1")
OPERANDS = ("A", "B", "C")
# A (Src1) is rows x reduction, B (Src2) columns x reduction, C (Dst) rows x columns.
GEMMINI_Z = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=bool)
_FLUSH_ROWS = 1 << 24  # claimed blocks gathered before one bincount over the whole space


def bool_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Boolean matrix product: ``out[i, j] = any_k a[i, k] and b[k, j]``."""
    return (np.asarray(a, np.int64) @ np.asarray(b, np.int64)) > 0


def access_matrix(loops: Sequence[str] = DIMS) -> np.ndarray:
    """``X``: which of `loops` index the input, weight and output of a conv (``[3, loops]``)."""
    uses = {"input": set("NPQCRS"), "weight": set("RSCK"), "output": set("NPQK")}
    return np.array([[d in uses[t] for d in loops] for t in TENSORS], dtype=bool)


def check_matching(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> tuple[bool, str]:
    """AMOS's test of one matching; returns (valid, reason).

    >>> loops = ("n", "k", "p", "q", "c", "r", "s")
    >>> x = np.array([[1,0,1,1,1,1,1], [0,1,0,0,1,1,1], [1,1,1,1,0,0,0]], bool)
    >>> y = np.array([[1,0,1,1,0,0,0], [0,1,0,0,0,0,0], [0,0,0,0,1,1,1]], bool)
    >>> check_matching(x, y, GEMMINI_Z)[0]
    True
    """
    x, y, z = (np.asarray(m, bool) for m in (x, y, z))
    mapped = y.any(axis=0)
    used = y.any(axis=1)
    if np.any(y.sum(axis=0) > 1):
        loop = int(np.argmax(y.sum(axis=0) > 1))
        return False, f"software loop {loop} is matched to more than one intrinsic loop"
    zy = bool_matmul(z, y)
    if not np.array_equal(zy[:, mapped], x[:, mapped]):
        t, l = np.argwhere(zy[:, mapped] != x[:, mapped])[0]
        return False, (f"Z*Y != X: operand {t} and software loop "
                       f"{np.flatnonzero(mapped)[l]} disagree")
    xy = bool_matmul(x[:, mapped], y[:, mapped].T)
    if not np.array_equal(xy[:, used], z[:, used]):
        t, l = np.argwhere(xy[:, used] != z[:, used])[0]
        return False, (f"X*Y^T != Z: tensor {t} and intrinsic loop "
                       f"{np.flatnonzero(used)[l]} disagree")
    return True, "valid"


def matching_matrices(row_dims: Sequence[str], col_dims: Sequence[str],
                      red_dims: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X, Y, Z)`` over `DIMS` for a lowering that puts the given dims on the array's rows
    (i1), columns (i2) and reduction (r1)."""
    y = np.array([[d in dims for d in DIMS] for dims in (row_dims, col_dims, red_dims)],
                 dtype=bool)
    return access_matrix(DIMS), y, GEMMINI_Z


# --------------------------------------------------------------------------- coverage
def _trace_computes(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, a_cols, bd_cols) of every compute instruction in `trace`, in order."""
    arr = trace.as_arrays()
    mask = (arr.funct == Funct.COMPUTE_PRELOADED) | (arr.funct == Funct.COMPUTE_ACCUMULATED)
    rs1, rs2 = arr.rs1[mask], arr.rs2[mask]
    rows = (rs1 >> np.uint64(48)).astype(np.int64)
    a_cols = ((rs1 >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    b_cols = ((rs2 >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    return rows, a_cols, b_cols


def check_coverage(layer, cs: int, ks: int, steps: Sequence, trace: Trace) -> int:
    """Raise `TraceError` unless the computes cover each blocked iteration exactly once.

    ``steps`` are the lowering's `StepRecord`s (group, tile origin, template of compute
    records). Returns the number of blocks checked.
    """
    kb, cb = -(-layer.K // ks), -(-layer.C // cs)
    shape = (layer.groups, layer.N, layer.P, layer.Q, kb, cb, layer.R, layer.S)
    size = int(np.prod(shape, dtype=np.int64))
    counts = np.zeros(size, np.int64)
    strides = np.array([int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(8)])
    t_rows, t_acols, t_bcols = _trace_computes(trace)
    pos = 0
    pending: list[np.ndarray] = []
    pending_rows = 0
    cache: dict[int, tuple] = {}
    for step in steps:
        tmpl = step.template
        if id(tmpl) not in cache:
            recs = tmpl.records
            if recs:
                pix = np.concatenate([r.pixels for r in recs])
                rec_of_row = np.repeat(np.arange(len(recs)), [len(r.pixels) for r in recs])
                outer = np.stack([r.outer_index for r in recs])
                meta = np.array([[len(r.pixels), r.ccols, r.kcols, r.scols] for r in recs])
            else:
                pix = np.zeros((0, 3), np.int64)
                rec_of_row = np.zeros(0, np.int64)
                outer = np.zeros((0, 7), np.int64)
                meta = np.zeros((0, 4), np.int64)
            cache[id(tmpl)] = (pix, rec_of_row, outer, meta)
        pix, rec_of_row, outer, meta = cache[id(tmpl)]
        n_rec = len(meta)
        if n_rec == 0:
            continue
        got = (t_rows[pos:pos + n_rec], t_acols[pos:pos + n_rec], t_bcols[pos:pos + n_rec])
        if len(got[0]) < n_rec or not (np.array_equal(got[0], meta[:, 0])
                                       and np.array_equal(got[1], meta[:, 1])
                                       and np.array_equal(got[2], meta[:, 2])):
            raise TraceError(f"coverage: computes #{pos}..#{pos + n_rec - 1} of the trace do "
                             "not match the rows and columns the lowering recorded for them")
        pos += n_rec
        o = step.origin
        glob = outer + o  # [rec, 7] global index of each weight block
        k_blk = glob[:, 5] // ks
        c_blk = glob[:, 4] // cs
        # A packed compute (first-layer packing) covers `scols` kernel columns at once.
        want_c = np.minimum(cs, layer.C - c_blk * cs) * meta[:, 3]
        want_k = np.minimum(ks, layer.K - k_blk * ks)
        if np.any(meta[:, 1] != want_c) or np.any(meta[:, 2] != want_k):
            bad = int(np.argmax((meta[:, 1] != want_c) | (meta[:, 2] != want_k)))
            raise TraceError(f"coverage: compute #{pos - n_rec + bad} covers {meta[bad, 1]} "
                             f"input x {meta[bad, 2]} output channels of block (c-block "
                             f"{c_blk[bad]}, k-block {k_blk[bad]}, {meta[bad, 3]} kernel "
                             f"column(s)); the block has {want_c[bad]} x {want_k[bad]}")
        span = meta[rec_of_row, 3]
        row_of = np.repeat(np.arange(len(rec_of_row)), span)
        s_off = np.arange(len(row_of)) - np.repeat(np.cumsum(span) - span, span)
        rec_of_row = rec_of_row[row_of]
        n_ = pix[row_of, 0] + o[6]
        p_ = pix[row_of, 1] + o[2]
        q_ = pix[row_of, 2] + o[3]
        r_ = glob[rec_of_row, 0]
        s_ = glob[rec_of_row, 1] + s_off
        coords = (np.full_like(n_, step.group), n_, p_, q_, k_blk[rec_of_row],
                  c_blk[rec_of_row], r_, s_)
        for i, (c_, extent) in enumerate(zip(coords, shape)):
            if np.any((c_ < 0) | (c_ >= extent)):
                raise TraceError(f"coverage: a compute covers index {int(c_.max())} of "
                                 f"{('group', 'N', 'P', 'Q', 'k-block', 'c-block', 'R', 'S')[i]}"
                                 f", outside its extent {extent}")
        pending.append(sum(c_ * st for c_, st in zip(coords, strides)))
        pending_rows += len(pending[-1])
        if pending_rows > _FLUSH_ROWS:
            counts += np.bincount(np.concatenate(pending), minlength=size)
            pending, pending_rows = [], 0
    if pending:
        counts += np.bincount(np.concatenate(pending), minlength=size)
    if pos != len(t_rows):
        raise TraceError(f"coverage: the trace has {len(t_rows)} computes, the lowering "
                         f"recorded {pos}")
    if np.any(counts != 1):
        bad = int(np.argmax(counts != 1))
        idx = np.unravel_index(bad, shape)
        names = ("group", "n", "p", "q", "k-block", "c-block", "r", "s")
        where = ", ".join(f"{n}={int(i)}" for n, i in zip(names, idx))
        raise TraceError(f"coverage: block ({where}) is computed {int(counts[bad])} times; "
                         "every block must be computed exactly once")
    return size


def check_tile_coverage(layer, tiles: Sequence[tuple[int, int, int, int, int, int, int]]) -> int:
    """Raise `TraceError` unless GEMM tiles cover the (group, row, k_red, n_out) space once.

    ``tiles`` are ``(group, row0, rows, c0, c_len, k0, k_len)`` with rows counted over the
    batched A matrix (``n*P + p``), as the ``loop_ws`` form emits them. The space is cut at
    the greatest common divisor of the tile edges, so the check costs the number of tiles,
    not of MACs. Returns the number of cells checked.
    """
    edges = [[], [], []]
    for _, r0, nr, c0, nc, k0, nk in tiles:
        for axis, (start, length) in enumerate(((r0, nr), (c0, nc), (k0, nk))):
            edges[axis] += [start, start + length]
    totals = (layer.N * layer.P, layer.C, layer.K)
    units = [int(np.gcd.reduce(np.array(e + [t], np.int64))) for e, t in zip(edges, totals)]
    shape = (layer.groups, *(t // u for t, u in zip(totals, units)))
    counts = np.zeros(shape, np.int64)
    for g, r0, nr, c0, nc, k0, nk in tiles:
        (a, b), (c, d), (e, f) = ((x // u, (x + n) // u) for x, n, u in
                                  ((r0, nr, units[0]), (c0, nc, units[1]), (k0, nk, units[2])))
        counts[g, a:b, c:d, e:f] += 1
    if np.any(counts != 1):
        g, r, c, k = np.unravel_index(int(np.argmax(counts != 1)), shape)
        raise TraceError(f"coverage: GEMM rows {r * units[0]}.., reduction {c * units[1]}.., "
                         f"outputs {k * units[2]}.. of group {g} are covered "
                         f"{int(counts[g, r, c, k])} times; they must be covered once")
    return counts.size


__all__ = ["GEMMINI_Z", "INTRINSIC", "OPERANDS", "TENSORS", "access_matrix", "bool_matmul",
           "check_coverage", "check_matching", "check_tile_coverage", "matching_matrices"]
