"""List scheduling: seed 004's worked example, Gemmini traces, and property tests."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.isa import Instruction, IsaParams, LocalAddr
from accel.schedule import (
    GEMMINI_UNITS,
    Latency,
    Op,
    Unit,
    schedule,
    schedule_ops,
    trace_ops,
)
from accel.trace import Region, Trace
from workloads.errors import ConfigError, TraceError

# ---------------------------------------------------------------------------------------------
# Seed 004 (RISC-V CIM compiler thesis, §5.3.2): two units, add = 2 cycles, others 1.

SEED_004_LATENCY_CYCLES = {"add": 2, "other": 1}  # the example's table, in one place
SEED_004_CODE = [  # (text, reads, writes)
    ("a = 1", (), ("a",)),
    ("f = a + x", ("a", "x"), ("f",)),
    ("b = 7", (), ("b",)),
    ("c = 9", (), ("c",)),
    ("g = f + d", ("f", "d"), ("g",)),
    ("d = 13", (), ("d",)),
    ("e = 19", (), ("e",)),
    ("h = f + c", ("f", "c"), ("h",)),
    ("j = d + y", ("d", "y"), ("j",)),
    ("z = -1", (), ("z",)),
]


def seed_004_ops():
    ops = [
        Op(text, "alu", SEED_004_LATENCY_CYCLES["add" if "+" in text else "other"],
           reads=tuple(map(Region.cell, reads)), writes=tuple(map(Region.cell, writes)))
        for text, reads, writes in SEED_004_CODE
    ]
    # r10 `JMP L1` ends the basic block: it issues after every other instruction.
    ops.append(Op("JMP L1", "alu", SEED_004_LATENCY_CYCLES["other"], after=tuple(range(10))))
    return ops


# Two units that each start one instruction per cycle (a 2-issue pipelined CPU).
SEED_004_MACHINE = (Unit("alu", slots=2, in_order=False, pipelined=True),)


def test_seed_004_example_reaches_its_optimal_7_cycles():
    result = schedule_ops(seed_004_ops(), SEED_004_MACHINE)
    assert result.makespan_cycles == 7
    # 7 is optimal: it equals the critical path a=1 -> f=a+x -> g=f+d -WAR-> d=13 -> j=d+y.
    assert result.critical_path_cycles == 7
    data_edges = {(e.src, e.dst, e.kind, e.space) for e in result.edges if e.kind != "order"}
    assert data_edges == {(0, 1, "raw", "a"), (1, 4, "raw", "f"), (1, 7, "raw", "f"),
                          (3, 7, "raw", "c"), (5, 8, "raw", "d"), (4, 5, "war", "d")}
    cycles = {}
    for i, s in enumerate(result.start_cycles.tolist()):
        cycles.setdefault(s + 1, []).append(i)
    # The schedule the reference derives by hand (cycle: instructions issued).
    assert cycles == {1: [0, 3], 2: [1, 2], 3: [6, 9], 4: [4, 7], 5: [5], 6: [8], 7: [10]}
    assert result.priority_cycles.tolist()[:2] == [7, 6]  # r0, r1 lead the critical path


def test_seed_004_is_8_cycles_if_units_are_not_pipelined():
    """The 7 relies on two-cycle adds not blocking their unit: with blocking units the best
    list schedule (and, by exhaustion below, any schedule) needs 8."""
    blocking = (Unit("alu", slots=2, in_order=False, pipelined=False),)
    result = schedule_ops(seed_004_ops(), blocking)
    assert result.makespan_cycles == 8
    assert brute_force_makespan(seed_004_ops(), slots=2, horizon=8) == 8


def brute_force_makespan(ops, slots, horizon):
    """Smallest makespan over all start-cycle assignments (non-pipelined units, tiny cases)."""
    probe = schedule_ops(ops, (Unit("alu", slots=slots, in_order=False, pipelined=False),))
    edges = [(e.src, e.dst, e.delay_cycles) for e in probe.edges]
    lat = [op.latency_cycles for op in ops]
    best = None

    def place(i, starts, usage):
        nonlocal best
        if i == len(ops):
            span = max(s + d for s, d in zip(starts, lat))
            best = span if best is None else min(best, span)
            return
        low = max([starts[a] + d for a, b, d in edges if b == i] + [0])
        for s in range(low, horizon - lat[i] + 1):
            cells = range(s, s + lat[i])
            if any(usage[c] >= slots for c in cells):
                continue
            if best is not None and s + lat[i] >= best:
                break
            for c in cells:
                usage[c] += 1
            place(i + 1, starts + [s], usage)
            for c in cells:
                usage[c] -= 1

    place(0, [], [0] * horizon)
    return best


# ---------------------------------------------------------------------------------------------
# Gemmini traces.

G = LocalAddr.garbage()


def ws_tile(a_sp, b_sp, c_acc, dram_a, dram_b, dram_c):
    """One 16x16x16 weight-stationary tile in the shape of sp_tiled_matmul_ws (§B.6)."""
    return [
        Instruction.mvin(dram_a, a_sp, 16, 16),
        Instruction.mvin2(dram_b, b_sp, 16, 16),
        Instruction.preload(b_sp, LocalAddr.accumulator(c_acc), 16, 16, 16, 16),
        Instruction.compute_preloaded(a_sp, G, 16, 16, 16, 16),
        Instruction.mvout(dram_c, LocalAddr.accumulator(c_acc), 16, 16),
    ]


CONFIGS = [
    Instruction.config_ex("ws"),
    Instruction.config_ld(16, id=0),
    Instruction.config_ld(16, id=1),
    Instruction.config_st(16),
]


def test_one_ws_tile_runs_load_compute_store_in_dependence_order():
    trace = Trace(CONFIGS + ws_tile(0, 0x100, 0, 0x1000, 0x2000, 0x3000) + [
        Instruction.fence()])
    result = schedule(trace)
    units = [op.unit for op in result.ops]
    assert units == ["execute", "load", "load", "store", "load", "load", "execute", "execute",
                     "store", "control"]
    s, e = result.start_cycles.tolist(), result.end_cycles.tolist()
    mvin_a, mvin_b, pre, comp, mvout, fence = range(4, 10)
    assert s[pre] >= e[mvin_b]  # preload reads B's rows
    assert s[comp] >= max(e[mvin_a], e[pre])  # compute reads A's rows and the array
    assert s[mvout] >= e[comp]  # C is written by the compute
    assert s[fence] >= max(e[:fence])
    assert result.makespan_cycles == e[fence]
    kinds = {(e_.src, e_.dst): e_.kind for e_ in result.edges}
    assert kinds[(mvin_b, pre)] == "raw" and kinds[(comp, mvout)] == "raw"
    assert kinds[(1, mvin_a)] == "raw"  # config_ld id 0 -> mvin


def test_two_tiles_overlap_like_double_buffering():
    trace = Trace(CONFIGS + ws_tile(0, 0x100, 0, 0x1000, 0x2000, 0x3000)
                  + ws_tile(0x200, 0x300, 16, 0x4000, 0x5000, 0x6000))
    result = schedule(trace)
    s, e = result.start_cycles.tolist(), result.end_cycles.tolist()
    first_compute, second_mvin = 7, 9
    assert s[second_mvin] < e[first_compute]  # loads of tile 2 run under compute of tile 1
    serial = sum(op.latency_cycles for op in result.ops)
    assert result.critical_path_cycles <= result.makespan_cycles < serial


def test_reusing_a_buffer_waits_for_its_readers():
    # Tile 2 loads into tile 1's A rows: the mvin must wait for tile 1's compute (WAR).
    trace = Trace(CONFIGS + ws_tile(0, 0x100, 0, 0x1000, 0x2000, 0x3000)
                  + ws_tile(0, 0x300, 16, 0x4000, 0x5000, 0x6000))
    result = schedule(trace)
    s, e = result.start_cycles.tolist(), result.end_cycles.tolist()
    assert {(x.src, x.dst, x.kind) for x in result.edges} >= {(7, 9, "war")}
    assert s[9] >= e[7]  # the array reads A for its whole latency


def test_config_ex_and_stores_are_ordered_as_in_the_reservation_station():
    trace = Trace([
        Instruction.config_st(16),
        Instruction.mvout(0x100, LocalAddr.accumulator(0), 16, 16),
        Instruction.config_ex("os"),
        Instruction.mvout(0x200, LocalAddr.accumulator(16), 16, 16),
    ])
    result = schedule(trace)
    s, e = result.start_cycles.tolist(), result.end_cycles.tolist()
    assert s[2] >= e[1]  # a config_ex waits for earlier stores
    assert s[3] >= e[2]  # a store waits for an earlier config_ex


def test_in_order_units_issue_in_program_order():
    # The second mvin is independent and short, but the load queue is in order.
    trace = Trace([Instruction.mvin(0, 0, 16, 64), Instruction.mvin(0x4000, 0x1000, 1, 16)])
    result = schedule(trace)
    assert result.start_cycles.tolist() == [0, 64]
    free = schedule(trace, units=(Unit("load", slots=2), *GEMMINI_UNITS[1:]))
    assert free.start_cycles.tolist() == [0, 0]


def test_latency_table_overrides_and_errors():
    trace = Trace([Instruction.mvin(0, 0, 16, 16), Instruction.mvout(0x100, 0, 16, 16)])
    assert schedule(trace).makespan_cycles == 32
    slow = schedule(trace, latencies={"mvin": Latency(100, 1), "mvout": 5})
    assert slow.end_cycles.tolist() == [116, 121]
    with pytest.raises(ConfigError, match="unknown mnemonic"):
        schedule(trace, latencies={"mvinn": 3})
    with pytest.raises(ConfigError, match="positive"):
        schedule(trace, latencies={"mvin": 0})
    with pytest.raises(ConfigError, match="not in the machine"):
        schedule(trace, units=(Unit("load"),))


def test_schedule_rejects_an_out_of_range_trace():
    trace = Trace([Instruction.fence(), Instruction.mvin(0, 16380, 16, 16)])
    with pytest.raises(TraceError) as err:
        schedule(trace)
    assert (err.value.index, err.value.field) == (1, "sp")
    schedule(trace, params=IsaParams(sp_rows=1 << 15))  # fine on a bigger scratchpad


def test_gantt_listing():
    result = schedule_ops(seed_004_ops(), SEED_004_MACHINE)
    text = result.to_text()
    assert "makespan 7 cycles" in text and "critical path 7 cycles" in text
    assert "unit alu" in text and "slots 2" in text
    lines = text.splitlines()
    rows = [line for line in lines if line.rstrip().endswith(("= 1", "JMP L1"))]
    assert rows[0].split()[:4] == ["0", "alu", "0", "1"] and "|=      |" in rows[0]
    assert rows[-1].split()[:4] == ["10", "alu", "6", "7"] and "|      =|" in rows[-1]
    big = schedule(Trace([Instruction.mvin(0, 16 * n, 16, 64) for n in range(40)]))
    assert all(len(line.split("|")[1]) == 64 for line in big.to_text().splitlines()
               if line.count("|") == 2)


# ---------------------------------------------------------------------------------------------
# Properties: an independent checker.


def required_delays(ops, units):
    """Every pairwise constraint, from scratch: (i, j) -> the least start_j - start_i."""
    unit = {u.name: u for u in units}
    lat = [op.latency_cycles for op in ops]
    read = [1 if unit[op.unit].pipelined else op.latency_cycles for op in ops]
    need = {}
    for j, i in itertools.combinations(range(len(ops)), 2):
        i, j = min(i, j), max(i, j)
        a, b = ops[i], ops[j]
        delays = []
        if any(r.overlaps(w) for r in b.reads for w in a.writes):
            delays.append(lat[i])  # RAW
        if any(w.overlaps(w2) for w in b.writes for w2 in a.writes):
            delays.append(lat[i])  # WAW
        if any(w.overlaps(r) for w in b.writes for r in a.reads):
            delays.append(read[i])  # WAR
        if i in b.after:
            delays.append(1)
        if a.barrier or b.barrier:
            delays.append(lat[i])
        if delays:
            need[(i, j)] = max(delays)
    return need


def check_schedule(result, ops, units):
    unit = {u.name: u for u in units}
    s, e = result.start_cycles.tolist(), result.end_cycles.tolist()
    lat = [op.latency_cycles for op in ops]
    assert all(e[i] == s[i] + lat[i] and s[i] >= 0 for i in range(len(ops)))
    need = required_delays(ops, units)
    for (i, j), delay in need.items():
        assert s[j] >= s[i] + delay, (i, j, delay)
    for u in units:
        mine = [i for i, op in enumerate(ops) if op.unit == u.name]
        held = [(s[i], s[i] + (1 if u.pipelined else lat[i])) for i in mine]
        for t0, _ in held:
            assert sum(a <= t0 < b for a, b in held) <= u.slots  # unit exclusivity
        if u.in_order:
            assert [s[i] for i in mine] == sorted(s[i] for i in mine)
    # List scheduling never idles: from the cycle an op's inputs allow it to start until it
    # does, its unit is full or (in order) an older op has not issued; and a free slot goes
    # to the highest priority (longest remaining path, recomputed here) first.
    n = len(ops)
    priority = list(lat)
    for (i, j), delay in sorted(need.items(), key=lambda kv: -kv[0][0]):
        priority[i] = max(priority[i], delay + priority[j])
    assert result.priority_cycles.tolist() == priority
    for j in range(n):
        u = unit[ops[j].unit]
        ready = max([s[i] + d for (i, jj), d in need.items() if jj == j] + [0])
        same = [i for i in range(n) if ops[i].unit == u.name and i != j]
        for t in range(ready, s[j]):
            full = sum(s[i] <= t < s[i] + (1 if u.pipelined else lat[i]) for i in same)
            waits_for_older = u.in_order and any(s[i] > t for i in same if i < j)
            assert full == u.slots or waits_for_older, (j, t)
        if not u.in_order:
            for k in same:
                if s[k] == s[j] or ready <= s[k] < s[j]:
                    assert (priority[k], -k) > (priority[j], -j) or s[k] >= s[j], (k, j)
    # The critical path, recomputed from all pairwise constraints.
    earliest = [0] * len(ops)
    for (i, j), delay in sorted(need.items(), key=lambda kv: kv[0][1]):
        earliest[j] = max(earliest[j], earliest[i] + delay)
    critical = max((earliest[i] + lat[i] for i in range(len(ops))), default=0)
    assert result.critical_path_cycles == critical
    assert critical <= result.makespan_cycles <= sum(lat)
    assert result.makespan_cycles == max(e, default=0)


regions = st.one_of(
    st.integers(0, 5).map(lambda r: Region.cell(f"r{r}")),
    st.tuples(st.integers(0, 40), st.integers(0, 12)).map(
        lambda t: Region("mem", t[0], t[0] + t[1])),
)


@st.composite
def machines_and_ops(draw):
    units = tuple(
        Unit(f"u{k}", slots=draw(st.integers(1, 3)), in_order=draw(st.booleans()),
             pipelined=draw(st.booleans()))
        for k in range(draw(st.integers(1, 3)))
    )
    ops = []
    for i in range(draw(st.integers(0, 18))):
        ops.append(Op(
            name=f"op{i}",
            unit=draw(st.sampled_from([u.name for u in units])),
            latency_cycles=draw(st.integers(1, 6)),
            reads=tuple(draw(st.lists(regions, max_size=3))),
            writes=tuple(draw(st.lists(regions, max_size=2))),
            barrier=draw(st.sampled_from([False] * 12 + [True])),
            after=tuple(draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True)))
            if i else (),
        ))
    return units, ops


@settings(max_examples=300, deadline=None)
@given(machines_and_ops())
def test_any_schedule_respects_dependences_units_and_bounds(machine):
    units, ops = machine
    check_schedule(schedule_ops(ops, units), ops, units)


@st.composite
def gemmini_traces(draw):
    """Small random traces over a few overlapping rows and DRAM bytes."""
    sp = st.integers(0, 48)
    acc = st.builds(LocalAddr.accumulator, st.integers(0, 48), accumulate=st.booleans(),
                    full=st.booleans())
    local = st.one_of(sp.map(LocalAddr.sp), acc)
    dram = st.integers(0, 512)
    small = st.integers(1, 16)
    makers = [
        st.builds(lambda d, a, r, c: Instruction.mvin(d, a, r, c), dram, sp, small,
                  st.integers(1, 64)),
        st.builds(lambda d, a, r, c: Instruction.mvin2(d, a, r, c), dram, local, small, small),
        st.builds(lambda d, a, r, c: Instruction.mvin3(d, a, r, c), dram, acc, small, small),
        st.builds(lambda d, a, r, c: Instruction.mvout(d, a, r, c), dram, local, small, small),
        st.builds(lambda b, c, r: Instruction.preload(b, c, r, 16, r, 16),
                  st.one_of(local, st.just(G)), st.one_of(acc, st.just(G)), small),
        st.builds(lambda a, r: Instruction.compute_preloaded(a, G, r, 16, 16, 16), local, small),
        st.builds(lambda a, r: Instruction.compute_accumulated(a, G, r, 16, 16, 16), sp, small),
        st.builds(lambda a, c, t: Instruction.config_ex("ws", a_stride=a, c_stride=c,
                                                        a_transpose=t),
                  st.integers(1, 2), st.integers(0, 2), st.booleans()),
        st.builds(lambda s, b, i, k: Instruction.config_ld(s, block_stride=b, id=i, shrunk=k),
                  st.integers(0, 96), st.integers(0, 32), st.integers(0, 2), st.booleans()),
        st.builds(lambda s: Instruction.config_st(s), st.integers(0, 96)),
        st.just(Instruction.fence()),
        st.just(Instruction.flush()),
    ]
    return Trace(draw(st.lists(st.one_of(makers), max_size=24)))


@settings(max_examples=200, deadline=None)
@given(gemmini_traces())
def test_gemmini_schedules_respect_every_conflict(trace):
    params = IsaParams()
    result = schedule(trace, params=params)
    ops = trace_ops(trace, params=params)
    assert [op.latency_cycles for op in result.ops] == [op.latency_cycles for op in ops]
    check_schedule(result, ops, GEMMINI_UNITS)
