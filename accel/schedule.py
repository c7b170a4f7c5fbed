"""List scheduling of a trace onto Gemmini's load, execute and store units.

Gemmini's reservation station sends each command to one of three queues (load: mvin*,
config_ld; execute: preload, compute, config_ex; store: mvout, mvout_spad, config_st), issues
each queue in order, and holds a command back while an older one in another queue touches
overlapping rows (RAW, WAR, WAW). `schedule` models that: it derives each instruction's reads
and writes from `Trace.accesses` (scratchpad and accumulator rows, DRAM bytes, configuration
registers), builds the dependence edges, and list-schedules the instructions on the units in
cycles.

The scheduler itself works on plain `Op` records, so a machine that is not Gemmini (the CPU of
seed 004's list-scheduling example, say) is expressed with the same types: see `Op`, `Unit`.

Timing model, for an edge ``i -> j`` (times are start cycles, ``L`` latency):

* RAW and WAW: ``start_j >= start_i + L_i`` (j sees, or overwrites, i's finished result);
* WAR: ``start_j >= start_i + R_i``, where ``R_i`` is how long i reads its operands: 1 cycle
  on a pipelined unit (operands read at issue), its whole latency otherwise;
* order (`Op.after`): ``start_j >= start_i + 1`` (issue strictly after);
* barrier (fence, CISC loops): everything before ends before it starts, and everything after
  starts after it ends.

A unit has ``slots`` identical copies; an op holds one for 1 cycle if the unit is pipelined,
else for its whole latency. In-order units issue in program order. The list scheduler walks
cycles and, on each unit with a free slot, issues the ready op with the highest priority,
where priority = the latency-weighted longest path from the op to the end of the trace
(dependence delays included), ties going to the older op.

>>> from accel.isa import Instruction
>>> from accel.trace import Trace
>>> trace = Trace([Instruction.mvin(0, 0, 16, 16), Instruction.mvout(0x100, 0, 16, 16)])
>>> result = schedule(trace)
>>> result.makespan_cycles, [e.kind for e in result.edges]
(32, ['raw'])
"""

from __future__ import annotations

import collections
import dataclasses
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence

import numpy as np

from accel.isa import MNEMONICS, IsaParams
from accel.trace import Region, Trace
from workloads.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Unit:
    """A functional unit: ``slots`` identical copies, in-order or not, pipelined or not."""

    name: str
    slots: int = 1
    in_order: bool = True
    pipelined: bool = False


@dataclasses.dataclass(frozen=True)
class Latency:
    """Cycles of one instruction kind: ``base_cycles + cycles_per_row * rows`` (at least 1)."""

    base_cycles: int = 1
    cycles_per_row: int = 0

    def cycles(self, rows: int) -> int:
        return max(1, self.base_cycles + self.cycles_per_row * rows)


# Gemmini's units: the three reservation-station queues, plus "control" for what the host or
# the loop unrollers handle (fence, flush, the CISC loops and their configs).
GEMMINI_UNITS: tuple[Unit, ...] = (
    Unit("load"), Unit("execute"), Unit("store"), Unit("control"),
)

UNIT_OF: dict[str, str] = {
    **{m: "load" for m in ("mvin", "mvin2", "mvin3", "config_ld")},
    **{m: "execute" for m in ("preload", "compute_preloaded", "compute_accumulated",
                              "config_ex", "config_norm")},
    **{m: "store" for m in ("mvout", "mvout_spad", "config_st")},
}

_PER_ROW = ("mvin", "mvin2", "mvin3", "mvout", "mvout_spad", "preload", "compute_preloaded",
            "compute_accumulated", "loop_ws", "loop_conv_ws")

# The one latency table. A throughput model: data movers and the array handle one DIM-wide
# row per cycle (`Access.rows`), everything else takes a cycle. No fixed DRAM latency: pass
# e.g. ``{"mvin": Latency(100, 1)}`` to `schedule` to add one.
DEFAULT_LATENCIES: dict[str, Latency] = {
    m: Latency(0, 1) if m in _PER_ROW else Latency(1, 0) for m in MNEMONICS
}


def unit_of(mnemonic: str) -> str:
    """The Gemmini unit an instruction goes to."""
    return UNIT_OF.get(mnemonic, "control")


@dataclasses.dataclass(frozen=True)
class Op:
    """One schedulable operation: what the scheduler needs to know about an instruction.

    ``reads`` / ``writes`` are `Region` ranges (use `Region.cell` for registers); ``after``
    lists earlier ops this one must issue after (control order, e.g. a branch that ends a
    basic block); a ``barrier`` waits for everything before and holds everything after.
    """

    name: str
    unit: str
    latency_cycles: int
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    barrier: bool = False
    after: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Dependence:
    """Edge ``src -> dst``: ``dst`` may not start before ``start[src] + delay_cycles``."""

    src: int
    dst: int
    kind: str  # "raw" | "war" | "waw" | "order" | "barrier"
    space: str
    delay_cycles: int


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """A scheduled trace: per-op unit and start/end cycles, the edges, and summary numbers.

    ``start_cycles``, ``end_cycles`` and ``priority_cycles`` are int64 arrays of shape
    ``[len(ops)]``; ``end = start + latency``.
    """

    ops: tuple[Op, ...]
    units: tuple[Unit, ...]
    start_cycles: np.ndarray
    end_cycles: np.ndarray
    priority_cycles: np.ndarray
    edges: tuple[Dependence, ...]
    makespan_cycles: int
    critical_path_cycles: int

    def busy_cycles(self) -> dict[str, int]:
        """Slot-cycles each unit is held (divide by slots x makespan for utilization)."""
        units = {u.name: u for u in self.units}
        busy = {u.name: 0 for u in self.units}
        for op in self.ops:
            busy[op.unit] += 1 if units[op.unit].pipelined else op.latency_cycles
        return busy

    def to_text(self, width: int = 64) -> str:
        """A Gantt-like listing: a summary, per-unit use, then one bar per op by start time."""
        n, span = len(self.ops), self.makespan_cycles
        lines = [f"schedule: {n} ops, makespan {span} cycles, "
                 f"critical path {self.critical_path_cycles} cycles"]
        busy = self.busy_cycles()
        for unit in self.units:
            held = busy[unit.name]
            share = held / (unit.slots * span) if span else 0.0
            lines.append(f"  unit {unit.name:<10} slots {unit.slots}  busy {held:>8} "
                         f"slot-cycles  utilization {share:6.1%}")
        columns = max(1, min(width, span))
        scale = span / columns if span else 1.0
        lines.append(f"  bar: {columns} columns, 1 column = {scale:g} cycles")
        name_width = max((len(u.name) for u in self.units), default=4)
        for i in sorted(range(n), key=lambda k: (int(self.start_cycles[k]), k)):
            s, e = int(self.start_cycles[i]), int(self.end_cycles[i])
            lo = int(s / scale) if span else 0
            hi = max(lo + 1, -int(-e // scale)) if span else 1
            bar = " " * lo + "=" * (min(hi, columns) - lo)
            lines.append(f"  {i:>5} {self.ops[i].unit:<{name_width}} {s:>7} {e:>7} "
                         f"|{bar:<{columns}}| {self.ops[i].name}")
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Dependences.


class _Segments:
    """Disjoint ranges of one address space, each with its last writer and readers since."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []
        self.writer: list[int | None] = []
        self.readers: list[list[int]] = []

    def _split(self, pos: int) -> None:
        k = bisect_right(self.starts, pos) - 1
        if k >= 0 and self.starts[k] < pos < self.stops[k]:
            self.starts.insert(k + 1, pos)
            self.stops.insert(k + 1, self.stops[k])
            self.stops[k] = pos
            self.writer.insert(k + 1, self.writer[k])
            self.readers.insert(k + 1, list(self.readers[k]))

    def _span(self, start: int, stop: int) -> tuple[int, int]:
        """Split at the ends; segments ``k0..k1-1`` then lie exactly inside [start, stop)."""
        self._split(start)
        self._split(stop)
        return bisect_left(self.starts, start), bisect_left(self.starts, stop)

    def writers(self, start: int, stop: int) -> set[int]:
        """The last writers anywhere in [start, stop)."""
        k0, k1 = self._span(start, stop)
        return {w for w in self.writer[k0:k1] if w is not None}

    def readers_since_write(self, start: int, stop: int) -> set[int]:
        k0, k1 = self._span(start, stop)
        return {r for rs in self.readers[k0:k1] for r in rs}

    def read(self, start: int, stop: int, op: int) -> None:
        k0, k1 = self._span(start, stop)
        gaps = []  # (position, start, stop) of ranges nobody touched yet
        cursor = start
        for k in range(k0, k1):
            self.readers[k].append(op)
            if self.starts[k] > cursor:
                gaps.append((k, cursor, self.starts[k]))
            cursor = self.stops[k]
        if cursor < stop:
            gaps.append((k1, cursor, stop))
        for k, lo, hi in reversed(gaps):  # right to left keeps earlier positions valid
            self.starts.insert(k, lo)
            self.stops.insert(k, hi)
            self.writer.insert(k, None)
            self.readers.insert(k, [op])

    def write(self, start: int, stop: int, op: int) -> None:
        k0, k1 = self._span(start, stop)
        self.starts[k0:k1], self.stops[k0:k1] = [start], [stop]
        self.writer[k0:k1], self.readers[k0:k1] = [op], [[]]


def _machine(ops: Sequence[Op], units: Sequence[Unit]) -> dict[str, Unit]:
    by_name: dict[str, Unit] = {}
    for unit in units:
        if unit.name in by_name:
            raise ConfigError(f"unit {unit.name!r} is listed twice")
        if isinstance(unit.slots, bool) or not isinstance(unit.slots, int) or unit.slots < 1:
            raise ConfigError(f"unit {unit.name!r}: slots must be a positive integer")
        by_name[unit.name] = unit
    for i, op in enumerate(ops):
        if op.unit not in by_name:
            raise ConfigError(f"op #{i} ({op.name}) runs on unit {op.unit!r}, which is not in "
                              f"the machine ({', '.join(by_name)})")
        lat = op.latency_cycles
        if isinstance(lat, bool) or not isinstance(lat, int) or lat < 1:
            raise ConfigError(f"op #{i} ({op.name}): latency must be a positive integer "
                              f"number of cycles, got {lat!r}")
        for j in op.after:
            if not 0 <= j < i:
                raise ConfigError(f"op #{i} ({op.name}): 'after' names #{j}, which is not an "
                                  "earlier op")
    return by_name


def dependences(ops: Sequence[Op], units: Sequence[Unit] = GEMMINI_UNITS) -> tuple[Dependence, ...]:
    """The RAW, WAR, WAW, order and barrier edges among ``ops`` (program order = index order).

    Only the edges that matter are kept: RAW and WAW from the last writer of each range, WAR
    from the readers since that write; older conflicts follow by transitivity.
    """
    machine = _machine(ops, units)
    spaces: dict[str, _Segments] = collections.defaultdict(_Segments)
    edges: dict[tuple[int, int, str], Dependence] = {}

    def read_cycles(i: int) -> int:
        return 1 if machine[ops[i].unit].pipelined else ops[i].latency_cycles

    def add(src: int, dst: int, kind: str, space: str, delay: int) -> None:
        if src != dst and (src, dst, kind) not in edges:
            edges[(src, dst, kind)] = Dependence(src, dst, kind, space, delay)

    last_barrier: int | None = None
    since_barrier: list[int] = []
    for j, op in enumerate(ops):
        reads = [r for r in op.reads if r.start < r.stop]  # empty ranges touch nothing
        writes = [w for w in op.writes if w.start < w.stop]
        for region in reads:
            for w in spaces[region.space].writers(region.start, region.stop):
                add(w, j, "raw", region.space, ops[w].latency_cycles)
        for region in writes:
            table = spaces[region.space]
            for w in table.writers(region.start, region.stop):
                add(w, j, "waw", region.space, ops[w].latency_cycles)
            for r in table.readers_since_write(region.start, region.stop):
                add(r, j, "war", region.space, read_cycles(r))
        for region in reads:
            spaces[region.space].read(region.start, region.stop, j)
        for region in writes:
            spaces[region.space].write(region.start, region.stop, j)
        for i in op.after:
            add(i, j, "order", "", 1)
        if last_barrier is not None:
            add(last_barrier, j, "barrier", "", ops[last_barrier].latency_cycles)
        if op.barrier:
            for i in since_barrier:
                add(i, j, "barrier", "", ops[i].latency_cycles)
            last_barrier, since_barrier = j, []
        else:
            since_barrier.append(j)
    return tuple(sorted(edges.values(), key=lambda e: (e.dst, e.src, e.kind)))


# ---------------------------------------------------------------------------------------------
# Scheduling.


def _delays(n: int, edges: Sequence[Dependence]) -> list[list[tuple[int, int]]]:
    """Successor lists with one (dst, delay) per pair, the largest delay of its edges."""
    best: dict[tuple[int, int], int] = {}
    for e in edges:
        key = (e.src, e.dst)
        best[key] = max(best.get(key, 0), e.delay_cycles)
    succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for (src, dst), delay in best.items():
        succ[src].append((dst, delay))
    return succ


def schedule_ops(ops: Sequence[Op], units: Sequence[Unit] = GEMMINI_UNITS) -> Schedule:
    """List-schedule ``ops`` on ``units``; see the module docstring for the model."""
    ops = tuple(ops)
    machine = _machine(ops, units)
    units = tuple(units)
    n = len(ops)
    edges = dependences(ops, units)
    succ = _delays(n, edges)
    lat = [op.latency_cycles for op in ops]

    # Priority: longest latency-weighted path to the end; edges only point forward.
    priority = [0] * n
    for i in reversed(range(n)):
        priority[i] = max([lat[i], *(delay + priority[j] for j, delay in succ[i])])
    earliest = [0] * n
    for i in range(n):
        for j, delay in succ[i]:
            earliest[j] = max(earliest[j], earliest[i] + delay)
    critical_path = max((earliest[i] + lat[i] for i in range(n)), default=0)

    preds_left = [0] * n
    for i in range(n):
        for j, _ in succ[i]:
            preds_left[j] += 1
    unit_index = {u.name: k for k, u in enumerate(units)}
    queue = [collections.deque() for _ in units]  # in-order units: ops in program order
    ready: list[list[int]] = [[] for _ in units]  # out-of-order units: ready ops
    for i, op in enumerate(ops):
        k = unit_index[op.unit]
        if units[k].in_order:
            queue[k].append(i)
        elif preds_left[i] == 0:
            ready[k].append(i)
    slot_free = [[0] * u.slots for u in units]
    est = [0] * n
    start = [0] * n
    done, t = 0, 0

    def pick(k: int, now: int) -> int | None:
        if units[k].in_order:
            if queue[k] and preds_left[queue[k][0]] == 0 and est[queue[k][0]] <= now:
                return queue[k][0]
            return None
        eligible = [i for i in ready[k] if est[i] <= now]
        return min(eligible, key=lambda i: (-priority[i], i)) if eligible else None

    def issue(i: int, k: int, slot: int, now: int) -> None:
        nonlocal done
        start[i] = now
        unit = units[k]
        slot_free[k][slot] = now + (1 if unit.pipelined else lat[i])
        if unit.in_order:
            queue[k].popleft()
        else:
            ready[k].remove(i)
        done += 1
        for j, delay in succ[i]:
            est[j] = max(est[j], now + delay)
            preds_left[j] -= 1
            if preds_left[j] == 0 and not units[unit_index[ops[j].unit]].in_order:
                ready[unit_index[ops[j].unit]].append(j)

    while done < n:
        progressed = True
        while progressed:  # zero-delay edges can make more ops ready in the same cycle
            progressed = False
            for k in range(len(units)):
                while True:
                    slot = min(range(units[k].slots), key=slot_free[k].__getitem__)
                    if slot_free[k][slot] > t:
                        break
                    i = pick(k, t)
                    if i is None:
                        break
                    issue(i, k, slot, t)
                    progressed = True
        if done == n:
            break
        waits = []
        for k in range(len(units)):
            free = min(slot_free[k])
            if units[k].in_order:
                heads = [queue[k][0]] if queue[k] and preds_left[queue[k][0]] == 0 else []
            else:
                heads = ready[k]
            waits += [max(est[i], free) for i in heads]
        if not waits:  # cannot happen with forward edges; guard against an endless loop
            raise RuntimeError("list scheduler deadlocked: no op can ever become ready")
        t = min(waits)

    start_cycles = np.asarray(start, dtype=np.int64)
    end_cycles = start_cycles + np.asarray(lat, dtype=np.int64)
    return Schedule(
        ops=ops,
        units=units,
        start_cycles=start_cycles,
        end_cycles=end_cycles,
        priority_cycles=np.asarray(priority, dtype=np.int64),
        edges=edges,
        makespan_cycles=int(end_cycles.max()) if n else 0,
        critical_path_cycles=int(critical_path),
    )


def _latency_table(latencies: Mapping[str, Latency | int] | None) -> dict[str, Latency]:
    table = dict(DEFAULT_LATENCIES)
    for name, value in (latencies or {}).items():
        if name not in table:
            raise ConfigError(f"latency table: unknown mnemonic {name!r}; known: "
                              f"{', '.join(MNEMONICS)}")
        if isinstance(value, Latency):
            table[name] = value
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            table[name] = Latency(value, 0)
        else:
            raise ConfigError(f"latency table: {name!r} must be a Latency or a positive number "
                              f"of cycles, got {value!r}")
    return table


def trace_ops(
    trace: Trace,
    latencies: Mapping[str, Latency | int] | None = None,
    params: IsaParams = IsaParams(),
) -> tuple[Op, ...]:
    """The trace as `Op` records: Gemmini unit, latency from the table, and regions.

    The trace is validated against ``params`` on the way (`Trace.validate`).
    """
    table = _latency_table(latencies)
    return tuple(
        Op(
            name=ins.to_text(),
            unit=unit_of(ins.mnemonic),
            latency_cycles=table[ins.mnemonic].cycles(access.rows),
            reads=access.reads,
            writes=access.writes,
            barrier=access.barrier,
        )
        for ins, access in zip(trace, trace.accesses(params, check=True))
    )


def schedule(
    trace: Trace,
    latencies: Mapping[str, Latency | int] | None = None,
    params: IsaParams = IsaParams(),
    units: Sequence[Unit] = GEMMINI_UNITS,
) -> Schedule:
    """Validate ``trace`` against ``params`` and list-schedule it on Gemmini's units.

    ``latencies`` overrides entries of `DEFAULT_LATENCIES` (a `Latency`, or an int number of
    cycles); ``units`` must contain every unit named in `UNIT_OF` and ``"control"``.
    """
    if not isinstance(trace, Trace):
        trace = Trace(trace)
    return schedule_ops(trace_ops(trace, latencies, params), units)


__all__ = [
    "DEFAULT_LATENCIES",
    "Dependence",
    "GEMMINI_UNITS",
    "Latency",
    "Op",
    "Schedule",
    "UNIT_OF",
    "Unit",
    "dependences",
    "schedule",
    "schedule_ops",
    "trace_ops",
    "unit_of",
]
