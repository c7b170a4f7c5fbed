"""Expand the CISC ``loop_ws`` into the primitive sequence Gemmini's LoopMatmul FSM issues.

``LoopMatmul.scala`` runs a ``loop_ws`` (configured by the five ``loop_ws_config_*`` commands
before it) as five cooperating state machines: LdA and LdB move A and B into the scratchpad,
LdD moves D (bias or partial sums) into the accumulator, Ex issues one preload + compute per
DIM x DIM block, StC moves C out. The simulator executes the same commands in the canonical
order of ``sp_tiled_matmul_ws`` (dosa-gemmini-isa.md §B.6), which satisfies every dependence
the FSMs enforce; the reservation station then overlaps them as the hardware would.

Addresses follow LoopMatmul: the FSM runs two loops concurrently, so loop ``n`` uses half
``n % 2`` of the scratchpad, A from the bottom of the half and B ending at its top
(``b_addr_end - K*J*DIM``), and half of the accumulator; the accumulator half moves to the other
one only after a loop that stores C, so loops with C = 0 keep accumulating into the same rows.
D = 0 skips the D loads and C = 0 skips the stores; the output of the first k-block overwrites
the accumulator unless ``ex_accumulate``. Configuration (strides of ``config_ld`` / ``config_st``,
activation, scales) is whatever the trace set before the loop, as for the hardware.

Not expanded (a `TraceError` names the field): ``loop_conv_ws``, scratchpad reuse across loops
(``a_spad_id`` / ``b_spad_id``), residual addition (``is_resadd``) and the normalizer activations.
"""

from __future__ import annotations

import numpy as np

from accel.isa import GARBAGE_ADDR, Funct, Instruction, IsaParams, trace_error, with_context
from accel.trace import TraceArrays
from workloads.errors import TraceError

_ACC = 1 << 31
_ACCUMULATE = 1 << 30
_FULL = 1 << 29
_CONFIG_FUNCTS = {
    Funct.LOOP_WS_CONFIG_BOUNDS, Funct.LOOP_WS_CONFIG_ADDRS_AB, Funct.LOOP_WS_CONFIG_ADDRS_DC,
    Funct.LOOP_WS_CONFIG_STRIDES_AB, Funct.LOOP_WS_CONFIG_STRIDES_DC,
}
_CONV_FUNCTS = {Funct.LOOP_CONV_WS} | {
    f for f in Funct if f.name.startswith("LOOP_CONV_WS_CONFIG")}


def _move(funct: int, dram: int, local: int, rows: int, cols: int) -> tuple[int, int, int]:
    return funct, dram, rows << 48 | cols << 32 | local


def _pair(funct: int, x: int, x_rows: int, x_cols: int, y: int, y_rows: int, y_cols: int
          ) -> tuple[int, int, int]:
    return funct, x_rows << 48 | x_cols << 32 | x, y_rows << 48 | y_cols << 32 | y


def _loop_ws(cfg: dict, flags: dict, params: IsaParams, loop_id: int, acc_id: int,
             index: int) -> list[tuple[int, int, int]]:
    """The primitive commands of one ``loop_ws`` (see the module docstring)."""
    d = params.dim
    ii, jj, kk = cfg.get("i", 0), cfg.get("j", 0), cfg.get("k", 0)
    pad_i, pad_j, pad_k = cfg.get("pad_i", 0), cfg.get("pad_j", 0), cfg.get("pad_k", 0)
    for name, value, pad in (("i", ii, pad_i), ("j", jj, pad_j), ("k", kk, pad_k)):
        if value < 1:
            raise trace_error(f"loop bound {name} = {value}; it must be at least 1",
                              field=name, index=index, mnemonic="loop_ws")
        if pad >= d:
            raise trace_error(f"pad_{name} = {pad} must be below DIM = {d}",
                              field=f"pad_{name}", index=index, mnemonic="loop_ws")
    a, b, c, dd = cfg.get("a", 0), cfg.get("b", 0), cfg.get("c", 0), cfg.get("d", 0)
    a_stride, b_stride = cfg.get("a_stride", 0), cfg.get("b_stride", 0)
    c_stride, d_stride = cfg.get("c_stride", 0), cfg.get("d_stride", 0)
    a_t, b_t = flags["a_transpose"], flags["b_transpose"]
    full_c, low_d, ex_acc = flags["full_c"], flags["low_d"], flags["ex_accumulate"]
    blocks = params.max_block_len
    blocks_acc = params.max_block_len_acc
    half_sp, half_acc = params.sp_rows // 2, params.acc_rows // 2
    if (ii * kk + kk * jj) * d > half_sp or ii * jj * d > half_acc:
        raise trace_error(
            f"a loop_ws of {ii}x{kk} A and {kk}x{jj} B blocks needs "
            f"{(ii * kk + kk * jj) * d} scratchpad and {ii * jj * d} accumulator rows; a loop may "
            f"use half of each ({half_sp}, {half_acc})", field="i", index=index,
            mnemonic="loop_ws")
    a_start = loop_id * half_sp
    b_start = (loop_id + 1) * half_sp - kk * jj * d
    c_start = acc_id * half_acc

    def rows_of(block: int, count: int, pad: int) -> int:
        return d - (pad if block == count - 1 else 0)

    def span(first: int, nblocks: int, count: int, pad: int) -> int:
        return nblocks * d - (pad if first + nblocks >= count else 0)

    out: list[tuple[int, int, int]] = []
    if dd:
        nb_max = blocks if low_d else blocks_acc
        elem = 1 if low_d else 4
        for i in range(ii):
            for j in range(0, jj, nb_max):
                nb = min(nb_max, jj - j)
                out.append(_move(Funct.MVIN3, dd + (i * d_stride + j) * d * elem,
                                 _ACC | c_start + (i * jj + j) * d, rows_of(i, ii, pad_i),
                                 span(j, nb, jj, pad_j)))
    c_blocks = 1 if full_c else blocks
    for k in range(kk):
        for j in range(jj):
            for i in range(ii):
                # LdA: A block (i, k) (or (k, i) when A is stored transposed).
                if not a_t and j == 0 and k % blocks == 0:
                    nb = min(blocks, kk - k)
                    out.append(_move(Funct.MVIN, a + (i * a_stride + k) * d,
                                     a_start + (i * kk + k) * d, rows_of(i, ii, pad_i),
                                     span(k, nb, kk, pad_k)))
                if a_t and j == 0 and i % blocks == 0:
                    nb = min(blocks, ii - i)
                    out.append(_move(Funct.MVIN, a + (k * a_stride + i) * d,
                                     a_start + (k * ii + i) * d, rows_of(k, kk, pad_k),
                                     span(i, nb, ii, pad_i)))
                # LdB: B block (k, j) (or (j, k) when B is stored transposed).
                if not b_t and i == 0 and j % blocks == 0:
                    nb = min(blocks, jj - j)
                    out.append(_move(Funct.MVIN2, b + (k * b_stride + j) * d,
                                     b_start + (k * jj + j) * d, rows_of(k, kk, pad_k),
                                     span(j, nb, jj, pad_j)))
                if b_t and i == 0 and j == 0 and k % blocks == 0:
                    nb = min(blocks, kk - k)
                    for jb in range(jj):
                        out.append(_move(Funct.MVIN2, b + (jb * b_stride + k) * d,
                                         b_start + (jb * kk + k) * d, rows_of(jb, jj, pad_j),
                                         span(k, nb, kk, pad_k)))
                a_addr = a_start + ((k * ii + i) if a_t else (i * kk + k)) * d
                b_addr = b_start + ((j * kk + k) if b_t else (k * jj + j)) * d
                rows_i, rows_k, cols_j = (rows_of(i, ii, pad_i), rows_of(k, kk, pad_k),
                                          rows_of(j, jj, pad_j))
                acc_row = c_start + (i * jj + j) * d
                out_addr = _ACC | acc_row | (_ACCUMULATE if (ex_acc or k != 0) else 0)
                out.append(_pair(Funct.PRELOAD, b_addr if i == 0 else GARBAGE_ADDR, rows_k,
                                 cols_j, out_addr, rows_i, cols_j))
                out.append(_pair(Funct.COMPUTE_PRELOADED if i == 0
                                 else Funct.COMPUTE_ACCUMULATED,
                                 a_addr, rows_i, rows_k, GARBAGE_ADDR, d, d))
                # StC: C blocks of row i once their reduction is complete.
                if c and k == kk - 1 and (j == jj - 1 or j % c_blocks == c_blocks - 1):
                    j0 = j - j % c_blocks
                    nb = j - j0 + 1
                    out.append(_move(Funct.MVOUT, c + (i * c_stride + j0) * d * (4 if full_c
                                                                                 else 1),
                                     _ACC | (_FULL if full_c else 0) | c_start
                                     + (i * jj + j0) * d,
                                     rows_i, span(j0, nb, jj, pad_j)))
    return out


def expand_loops(arrays: TraceArrays, params: IsaParams
                 ) -> tuple[TraceArrays, np.ndarray, np.ndarray]:
    """Replace every ``loop_ws`` (and drop its configs) by its primitive commands.

    Returns the new arrays; per new instruction, the index of the instruction it came from
    (the ``loop_ws`` for expanded commands), so errors name the caller's instruction; and
    whether the loop FSM issued it (rather than the host).
    """
    funct = arrays.funct.tolist()
    rs1 = arrays.rs1.tolist()
    rs2 = arrays.rs2.tolist()
    out_f: list[int] = []
    out_1: list[int] = []
    out_2: list[int] = []
    origin: list[int] = []
    by_fsm: list[bool] = []
    cfg: dict = {}
    loop_id = acc_id = 0
    for index, (f, x, y) in enumerate(zip(funct, rs1, rs2)):
        if f in _CONV_FUNCTS:
            raise trace_error("loop_conv_ws is not simulated; lower convolutions to primitive "
                              "instructions", field="funct", index=index)
        if f in _CONFIG_FUNCTS:
            try:
                cfg.update(Instruction(f, x, y).fields())
            except TraceError as err:  # a malformed config: name where
                raise with_context(err, index=index) from None
            continue
        if f != Funct.LOOP_WS:
            out_f.append(f)
            out_1.append(x)
            out_2.append(y)
            origin.append(index)
            by_fsm.append(False)
            continue
        flags = Instruction(f, x, y).fields()
        if flags["a_spad_id"] or flags["b_spad_id"]:
            raise trace_error("scratchpad reuse across loops (spad ids) is not simulated",
                              field="a_spad_id" if flags["a_spad_id"] else "b_spad_id",
                              index=index, mnemonic="loop_ws")
        if flags["is_resadd"]:
            raise trace_error("residual addition in loop_ws is not simulated",
                              field="is_resadd", index=index, mnemonic="loop_ws")
        if flags["act"] not in (0, 1):
            raise trace_error("normalizer activations in loop_ws are not simulated",
                              field="act", index=index, mnemonic="loop_ws")
        if flags["a_transpose"] and flags["b_transpose"]:
            raise trace_error("the weight-stationary FSM cannot transpose both A and B",
                              field="b_transpose", index=index, mnemonic="loop_ws")
        cmds = _loop_ws(cfg, flags, params, loop_id, acc_id, index)
        for cf, c1, c2 in cmds:
            out_f.append(int(cf))
            out_1.append(c1)
            out_2.append(c2)
            origin.append(index)
            by_fsm.append(True)
        loop_id ^= 1
        if cfg.get("c", 0):
            acc_id ^= 1
    expanded = TraceArrays(np.array(out_f, np.uint64), np.array(out_1, np.uint64),
                           np.array(out_2, np.uint64))
    return expanded, np.array(origin, np.int64), np.array(by_fsm, bool)


__all__ = ["expand_loops"]
