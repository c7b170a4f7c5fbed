"""A cycle-level model of the PE array: `lax.scan` over cycles, skewed systolic dataflow.

It exists to check the simulator's fast path (one ``A @ W + D`` per compute instruction, and a
closed-form latency in `accel.sim.timing`) against what a systolic array actually does, PE by PE
and cycle by cycle:

* weight-stationary (`ws_compute`): PE ``(k, c)`` holds ``W[k, c]``. Row ``i`` of A enters PE
  row ``k`` at the left edge at cycle ``i + k`` (the input skew) and moves one column right per
  cycle; partial sums enter column ``c`` at the top at cycle ``i + c`` (D, the bias) and move one
  row down per cycle, each PE adding ``a * w``. ``C[i, c]`` leaves the bottom of column ``c`` at
  cycle ``i + (rows - 1) + c``, where the output de-skew picks it up. The last output leaves
  ``n + rows + cols - 2`` cycles after the first input entered: the fill and drain.
* `ws_preload`: B enters at the top, last row first, and shifts down one PE row per cycle; after
  ``rows`` cycles every PE holds its weight.
* output-stationary (`os_compute`): PE ``(i, c)`` accumulates ``C[i, c]``; ``A[i, k]`` enters row
  ``i`` at cycle ``i + k`` moving right, ``B[k, c]`` enters column ``c`` at cycle ``k + c`` moving
  down, so they meet in PE ``(i, c)`` at cycle ``i + c + k``.

Every function returns the result and the number of cycles the scan ran until the last useful
value left (or, for OS, was accumulated).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def ws_latency_cycles(rows_fed: int, pe_rows: int, pe_cols: int) -> int:
    """Closed form of what `ws_compute` measures: cycles from the first A row entering to the
    last C row leaving (fill + drain)."""
    return rows_fed + pe_rows + pe_cols - 2


def os_latency_cycles(k: int, pe_rows: int, pe_cols: int) -> int:
    """Closed form of what `os_compute` measures: cycles until the last product is added."""
    return k + pe_rows + pe_cols - 2


@functools.partial(jax.jit, static_argnames=("cycles",))
def _ws_scan(a, w, d, cycles):
    n, pe_rows = a.shape
    pe_cols = w.shape[1]
    k_idx = jnp.arange(pe_rows)
    c_idx = jnp.arange(pe_cols)

    def cycle(carry, t):
        a_reg, p_reg, tag_reg = carry
        # Skewed inputs: PE row k sees A[t - k, k] at its left edge; column c sees D[t - c, c]
        # at its top, tagged with its row index (-1: a bubble).
        i_left = t - k_idx
        a_in = jnp.where((i_left >= 0) & (i_left < n), a[jnp.clip(i_left, 0, n - 1), k_idx], 0)
        i_top = t - c_idx
        live = (i_top >= 0) & (i_top < n)
        d_in = jnp.where(live, d[jnp.clip(i_top, 0, n - 1), c_idx], 0)
        tag_in = jnp.where(live, i_top, -1)
        a_now = jnp.concatenate([a_in[:, None], a_reg[:, :-1]], axis=1)  # one column right
        p_now = jnp.concatenate([d_in[None, :], p_reg[:-1, :]], axis=0) + a_now * w  # one down
        tag_now = jnp.concatenate([tag_in[None, :], tag_reg[:-1, :]], axis=0)
        return (a_now, p_now, tag_now), (p_now[-1], tag_now[-1])  # what leaves the bottom

    zeros = jnp.zeros((pe_rows, pe_cols), jnp.int32)
    _, (bottom, tags) = lax.scan(cycle, (zeros, zeros, zeros - 1), jnp.arange(cycles))
    # De-skew by tag: output row i of column c is whatever left column c tagged i.
    out = jnp.zeros((n + 1, pe_cols), jnp.int32)
    rows = jnp.where(tags >= 0, tags, n)  # bubbles go to a dummy row
    out = out.at[rows, jnp.broadcast_to(c_idx, rows.shape)].set(bottom)
    last = jnp.max(jnp.where(tags >= 0, jnp.arange(cycles)[:, None], -1))
    return out[:n], last + 1


def ws_compute(a: np.ndarray, w: np.ndarray, d: np.ndarray | None = None
               ) -> tuple[np.ndarray, int]:
    """Push ``a`` [n, pe_rows] through a WS array holding ``w`` [pe_rows, pe_cols], partial
    sums starting at ``d`` [n, pe_cols] (zeros if None).

    Returns ``(c, cycles)``: the outputs collected at the bottom of the array, and the cycles
    from the first input to the last output leaving, as the scan observed them.
    """
    a = jnp.asarray(a, jnp.int32)
    w = jnp.asarray(w, jnp.int32)
    n = a.shape[0]
    d = jnp.zeros((n, w.shape[1]), jnp.int32) if d is None else jnp.asarray(d, jnp.int32)
    horizon = n + 2 * (w.shape[0] + w.shape[1]) + 4  # long enough to drain, not assumed exact
    out, cycles = _ws_scan(a, w, d, horizon)
    return np.asarray(out), int(cycles)


@functools.partial(jax.jit, static_argnames=("cycles",))
def _preload_scan(b, cycles):
    pe_rows, pe_cols = b.shape

    def cycle(carry, t):
        regs, tags = carry
        row = pe_rows - 1 - t  # the last row enters first
        live = row >= 0  # the feed: one row per cycle, then the shift stops (weights latch)
        incoming = jnp.where(live, b[jnp.clip(row, 0, pe_rows - 1)], 0)
        regs = jnp.where(live, jnp.concatenate([incoming[None, :], regs[:-1]], axis=0), regs)
        tags = jnp.where(live, jnp.concatenate([jnp.full((1,), row), tags[:-1]]), tags)
        settled = jnp.all(tags == jnp.arange(pe_rows))
        return (regs, tags), settled

    init = (jnp.zeros((pe_rows, pe_cols), jnp.int32), jnp.full(pe_rows, -1, jnp.int32))
    (regs, _), settled = lax.scan(cycle, init, jnp.arange(cycles))
    return regs, jnp.argmax(settled) + 1


def ws_preload(b: np.ndarray) -> tuple[np.ndarray, int]:
    """Shift ``b`` [pe_rows, pe_cols] into the array from the top, last row first.

    Returns the weights the PEs hold once every row reached its PE row, and the cycles that
    took, as the scan observed them.
    """
    b = jnp.asarray(b, jnp.int32)
    regs, cycles = _preload_scan(b, 2 * int(b.shape[0]) + 2)
    return np.asarray(regs), int(cycles)


@functools.partial(jax.jit, static_argnames=("cycles",))
def _os_scan(a, b, d, cycles):
    pe_rows, k = a.shape
    pe_cols = b.shape[1]
    i_idx = jnp.arange(pe_rows)
    c_idx = jnp.arange(pe_cols)

    def cycle(carry, t):
        a_reg, b_reg, av, bv, acc = carry
        ka = t - i_idx  # row i sees A[i, t - i]
        a_live = (ka >= 0) & (ka < k)
        a_in = jnp.where(a_live, a[i_idx, jnp.clip(ka, 0, k - 1)], 0)
        kb = t - c_idx  # column c sees B[t - c, c]
        b_live = (kb >= 0) & (kb < k)
        b_in = jnp.where(b_live, b[jnp.clip(kb, 0, k - 1), c_idx], 0)
        a_now = jnp.concatenate([a_in[:, None], a_reg[:, :-1]], axis=1)
        b_now = jnp.concatenate([b_in[None, :], b_reg[:-1, :]], axis=0)
        av = jnp.concatenate([a_live[:, None], av[:, :-1]], axis=1)
        bv = jnp.concatenate([b_live[None, :], bv[:-1, :]], axis=0)
        return (a_now, b_now, av, bv, acc + a_now * b_now), jnp.any(av & bv)

    zeros = jnp.zeros((pe_rows, pe_cols), jnp.int32)
    off = jnp.zeros((pe_rows, pe_cols), bool)
    (_, _, _, _, acc), busy = lax.scan(cycle, (zeros, zeros, off, off, d), jnp.arange(cycles))
    last = jnp.max(jnp.where(busy, jnp.arange(cycles), -1))
    return acc, last + 1


def os_compute(a: np.ndarray, b: np.ndarray, d: np.ndarray | None = None
               ) -> tuple[np.ndarray, int]:
    """Output-stationary ``d + a @ b``: ``a`` [pe_rows, k], ``b`` [k, pe_cols], ``d`` the
    preloaded accumulators [pe_rows, pe_cols]. Returns ``(c, cycles)``, the cycles counted up
    to the last product the scan saw added."""
    a = jnp.asarray(a, jnp.int32)
    b = jnp.asarray(b, jnp.int32)
    d = (jnp.zeros((a.shape[0], b.shape[1]), jnp.int32) if d is None
         else jnp.asarray(d, jnp.int32))
    horizon = a.shape[1] + 2 * (a.shape[0] + b.shape[1]) + 4
    acc, cycles = _os_scan(a, b, d, horizon)
    return np.asarray(acc), int(cycles)


__all__ = ["os_compute", "os_latency_cycles", "ws_compute", "ws_latency_cycles", "ws_preload"]
