"""accel.sim, timing side: dependences, queues, bandwidth, latency, overlap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import Instruction, IsaParams, LocalAddr
from accel.sim import DramImage, TimingTable, decode, programs, run, timing
from accel.trace import Trace
from workloads.errors import ConfigError

HW = HardwareConfig.preset("gemmini_default")
G = LocalAddr.garbage()
ACC = LocalAddr.accumulator


def _two_tiles(second_rows: int):
    """Load tile 0, compute on it; load tile 1 into ``second_rows``, compute on it."""
    image = DramImage()
    a0 = image.add("A0", np.ones((16, 16), np.int8))
    a1 = image.add("A1", np.ones((16, 16), np.int8))
    w = image.add("W", np.ones((16, 16), np.int8))
    trace = Trace([
        Instruction.config_ld(16), Instruction.config_ld(16, id=1),
        Instruction.mvin2(w, 1000, 16, 16),
        Instruction.mvin(a0, 0, 16, 16),
        Instruction.preload(1000, ACC(0), 16, 16, 16, 16),
        Instruction.compute_preloaded(0, G, 16, 16, 16, 16),
        Instruction.mvin(a1, second_rows, 16, 16),
        Instruction.preload(G, ACC(16), 16, 16, 16, 16),
        Instruction.compute_accumulated(second_rows, G, 16, 16, 16, 16),
        Instruction.fence()])
    return trace, image


def test_double_buffering_overlap_emerges_from_dependences():
    single, image = _two_tiles(0)  # tile 1 overwrites the rows tile 0's compute reads
    double, _ = _two_tiles(64)  # tile 1 goes to other rows
    r1, r2 = run(single, HW, image), run(double, HW, image)
    mvin1, comp0 = 6, 5
    # WAR: the single-buffered load waits until the compute that reads its rows completed.
    assert r1.start_cycles[mvin1] >= r1.end_cycles[comp0]
    assert r2.start_cycles[mvin1] < r2.end_cycles[comp0]
    assert r2.cycles < r1.cycles


def test_raw_dependences_order_load_compute_store():
    rng = np.random.default_rng(0)
    prog = programs.gemm_ws(rng.integers(-9, 9, (32, 32)).astype(np.int8),
                            rng.integers(-9, 9, (32, 32)).astype(np.int8))
    result = run(prog.trace, HW, prog.image)
    mnem = [ins.mnemonic for ins in prog.trace]
    first_compute = mnem.index("compute_preloaded")
    first_mvout = mnem.index("mvout")
    loads_before = [i for i in range(first_compute) if mnem[i].startswith("mvin")]
    # The first compute reads what the first mvins wrote; the first mvout what computes wrote.
    assert result.start_cycles[first_compute] >= max(result.end_cycles[i] for i in loads_before)
    decoded = decode(prog.trace, IsaParams.from_hardware(HW), prog.image.size_bytes)
    lo = int(decoded.column("local")[first_mvout])
    hi = lo + 16 * int(decoded.column("nblocks")[first_mvout])
    c_rows = decoded.column("c")
    writers = [i for i in range(first_mvout) if mnem[i].startswith("compute")
               and lo <= c_rows[i] < hi]
    assert writers and result.start_cycles[first_mvout] >= max(
        result.end_cycles[i] for i in writers)
    assert result.cycles == int(result.end_cycles.max())


def test_cycles_bounded_by_the_busiest_unit_and_busy_cycles_add_up():
    rng = np.random.default_rng(1)
    prog = programs.gemm_ws(rng.integers(-9, 9, (64, 80)).astype(np.int8),
                            rng.integers(-9, 9, (80, 48)).astype(np.int8), tiles=(2, 3, 2))
    table = TimingTable()
    result = run(prog.trace, HW, prog.image, timing_table=table)
    decoded = decode(prog.trace, IsaParams.from_hardware(HW), prog.image.size_bytes)
    cost = timing.costs(decoded, table, HW)
    unit = decoded.column("unit")
    for k, name in enumerate(("load", "execute", "store")):
        assert result.busy_cycles[name] == int(cost[unit == k, timing.CCOL["occ"]].sum())
    assert result.cycles >= timing.lower_bound_cycles(decoded, table, HW)
    assert all(0 < u <= 1 for u in result.utilization().values())
    assert np.all(result.end_cycles >= result.start_cycles)


def test_fence_waits_for_everything_before_it():
    trace, image = _two_tiles(64)
    result = run(trace, HW, image)
    fence = len(trace) - 1
    assert result.start_cycles[fence] >= result.end_cycles[:fence].max()


def test_functional_and_timing_only_runs_agree():
    trace, image = _two_tiles(64)
    a = run(trace, HW, image)
    b = run(trace, HW, None, functional=False)
    np.testing.assert_array_equal(a.start_cycles, b.start_cycles)
    assert a.cycles == b.cycles and b.dram is None


def _load_bound_program():
    rng = np.random.default_rng(2)
    return programs.gemm_ws(rng.integers(-9, 9, (16, 512)).astype(np.int8),
                            rng.integers(-9, 9, (512, 16)).astype(np.int8))


def test_memory_parameters_move_cycles_the_right_way():
    prog = _load_bound_program()
    base = run(prog.trace, HW, prog.image).cycles
    slow_dram = run(prog.trace, HW, prog.image,
                    timing_table=TimingTable(dram_latency_cycles=400)).cycles
    narrow = run(prog.trace, dataclasses.replace(HW, dram_bw_words=2.0), prog.image).cycles
    wide_hw = dataclasses.replace(HW, dram_bw_words=64.0)
    wide = run(prog.trace, wide_hw, prog.image).cycles
    fixed_bus = run(prog.trace, wide_hw, prog.image,
                    timing_table=TimingTable(dma_bus_bytes_per_cycle=16)).cycles
    few_inflight = run(prog.trace, HW, prog.image,
                       timing_table=TimingTable(max_inflight_requests=2)).cycles
    assert slow_dram > base and narrow > base and few_inflight > base
    assert wide < base          # the DMA bus is built as wide as the DRAM bandwidth
    assert wide <= fixed_bus    # a fixed 16-byte bus caps what a wider DRAM can give


def test_a_smaller_reservation_station_never_helps():
    prog = _load_bound_program()
    base = run(prog.trace, HW, prog.image).cycles
    small = run(prog.trace, HW, prog.image, timing_table=TimingTable(
        rs_entries_load=1, rs_entries_execute=2, rs_entries_store=1)).cycles
    assert small >= base


def _mul_pre_occupancy(weights_row: int) -> list[int]:
    trace = Trace([Instruction.preload(weights_row, ACC(0), 16, 16, 16, 16),
                   Instruction.compute_preloaded(0, G, 16, 16, 16, 16),
                   Instruction.preload(weights_row, ACC(16), 16, 16, 16, 16),
                   Instruction.compute_preloaded(0, G, 16, 16, 16, 16)])
    cost = timing.costs(decode(trace, IsaParams.from_hardware(HW), None), TimingTable(), HW)
    return cost[:, timing.CCOL["occ"]].tolist()


def test_preload_after_compute_overlaps_it_unless_they_share_a_bank():
    # A real preload right after a compute hides behind it (Gemmini's mul_pre) when the
    # compute's A and the weights sit in different scratchpad banks (4096 rows each here) ...
    assert _mul_pre_occupancy(4096) == [16, 16, 0, 16]
    # ... and the two take turns on one bank's read port when they share it.
    assert _mul_pre_occupancy(16) == [16, 16, 16, 16]


def test_dma_requests_follow_the_chips_packets():
    addr = np.array([0, 48, 0, 8, 40, 25, 57, 100])
    nbytes = np.array([16, 16, 64, 64, 64, 16, 16, 3])
    reqs, beats = timing.dma_packets(addr, nbytes, 16, 64)
    # an aligned line; a lone line; an aligned 64-byte row; the same row 8 bytes off (a 64-byte
    # block, then 8 bytes in one line); 40 off (24 bytes in a 32-byte block, then a 64-byte
    # one); 16 bytes that straddle a line inside one 64-byte block (one request of four
    # beats); the same across a 64-byte boundary (two of a line each); 3 bytes (a line)
    assert reqs.tolist() == [1, 1, 1, 2, 2, 1, 2, 1]
    assert beats.tolist() == [1, 1, 4, 5, 6, 4, 2, 1]


def test_the_in_flight_limit_is_a_window_not_a_rate():
    """A short burst goes out one request a cycle and lands a round trip later; a long
    stream settles at the in-flight limit's rate (the chip's probes: 76 / 116 cycles for one
    16-row mvin at latency 40 / 80, 818 / 1458 for 32 of them)."""
    table = TimingTable(dram_latency_cycles=80, max_inflight_requests=32,
                        dma_bus_bytes_per_cycle=16)
    hw = dataclasses.replace(HW, dram_bw_words=16.0)
    round_trip = table.dram_latency_cycles + table.dma_round_trip_extra_cycles
    one = run(_contiguous_loads(1), hw, functional=False, timing_table=table)
    assert one.cycles <= 16 + round_trip + table.mvin_write_cycles + 4
    many = run(_contiguous_loads(32), hw, functional=False, timing_table=table)
    rate = 512 * round_trip / 32
    assert rate <= many.cycles <= rate + round_trip + 16


def _contiguous_loads(n: int) -> Trace:
    return Trace([Instruction.config_ld(16)]
                 + [Instruction.mvin(4096 + 256 * i, 16 * i, 16, 16) for i in range(n)]
                 + [Instruction.fence()])


def _small_loads(n: int) -> Trace:
    return Trace([Instruction.config_ld(16)] + [Instruction.mvin(64 * i, 16 * i, 2, 16)
                                                for i in range(n)] + [Instruction.fence()])


def test_a_controller_keeps_few_moves_outstanding():
    trace = _small_loads(12)
    slow = TimingTable(dram_latency_cycles=200, max_inflight_requests=16)   # 2 moves out
    fast = TimingTable(dram_latency_cycles=200, max_inflight_requests=48)   # 4 moves out
    r2 = run(trace, HW, functional=False, timing_table=slow)
    r4 = run(trace, HW, functional=False, timing_table=fast)
    assert r4.cycles < r2.cycles
    mvins = range(1, 13)
    starts, ends = r2.start_cycles, r2.end_cycles
    for k in list(mvins)[2:]:
        assert starts[k] >= ends[k - 2]   # the third waits for the first to complete


def test_an_mvout_retires_before_its_writes_are_acknowledged():
    trace = Trace([Instruction.config_st(16), Instruction.mvout(0, ACC(0), 16, 16),
                   Instruction.fence()])
    res = run(trace, HW, functional=False)
    table = TimingTable()
    assert res.cycles - res.end_cycles[1] >= table.dram_latency_cycles


def test_timing_table_validation_and_overrides():
    with pytest.raises(ConfigError):
        TimingTable(rs_entries_load=0)
    with pytest.raises(ConfigError):
        TimingTable.from_dict({"dram_latency": 5})
    table = TimingTable.from_dict({"dram_latency_cycles": 4})
    assert table.dram_latency_cycles == 4 and table.request_interval_cycles(HW) == 1.0
    # The generator's DMA for the design's DRAM bandwidth: a 128-bit bus and 32 requests at 8
    # bytes/cycle (16-byte rows at 51 cycles a round trip); a 512-bit bus at 64, with a round
    # trip's worth of requests (one a cycle), 64.
    wide = dataclasses.replace(HW, dram_bw_words=64.0)
    assert (TimingTable().bus_bytes(HW), TimingTable().inflight_requests(HW)) == (16, 32)
    assert (TimingTable().bus_bytes(wide), TimingTable().inflight_requests(wide)) == (64, 64)
    assert table.bytes_per_cycle(HW) == 8.0  # the preset's 8 words/cycle, under the 16-B bus


def test_array_macs_count_every_compute():
    rng = np.random.default_rng(3)
    prog = programs.gemm_ws(rng.integers(-9, 9, (16, 32)).astype(np.int8),
                            rng.integers(-9, 9, (32, 16)).astype(np.int8))
    result = run(prog.trace, HW, prog.image)
    assert result.macs == result.array_macs == prog.macs  # whole blocks: no padding here
    odd = programs.gemm_ws(rng.integers(-9, 9, (20, 21)).astype(np.int8),
                           rng.integers(-9, 9, (21, 7)).astype(np.int8))
    result = run(odd.trace, HW, odd.image)
    assert result.macs == odd.macs == 20 * 21 * 7
    assert result.array_macs == (16 + 4) * 2 * 16 * 16  # rows fed x DIM x DIM per compute
