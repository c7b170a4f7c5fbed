"""Which orderings Gemmini's hardware enforces, and the races a trace leaves to chance.

The simulator's scan runs one schedule; the chip may run another. This module reads a trace
as the chip's reservation station does and reports every pair of instructions whose relative
timing the chip leaves open while the result depends on it. What it follows (ucb-bar/gemmini,
``src/main/scala/gemmini``):

* **Tracked operands** (``ReservationStation.scala`` ~185-270): an mvin tracks its destination
  rows (``(blocks - 1) * block_stride + rows``, widened upwards by its pixel repeats less one,
  ~297-307); an mvout its source rows; an mvout_spad its
  scratchpad destination and accumulator source; a preload its weight rows (``op1``) and its
  output rows C (``dst``: ``c_rows * c_stride``); a compute its A rows (``rows * a_stride``) and
  its D rows. A compute does not track the accumulator rows it writes: its preload does.
  Garbage addresses overlap nothing; the scratchpad and the accumulator never overlap.
* **Dependences** (same file ~285-335): a load waits for older execute and store entries whose
  tracked rows overlap its destination; an execute entry for older loads that write its rows and
  for older stores by the rules there (RAW, WAW, WAR with mvout_spad's destination); a store for
  older loads and execute entries that write what it reads, and for every older store. Within
  the load and execute queues, entries only *issue* in order. Configuration commands carry no
  address dependences. A dependence on an entry already retired is moot, so every tracked
  overlap orders the two commands whether or not the older one is still resident.
* **Completion**: a preload whose C is real retires when the last row of its compute's output
  leaves the mesh (``ExecuteController.scala`` ~970, the mesh tag carries the preload's ROB id);
  the mesh returns results in request order (``MeshWithDelays``' tag queue is a FIFO), so that
  retirement also means every older execute write is done. A compute retires when its rows have
  entered the array. ``config_ex`` waits for the mesh to drain (``DoConfig &&
  !matmul_in_progress``, ~541). A fence waits for every older command.
* **The shared accumulator adder** (``Scratchpad.scala`` ~685: ``AccPipeShared``, one adder
  pipeline for all accumulator banks, selected one-hot by each bank's ``adder.valid``; each
  bank's write port takes the execute unit first and the DMA after, ~779-850): two accumulating
  writes in the same cycle to *different* banks, one from the execute unit and one from an
  mvin with the accumulate bit, both go through the one adder and both rows get a wrong sum.
  In one bank the two never meet (the execute write wins the port and the DMA waits).

So a trace races when an mvin that accumulates into the accumulator and a compute that
accumulates into another bank of it are not ordered by the rules above. On the chip (a verilated
16x16 Gemmini) every residual-add program with this pattern was wrong and every program without
it bit-exact.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any

import numpy as np

from accel.isa import IsaParams
from accel.sim.decode import Op, Unit, decode

MAX_REPORTED = 64  # races listed per trace (the count is always whole)


@dataclasses.dataclass(frozen=True)
class Race:
    """Two instructions (indices into the caller's trace) the chip may run at once, and why."""

    first: int
    second: int
    first_mnemonic: str
    second_mnemonic: str
    detail: str

    def __str__(self) -> str:
        return (f"instruction {self.first} ({self.first_mnemonic}) and instruction "
                f"{self.second} ({self.second_mnemonic}): {self.detail}")


@dataclasses.dataclass(frozen=True)
class RaceReport:
    """Every race of a trace: ``count`` in all, the first `MAX_REPORTED` of them listed."""

    count: int
    races: tuple[Race, ...]

    @property
    def racing(self) -> bool:
        return self.count > 0


class _Done:
    """What is known complete when an instruction starts: accumulating mvins (a bitset over
    their candidate numbers) and a watermark over execute entries (mesh order)."""

    __slots__ = ("bits", "ex")

    def __init__(self, bits: int = 0, ex: int = -1) -> None:
        self.bits, self.ex = bits, ex

    def merge(self, other: _Done) -> None:
        self.bits |= other.bits
        self.ex = max(self.ex, other.ex)


def _ranges(d: Any, params: IsaParams) -> tuple[np.ndarray, ...]:
    """Per instruction, the reservation station's tracked operands as unified row ranges
    ``[start, end)`` (accumulator row r is unified row sp_rows + r; -1 for none): ``opa``,
    ``opb`` and whether ``opa`` is a destination."""
    col = {name: d.column(name).astype(np.int64) for name in (
        "op", "local", "is_acc", "rows", "nblocks", "block_stride", "dst", "a", "a_garbage",
        "a_acc", "a_rows", "a_stride", "bd", "bd_garbage", "bd_acc", "bd_rows", "c",
        "c_garbage", "c_acc", "c_rows", "c_stride")}
    op, n, sp = col["op"], len(col["op"]), params.sp_rows
    none = np.full(n, -1, np.int64)
    opa_s, opa_e, opb_s, opb_e = none.copy(), none.copy(), none.copy(), none.copy()
    opa_dst = np.zeros(n, bool)

    def unified(row: np.ndarray, acc: np.ndarray) -> np.ndarray:
        return np.where(acc == 1, sp + row, row)

    def put(sel: np.ndarray, start: np.ndarray, length: np.ndarray, which: str) -> None:
        s, e = (opa_s, opa_e) if which == "a" else (opb_s, opb_e)
        s[sel] = start[sel]
        e[sel] = (start + length)[sel]

    base = unified(col["local"], col["is_acc"])
    blocks = np.maximum(col["nblocks"], 1) - 1
    is_mvin, is_mvout, is_msp = op == Op.MVIN, op == Op.MVOUT, op == Op.MVOUT_SPAD
    before = d.mvin_rows_before()
    put(is_mvin, base - before, blocks * col["block_stride"] + col["rows"] + before, "a")
    opa_dst |= is_mvin
    put(is_mvout, base, blocks * params.dim + col["rows"], "a")
    put(is_msp, col["dst"], col["rows"], "a")
    put(is_msp, base, col["rows"], "b")
    opa_dst |= is_msp
    is_pre = op == Op.PRELOAD
    is_comp = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)
    # A preload's C range uses config_ex's c_stride, which its compute's row carries.
    nxt = np.minimum(np.arange(n) + 1, max(n - 1, 0))
    c_stride = np.where(is_comp[nxt], col["c_stride"][nxt], 1)
    c_real = is_pre & (col["c_garbage"] == 0)
    put(c_real, unified(col["c"], col["c_acc"]), col["c_rows"] * c_stride, "a")
    opa_dst |= c_real
    bd_real = (is_pre | is_comp) & (col["bd_garbage"] == 0)
    bd = unified(col["bd"], col["bd_acc"])
    put(bd_real & is_pre, bd, col["bd_rows"], "b")
    a_real = is_comp & (col["a_garbage"] == 0)
    put(a_real, unified(col["a"], col["a_acc"]), col["a_rows"] * col["a_stride"], "a")
    put(bd_real & is_comp, bd, col["bd_rows"], "b")
    return opa_s, opa_e, opb_s, opb_e, opa_dst


def _acc_banks(rows: np.ndarray, bank_rows: int) -> int:
    """A bitmask of the accumulator banks ``rows`` fall in."""
    mask = 0
    for b in np.unique(rows // bank_rows).tolist():
        mask |= 1 << int(b)
    return mask


def find_races(trace: Any, hw: Any) -> RaceReport:
    """The races of ``trace`` on ``hw`` (an `accel.arch.HardwareConfig`) by the chip's rules
    (module docstring): each an accumulating mvin and an accumulating compute into another
    accumulator bank that nothing orders."""
    params = IsaParams.from_hardware(hw)
    d = decode(trace, params, None, 0, hw.dataflow)
    m_banks, e_banks = _accumulating_writes(d, params)
    if not m_banks or not e_banks:
        return RaceReport(0, ())
    m_number = {m: k for k, m in enumerate(sorted(m_banks))}
    return _unordered(d, _known_done(d, params, m_number), m_banks, e_banks)


def _accumulating_writes(d: Any, params: IsaParams) -> tuple[dict[int, int], dict[int, int]]:
    """The accumulator banks (a bitmask) of each mvin that accumulates into the accumulator,
    and of each compute that does (its C rows, its preload's)."""
    op = d.column("op").astype(np.int64)
    bank_rows = max(1, params.acc_rows // params.acc_banks)
    rows = d.column("rows").astype(np.int64)
    nblocks = np.maximum(d.column("nblocks").astype(np.int64), 1)
    bstride = d.column("block_stride").astype(np.int64)
    local = d.column("local").astype(np.int64)
    m_cand = (op == Op.MVIN) & (d.column("is_acc") == 1) & (d.column("accumulate") == 1)
    m_banks = {}
    for i in np.flatnonzero(m_cand).tolist():
        rr = (local[i] + np.arange(nblocks[i])[:, None] * bstride[i]
              + np.arange(rows[i])[None, :]).ravel()
        m_banks[i] = _acc_banks(rr, bank_rows)
    is_comp = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)
    e_cand = (is_comp & (d.column("c_garbage") == 0) & (d.column("c_acc") == 1)
              & (d.column("c_accumulate") == 1))
    c_row, c_rows = d.column("c").astype(np.int64), d.column("c_rows").astype(np.int64)
    c_stride = d.column("c_stride").astype(np.int64)
    e_idx = np.flatnonzero(e_cand)
    width = int(c_rows[e_idx].max(initial=0))
    steps = np.arange(width)[None, :]
    banks = (c_row[e_idx, None] + steps * c_stride[e_idx, None]) // bank_rows
    valid = steps < c_rows[e_idx, None]
    if banks[valid].size and not 0 <= banks[valid].min() <= banks[valid].max() < 63:
        e_banks = {i: _acc_banks(c_row[i] + np.arange(c_rows[i]) * c_stride[i], bank_rows)
                   for i in e_idx.tolist()}
    else:           # one bitmask per compute at once: bit b for every bank b its rows touch
        masks = np.bitwise_or.reduce(np.where(valid, np.left_shift(1, banks), 0), axis=1)
        e_banks = dict(zip(e_idx.tolist(), masks.tolist()))
    return m_banks, e_banks


def _known_done(d: Any, params: IsaParams, m_number: dict[int, int]) -> list[_Done]:
    """For each instruction, what the chip's rules guarantee complete when it starts: the
    accumulating mvins (bit ``m_number[i]`` for mvin i) and the execute watermark."""
    n = len(d)
    op = d.column("op").astype(np.int64)
    unit = d.column("unit").astype(np.int64)
    opa_s, opa_e, opb_s, opb_e, opa_dst = _ranges(d, params)
    rows_total = params.sp_rows + params.acc_rows

    # Per unified row, the union of ({i} + Done(i)) over the entries of each kind that track it:
    # the mvin bits as Python integers (a bitset over every candidate) and the execute
    # watermark as an array, 0 and -1 where nothing was recorded (the identities of | and max).
    kinds = ("ld", "ex_any", "ex_dst", "st_a", "st_dst", "st_b_of_dst")
    row_bits = {k: [0] * (rows_total + 1) for k in kinds}
    row_ex = {k: np.full(rows_total + 1, -1, np.int64) for k in kinds}
    done = [None] * n
    queue_last = {int(Unit.LOAD): None, int(Unit.EXECUTE): None, int(Unit.STORE): None}
    store_all = _Done()
    older_all = _Done()  # everything issued so far
    floor = _Done()  # what the last fence waited for: done before anything after it starts
    ex_older = -1

    def gather(kind: str, start: int, end: int, into: _Done) -> None:
        end = min(end, rows_total)
        if start < 0 or start >= end:
            return
        into.bits = functools.reduce(operator.or_, row_bits[kind][start:end], into.bits)
        into.ex = max(into.ex, int(row_ex[kind][start:end].max()))

    def record(kind: str, start: int, end: int, value: _Done) -> None:
        end = min(end, rows_total)
        if start < 0 or start >= end:
            return
        if value.bits:
            table = row_bits[kind]
            table[start:end] = [bits | value.bits for bits in table[start:end]]
        watermark = row_ex[kind][start:end]
        np.maximum(watermark, value.ex, out=watermark)

    for j in range(n):
        o, u = int(op[j]), int(unit[j])
        if o == Op.FENCE:
            floor.merge(older_all)
        dj = _Done(floor.bits, floor.ex)
        prev = queue_last.get(u)
        if prev is not None:
            dj.merge(done[prev])
        a0, a1, b0, b1 = int(opa_s[j]), int(opa_e[j]), int(opb_s[j]), int(opb_e[j])
        if u == Unit.LOAD:
            gather("ex_any", a0, a1, dj)
            gather("st_a", a0, a1, dj)
            gather("st_b_of_dst", a0, a1, dj)
        elif u == Unit.EXECUTE:
            if o == Op.CONFIG_EX:
                dj.ex = max(dj.ex, ex_older)
            for s, e in ((a0, a1), (b0, b1)):
                gather("ld", s, e, dj)
                gather("st_dst", s, e, dj)
            if opa_dst[j]:
                gather("st_a", a0, a1, dj)
                gather("st_b_of_dst", a0, a1, dj)
        elif u == Unit.STORE:
            dj.merge(store_all)
            for s, e in ((a0, a1), (b0, b1)):
                gather("ld", s, e, dj)
            if opa_dst[j]:
                gather("ex_any", a0, a1, dj)
                gather("ex_dst", b0, b1, dj)
            else:
                gather("ex_dst", a0, a1, dj)
        done[j] = dj
        # What depending on j means: j complete, and so everything j waited for.
        mine = _Done(dj.bits, dj.ex)
        if j in m_number:
            mine.bits |= 1 << m_number[j]
        if u == Unit.EXECUTE and opa_dst[j]:
            mine.ex = max(mine.ex, j)  # a preload with a real C retires after every older write
        if u == Unit.LOAD:
            record("ld", a0, a1, mine)
        elif u == Unit.EXECUTE:
            record("ex_any", a0, a1, mine)
            record("ex_any", b0, b1, mine)
            if opa_dst[j]:
                record("ex_dst", a0, a1, mine)
            ex_older = j if opa_dst[j] else ex_older
        elif u == Unit.STORE:
            if opa_dst[j]:
                record("st_dst", a0, a1, mine)
                record("st_b_of_dst", b0, b1, mine)
            else:
                record("st_a", a0, a1, mine)
            store_all.merge(mine)
        if u in queue_last:
            queue_last[u] = j
        older_all.merge(mine)
        if j in m_number:
            older_all.bits |= 1 << m_number[j]

    return done


def _unordered(d: Any, done: list[_Done], m_banks: dict[int, int], e_banks: dict[int, int]
               ) -> RaceReport:
    """Pairs of an accumulating mvin M and an accumulating compute E into another bank that
    nothing orders. The compute writes while its preload's ROB entry is live: it is ordered
    after M if M is done when the compute starts, and before M if its preload retired before
    M starts."""
    n = len(d)
    op = d.column("op").astype(np.int64)
    pre_of = {}
    last_pre = -1
    for j in range(n):
        if op[j] == Op.PRELOAD:
            last_pre = j
        elif j in e_banks:
            pre_of[j] = last_pre
    m_idx = np.array(sorted(m_banks), np.int64)
    e_idx = np.array(sorted(e_banks), np.int64)
    races: list[Race] = []
    count = 0
    names = {Op.MVIN: "mvin", Op.COMPUTE_PRELOADED: "compute_preloaded",
             Op.COMPUTE_ACCUMULATED: "compute_accumulated"}

    def report(m: int, e: int) -> None:
        nonlocal count
        if m_banks[m] == e_banks[e] and bin(m_banks[m]).count("1") == 1:
            return  # one and the same bank: the execute write wins the port, the DMA waits
        count += 1
        if len(races) < MAX_REPORTED:
            first, second = sorted((m, e))
            races.append(Race(
                int(d.origin[first]), int(d.origin[second]), names[Op(int(op[first]))],
                names[Op(int(op[second]))],
                "an accumulating mvin and an accumulating compute into different accumulator "
                "banks that no dependence orders: the chip's one accumulator adder, shared by "
                "its banks, may take both in the same cycle"))

    for e in e_idx.tolist():  # older mvins not known done when the compute starts
        older = int(np.searchsorted(m_idx, e))
        open_bits = ((1 << older) - 1) & ~done[e].bits  # bit k: the k-th mvin, m_idx[k]
        while open_bits:
            low = open_bits & -open_bits
            report(int(m_idx[low.bit_length() - 1]), e)
            open_bits ^= low
    for m in m_idx.tolist():  # older computes whose preload had not retired when m started
        lo = int(np.searchsorted(e_idx, max(done[m].ex, 0), side="right"))
        hi = int(np.searchsorted(e_idx, m))
        for e in e_idx[lo:hi].tolist():
            if pre_of[e] > done[m].ex:
                report(m, e)
    return RaceReport(count, tuple(races))


__all__ = ["MAX_REPORTED", "Race", "RaceReport", "find_races"]
