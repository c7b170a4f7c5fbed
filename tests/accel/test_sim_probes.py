"""The simulator against the chip's single-kind probes (``data/gemmini_rtl_probes.csv``): moves
of every size at three memory latencies, and weight loads beside computes, each within 10% of
the cycles the verilated Gemmini took. The probes' traces are not in the file; they are built
here from each probe's description (16-byte bus, 32 requests in flight, inputs and weights in
scratchpad bank 0 as a small hand-written test puts them)."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from accel.arch import HardwareConfig
from accel.dosa_csv import DATA_DIR
from accel.isa import Instruction, LocalAddr
from accel.sim import TimingTable, run
from accel.trace import Trace

HW = dataclasses.replace(HardwareConfig.preset("gemmini_default"), dram_bw_words=16.0)
ACC = LocalAddr.accumulator
MEASURED = {(row["probe"], int(row["latency"])): int(row["rtl_cycles"])
            for row in csv.DictReader(open(DATA_DIR / "gemmini_rtl_probes.csv", newline=""))}


def _mvins(n, rows, cols, stride, sp_step=16):
    return ([Instruction.config_ld(stride)]
            + [Instruction.mvin(0x10000 + i * rows * stride, i * sp_step, rows, cols)
               for i in range(n)])


def _mvouts(n, rows, cols):
    return ([Instruction.config_st(cols)]
            + [Instruction.mvout(0x10000 + i * rows * cols, ACC(16 * i), rows, cols)
               for i in range(n)])


def _weights_and_computes(weights, computes, rows):
    out = [Instruction.config_ex()]
    for w in range(weights):
        for c in range(computes):
            if c == 0:
                out += [Instruction.preload(256 + 16 * w, ACC(16 * c), 16, 16, rows, 16),
                        Instruction.compute_preloaded(16 * c, LocalAddr.garbage(), rows, 16,
                                                      16, 16)]
            else:
                out += [Instruction.preload(LocalAddr.garbage(), ACC(16 * c), 16, 16, rows,
                                            16),
                        Instruction.compute_accumulated(16 * c, LocalAddr.garbage(), rows, 16,
                                                        16, 16)]
    return out


PROBES = {
    "1 mvin 16x16 (16 B rows)": _mvins(1, 16, 16, 16),
    "1 mvin 16x64 (64 B rows)": _mvins(1, 16, 64, 64, 64),
    "8 mvin 16x64 (64 B rows)": _mvins(8, 16, 64, 64, 64),
    "32 mvin 16x16 (512 x 16 B requests)": _mvins(32, 16, 16, 16),
    "16 mvin 16x13 (13 B rows; stride 13: rows straddle 16 B lines)": _mvins(16, 16, 13, 13),
    "16 mvin 16x3 (3 B rows)": _mvins(16, 16, 3, 3),
    "1 mvout 16x16 acc->int8": _mvouts(1, 16, 16),
    "8 mvout 16x16 acc->int8": _mvouts(8, 16, 16),
    "32 mvout 16x16 acc->int8": _mvouts(32, 16, 16),
    "16 mvout 16x1 acc (1 B rows)": _mvouts(16, 16, 1),
    "1 preload + compute": _weights_and_computes(1, 1, 16),
    "16 W x 1 compute (16 rows)": _weights_and_computes(16, 1, 16),
    "64 x (preload new W + compute 4 rows)": _weights_and_computes(64, 1, 4),
    "16 W x 2 computes": _weights_and_computes(16, 2, 16),
    "16 W x 4 computes": _weights_and_computes(16, 4, 16),
    "16 W x 8 computes": _weights_and_computes(16, 8, 16),
}


@pytest.mark.parametrize("probe,latency", [key for key in MEASURED if key[0] in PROBES])
def test_the_simulator_meets_the_chips_probes(probe, latency):
    table = TimingTable(dram_latency_cycles=latency, dma_bus_bytes_per_cycle=16,
                        max_inflight_requests=32)
    cycles = run(Trace(PROBES[probe] + [Instruction.fence()]), HW, functional=False,
                 timing_table=table).cycles
    assert cycles == pytest.approx(MEASURED[(probe, latency)], rel=0.10)


def test_every_probe_built_here_was_measured():
    assert set(PROBES) <= {probe for probe, _ in MEASURED}
