"""The timing model: one table of constants, static per-instruction costs, and the scan step.

Gemmini (``ReservationStation.scala``, ``LoadController.scala``, ``ExecuteController.scala``,
``StoreController.scala``) runs three in-order queues: load (mvin, config_ld), execute (preload,
compute, config_ex) and store (mvout, config_st). The host hands commands over one per
`TimingTable.issue_cycles`, in program order, into a reservation station with a fixed number of
entries per queue; an entry is freed when its command completes, so a full queue stalls every
later command (head-of-line blocking). A command starts when its queue is free, its entry is
allocated, and every older command of *another* queue that touches an overlapping scratchpad /
accumulator row has completed (RAW, WAR and WAW; Gemmini clears a dependence at completion).
Within the execute queue the mesh checks RAW hazards on the rows it reads, and accumulations into
the same accumulator rows pipeline freely. Double buffering is not a special case: when the
next tile's mvins write other rows than the current tile's computes read, nothing stops them.

Per command (all derived from `TimingTable` and the `HardwareConfig`):

* mvin / mvout: the DMA cuts each DRAM row into TileLink requests as the chip does
  (`dma_packets`: one per ``dma_max_bytes`` block the row touches, each moving a whole aligned
  power-of-two block; an mvin with a zero stride reads its row once); on the chip's 55
  programs these are exactly the requests it issued. A direction keeps
  `TimingTable.inflight_requests` out, each for a round trip (``dram_latency_cycles +
  dma_round_trip_extra_cycles``, writes ``+ dma_write_extra_cycles``), so a long stream sends
  at most that many per round trip, while a short burst goes out one request a cycle (the
  limit is a window: `window_cycles`); its beats cross the bus at the DRAM bandwidth. Reads
  (mvin) and writes (mvout) each have their channel (the StreamReader and StreamWriter), each
  in program order, and each controller keeps ``inflight_requests / DIM + 1`` moves
  outstanding (`TimingTable.outstanding_moves`). An mvin completes a round trip +
  ``mvin_write_cycles`` after its last request (with pixel repeats p, its rows enter the
  scratchpad at most one per p cycles); an mvout reads one accumulator row per cycle
  through the scaling pipeline, hands the rows to the writer and retires when the last is
  handed over; its acknowledgements come a round trip later, which only a fence (and the end
  of the program) waits for.
* mvout_spad (baco extension): the store queue reads one accumulator row per cycle through
  the same scaling pipeline as an mvout and writes it to the scratchpad; no DMA and no DRAM
  latency: done ``mvout_read_cycles + spad_write_cycles`` after the last row is read.
* a statistics pass (an mvout or mvout_spad with a normalizer command MAX, SUM_EXP or
  INV_SUM_EXP, `DecodedTrace.stat_passes`) holds the store queue one cycle per accumulator row
  it reads (its blocks) and is done ``mvout_read_cycles`` later; it writes nothing, so it uses
  no DMA, no DRAM latency and no scratchpad write.
* preload / compute: the array takes one row of A (and one of B or D) per cycle. A compute
  takes ``max(a_rows, bd_rows, min_compute_rows)`` cycles (``total_rows`` in
  ``ExecuteController``; full DIM under OS); a preload that loads weights takes DIM cycles, and
  merged with the compute just before it (Gemmini's "mul_pre") the two are one step of DIM
  rows; a preload of the garbage address costs nothing after a compute and
  ``min_compute_rows`` alone. Operands of one step that sit in the same scratchpad bank (or
  both in the accumulator) take turns on its read port, one row each per cycle
  (``ExecuteController.scala`` ~316-357): a compute whose A shares a bank with the next
  preload's weights takes twice as long. Results land ``spad_read_cycles + pe_rows + pe_cols -
  2 + acc_write_cycles`` after the last input row: the skewed fill and drain of the systolic
  array (`accel.sim.pe_array` measures the ``pe_rows + pe_cols - 2`` part cycle by cycle).
* config_ex waits until the mesh is empty; fence waits until every earlier command completed.

The constants not read from Gemmini's generator configuration (the round-trip extras) were
read off the chip's own probes (`data/gemmini_rtl_probes.csv`) and checked once, globally, on
baco's programs run on the chip (`data/gemmini_rtl_baco_programs.csv`, `baco validate
programs`). The mesh keeps at most `TimingTable.mesh_matmuls` computes in flight (its tag
queue): a compute starts only when the one that many before it has left the array. Not
modelled: the TileLink A channel shared by read
requests and write beats, and DMA writes waiting on an accumulator bank the execute unit is
writing.

Cycle counts are int32 (the scan runs without x64): traces longer than about 2**31 cycles
overflow and are reported as such by `accel.sim.run`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from accel import dma, gemmini_timing
from accel.isa import IsaParams
from accel.sim.decode import COL, DecodedTrace, Op, Unit
from workloads.errors import ConfigError

N_UNITS = 3
RS_CAPACITY = 64  # largest reservation-station depth the scan state can hold
MOVE_CAPACITY = 16  # largest number of outstanding moves per controller the scan state holds
MESH_CAPACITY = 16  # largest number of matmuls in the mesh the scan state holds


@dataclasses.dataclass(frozen=True)
class TimingTable:
    """Every timing constant of the simulator, with where it comes from.

    Override with `dataclasses.replace` (or ``TimingTable(**overrides)``); values are plain
    Python numbers. Gemmini's figures default to `accel.gemmini_timing`, which says where each
    comes from (the template's expressions name the same figures); the rest are Gemmini
    ``GemminiConfigs.defaultConfig`` (``Configs.scala``) unless said otherwise.
    """

    # Host interface: cycles between two commands the host issues (a RoCC instruction from
    # Rocket; 1 = back to back). Commands a loop FSM issues (expanded loop_ws) come one per
    # cycle (fsm_issue_cycles).
    issue_cycles: int = 1
    fsm_issue_cycles: int = 1
    # Reservation-station entries per queue: reservation_station_entries_{ld,ex,st}.
    rs_entries_load: int = gemmini_timing.RS_ENTRIES_LOAD
    rs_entries_execute: int = gemmini_timing.RS_ENTRIES_EXECUTE
    rs_entries_store: int = gemmini_timing.RS_ENTRIES_STORE
    # DMA, Gemmini's generator parameters (Configs.scala defaultConfig ~66-69):
    # dma_buswidth (128 bits there) as bytes per beat; dma_maxbytes = 64 per request;
    # max_in_flight_mem_reqs (16 there): the StreamReader's and StreamWriter's transaction ids
    # (DMA.scala StreamWriter ~393 xactBusy; XactTracker), so at most that many requests are
    # out per direction, each for a round trip of dram_latency_cycles +
    # dma_round_trip_extra_cycles (the TileLink path and the tracker). The same number bounds
    # the moves a controller keeps outstanding: max_in_flight_mem_reqs / DIM + 1
    # (LoadController.scala ~84, StoreController.scala ~146, the DMACommandTracker's nCmds).
    # A positive bus or in-flight count fixes it; 0 builds it for the hardware's DRAM
    # bandwidth as the generator would be configured (`bus_bytes`, `inflight_requests`).
    dma_bus_bytes_per_cycle: int = 0
    dma_max_bytes: int = 64
    max_inflight_requests: int = 0
    # The round trip: the memory's latency, what the DMA adds, and a write's acknowledgement.
    dma_round_trip_extra_cycles: int = gemmini_timing.ROUND_TRIP_EXTRA_CYCLES
    dma_write_extra_cycles: int = gemmini_timing.DMA_WRITE_EXTRA_CYCLES
    dram_latency_cycles: int = gemmini_timing.DRAM_LATENCY_CYCLES
    # Moves: an mvin's scratchpad write, an mvout's accumulator read and scaling, an
    # mvout_spad's scratchpad write (baco extension).
    mvin_write_cycles: int = gemmini_timing.MVIN_WRITE_CYCLES
    mvout_read_cycles: int = gemmini_timing.MVOUT_READ_CYCLES
    spad_write_cycles: int = gemmini_timing.SPAD_WRITE_CYCLES
    # Execute pipeline around the mesh: scratchpad read before the first row enters,
    # accumulator read-modify-write after the last row leaves; a compute's floor on its rows;
    # the mesh's tag queue.
    spad_read_cycles: int = gemmini_timing.SPAD_READ_CYCLES
    acc_write_cycles: int = gemmini_timing.ACC_WRITE_CYCLES
    min_compute_rows: int = gemmini_timing.MIN_COMPUTE_ROWS
    mesh_matmuls: int = gemmini_timing.MESH_MATMULS
    # Configuration commands and fence take one cycle once they start.
    config_cycles: int = 1
    fence_cycles: int = 1

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ConfigError(f"TimingTable.{f.name} must be a non-negative integer, got "
                                  f"{value!r}")
        for name in ("rs_entries_load", "rs_entries_execute", "rs_entries_store"):
            if not 1 <= getattr(self, name) <= RS_CAPACITY:
                raise ConfigError(f"TimingTable.{name} must be 1..{RS_CAPACITY}")
        if not 1 <= self.mesh_matmuls <= MESH_CAPACITY:
            raise ConfigError(f"TimingTable.mesh_matmuls must be 1..{MESH_CAPACITY}")
        for name in ("dma_max_bytes", "issue_cycles", "fsm_issue_cycles"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TimingTable.{name} must be at least 1")

    def bytes_per_cycle(self, hw: Any) -> float:
        """DMA bandwidth: the hardware's DRAM bandwidth, or a fixed bus if that is narrower."""
        dram = _dram_bytes_per_cycle(hw)
        bus = float(self.dma_bus_bytes_per_cycle)
        return min(bus, dram) if bus > 0 else dram

    def bus_bytes(self, hw: Any) -> int:
        """Bytes per DMA beat: the fixed bus, or the generator's (`accel.dma.bus_bytes`)."""
        if self.dma_bus_bytes_per_cycle > 0:
            return int(self.dma_bus_bytes_per_cycle)
        return int(dma.bus_bytes(_dram_bytes_per_cycle(hw)))

    def inflight_requests(self, hw: Any) -> int:
        """Requests a DMA direction keeps out: the fixed count, or the generator's for this
        round trip (`accel.dma.inflight_requests`)."""
        if self.max_inflight_requests > 0:
            return int(self.max_inflight_requests)
        return int(dma.inflight_requests(
            self.bytes_per_cycle(hw), self.dram_latency_cycles + self.dma_round_trip_extra_cycles))

    def request_interval_cycles(self, hw: Any) -> float:
        """Cycles between DMA requests of one direction: one per cycle, or fewer when the
        in-flight limit binds (that many requests per round trip)."""
        round_trip = self.dram_latency_cycles + self.dma_round_trip_extra_cycles
        return max(1.0, round_trip / self.inflight_requests(hw))

    def outstanding_moves(self, dim: int, hw: Any) -> int:
        """Moves a load or store controller keeps outstanding (its command tracker's nCmds)."""
        return min(MOVE_CAPACITY, self.inflight_requests(hw) // dim + 1)

    def scan_params(self, dim: int, hw: Any) -> np.ndarray:
        """The few constants the scan itself reads (the rest are folded into `costs`)."""
        return np.array([self.issue_cycles, self.rs_entries_load, self.rs_entries_execute,
                         self.rs_entries_store, self.fence_cycles, self.fsm_issue_cycles,
                         self.outstanding_moves(dim, hw), self.mesh_matmuls], np.int32)

    @classmethod
    def from_dict(cls, overrides: dict[str, Any] | None) -> TimingTable:
        overrides = dict(overrides or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigError(f"unknown timing constants {sorted(unknown)}; known: "
                              f"{sorted(known)}")
        return cls(**overrides)


def _dram_bytes_per_cycle(hw: Any) -> float:
    return float(dma.dram_bytes_per_cycle(float(hw.dram_bw_words), int(hw.input_bits)))


# ---------------------------------------------------------------------------------------------
# Static costs.

COST_COLUMNS = ("occ", "post", "dma", "dma_offset", "tail", "burst", "ahead", "work")
CCOL = {name: i for i, name in enumerate(COST_COLUMNS)}


def dma_packets(addr: np.ndarray, nbytes: np.ndarray, bus_bytes: int,
                max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """TileLink requests and bus beats that move ``nbytes`` from each ``addr``, as Gemmini's
    StreamReader and StreamWriter cut a row (DMA.scala ~186-205 read_packets, ~426-470
    write_packets): each request is the power-of-two block (``bus_bytes`` to ``max_bytes``)
    aligned to its size that covers the most of what is left from the current address (the
    smallest on ties), and moves all its beats. So a row costs one request per ``max_bytes``
    block it touches, and a row that straddles a smaller block is carried by a larger one."""
    pos, left = addr.astype(np.int64).copy(), np.maximum(nbytes.astype(np.int64), 0)
    reqs = np.zeros(len(pos), np.int64)
    beats = np.zeros(len(pos), np.int64)
    sizes = [s for s in (bus_bytes << k for k in range(16)) if s <= max(max_bytes, bus_bytes)]
    while np.any(left > 0):
        live = left > 0
        best = np.zeros(len(pos), np.int64)
        size = np.full(len(pos), sizes[0], np.int64)
        for s in sizes:
            moved = np.minimum(s - pos % s, left)
            better = moved > best
            best = np.where(better, moved, best)
            size = np.where(better, s, size)
        pos = np.where(live, pos + best, pos)
        left = np.where(live, left - best, left)
        reqs += live
        beats += np.where(live, size // bus_bytes, 0)
    return reqs, beats


def _move_packets(decoded: DecodedTrace, table: TimingTable, hw: Any,
                  sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(idx, requests, beats)`` of each selected move: its DRAM rows cut by `dma_packets`.
    An mvin with a zero stride reads its row once and the scratchpad repeats it
    (LoadController.scala ~76 ``actual_rows_read``, ~105 ``repeats``)."""
    idx = np.flatnonzero(sel)
    col = {k: decoded.column(k).astype(np.int64)[idx] for k in
           ("op", "rows", "cols", "elem_bytes", "dram", "dram_stride")}
    rows = np.maximum(col["rows"], 0)
    repeated = (col["op"] == Op.MVIN) & (col["dram_stride"] == 0)
    rows = np.where(repeated, np.minimum(rows, 1), rows)
    which = np.repeat(np.arange(len(idx)), rows)
    r = np.arange(len(which)) - np.repeat(np.cumsum(rows) - rows, rows)
    addr = col["dram"][which] + r * col["dram_stride"][which]
    nbytes = (col["cols"] * col["elem_bytes"])[which]
    reqs, beats = dma_packets(addr, nbytes, table.bus_bytes(hw), table.dma_max_bytes)
    return (idx, np.bincount(which, weights=reqs, minlength=len(idx)),
            np.bincount(which, weights=beats, minlength=len(idx)))


def dma_requests(decoded: DecodedTrace, table: TimingTable, hw: Any,
                 sel: np.ndarray) -> np.ndarray:
    """Memory requests each selected move issues (0 elsewhere)."""
    out = np.zeros(len(decoded), np.int64)
    idx, reqs, _ = _move_packets(decoded, table, hw, sel)
    out[idx] = reqs
    return out


def _request_interval(table: TimingTable, hw: Any, write: bool) -> float:
    if not write:
        return table.request_interval_cycles(hw)
    return max(1.0, (table.dram_latency_cycles + table.dma_round_trip_extra_cycles
                     + table.dma_write_extra_cycles) / table.inflight_requests(hw))


def move_dma_cycles(decoded: DecodedTrace, table: TimingTable, hw: Any,
                    sel: np.ndarray, write: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(held, burst)`` cycles of the DMA's read (mvin) or write (mvout) channel for each
    selected move. ``held``: the longer of its beats at the DRAM bandwidth and its requests
    at the in-flight limit's steady rate (one per `TimingTable.request_interval_cycles`, or
    the longer round trip of a write). ``burst``: the same with the window open (one request
    a cycle), how fast a move goes when the requests before it have come back."""
    held = np.zeros(len(decoded), np.int64)
    burst = np.zeros(len(decoded), np.int64)
    idx, reqs, beats = _move_packets(decoded, table, hw, sel)
    interval = _request_interval(table, hw, write)
    beat_cycles = table.bus_bytes(hw) / table.bytes_per_cycle(hw)
    held[idx] = np.ceil(np.maximum(beats * beat_cycles, reqs * interval)).astype(np.int64)
    burst[idx] = np.ceil(np.maximum(beats * beat_cycles, reqs)).astype(np.int64)
    return held, burst


def window_cycles(table: TimingTable, hw: Any, write: bool) -> int:
    """How far a direction's requests may run ahead of their steady rate: the in-flight
    limit is a window (StreamReader/StreamWriter transaction ids, DMA.scala), so requests go
    one a cycle until that many are out, and each id comes back a round trip later. The
    chip's probes: 16 requests at latency 80 finish a round trip after the 16th cycle, not
    16 steady intervals."""
    return int(math.floor(table.inflight_requests(hw) * _request_interval(table, hw, write)))


def _banks(decoded: DecodedTrace, hw: Any) -> dict[str, np.ndarray]:
    """The bank each execute operand reads (scratchpad banks 0.., the accumulator -1, none
    -2 for a garbage operand). The execute unit reads one row per bank per cycle, so the
    operands of one step in the same bank take turns (ExecuteController.scala ~316-357,
    same_bank and must_wait_for; Configs.scala sp_banks = 4, `IsaParams.sp_banks`)."""
    bank_rows = IsaParams.from_hardware(hw).sp_bank_rows
    out = {}
    for name in ("a", "bd"):
        row = decoded.column(name).astype(np.int64)
        acc = decoded.column(f"{name}_acc") == 1
        out[name] = np.where(decoded.column(f"{name}_garbage") == 1, -2,
                             np.where(acc, -1, row // bank_rows))
    return out


def _bank_turns(operands: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """How many of a step's live operands read the busiest bank (at least 1): the step takes
    that many cycles per row."""
    turns = np.ones(len(operands[0][0]), np.int64)
    for i, (bank_i, live_i) in enumerate(operands):
        same = np.ones(len(bank_i), np.int64)
        for j, (bank_j, live_j) in enumerate(operands):
            if j != i:
                same += live_j & (bank_j == bank_i) & (bank_j != -2)
        turns = np.maximum(turns, np.where(live_i & (bank_i != -2), same, 1))
    return turns


def compute_cycles(a_rows: Any, bd_rows: Any, table: TimingTable, dim: int, os: Any) -> Any:
    """Cycles the array is busy with one compute (ExecuteController's ``total_rows``)."""
    return np.where(os, dim, np.maximum(np.maximum(a_rows, bd_rows), table.min_compute_rows))


def array_latency_cycles(pe_rows: int, pe_cols: int) -> int:
    """Fill and drain of the systolic array: a compute that feeds ``n`` rows has its last output
    out of the array ``n + pe_rows + pe_cols - 2`` cycles after its first row went in (the
    input skew across rows plus the output skew across columns); `accel.sim.pe_array` measures
    this cycle by cycle. The queue is busy for the ``n`` cycles; this is the rest."""
    return pe_rows + pe_cols - 2


def costs(decoded: DecodedTrace, table: TimingTable, hw: Any) -> np.ndarray:
    """Per-instruction static costs, int32 ``[n, len(COST_COLUMNS)]``.

    ``occ``: cycles the instruction holds its queue; ``post``: cycles from the end of its work
    to completion (latency); ``dma``: cycles it holds its DMA channel (read or write) at the
    steady rate, starting ``dma_offset`` cycles after it starts; ``burst``: the same with the
    in-flight window open; ``ahead``: how far the window lets its requests run ahead of the
    steady rate (`window_cycles`); ``work``: a move's own cycles besides the DMA (an mvout's
    accumulator reads).
    """
    c = {name: decoded.column(name).astype(np.int64) for name in
         ("op", "rows", "cols", "elem_bytes", "nblocks", "is_acc", "full", "a_rows", "a_cols",
          "a_garbage", "a_transpose", "bd_rows", "bd_garbage", "dataflow", "merged")}
    op = c["op"]
    dim = decoded.shape.dim
    n = len(op)
    occ = np.zeros(n, np.int64)
    post = np.zeros(n, np.int64)
    dma = np.zeros(n, np.int64)
    dma_offset = np.zeros(n, np.int64)
    tail = np.zeros(n, np.int64)

    # Moves.
    is_mvin, is_mvout = op == Op.MVIN, op == Op.MVOUT
    stats = decoded.stat_passes()
    read, read_burst = move_dma_cycles(decoded, table, hw, is_mvin, write=False)
    written, written_burst = move_dma_cycles(decoded, table, hw, is_mvout & ~stats,
                                             write=True)
    dma = read + written
    burst = read_burst + written_burst
    ahead = np.where(is_mvin, window_cycles(table, hw, False),
                     np.where(is_mvout, window_cycles(table, hw, True), 0))
    round_trip = table.dram_latency_cycles + table.dma_round_trip_extra_cycles
    # With pixel repeats p the PixelRepeater writes each row p times, one scratchpad write a
    # cycle, and takes the next row only after the last (PixelRepeater.scala ~46, ~74-85): the
    # load queue's mvins stream at most one row per p cycles.
    repeats = decoded.column("repeats").astype(np.int64)
    occ = np.where(is_mvin, np.where(repeats > 1, np.maximum(read, c["rows"] * repeats), read),
                   occ)
    post = np.where(is_mvin, round_trip + table.mvin_write_cycles, post)
    # mvout: the store queue reads local rows (one per cycle per block) through the scaling
    # pipeline and hands them to the DMA's writer; it retires when the last row is handed over
    # (the DMA answers the store controller on dispatch: Scratchpad.scala ~352, so the
    # StoreController's command tracker completes then), and the write acknowledgements come
    # a round trip later (``tail``: only a fence, or the end of the program, waits for them).
    local_rows = c["rows"] * c["nblocks"]
    occ = np.where(is_mvout, np.maximum(local_rows, written), occ)
    work = np.where(is_mvout, local_rows, 0)
    dma_offset = np.where(is_mvout, table.mvout_read_cycles, dma_offset)
    tail = np.where(is_mvout & ~stats, round_trip + table.dma_write_extra_cycles, tail)
    is_msp = op == Op.MVOUT_SPAD
    occ = np.where(is_msp, c["rows"], occ)
    post = np.where(is_msp, table.mvout_read_cycles + table.spad_write_cycles, post)
    # Statistics passes: the rows' read through the pipeline, nothing written.
    occ = np.where(stats, local_rows, occ)
    dma_offset = np.where(stats, 0, dma_offset)
    post = np.where(stats, table.mvout_read_cycles, post)

    # Execute. A step feeds the array one row of each live operand per cycle; operands in the
    # same scratchpad bank (or both in the accumulator) take turns (`_bank_turns`).
    os = c["dataflow"] == 0
    is_comp = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)
    a_rows_stored = np.where(c["a_garbage"] == 1, 1, c["a_rows"])
    bd_rows = np.where(c["bd_garbage"] == 1, 1, c["bd_rows"])
    bank = _banks(decoded, hw)
    comp = compute_cycles(a_rows_stored, bd_rows, table, dim, os) * _bank_turns(
        [(bank["a"], is_comp), (bank["bd"], is_comp)])
    occ = np.where(is_comp, comp, occ)
    post = np.where(is_comp, table.spad_read_cycles + array_latency_cycles(dim, dim)
                    + table.acc_write_cycles, post)
    is_pre = op == Op.PRELOAD
    prev_comp = np.zeros(n, np.int64)
    prev = np.zeros(n, np.int64)
    exec_rows = np.flatnonzero((op == Op.PRELOAD) | is_comp | (op == Op.CONFIG_EX)
                               | (op == Op.CONFIG_NORM))
    if len(exec_rows) > 1:
        prev_comp[exec_rows[1:]] = np.where(is_comp[exec_rows[:-1]], comp[exec_rows[:-1]], 0)
        prev[exec_rows[1:]] = exec_rows[:-1]
    loads_weights = (c["bd_garbage"] == 0) | os
    alone = np.where(loads_weights, dim, table.min_compute_rows)
    # A weight-loading preload merged with the compute before it ("mul_pre") is one step of
    # DIM rows (total_rows is DIM while D is fed) in which the compute's A and D and the
    # preload's weights take turns where they share a bank.
    merged = (c["merged"] == 1) & loads_weights
    step = dim * _bank_turns([(bank["a"][prev], merged), (bank["bd"][prev], merged),
                              (bank["bd"], merged)])
    after_compute = np.where(loads_weights, np.maximum(step - prev_comp, 0), 0)
    occ = np.where(is_pre, np.where(c["merged"] == 1, after_compute, alone), occ)

    is_cfg = np.isin(op, [Op.CONFIG_EX, Op.CONFIG_LD, Op.CONFIG_ST, Op.CONFIG_NORM])
    occ = np.where(is_cfg | (op == Op.FLUSH), table.config_cycles, occ)
    out = np.stack([occ, post, dma, dma_offset, tail, burst, ahead, work], axis=1)
    if out.size and out.max() > np.iinfo(np.int32).max // 4:
        raise ConfigError("an instruction's cost overflows the simulator's int32 cycles")
    return out.astype(np.int32)


# Rows each instruction reads and writes, for the dependence checks: up to `slots` runs of
# (unified row, count, stride) where accumulator row r is unified row sp_rows + r.


def access_runs(decoded: DecodedTrace) -> tuple[np.ndarray, np.ndarray]:
    """``(reads, writes)``, each int32 ``[n, slots, 3]`` runs ``(row, count, stride)``."""
    shape = decoded.shape
    slots = max(shape.max_blocks, 2)
    n = len(decoded)
    col = {name: decoded.column(name).astype(np.int64) for name in (
        "op", "local", "dst", "rows", "nblocks", "block_stride", "is_acc", "a", "a_garbage",
        "a_acc",
        "a_rows", "a_stride", "bd", "bd_garbage", "bd_acc", "bd_rows", "c", "c_garbage",
        "c_acc", "c_rows", "c_stride")}
    op = col["op"]
    reads = np.zeros((n, slots, 3), np.int64)
    writes = np.zeros((n, slots, 3), np.int64)

    def unified(row: np.ndarray, acc: np.ndarray) -> np.ndarray:
        return np.where(acc == 1, shape.sp_rows + row, row)

    is_mvin, is_mvout = op == Op.MVIN, op == Op.MVOUT
    base = unified(col["local"], col["is_acc"])
    # An mvin with pixel repeats also writes rows before its first.
    before = decoded.mvin_rows_before()
    for b in range(shape.max_blocks):
        live = b < col["nblocks"]
        blk_in = np.stack([base - before + b * col["block_stride"], col["rows"] + before,
                           np.ones(n, np.int64)], 1)
        blk_out = np.stack([base + b * shape.dim, col["rows"], np.ones(n, np.int64)], 1)
        writes[:, b] = np.where((is_mvin & live)[:, None], blk_in, writes[:, b])
        reads[:, b] = np.where((is_mvout & live)[:, None], blk_out, reads[:, b])
    is_msp = op == Op.MVOUT_SPAD
    ones = np.ones(n, np.int64)
    reads[:, 0] = np.where(is_msp[:, None], np.stack([base, col["rows"], ones], 1), reads[:, 0])
    msp_writes = is_msp & ~decoded.stat_passes()  # a statistics pass writes no row
    writes[:, 0] = np.where(msp_writes[:, None], np.stack([col["dst"], col["rows"], ones], 1),
                            writes[:, 0])
    is_pre = op == Op.PRELOAD
    is_comp = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)
    a_run = np.stack([unified(col["a"], col["a_acc"]), col["a_rows"], col["a_stride"]], 1)
    bd_run = np.stack([unified(col["bd"], col["bd_acc"]), col["bd_rows"], np.ones(n, np.int64)],
                      1)
    c_run = np.stack([unified(col["c"], col["c_acc"]), col["c_rows"], col["c_stride"]], 1)
    reads[:, 0] = np.where((is_comp & (col["a_garbage"] == 0))[:, None], a_run, reads[:, 0])
    reads[:, 1] = np.where(((is_comp | is_pre) & (col["bd_garbage"] == 0))[:, None], bd_run,
                           reads[:, 1])
    writes[:, 0] = np.where((is_comp & (col["c_garbage"] == 0))[:, None], c_run, writes[:, 0])
    return reads.astype(np.int32), writes.astype(np.int32)


# ---------------------------------------------------------------------------------------------
# The scan step.


def init_state(local_rows: int) -> dict[str, Any]:
    """The timing half of `SimState` at cycle 0 (see `accel.sim.state`)."""
    return {
        "last_issue": jnp.int32(0),
        "rs_done": jnp.zeros((N_UNITS, RS_CAPACITY), jnp.int32),
        "rs_count": jnp.zeros(N_UNITS, jnp.int32),
        "unit_free": jnp.zeros(N_UNITS, jnp.int32),
        "unit_done": jnp.zeros(N_UNITS, jnp.int32),
        "all_done": jnp.int32(0),
        "dma_free": jnp.zeros(2, jnp.int32),
        "mv_done": jnp.zeros((2, MOVE_CAPACITY), jnp.int32),
        "mv_count": jnp.zeros(2, jnp.int32),
        "mesh_done": jnp.zeros(MESH_CAPACITY, jnp.int32),
        "mesh_count": jnp.int32(0),
        "w_time": jnp.zeros((N_UNITS, local_rows), jnp.int32),
        "r_time": jnp.zeros((N_UNITS, local_rows), jnp.int32),
        "busy": jnp.zeros(N_UNITS, jnp.int32),
    }


def _run_rows(run: Any, dim: int, sink: int) -> tuple[Any, Any]:
    """Unified row indices of runs ``[slots, 3]``, flattened to ``[slots * dim]``, and which
    are real (masked rows point at the sink row, whose times must be ignored)."""
    r = jnp.arange(dim, dtype=jnp.int32)
    idx = run[:, 0:1] + r[None, :] * run[:, 2:3]
    live = r[None, :] < run[:, 1:2]
    return jnp.where(live, idx, sink).reshape(-1), live.reshape(-1)


def step(t: Any, ints: Any, cost: Any, reads: Any, writes: Any, params: Any, dim: int,
         sink: int) -> tuple[Any, tuple[Any, Any]]:
    """Advance the timing state ``t`` (a `SimState`) over one instruction.

    Returns the new state and ``(start, done)`` cycles of the instruction (-1 for NOP padding).
    """
    op = ints[COL["op"]]
    unit = ints[COL["unit"]]
    fence_cycles = params[4]
    n_cmds = params[6]
    mesh_matmuls = params[7]
    issue_cycles = jnp.where(ints[COL["fsm"]] == 1, params[5], params[0])
    depth = params[1:4]
    nop = op == Op.NOP
    fence = op == Op.FENCE
    queued = unit < N_UNITS
    u = jnp.minimum(unit, N_UNITS - 1)

    # Reservation-station entry (in program order; a full queue blocks everything after it).
    slot = t.rs_count[u] % depth[u]
    slot_free = jnp.where(queued, t.rs_done[u, slot], 0)
    enter = jnp.maximum(t.last_issue + issue_cycles, slot_free)
    enter = jnp.where(fence, jnp.maximum(enter, t.all_done), enter)

    # Dependences on older commands of other queues (and, for the array's operand reads, on
    # the execute queue's own writes: the mesh's RAW hazard check).
    read_rows, read_live = _run_rows(reads, dim, sink)
    write_rows, write_live = _run_rows(writes, dim, sink)
    others = jnp.arange(N_UNITS) != u
    own_raw = (jnp.arange(N_UNITS) == u) & (u == Unit.EXECUTE)
    w_read = t.w_time[:, read_rows]  # [units, slots*dim]
    raw = jnp.max(jnp.where((others | own_raw)[:, None] & read_live[None, :], w_read, 0))
    w_write = t.w_time[:, write_rows]
    r_write = t.r_time[:, write_rows]
    war_waw = jnp.max(jnp.where(others[:, None] & write_live[None, :],
                                jnp.maximum(w_write, r_write), 0))
    dep = jnp.where(queued, jnp.maximum(raw, war_waw), 0)
    drain = jnp.where(op == Op.CONFIG_EX, t.unit_done[Unit.EXECUTE], 0)
    occ, post, dma, dma_offset, tail = cost[0], cost[1], cost[2], cost[3], cost[4]
    burst, ahead, work = cost[5], cost[6], cost[7]
    uses_dma = dma > 0
    way = (op == Op.MVOUT).astype(jnp.int32)   # 0: DRAM reads (mvin), 1: writes (mvout)
    # A controller keeps n_cmds moves outstanding: a move waits for the one n_cmds before it.
    mv_slot = t.mv_count[way] % n_cmds
    mv_free = jnp.where(uses_dma, t.mv_done[way, mv_slot], 0)
    # A compute waits for a free entry of the mesh's tag queue: the one mesh_matmuls before it
    # must have left the array.
    matmul = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)
    mesh_slot = t.mesh_count % mesh_matmuls
    mesh_free = jnp.where(matmul, t.mesh_done[mesh_slot], 0)
    start = jnp.maximum(jnp.maximum(enter, jnp.where(queued, t.unit_free[u], 0)),
                        jnp.maximum(jnp.maximum(dep, drain), jnp.maximum(mv_free, mesh_free)))

    # The channel is held at the steady rate (dma_free), but a move's last request goes out
    # as soon as the in-flight window lets it: one a cycle, at most `ahead` before the rate.
    dma_start = jnp.maximum(start + dma_offset, t.dma_free[way])
    dma_end = dma_start + dma
    last_request = jnp.maximum(start + dma_offset + burst, dma_end - ahead)
    work_end = jnp.where(uses_dma, jnp.maximum(start + work, last_request), start + occ)
    # A move holds its queue until its last request can enter the DMA's pipeline.
    queue_free = jnp.where(uses_dma, jnp.maximum(start + work, last_request - dma_offset),
                           start + occ)
    done = jnp.where(fence, start + fence_cycles, work_end + post)

    live = ~nop
    q = live & queued
    onehot = (jnp.arange(N_UNITS) == u) & q
    new_rs_done = t.rs_done.at[u, slot].set(jnp.where(q, done, t.rs_done[u, slot]))
    done_w = jnp.where(q, done, 0)
    w_time = t.w_time.at[u, write_rows].max(done_w)
    r_time = t.r_time.at[u, read_rows].max(done_w)
    state = t.set(
        last_issue=jnp.where(live, jnp.where(fence, done, enter), t.last_issue),
        rs_done=new_rs_done,
        rs_count=t.rs_count + onehot.astype(jnp.int32),
        unit_free=jnp.where(onehot, queue_free, t.unit_free),
        unit_done=jnp.where(onehot, jnp.maximum(t.unit_done, done), t.unit_done),
        all_done=jnp.where(live, jnp.maximum(t.all_done, done + tail), t.all_done),
        dma_free=t.dma_free.at[way].set(jnp.where(live & uses_dma, dma_end, t.dma_free[way])),
        mv_done=t.mv_done.at[way, mv_slot].set(jnp.where(live & uses_dma, done,
                                                          t.mv_done[way, mv_slot])),
        mv_count=t.mv_count.at[way].add((live & uses_dma).astype(jnp.int32)),
        mesh_done=t.mesh_done.at[mesh_slot].set(jnp.where(live & matmul, done,
                                                          t.mesh_done[mesh_slot])),
        mesh_count=t.mesh_count + (live & matmul).astype(jnp.int32),
        w_time=w_time,
        r_time=r_time,
        busy=t.busy + jnp.where(onehot, occ, 0),
    )
    return state, (jnp.where(nop, -1, start), jnp.where(nop, -1, done))


def table_dict(table: TimingTable) -> dict[str, int]:
    return {f.name: int(getattr(table, f.name)) for f in dataclasses.fields(table)}


def lower_bound_cycles(decoded: DecodedTrace, table: TimingTable, hw: Any) -> int:
    """A bound no schedule beats: the busiest queue's work or either DMA direction's bytes."""
    cost = costs(decoded, table, hw)
    unit, op = decoded.column("unit"), decoded.column("op")
    per_unit = [int(cost[unit == k, CCOL["occ"]].astype(np.int64).sum()) for k in range(N_UNITS)]
    per_way = [int(cost[sel, CCOL["dma"]].astype(np.int64).sum())
               for sel in (op != Op.MVOUT, op == Op.MVOUT)]
    return max(per_unit + per_way)


__all__ = [
    "CCOL",
    "COST_COLUMNS",
    "MOVE_CAPACITY",
    "N_UNITS",
    "RS_CAPACITY",
    "TimingTable",
    "access_runs",
    "array_latency_cycles",
    "compute_cycles",
    "costs",
    "dma_packets",
    "dma_requests",
    "init_state",
    "lower_bound_cycles",
    "move_dma_cycles",
    "step",
    "table_dict",
    "window_cycles",
]

