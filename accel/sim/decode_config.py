"""The configuration state in force at every instruction, for the trace decoder.

`accel.sim.decode` resolves the configuration registers statically: every instruction carries
the values of the ``config_ex`` / ``config_ld`` / ``config_st`` / ``config_norm`` state in force
when it executes, by a forward fill over the instruction index. This module does that fill and
rejects what those commands may not set (activations the simulator does not run, load states
and statistics slots that do not exist, pixel repeats wider than the array, scales that are not
finite floats). It is its own module because the decoder's other stages only read its result.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from accel.isa import LAYOUTS, Activation
from accel.sim.decode_fields import Words, f32, forward_fill

NORM_STAT_IDS = 4  # the normalizer's statistics slots (Gemmini's NORM_STAT_IDS)
LOAD_STATES = 3  # config_ld's states: mvin, mvin2, mvin3


@dataclasses.dataclass(frozen=True)
class ExecuteConfig:
    """``config_ex``'s state at each instruction: ``fields`` (dataflow, ex_act, a_transpose,
    b_transpose, sys_shift, a_stride, c_stride, int64) and ``scale`` (float32 acc_scale);
    ``full`` marks the config_ex commands that set more than the strides."""

    fields: dict[str, np.ndarray]
    scale: np.ndarray
    full: np.ndarray


@dataclasses.dataclass(frozen=True)
class LoadConfig:
    """``config_ld``'s state at each instruction, one array per load state (mvin, mvin2,
    mvin3): pixel repeats (1: none), stride (-1: never set), block stride, shrunk, scale."""

    repeats: list[np.ndarray]
    stride: list[np.ndarray]
    block_stride: list[np.ndarray]
    shrunk: list[np.ndarray]
    scale: list[np.ndarray]


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """``config_st``'s and ``config_norm``'s state at each instruction: the store stride (-1:
    never set), the 3-bit store activation, scale and pool stride, the statistics slot and the
    I-GELU (``igelu_qb``, ``igelu_qc``) and i-exp (``iexp_qln2``, ``iexp_qln2_inv``)
    constants."""

    stride: np.ndarray
    act: np.ndarray
    scale: np.ndarray
    pool: np.ndarray
    stat_id: np.ndarray
    igelu: dict[str, np.ndarray]
    iexp: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Config:
    """The configuration state at each instruction, by register."""

    execute: ExecuteConfig
    load: LoadConfig
    store: StoreConfig


def resolve_config(w: Words, is_ex: np.ndarray, is_ld: np.ndarray, is_st: np.ndarray,
                   is_norm: np.ndarray, dim: int, dataflow: str) -> Config:
    """The configuration in force at every instruction, given which instructions are
    ``config_ex`` / ``config_ld`` / ``config_st`` / ``config_norm`` (``dataflow``: the one in
    force before any config_ex). Raises `TraceError` at the first bad configuration."""
    execute = _execute_config(w, is_ex, dataflow)
    load = _load_config(w, is_ld, dim)
    store = _store_config(w, is_st, is_norm)
    _check_scales(w, is_ld, is_st, execute.full)
    return Config(execute, load, store)


def _execute_config(w: Words, is_ex: np.ndarray, dataflow: str) -> ExecuteConfig:
    lx = LAYOUTS["config_ex"]
    only_strides = w.field(lx, "set_only_strides").astype(bool)
    ex_full = is_ex & ~only_strides
    ex_act = w.field(lx, "act").astype(np.int64)
    default_df = 1 if dataflow == "WS" else 0
    fields = {
        "dataflow": forward_fill(ex_full, w.field(lx, "dataflow").astype(np.int64), default_df),
        "ex_act": forward_fill(ex_full, ex_act, 0),
        "a_transpose": forward_fill(ex_full, w.field(lx, "a_transpose").astype(np.int64), 0),
        "b_transpose": forward_fill(ex_full, w.field(lx, "b_transpose").astype(np.int64), 0),
        "sys_shift": forward_fill(ex_full, w.field(lx, "sys_shift").astype(np.int64), 0),
        "a_stride": forward_fill(is_ex, w.field(lx, "a_stride").astype(np.int64), 1),
        "c_stride": forward_fill(is_ex, w.field(lx, "c_stride").astype(np.int64), 1),
    }
    scale = forward_fill(ex_full, f32(w.field(lx, "acc_scale")),
                         np.float32(1.0)).astype(np.float32)
    bad_act = is_ex & ~only_strides & (ex_act > 1)
    if bad_act.any():
        k = int(np.argmax(bad_act))
        raise w.fail(k, "activation (layernorm / igelu) is not simulated; use none or relu",
                     "act", "config_ex")
    return ExecuteConfig(fields, scale, ex_full)


def _load_config(w: Words, is_ld: np.ndarray, dim: int) -> LoadConfig:
    ll = LAYOUTS["config_ld"]
    ld_id = w.field(ll, "id").astype(np.int64)
    bad = is_ld & (ld_id > 2)
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"id {int(ld_id[k])} is not a load state (0, 1 or 2)", "id", "config_ld")
    # LoadController.scala ~148 keeps one pixel_repeats per load state, 0 read as 1.
    repeats_raw = np.maximum(w.field(ll, "pixel_repeats").astype(np.int64), 1)
    bad = is_ld & (repeats_raw > dim)
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"pixel_repeats {int(repeats_raw[k])} exceeds the array dimension "
                     f"{dim}", "pixel_repeats", "config_ld")
    states = [is_ld & (ld_id == k) for k in range(LOAD_STATES)]
    return LoadConfig(
        repeats=[forward_fill(sel, repeats_raw, 1) for sel in states],
        stride=[forward_fill(sel, w.field(ll, "stride").astype(np.int64), -1)
                for sel in states],
        block_stride=[forward_fill(sel, w.field(ll, "block_stride").astype(np.int64), dim)
                      for sel in states],
        shrunk=[forward_fill(sel, w.field(ll, "shrunk").astype(np.int64), 0) for sel in states],
        scale=[forward_fill(sel, f32(w.field(ll, "scale")), np.float32(1.0)).astype(np.float32)
               for sel in states])


def _store_config(w: Words, is_st: np.ndarray, is_norm: np.ndarray) -> StoreConfig:
    ls = LAYOUTS["config_st"]
    st_act_raw = w.field(ls, "act").astype(np.int64)
    bad = is_st & (st_act_raw == Activation.LAYERNORM)
    if bad.any():
        raise w.fail(int(np.argmax(bad)), "activation layernorm is not simulated; use none, "
                     "relu or igelu", "act", "config_st")
    # The normalizer's registers (StoreController): every config_norm sets the statistics slot;
    # one without set_stats_id_only also sets I-GELU's / i-exp's signed 32-bit constants (zero
    # until set), qln2 or qln2_inv (q_const_type 0 / 1) and the activation's msb.
    ln = LAYOUTS["config_norm"]

    def signed(name: str) -> np.ndarray:
        return w.field(ln, name).astype(np.uint32).view(np.int32).astype(np.int64)

    norm_full = is_norm & ~w.field(ln, "set_stats_id_only").astype(bool)
    stat_raw = w.field(ln, "stat_id").astype(np.int64)
    bad = is_norm & (stat_raw >= NORM_STAT_IDS)
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"stat_id {int(stat_raw[k])} is not a statistics slot (0.."
                     f"{NORM_STAT_IDS - 1})", "stat_id", "config_norm")
    stat_id = forward_fill(is_norm, stat_raw, 0)
    igelu = {name: forward_fill(norm_full, signed(name), 0)
             for name in ("igelu_qb", "igelu_qc")}
    q_type = w.field(ln, "q_const_type").astype(np.int64)
    iexp = {name: forward_fill(norm_full & (q_type == t), signed("q_const"), 0)
            for t, name in enumerate(("iexp_qln2", "iexp_qln2_inv"))}
    st_stride = forward_fill(is_st, w.field(ls, "stride").astype(np.int64), -1)
    # The store activation: config_st's two bits (clearing the msb), config_norm's msb on top.
    act_msb = forward_fill(is_st | norm_full, np.where(
        is_st, 0, w.field(ln, "act_msb").astype(np.int64)), 0)
    st_act = act_msb << 2 | forward_fill(is_st, st_act_raw, 0)
    bad = norm_full & (st_act > Activation.SOFTMAX)
    if bad.any():
        k = int(np.argmax(bad))
        raise w.fail(k, f"act_msb over config_st's act {int(st_act[k]) & 3} makes activation "
                     f"{int(st_act[k])}, which is none of Gemmini's; softmax (4) needs config_st "
                     "act none", "act_msb", "config_norm")
    st_scale = forward_fill(is_st, f32(w.field(ls, "acc_scale")),
                            np.float32(1.0)).astype(np.float32)
    st_pool = forward_fill(is_st, w.field(ls, "pool_stride").astype(np.int64), 0)
    return StoreConfig(stride=st_stride, act=st_act, scale=st_scale, pool=st_pool,
                       stat_id=stat_id, igelu=igelu, iexp=iexp)


def _check_scales(w: Words, is_ld: np.ndarray, is_st: np.ndarray, ex_full: np.ndarray) -> None:
    """Every scale a configuration command sets must be a finite float."""
    for sel, layout, name in ((is_ld, LAYOUTS["config_ld"], "scale"),
                              (is_st, LAYOUTS["config_st"], "acc_scale"),
                              (ex_full, LAYOUTS["config_ex"], "acc_scale")):
        bad = sel & ~np.isfinite(f32(w.field(layout, name)))
        if bad.any():
            raise w.fail(int(np.argmax(bad)), "the scale is not a finite float", name,
                         layout.mnemonic)


__all__ = ["LOAD_STATES", "NORM_STAT_IDS", "Config", "ExecuteConfig", "LoadConfig",
           "StoreConfig", "resolve_config"]
