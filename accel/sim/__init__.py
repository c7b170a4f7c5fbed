"""accel.sim: a JAX simulator of Gemmini-like traces (functional + timing).

`run` executes a `Trace` on a DRAM image (`DramImage`, or a byte array) with Gemmini's
semantics and returns the final DRAM and the cycles of the timing model (`TimingTable`, one
table of constants); `run_batch` vmaps several traces. Modules: `decode` (trace -> arrays,
checks; its stages in `decode_config`, `decode_moves`, `decode_execute`), `functional` and `timing` (the scan step), `engine` (compilation and runs), `cisc`
(``loop_ws`` expansion), `pe_array` (the cycle-level array that checks the fast path),
`programs` and `reference` (hand-written traces and numpy answers), `rtl` (validation against
Gemmini RTL measurements), `hazards` (the orderings the chip enforces, and a trace's races:
`find_races`), `accounting` (the words each memory reads, updates and fills as a trace runs:
`trace_accesses`).

>>> import numpy as np
>>> from accel.arch import HardwareConfig
>>> from accel.isa import Instruction, LocalAddr
>>> from accel.trace import Trace
>>> image = DramImage()
>>> a = image.add("A", np.eye(16, dtype=np.int8))
>>> c = image.reserve("C", (16, 16), np.int8)
>>> trace = Trace([
...     Instruction.config_ld(16), Instruction.mvin(a, 0, 16, 16),
...     Instruction.preload(0, LocalAddr.accumulator(0), 16, 16, 16, 16),
...     Instruction.compute_preloaded(0, LocalAddr.garbage(), 16, 16, 16, 16),
...     Instruction.config_st(16), Instruction.mvout(c, LocalAddr.accumulator(0), 16, 16)])
>>> result = run(trace, HardwareConfig.preset("gemmini_default"), image)
>>> bool((result.read("C") == np.eye(16)).all()), result.cycles > 0
(True, True)
"""

from accel.sim.accounting import MemoryLevels, gemmini_levels, trace_accesses
from accel.sim.decode import NORM_STAT_IDS, DecodedTrace, decode
from accel.sim.engine import CHUNK, SimResult, preferred_batch, run, run_batch
from accel.sim.hazards import Race, RaceReport, find_races
from accel.sim.memory import DramImage
from accel.sim.reference import conv_acc, gemm_acc, igelu, requantize, softmax_rows
from accel.sim.rtl import (
    RtlModel,
    RtlRow,
    metrics,
    parse_row,
    prepare_rows,
    read_rtl_csv,
    simulate_rows,
    validate_rtl_sim,
)
from accel.sim.state import SimState
from accel.sim.timing import TimingTable

__all__ = [
    "CHUNK",
    "NORM_STAT_IDS",
    "DecodedTrace",
    "DramImage",
    "MemoryLevels",
    "Race",
    "RaceReport",
    "RtlModel",
    "RtlRow",
    "SimResult",
    "SimState",
    "TimingTable",
    "conv_acc",
    "decode",
    "find_races",
    "gemm_acc",
    "gemmini_levels",
    "igelu",
    "metrics",
    "parse_row",
    "preferred_batch",
    "prepare_rows",
    "read_rtl_csv",
    "requantize",
    "run",
    "run_batch",
    "simulate_rows",
    "softmax_rows",
    "trace_accesses",
    "validate_rtl_sim",
]
