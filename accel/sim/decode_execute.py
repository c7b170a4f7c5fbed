"""Preloads and computes for the trace decoder: operands, pairing, range checks and MACs.

`accel.sim.decode` hands this module the execute stream. Every compute gets the output address
of the preload it pairs with (Gemmini pairs a compute with the preload just before it in the
execute queue; under OS a compute belongs to the accumulation the last preload started; a
compute without one discards its result, as ``ExecuteController`` does for a "single mul"),
its operands are checked against the array's dimension and the local memories' rows (as the
array reads them: a transposed operand is stored transposed), and the multiply-accumulates the
computes perform are counted. It is its own module because none of this concerns the moves or
the configuration beyond the ``config_ex`` state it reads.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from accel.isa import LAYOUTS, Layout
from accel.sim.decode_config import ExecuteConfig
from accel.sim.decode_fields import GARBAGE, Words, split_local

if TYPE_CHECKING:
    from accel.sim.decode import SimShape

Operand = dict[str, np.ndarray]  # a local address's parts (`split_local`), raw, garbage, rows, cols


@dataclasses.dataclass(frozen=True)
class Execute:
    """The decoded preloads and computes: ``columns`` (the int columns they fill), ``macs``
    and ``fed`` (per instruction: the MACs on real data, the A rows fed to the array),
    ``uses_os`` (a preload or compute under OS) and ``reads_acc`` (an operand read from the
    accumulator)."""

    columns: dict[str, np.ndarray]
    macs: np.ndarray
    fed: np.ndarray
    uses_os: bool
    reads_acc: bool


@dataclasses.dataclass(frozen=True)
class _Pairing:
    """Which preload each compute pairs with: ``prev_exec`` (the execute instruction before
    each, -1: none), ``ws_paired`` (a compute right after a preload), ``paired`` (a compute
    with a preload, by the dataflow), ``src`` (that preload) and ``merged`` (a preload right
    after a compute)."""

    prev_exec: np.ndarray
    ws_paired: np.ndarray
    paired: np.ndarray
    src: np.ndarray
    merged: np.ndarray


def decode_execute(w: Words, is_pre: np.ndarray, is_cp: np.ndarray, is_ca: np.ndarray,
                   is_exec: np.ndarray, ex: ExecuteConfig, shape: SimShape) -> Execute:
    """Decode and check the preloads (``is_pre``) and computes (``is_cp``: compute_preloaded,
    ``is_ca``: compute_accumulated) under the ``config_ex`` state ``ex``; ``is_exec`` marks
    every instruction of the execute queue. Raises `TraceError` at the first bad one."""
    n, dim = len(w), shape.dim
    cfg = ex.fields
    pl, cp = LAYOUTS["preload"], LAYOUTS["compute_preloaded"]
    is_comp = is_cp | is_ca
    pre_bd, pre_c = _operand(w, pl, "bd"), _operand(w, pl, "c")
    comp_a, comp_bd = _operand(w, cp, "a"), _operand(w, cp, "bd")
    _check_operands(w, is_pre, is_comp, pre_bd, pre_c, comp_a, comp_bd, dim)
    pair = _pair(is_pre, is_comp, is_exec, cfg["dataflow"] == 0)
    c_garbage = np.where(is_pre, pre_c["garbage"],
                         np.where(pair.paired, pre_c["garbage"][pair.src], 1))

    def pick(key: str) -> np.ndarray:
        return np.where(is_pre, pre_c[key], np.where(pair.paired, pre_c[key][pair.src], 0))

    c_row, c_acc, c_accum = pick("row"), pick("acc"), pick("accumulate")
    c_rows, c_cols = pick("rows"), pick("cols")
    a_stride = np.where(is_comp, cfg["a_stride"], 1)
    c_stride = np.where(is_comp, cfg["c_stride"], 1)
    ws = cfg["dataflow"] == 1
    bad = is_comp & ws & (cfg["a_transpose"] == 1) & (cfg["b_transpose"] == 1)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "the weight-stationary dataflow cannot transpose both "
                     "A and B", "b_transpose", "compute")
    # The instruction carries an operand's logical rows x cols; a transposed operand is stored
    # transposed, so the block the array reads is cols x rows (ExecuteController's a_cols =
    # Mux(a_transpose, a_rows, a_cols), likewise for B under OS and the preloaded B under WS).
    _stored(comp_a, cfg["a_transpose"] == 1)
    _stored(comp_bd, ~ws & (cfg["b_transpose"] == 1))
    _stored(pre_bd, ws & (cfg["b_transpose"] == 1))
    ones = np.ones(n, np.int64)
    _check_range(w, shape, is_comp & (comp_a["garbage"] == 0), comp_a["row"], comp_a["acc"],
                 comp_a["rows"], a_stride, "a", "compute")
    _check_range(w, shape, is_comp & (comp_bd["garbage"] == 0), comp_bd["row"], comp_bd["acc"],
                 comp_bd["rows"], ones, "bd", "compute")
    _check_range(w, shape, is_pre & (pre_bd["garbage"] == 0), pre_bd["row"], pre_bd["acc"],
                 pre_bd["rows"], ones, "bd", "preload")
    _check_range(w, shape, (is_pre | is_comp) & (c_garbage == 0), c_row, c_acc, c_rows,
                 np.where(is_comp, c_stride, cfg["c_stride"]), "c", "preload")

    bd = {k: np.where(is_pre, pre_bd[k], np.where(is_comp, comp_bd[k], 0))
          for k in ("row", "garbage", "acc", "rows", "cols")}
    columns = dict(
        a=np.where(is_comp, comp_a["row"], 0), a_garbage=np.where(is_comp, comp_a["garbage"], 1),
        a_acc=np.where(is_comp, comp_a["acc"], 0), a_rows=np.where(is_comp, comp_a["rows"], 0),
        a_cols=np.where(is_comp, comp_a["cols"], 0), a_stride=a_stride,
        bd=bd["row"], bd_garbage=np.where(is_pre | is_comp, bd["garbage"], 1), bd_acc=bd["acc"],
        bd_rows=bd["rows"], bd_cols=bd["cols"],
        c=c_row, c_garbage=np.where(is_pre | is_comp, c_garbage, 1), c_acc=c_acc,
        c_accumulate=c_accum, c_rows=c_rows, c_cols=c_cols, c_stride=c_stride,
        dataflow=cfg["dataflow"], a_transpose=cfg["a_transpose"],
        b_transpose=cfg["b_transpose"], sys_shift=cfg["sys_shift"], ex_act=cfg["ex_act"],
        merged=pair.merged.astype(np.int64))
    macs, fed = _macs(is_cp, is_comp, comp_a, comp_bd, pre_bd, pair, cfg)
    uses_os = bool(((is_pre | is_comp) & (cfg["dataflow"] == 0)).any())
    reads_acc = bool((((is_comp & (comp_a["garbage"] == 0) & (comp_a["acc"] == 1))
                       | ((is_pre | is_comp) & (bd["garbage"] == 0) & (bd["acc"] == 1)))).any())
    return Execute(columns=columns, macs=macs, fed=fed, uses_os=uses_os, reads_acc=reads_acc)


def _operand(w: Words, layout: Layout, name: str) -> Operand:
    """Operand ``name`` of every instruction as ``layout`` reads it."""
    raw = w.field(layout, name).astype(np.int64)
    return {"raw": raw, "garbage": (raw == GARBAGE).astype(np.int64), **split_local(raw),
            "rows": w.field(layout, f"{name}_rows").astype(np.int64),
            "cols": w.field(layout, f"{name}_cols").astype(np.int64)}


def _check_operands(w: Words, is_pre: np.ndarray, is_comp: np.ndarray, pre_bd: Operand,
                    pre_c: Operand, comp_a: Operand, comp_bd: Operand, dim: int) -> None:
    """Operands fit the array, carry no normalizer command, and only C (of a preload, with an
    accumulator address) has the accumulate / full-width bits."""
    for sel, operands, mnem in ((is_pre, (("bd", pre_bd), ("c", pre_c)), "preload"),
                                (is_comp, (("a", comp_a), ("bd", comp_bd)), "compute")):
        for name, o in operands:
            real = sel & (o["garbage"] == 0)
            for what in ("rows", "cols"):
                bad = sel & (o[what] > dim)
                if bad.any():
                    k = int(np.argmax(bad))
                    raise w.fail(k, f"{name}_{what} {int(o[what][k])} exceeds the array "
                                 f"dimension {dim}", f"{name}_{what}", mnem)
            bad = real & (o["norm"] != 0)
            if bad.any():
                raise w.fail(int(np.argmax(bad)), "normalizer commands (local address bits "
                             "28-26) are not simulated", name, mnem)
            if name != "c":
                bad = real & ((o["accumulate"] == 1) | (o["full"] == 1))
                if bad.any():
                    raise w.fail(int(np.argmax(bad)), "accumulate / full-width bits mean "
                                 "nothing on an operand the array reads", name, mnem)
    bad = is_pre & (pre_c["garbage"] == 0) & (pre_c["acc"] == 0) & (
        (pre_c["accumulate"] == 1) | (pre_c["full"] == 1))
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "accumulate / full-width bits need an accumulator "
                     "address", "c", "preload")


def _pair(is_pre: np.ndarray, is_comp: np.ndarray, is_exec: np.ndarray,
          os_now: np.ndarray) -> _Pairing:
    """Pair every compute with the preload right before it in the execute stream (WS); under
    OS (``os_now``) a compute belongs to the accumulation the last preload started."""
    n = is_pre.shape[0]
    exec_idx = np.flatnonzero(is_exec)
    prev_exec = np.full(n, -1, np.int64)
    prev_exec[exec_idx[1:]] = exec_idx[:-1]
    last_pre = np.maximum.accumulate(np.where(is_pre, np.arange(n), -1)) if n else prev_exec
    ws_paired = is_comp & (prev_exec >= 0) & is_pre[np.maximum(prev_exec, 0)]
    paired = np.where(os_now, is_comp & (last_pre >= 0), ws_paired)
    src = np.where(os_now, np.maximum(last_pre, 0), np.where(ws_paired, prev_exec, 0))
    merged = is_pre & (prev_exec >= 0) & is_comp[np.maximum(prev_exec, 0)]
    return _Pairing(prev_exec, ws_paired, paired, src, merged)


def _stored(o: Operand, flip: np.ndarray) -> None:
    """Swap ``o``'s rows and cols where ``flip``: the block as stored, of a transposed
    operand."""
    rows_, cols_ = o["rows"].copy(), o["cols"].copy()
    o["rows"], o["cols"] = np.where(flip, cols_, rows_), np.where(flip, rows_, cols_)


def _check_range(w: Words, shape: SimShape, sel: np.ndarray, row: np.ndarray, acc: np.ndarray,
                 count: np.ndarray, step: np.ndarray, name: str, mnem: str) -> None:
    """The ``count`` rows ``step`` apart from ``row`` lie within the local memory."""
    last = row + np.maximum(count - 1, 0) * step + 1
    cap = np.where(acc == 1, shape.acc_rows, shape.sp_rows)
    bad = sel & (count > 0) & (last > cap)
    if bad.any():
        k = int(np.argmax(bad))
        what = "accumulator" if acc[k] else "scratchpad"
        raise w.fail(k, f"{what} rows {int(row[k])}..{int(last[k]) - 1} are out of range: the "
                     f"{what} has {int(cap[k])} rows", name, mnem)


def _macs(is_cp: np.ndarray, is_comp: np.ndarray, comp_a: Operand, comp_bd: Operand,
          pre_bd: Operand, pair: _Pairing,
          cfg: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per instruction, the MACs on real data and the A rows fed to the array. MACs: logical A
    (rows x k) against the weights in the array (WS: those the last compute_preloaded flipped
    in from its preload) or the compute's own B (OS). The operands' rows / cols are as stored
    (`_stored`)."""
    n = is_cp.shape[0]
    ws = cfg["dataflow"] == 1
    logical = {"a": (np.where(cfg["a_transpose"] == 1, comp_a["cols"], comp_a["rows"]),
                     np.where(cfg["a_transpose"] == 1, comp_a["rows"], comp_a["cols"]))}
    pre_flip = ws & (cfg["b_transpose"] == 1)
    w_rows = np.where(pre_bd["garbage"] == 1, 0, np.where(pre_flip, pre_bd["cols"],
                                                           pre_bd["rows"]))
    w_cols = np.where(pre_bd["garbage"] == 1, 0, np.where(pre_flip, pre_bd["rows"],
                                                           pre_bd["cols"]))
    flip_src = np.where(is_cp & pair.ws_paired, pair.prev_exec, -1)
    last_flip = np.maximum.accumulate(np.where(is_cp, np.arange(n), -1)) if n else flip_src
    src_pre = np.where(last_flip >= 0, flip_src[np.maximum(last_flip, 0)], -1)
    ws_w_rows = np.where(src_pre >= 0, w_rows[np.maximum(src_pre, 0)], 0)
    ws_w_cols = np.where(src_pre >= 0, w_cols[np.maximum(src_pre, 0)], 0)
    os_b_flip = cfg["b_transpose"] == 1
    os_rows = np.where(comp_bd["garbage"] == 1, 0, np.where(os_b_flip, comp_bd["cols"],
                                                             comp_bd["rows"]))
    os_cols = np.where(comp_bd["garbage"] == 1, 0, np.where(os_b_flip, comp_bd["rows"],
                                                             comp_bd["cols"]))
    k_rows = np.where(ws, ws_w_rows, os_rows)
    n_cols = np.where(ws, ws_w_cols, os_cols)
    live = is_comp & (comp_a["garbage"] == 0)
    macs = np.where(live, logical["a"][0] * np.minimum(logical["a"][1], k_rows) * n_cols, 0)
    fed = np.where(live, comp_a["rows"], 0)
    return macs, fed


__all__ = ["Execute", "decode_execute"]
