"""The ``loop_ws`` (CISC) form of a GEMM: one six-instruction group per scratchpad tile.

This is ``tiled_matmul_outer`` (gemmini.h) driven by the mapping: the DRAM loops, in the
mapping's order, visit scratchpad tiles of ``I x K`` A blocks and ``K x J`` B blocks (DIM x DIM
blocks, the last ones padded through ``pad_I``/``pad_J``/``pad_K``); for each, a ``loop_ws``
has the hardware FSM (LoopMatmul.scala) move the tile in, run the WS computes and move C out.
The mapping's levels below the scratchpad do not reach the trace: the FSM orders its own
computes, and uses whole DIM x DIM blocks whatever the spatial factors.

Accumulation across tiles follows LoopMatmul: the FSM's accumulator region moves to the other
half only after a loop that stores C, so consecutive loops over one output tile with C = 0 and
``ex_accumulate`` keep adding into the same rows; D (the bias, DRAM stride 0, or int32 partial
sums) is loaded by the first. When the nest leaves an output tile before its reduction is done,
the loop stores int32 partial sums (``full_C``) and the next visit loads them back as D.

Each loop may use half the scratchpad (A from the bottom, B from the top of its half) and half
the accumulator, since the FSM runs two loops concurrently (README, "loop_ws").
"""

from __future__ import annotations

import dataclasses

import numpy as np

from accel.isa import Activation, Dataflow, Instruction, IsaParams
from accel.lower.emit import Emitter
from accel.lower.layout import DramLayout
from accel.lower.nest import (
    DRAM,
    O_DIMS,
    SP,
    C,
    K,
    N,
    Nest,
    P,
    enumerate_digits,
    index_matrix,
)
from accel.lower.ws import Allocation, BufferRegion, Epilogue
from workloads.errors import ConfigError, InfeasibleError, UnsupportedOpError


def macro_needs_partial(nest: Nest) -> bool:
    """Whether the ``loop_ws`` sequence leaves an output tile before its reduction is done."""
    done: set[tuple] = set()
    previous = None
    for call in _calls(nest):
        if call.key != previous:
            if call.key in done:
                return True
            if previous is not None:
                done.add(previous)
            previous = call.key
    return False


@dataclasses.dataclass
class MacroResult:
    emitter: Emitter
    alloc: Allocation
    steps: list
    weight_tile_loads: int
    input_tile_loads: int
    output_tile_visits: int
    partial_spills: int
    tiles: list  # (group, row0, rows, c0, c_len, k0, k_len) of each loop_ws, for coverage


@dataclasses.dataclass
class _Call:
    group: int
    n: int  # first batch index of the A rows
    p0: int
    c0: int
    k0: int
    rows: int
    kred: int
    cols: int
    key: tuple


def _calls(nest: Nest) -> list[_Call]:
    """One ``loop_ws`` per scratchpad tile in DRAM-loop order; a tile that holds several
    batches of a partial P range (rows not contiguous in DRAM) is one loop per batch."""
    lay, e2 = nest.layer, nest.ext[SP]
    loops3 = nest.loops[DRAM]
    offs = enumerate_digits(loops3) @ index_matrix(loops3)
    calls: list[_Call] = []
    for g in range(lay.groups):
        for o3 in offs:
            v = np.clip(nest.dims - o3, 0, e2)
            if np.any(v[list(O_DIMS)] == 0) or v[C] == 0:
                continue  # outputs or reduction wholly in the padding
            merged = e2[P] >= lay.P
            batches = [(int(o3[N]), int(v[N] * v[P]))] if merged else [
                (int(o3[N]) + b, int(v[P])) for b in range(int(v[N]))]
            for n0, rows in batches:
                key = (g, n0, int(o3[P]), int(o3[K]))
                calls.append(_Call(g, n0, int(o3[P]), int(o3[C]), int(o3[K]), rows,
                                   int(v[C]), int(v[K]), key))
    return calls


def lower_loop_ws(nest: Nest, params: IsaParams, layout: DramLayout,
                  epi: Epilogue) -> MacroResult:
    """Emit the GEMM as ``loop_ws`` groups (see the module docstring)."""
    lay, dim = nest.layer, nest.dim
    if lay.kind not in ("gemm", "gemv"):
        raise ConfigError(f"macro=True lowers GEMMs with loop_ws; this layer is a {lay.kind} "
                          "(lower it unrolled, macro=False)")
    if epi.residual:
        raise UnsupportedOpError("the loop_ws form has no residual add; lower with "
                                 "macro=False for the 'add' epilogue")
    if epi.gelu is not None:
        raise UnsupportedOpError("the loop_ws form's I-GELU is not simulated; lower with "
                                 "macro=False for the 'gelu' epilogue")
    e2 = nest.ext[SP]
    rows_max = int(e2[P] * (e2[N] if e2[P] >= lay.P else 1))
    bi, bj, bk = (-(-rows_max // dim), -(-int(e2[K]) // dim), -(-int(e2[C]) // dim))
    half_sp, half_acc = params.sp_rows // 2, params.acc_rows // 2
    sp_need = (bi * bk + bk * bj) * dim
    if sp_need > half_sp:
        raise InfeasibleError(
            f"scratchpad: a loop_ws tile of {bi}x{bk} A and {bk}x{bj} B blocks needs {sp_need} "
            f"rows but loop_ws may use half the scratchpad, {half_sp} rows")
    if bi * bj * dim > half_acc:
        raise InfeasibleError(
            f"accumulator: a loop_ws tile of {bi}x{bj} C blocks needs {bi * bj * dim} rows "
            f"but loop_ws may use half the accumulator, {half_acc} rows")
    for name, v in (("I", bi), ("J", bj), ("K", bk)):
        if v >= 1 << 16:
            raise InfeasibleError(f"loop_ws bound {name}={v} does not fit 16 bits")

    gc, gk = lay.groups * lay.C, lay.groups * lay.K
    x, w, out = layout["input"], layout["weight"], layout["output"]
    bias = layout["bias"] if epi.bias else None
    part = layout.get("partial")
    out_bytes = out.itemsize
    act = Activation.RELU if epi.relu else Activation.NONE

    calls = _calls(nest)
    total: dict[tuple, int] = {}
    for call in calls:
        total[call.key] = total.get(call.key, 0) + 1

    em = Emitter(params)
    em.out.append(Instruction.config_ex(Dataflow.WS, act, a_stride=1))
    em.ex, em.a_stride = (Dataflow.WS, act), 1
    em.config_ld(0, gc)
    em.config_ld(1, lay.K)
    visits: dict[tuple, int] = {}
    spills = 0
    tiles: list[tuple] = []
    distinct_w, distinct_i = set(), set()
    continuing = False
    for idx, call in enumerate(calls):
        seen = visits.get(call.key, 0)
        visits[call.key] = seen + 1
        last = seen + 1 == total[call.key]
        nxt = calls[idx + 1].key if idx + 1 < len(calls) else None
        i_blocks, j_blocks = -(-call.rows // dim), -(-call.cols // dim)
        k_blocks = -(-call.kred // dim)
        if continuing:
            d_addr = 0
        elif seen == 0:
            d_addr = bias.address(call.group * lay.K + call.k0) if bias is not None else 0
        else:
            d_addr = part.address(call.n, call.p0, 0, call.group * lay.K + call.k0)
        if d_addr and seen and not continuing:
            em.fence()  # the loop's own stores of these partial sums must land first
        if d_addr:
            em.config_ld(2, 0 if seen == 0 else gk * 4)
        if last:
            c_addr = out.address(call.n, call.p0, 0, call.group * lay.K + call.k0)
            full_c, c_bytes = epi.full_output, out_bytes
        elif nxt == call.key:
            c_addr, full_c, c_bytes = 0, False, out_bytes
        else:
            c_addr = part.address(call.n, call.p0, 0, call.group * lay.K + call.k0)
            full_c, c_bytes = True, 4
            spills += 1
        if c_addr:
            em.config_st(gk * c_bytes, act=act, acc_scale=epi.acc_scale)
        a_addr = x.address(call.n, call.p0, 0, call.group * lay.C + call.c0)
        b_addr = w.address(call.group, 0, 0, call.c0, call.k0)
        em.out.extend(Instruction.loop_ws(
            i=i_blocks, j=j_blocks, k=k_blocks,
            pad_i=i_blocks * dim - call.rows, pad_j=j_blocks * dim - call.cols,
            pad_k=k_blocks * dim - call.kred,
            a=a_addr, b=b_addr, c=c_addr, d=d_addr,
            a_stride=gc, b_stride=lay.K, c_stride=gk,
            d_stride=0 if (d_addr and seen == 0) else gk,
            full_c=full_c, ex_accumulate=bool(d_addr) or continuing, act=act))
        continuing = c_addr == 0
        tiles.append((call.group, call.n * lay.P + call.p0, call.rows, call.c0, call.kred,
                      call.k0, call.cols))
        distinct_w.add((call.group, call.c0, call.k0))
        distinct_i.add((call.group, call.n, call.p0, call.c0))
        em.computes += i_blocks * j_blocks * k_blocks
        em.preloads += i_blocks * j_blocks * k_blocks
        em.block_macs += call.rows * call.kred * call.cols
        em.array_macs += i_blocks * dim * j_blocks * k_blocks * dim * dim
        em.dram_read_bytes += call.rows * call.kred + call.kred * call.cols + (
            (call.rows * call.cols * 4) if (d_addr and seen) else (call.cols * 4 if d_addr else 0))
        em.dram_write_bytes += call.rows * call.cols * c_bytes if c_addr else 0
    em.fence()
    a_rows, b_rows = bi * bk * dim, bk * bj * dim
    alloc = Allocation(
        (BufferRegion("loop_ws A", "sp", 0, a_rows, 2),
         BufferRegion("loop_ws B", "sp", half_sp - b_rows, b_rows, 2, weights=True),
         BufferRegion("loop_ws C", "acc", 0, bi * bj * dim, 2)),
        sp_rows_used=2 * sp_need, sp_rows_available=params.sp_rows,
        acc_rows_used=2 * bi * bj * dim, acc_rows_available=params.acc_rows)
    return MacroResult(em, alloc, [], len(distinct_w), len(distinct_i), len(visits), spills,
                       tiles)


__all__ = ["MacroResult", "lower_loop_ws", "macro_needs_partial"]
