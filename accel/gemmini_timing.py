"""Gemmini's timing figures, each with where it comes from: the one copy of them.

The simulator's `accel.sim.TimingTable` takes its defaults from here, and a template's
expressions name them (`TEMPLATE_NAMES`, by the table's field names), so the instruction-aware
model's costs in ``templates/gemmini.yaml`` are written in the simulator's constants. Sources:
Gemmini ``GemminiConfigs.defaultConfig`` (``Configs.scala``) and the reference notes
dosa-gemmini-isa.md §B.5, unless said otherwise.
"""

from __future__ import annotations

# Reservation-station entries per queue: reservation_station_entries_{ld,ex,st}.
RS_ENTRIES_LOAD = 8
RS_ENTRIES_EXECUTE = 16
RS_ENTRIES_STORE = 4

DRAM_LATENCY_CYCLES = 40
"""Round trip of a DMA request through the system bus to the shared L2 and back, in accelerator
cycles (an L2 hit on a Chipyard SoC; the chip's programs were measured at 20, 40 and 80). The
one constant fitted to measurements: a grid over {30, 40, 60} on the training split of DOSA's
FireSim rows (`accel.sim.rtl`); 30-60 change the rank correlation by under 0.005."""

ROUND_TRIP_EXTRA_CYCLES = 11
"""What a request's round trip adds to the memory's latency (the TileLink path and the
transaction tracker): the chip's 512-request mvin probes at latency 40 and 80 (1.6 and 2.85
cycles per request at 32 in flight); a grid of 10-14 on the shared programs is flat."""

DMA_WRITE_EXTRA_CYCLES = 7
"""A write request is out until its acknowledgement: the same round trip plus this (the chip's
mvout probes: ~1.7 cycles per 16-byte write at 32 in flight and latency 40)."""

MVIN_WRITE_CYCLES = 4
"""Scratchpad write after an mvin's last beat arrives: mvin_scale_args latency = 4."""

MVOUT_READ_CYCLES = 10
"""Accumulator read + scaling pipeline before an mvout's data reaches the DMA:
acc_scale_args latency = 8 (plus the 2-cycle accumulator read, acc_latency)."""

SPAD_WRITE_CYCLES = 1
"""mvout_spad (baco extension, no Gemmini measurement): after the scaling pipeline, a row is
written to a scratchpad bank in one cycle (a SyncReadMem write port)."""

# Execute pipeline around the mesh: scratchpad read (spad_read_delay) before the first row
# enters, accumulator read-modify-write (acc_latency) after the last row leaves.
SPAD_READ_CYCLES = 4
ACC_WRITE_CYCLES = 2

MIN_COMPUTE_ROWS = 4
"""ExecuteController floors total_rows at 4 ("two writes to the same accumulator address must
occur at least 4 cycles apart")."""

MESH_MATMULS = 6
"""Matmuls in the mesh at once: MeshWithDelays' tag queue holds max_simultaneous_matmuls + 1 =
5 x latency per PE (1 with tile_latency 0) + 1 = 6 (MeshWithDelays.scala ~48-56); a compute
waits for a free entry (io.req.ready, ~248) and holds it until its last row leaves the array,
so computes much shorter than the array's fill are throttled."""

TEMPLATE_NAMES: dict[str, int] = {
    "rs_entries_load": RS_ENTRIES_LOAD,
    "rs_entries_execute": RS_ENTRIES_EXECUTE,
    "rs_entries_store": RS_ENTRIES_STORE,
    "dram_latency_cycles": DRAM_LATENCY_CYCLES,
    "dma_round_trip_extra_cycles": ROUND_TRIP_EXTRA_CYCLES,
    "dma_write_extra_cycles": DMA_WRITE_EXTRA_CYCLES,
    "mvin_write_cycles": MVIN_WRITE_CYCLES,
    "mvout_read_cycles": MVOUT_READ_CYCLES,
    "spad_write_cycles": SPAD_WRITE_CYCLES,
    "spad_read_cycles": SPAD_READ_CYCLES,
    "acc_write_cycles": ACC_WRITE_CYCLES,
    "min_compute_rows": MIN_COMPUTE_ROWS,
    "mesh_matmuls": MESH_MATMULS,
}
"""The figures a template expression may name, under `accel.sim.TimingTable`'s field names."""

__all__ = [
    "ACC_WRITE_CYCLES",
    "DMA_WRITE_EXTRA_CYCLES",
    "DRAM_LATENCY_CYCLES",
    "MESH_MATMULS",
    "MIN_COMPUTE_ROWS",
    "MVIN_WRITE_CYCLES",
    "MVOUT_READ_CYCLES",
    "ROUND_TRIP_EXTRA_CYCLES",
    "RS_ENTRIES_EXECUTE",
    "RS_ENTRIES_LOAD",
    "RS_ENTRIES_STORE",
    "SPAD_READ_CYCLES",
    "SPAD_WRITE_CYCLES",
    "TEMPLATE_NAMES",
]
