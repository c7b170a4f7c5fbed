"""Check the simulator's cycles against Gemmini RTL measurements (DOSA's FireSim data).

Each row of ``gemmini_rtl_train.csv`` (format: ``data/README.md``) is a layer
(``prob.*``), a Timeloop mapping (``mapping.mapping``) and the cycles Gemmini took to run it
(``target.gemmini_cycle``). `validate_rtl_sim` lowers every row with `accel.lower.lower`, runs
the timing model only (no data), and compares.

The chips. The ``arch.*`` columns describe the 128x128 Timeloop model the mappings were drawn
for, not the RTL builds. DOSA's collection script (``ucb-bar/gemmini-rocc-tests``, branch
``dosa``, ``gemmini-data-collection/gemmini_data_collection.py`` ``per_pe_dim``) sorted each
mapping to the smallest array of ``PE_DIMS`` that holds its C fan-out (below the accumulator)
and K fan-out (below the scratchpad), dropping a mapping whose narrower fan-out fits half
that array while it also has a temporal loop; its FireSim deploy script
(``charleshong3/firesim-dosa`` ``deploy/gemmini.py``) runs group ``i`` on the build
``firesim_rocket_singlecore_{i}pe4kdummygemmini_nofirstlayer...``. All 1,567 rows pass that
filter, where 83% of the 10,000 Timeloop rows would not, so each row is simulated on an
``i`` x ``i`` array (`generator_pe_dim`). The builds are Gemmini's ``dummyConfig`` (memories
that hold no data, so they can be made large, "4k" read as 4096 KiB), without first-layer
optimizations. Buffer sizes enter the timing model only through the scratchpad's banks; the
chip gets room for every row's tiles (`LOWERING_ROOM` times the row's buffers, or a hardware
preset's: ``parse_row(..., hardware=)``, as ``baco validate rtl --hardware gemmini_default``
does), and a row whose tiles outgrow even that runs on `DOSA_CHIP_BUFFER_KB`, as it did there.
A row that cannot be lowered at all ends the run, or, with ``prepare_rows(..., failures={})``,
is recorded and predicted as NaN.

The software. The collection's templates (``conv_tilings.c``, ``matmul_tilings.c``) passed
each row to that branch's ``tiled_conv`` / ``tiled_matmul`` (``include/gemmini.h``), with
tiles from ``layers/extract_data_csv.py``:

* convolutions: the image is square, of side ``P * stride``, with "same" padding
  (``R // 2``), so the output side is ``(P * stride + 2 * (R // 2) - R) // stride + 1``
  (`generator_extents`); the per-call tile is the accumulator level's factors, spatial ones
  included, with the scratchpad level's K fan-out and the register level's P and Q
  (`generator_tile`). ``tiled_conv`` walks the image tile by tile in the DRAM loop order, one
  ``loop_conv_ws`` (LoopConv FSM) call per tile, edge tiles cut to what is left. The published
  header steps the K and C loops by the *spatial* factors while keeping the full tile
  (overlapping calls), but the measurements fit plain tile steps far better, so the rows were
  evidently run by an earlier version: we step by tiles;
* GEMMs (rows with ``Q = R = S = 1``: ``I = P``, ``K = C``, ``J = K``): ``tiled_matmul``
  walks ``I``, ``J``, ``K`` in tiles of ``max(1, tile >> 4)`` array blocks (the template
  divides by 16 whatever the array) of ``pe_dim`` = the build's array each, one ``loop_ws``
  (LoopMatmul FSM) call per tile, edge tiles cut (`generator_matmul_tile`).

Each distinct call tile (one, or a few when tiles do not divide the extents) is lowered in the
loop FSMs' loop order (`_call_program`: weights outside, the tile's rows streaming under each
weight block), its commands issued as the FSMs' arbiter issues them (`fsm_order`, one per
cycle), and simulated alone (``c1``) and followed by the same call in the other half of the
memories (``c2``: the FSMs keep two loops in flight, `other_loop`, with no fence between);
every further call costs ``max(c2 - c1, host)``, with ``host`` the software's cycles per call
(`RtlModel`).

Global constants fitted on the training split (rows whose index is not a multiple of 5; the
held-out split is reported separately): the DMA round trip and requests in flight
(`TimingTable`) and the software's cycles per call (`RtlModel`), on a grid; the results move
little across the grid.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.dosa_csv import PE_DIMS, generator_pe_dim, integer, number, read_csv
from accel.isa import GARBAGE_ADDR, Funct, IsaParams
from accel.mapping import Mapping
from accel.sim.decode import Unit, decode
from accel.sim.engine import preferred_batch, run_batch
from accel.sim.timing import N_UNITS, TimingTable, access_runs
from workloads.errors import BacoError, ConfigError, InfeasibleError
from workloads.layer import DIMS, Layer

_R, _S, _P, _Q, _C, _K, _N = range(7)
REG, ACC, SP, DRAM = range(4)
RTL_DIM = 16
REQUIRED = ("mapping.mapping", "target.gemmini_cycle", "prob.R", "prob.S", "prob.P", "prob.Q",
            "prob.C", "prob.K", "prob.N")


@dataclasses.dataclass(frozen=True)
class RtlRow:
    """One RTL measurement: the layer, the mapping as written in the CSV, the cycles measured,
    and the scratchpad / accumulator KiB of the row's architecture columns."""

    index: int
    layer: Layer
    mapping: Mapping
    cycles: float
    sp_kb: float
    acc_kb: float


def parse_row(row: dict[str, str], index: int, source: str = "csv",
              hardware: HardwareConfig | None = None) -> RtlRow:
    """One CSV row. Timeloop pairs P with ``Wstride`` ((P-1)*Wstride + R), `Layer` pairs P
    with ``Hstride``, so the CSV's W stride becomes the layer's H stride. With `hardware`, the
    buffers are that configuration's and the row's ``arch.*`` columns are not read."""
    where = f"{source} row {index + 2}"

    def positive(key: str, default: float | None = None) -> float:
        return number(row, key, where, default, positive=True)

    dims = {d: integer(row, f"prob.{d}", where) for d in DIMS}
    hstride = integer(row, "prob.Wstride", where, 1)
    wstride = integer(row, "prob.Hstride", where, 1)
    hdil = integer(row, "prob.Wdilation", where, 1)
    wdil = integer(row, "prob.Hdilation", where, 1)
    if dims["R"] == dims["S"] == dims["Q"] == 1:
        layer = Layer.gemm(M=dims["P"], K_red=dims["C"], N_out=dims["K"], batch=dims["N"],
                           name=where)
    else:
        pads = (dims["R"] // 2, dims["S"] // 2, dims["R"] // 2, dims["S"] // 2)
        layer = Layer.conv2d(**dims, Hstride=hstride, Wstride=wstride, Hdilation=hdil,
                             Wdilation=wdil, pads=pads, name=where)
    mapping = Mapping.from_timeloop(row.get("mapping.mapping", ""), stages=2)
    if hardware is not None:
        return RtlRow(index, layer, mapping, positive("target.gemmini_cycle"),
                      float(hardware.sp_kb), float(hardware.acc_kb))
    sp_kb = (positive("arch.mem2_depth", 8192.0)
             * positive("arch.mem2_width", 128.0)
             * positive("arch.mem2_instances", 1.0) / 8 / 1024)
    acc_kb = (positive("arch.mem1_depth", 1024.0)
              * positive("arch.mem1_width", 32.0)
              * positive("arch.mem1_instances", 16.0) / 8 / 1024)
    return RtlRow(index, layer, mapping, positive("target.gemmini_cycle"), sp_kb,
                  acc_kb)


def read_rtl_csv(path: str | pathlib.Path, limit: int | None = None,
                 hardware: HardwareConfig | None = None) -> list[RtlRow]:
    """Rows of a DOSA RTL CSV (``target.gemmini_cycle`` and the Timeloop columns); with
    `hardware`, every row gets its buffers (`parse_row`)."""
    return [parse_row(row, i, str(path), hardware) for i, row in read_csv(path, REQUIRED, limit)]


# ---------------------------------------------------------------------------------------------
# The program the chip ran.


def rtl_chip(sp_kb: float = 1024.0, acc_kb: float = 1024.0, dim: int = RTL_DIM
             ) -> HardwareConfig:
    """The Gemmini the rows ran on (see the module docstring): a ``dim`` x ``dim`` array, the
    rows' buffers, and the DMA bus as the DRAM bandwidth (16 bytes per cycle)."""
    return HardwareConfig(pe_rows=dim, pe_cols=dim, sp_kb=sp_kb, acc_kb=acc_kb,
                          dram_bw_words=16.0, name="gemmini_rtl")


# ---------------------------------------------------------------------------------------------
# Rows as simulation jobs.


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """How one row is simulated, on a ``dim``-wide array: each of ``problems`` is the on-chip
    program of one distinct kernel call (``software`` ``"conv"``: a LoopConv call of
    ``tiled_conv``; ``"matmul"``: a LoopMatmul call of ``tiled_matmul``), run ``counts[i]``
    times; the first is the walk's first call, every dim's full tile. Each is simulated alone
    (``c1``) and twice back to back (``c2``); the software issues the next call while one runs,
    so a call costs ``steady = max(c2 - c1, host)`` in the stream, with ``host`` the software's
    cycles per call, and the row ``c1[0] + host + sum(counts * steady) - steady[0]``."""

    problems: tuple[tuple[Layer, Mapping], ...]
    counts: tuple[int, ...]
    dim: int = RTL_DIM
    software: str = "conv"

    @property
    def calls(self) -> int:
        return sum(self.counts)

    @property
    def simulations(self) -> int:
        """How many simulated cycle counts `combine` takes."""
        return 2 * len(self.problems)

    def combine(self, cycles: Sequence[float], host_call_cycles: float = 0.0) -> float:
        c1 = [float(c) for c in cycles[0::2]]
        steady = [max(float(b) - a, host_call_cycles) for a, b in zip(c1, cycles[1::2])]
        return (c1[0] + host_call_cycles - steady[0]
                + sum(n * c for n, c in zip(self.counts, steady)))


def _split(extent: int, dim: int) -> tuple[int, int]:
    """``extent`` as spatial x temporal with the spatial part at most ``dim``."""
    spatial = max(x for x in range(1, min(extent, dim) + 1) if extent % x == 0)
    return spatial, extent // spatial


def generator_tile(mapping: Mapping) -> np.ndarray:
    """The per-call tile DOSA's script (``layers/extract_data_csv.py``) passed to
    ``tiled_conv`` / ``tiled_matmul`` for a mapping: the accumulator level's factors, spatial
    ones included, times the scratchpad level's K fan-out and the register level's P and Q.
    (Counting L0's P and Q twice, as this module once did, fits the measurements worse:
    conv rows Spearman 0.922 against 0.942.)"""
    t, s = mapping.temporal, mapping.spatial
    tile = (t[ACC] * s[ACC]).astype(np.int64)
    tile[_K] *= s[SP, _K]
    tile[_P] *= t[REG, _P]
    tile[_Q] *= t[REG, _Q]
    return tile


def generator_extents(layer: Layer) -> np.ndarray:
    """The loop limits ``tiled_conv`` ran over: the generator built a square image of side
    ``P * stride`` with "same" padding (``R // 2``), so the output side is
    ``(P * stride + 2 * (R // 2) - R) // stride + 1`` (one more than P for even kernels)."""
    stride = layer.Hstride
    side = (layer.P * stride + 2 * (layer.R // 2) - layer.R) // stride + 1
    extents = np.array([getattr(layer, d) for d in DIMS], np.int64)
    extents[_P] = extents[_Q] = side
    return extents


def _call_shapes(extents: np.ndarray, tile: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """The distinct call tiles of a tiled loop nest and how many calls have each: every dim
    runs full tiles and, when the tile does not divide it, one remainder. The first is the
    walk's first call (every dim's full tile)."""
    per_dim = []
    for total, step in zip(extents.tolist(), tile.tolist()):
        step = min(step, total)
        sizes = [(step, total // step)]
        if total % step:
            sizes.append((total % step, 1))
        per_dim.append(sizes)
    shapes = []
    for combo in itertools.product(*per_dim):
        shapes.append((np.array([size for size, _ in combo], np.int64),
                       math.prod(count for _, count in combo)))
    return shapes


def _call_program(shape: np.ndarray, like: Mapping, dim: int) -> Mapping:
    """One LoopConv or LoopMatmul call on a tile, in the FSMs' loop order: channel blocks of
    at most ``dim`` on the array (the chip runs DIM-wide blocks whatever the mapping's spatial
    factors), then under each weight block the kernel window, the batch and the tile's output
    rows (Q) at the accumulator level and its output columns (P, the script's ``OCOLS``; a
    GEMM's rows) at the register level: a LoopConv compute streams at most the columns left in
    one output row (``LoopConv.scala`` ~656, ``I = min(ocols - ocol, DIM)``), never across
    rows. (Columns and rows the other way round fit the measurements worse: Spearman 0.967
    against 0.971 over the rows, MAPE 32% against 30%.)"""
    temporal = np.ones((4, len(DIMS)), np.int64)
    spatial = np.ones((4, len(DIMS)), np.int64)
    temporal[REG, _P], temporal[ACC, _Q] = shape[_P], shape[_Q]
    for d in (_N, _R, _S):
        temporal[ACC, d] = shape[d]
    spatial[ACC, _C], temporal[ACC, _C] = _split(int(shape[_C]), dim)
    spatial[SP, _K], temporal[ACC, _K] = _split(int(shape[_K]), dim)
    order = like.order.copy()
    order[ACC] = [_K, _R, _S, _C, _N, _P, _Q]
    order[REG] = [d for d in range(len(DIMS)) if d not in (_P, _Q)] + [_P, _Q]
    return Mapping(temporal=temporal, spatial=spatial, order=order, stages=like.stages,
                   tags=like.tags)


def generator_matmul_tile(mapping: Mapping, dim: int) -> np.ndarray:
    """The per-call tile of DOSA's ``tiled_matmul`` on a ``dim``-wide array: the script's tile
    (`generator_tile`: I = P, K = C, J = K) in ``max(1, tile >> 4)`` array blocks
    (``matmul_tilings.c`` divides by 16 whatever the array), each block ``dim`` wide
    (``tiled_matmul_outer`` steps by ``tile * pe_dim``)."""
    script = generator_tile(mapping)
    tile = np.ones(len(DIMS), np.int64)
    for d in (_P, _C, _K):
        tile[d] = max(1, int(script[d]) >> 4) * dim
    return tile


def plan_row(layer: Layer, mapping: Mapping, dim: int | None = None) -> RowPlan:
    """What the generator ran for one row (see the module docstring) as simulation problems:
    one per distinct kernel call, on the row's build (`generator_pe_dim` unless ``dim``)."""
    dim = dim or generator_pe_dim(mapping)
    matmul = layer.kind in ("gemm", "gemv")
    if matmul:
        # The generator multiplied I = P, K = C, J = K; the batch is not a loop of its own.
        extents = np.array([1, 1, layer.P, 1, layer.C, layer.K, 1], np.int64)
        tile = generator_matmul_tile(mapping, dim)
    else:
        extents, tile = generator_extents(layer), generator_tile(mapping)
    problems, counts = [], []
    for shape, count in _call_shapes(extents, tile):
        sub = dataclasses.replace(layer, **{d: int(shape[i]) for i, d in enumerate(DIMS)},
                                  pads=(0, 0, 0, 0))
        problems.append((sub, _call_program(shape, mapping, dim)))
        counts.append(count)
    return RowPlan(tuple(problems), tuple(counts), dim, "matmul" if matmul else "conv")


# ---------------------------------------------------------------------------------------------
# Simulation and metrics.


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    values = x[order]
    start = 0
    for i in range(1, len(x) + 1):  # ties share their average rank
        if i == len(x) or values[i] != values[start]:
            ranks[order[start:i]] = (start + i - 1) / 2.0
            start = i
    return ranks


def metrics(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Pearson (linear and log-log), Spearman and mean absolute percentage error (fraction)."""
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if len(p) < 2:
        raise ConfigError("metrics need at least two rows")
    return {
        "rows": len(p),
        "pearson": float(np.corrcoef(p, m)[0, 1]),
        "pearson_log": float(np.corrcoef(np.log(p), np.log(m))[0, 1]),
        "spearman": float(np.corrcoef(_ranks(p), _ranks(m))[0, 1]),
        "mape": float(np.mean(np.abs(p - m) / m)),
    }


@dataclasses.dataclass(frozen=True)
class RtlModel:
    """The simulator's timing constants plus the software's cycles per kernel call
    (``host_call_cycles`` for ``tiled_conv``, ``host_matmul_call_cycles`` for
    ``tiled_matmul``): the C loop's tile bookkeeping and the configuration commands that
    precede each LoopConv / LoopMatmul command on an in-order Rocket."""

    # DOSA's FireSim chips: a grid over max_inflight_requests {16, 32} x dram_latency_cycles
    # {20, 40} x host_call_cycles {100, 150, 250, 400} x host_matmul_call_cycles
    # {60, 100, 130} on the training split picks 32, 20, 250 and 130 (Spearman 0.971, MAPE
    # 29%; with 16 and 20: 0.968, 41%; 32 and 40: 0.970, 37%). A matmul call's 130 is also what
    # the rows of many tiny calls measure (4x4x4 calls on the 4x4 build: 131 cycles each).
    # The builds themselves have defaultConfig's 16 requests in flight and a 128-bit bus
    # (DOSA's Gemmini fork, charleshong3/gemmini-dosa ``Configs.scala`` ``dummyConfig``) behind
    # an L2, a 4 MB LLC model and DDR3 FR-FCFS timing (FireSim ``DDR3FRFCFSLLC4MB``,
    # charleshong3/firesim-dosa ``config_build_recipes.yaml``), which the simulator does not
    # model: 32 and 20 stand in for that memory system (16 and 20: MAPE 41%; a latency by
    # working set, L2-sized or larger, moves Spearman by at most 0.002).
    timing: TimingTable = dataclasses.field(default_factory=lambda: TimingTable(
        max_inflight_requests=32, dram_latency_cycles=20))
    host_call_cycles: int = 250
    host_matmul_call_cycles: int = 130

    def host_cycles(self, software: str) -> int:
        return self.host_matmul_call_cycles if software == "matmul" else self.host_call_cycles


LOWERING_ROOM = 4
"""The lowering pads tiles to DIM-wide rows and double-buffers them, so it gets this many times
the row's (or the chosen hardware's) buffer sizes. A row that does not fit even then runs on
the buffers of the chip DOSA measured (`DOSA_CHIP_BUFFER_KB`)."""

DOSA_CHIP_BUFFER_KB = 4096.0
"""The buffers of the chips DOSA's rows ran on: FireSim builds
``firesim_rocket_singlecore_{i}pe4kdummygemmini_nofirstlayer_no_nic_l2_llc4mb_ddr3``
(charleshong3/firesim-dosa, ``deploy/built-hwdb-entries``, ``deploy/gemmini.py``), Gemminis of
dummy element types (Gemmini's ``Configs.scala`` ``dummyConfig``: memories that hold no data,
so they can be made large), "4k" read as 4096 KiB, without first-layer optimizations. So a
row whose tiles outgrow the hardware named for validation (``--hardware gemmini_default``) was
still run as its mapping says; it is simulated on these buffers instead of skipped."""


_LOCAL_ADDRESSES = (  # (rs field, the functs whose low 32 bits of it are a local address)
    (1, (Funct.PRELOAD, Funct.COMPUTE_PRELOADED, Funct.COMPUTE_ACCUMULATED)),
    (2, (Funct.MVIN, Funct.MVIN2, Funct.MVIN3, Funct.MVOUT, Funct.PRELOAD,
         Funct.COMPUTE_PRELOADED, Funct.COMPUTE_ACCUMULATED)),
)


def other_loop(arrays: tuple[np.ndarray, ...], sp_rows: int, acc_rows: int
               ) -> tuple[np.ndarray, ...]:
    """A call's trace as the loop FSM's other concurrent loop runs it: LoopConv and LoopMatmul
    keep two loops in flight, loop ``i`` in rows ``[i * max / 2, (i + 1) * max / 2)`` of the
    scratchpad and the accumulator (``LoopMatmul.scala`` ~1296, ``concurrent_loops = 2``), so
    the next call's loads overlap this one's computes. Every local address but the garbage one
    moves up by ``sp_rows`` or ``acc_rows``."""
    funct = np.asarray(arrays[0])
    out = [np.asarray(a, np.uint64).copy() for a in arrays]
    for field, functs in _LOCAL_ADDRESSES:
        local = out[field] & np.uint64(0xFFFFFFFF)
        live = np.isin(funct, [int(f) for f in functs]) & (local != np.uint64(GARBAGE_ADDR))
        shift = np.where(local >> np.uint64(31) & np.uint64(1), np.uint64(acc_rows),
                         np.uint64(sp_rows))
        out[field] = np.where(live, out[field] + shift, out[field])
    return tuple(out[i].astype(np.asarray(arrays[i]).dtype) for i in range(len(arrays)))


_FSM_PRIORITY = {Unit.STORE: 0, Unit.EXECUTE: 1, Unit.LOAD: 2}


def fsm_order(arrays: tuple[np.ndarray, ...], hw: HardwareConfig) -> tuple[np.ndarray, ...]:
    """A call's commands in the order its loop FSM issues them. LoopConv and LoopMatmul run
    their loads, computes and stores as separate sub-FSMs whose commands an arbiter merges,
    stores first, then computes, then loads (``LoopConv.scala`` ~1220 ``arb``, LoopMatmul
    alike), each throttled only by its reservation-station queue; the station orders a compute
    after the loads of the rows it reads. So each command goes out as soon as its queue's
    previous command and every older command of another queue that touches one of its rows
    (read after write, write after read or write) have: here, the stable order of that
    dependence depth, ties broken by the arbiter's priority. The lowering writes a call's
    loads before its computes; issued in that order, the reservation station's queues would
    keep every compute behind every load."""
    decoded = decode(arrays, IsaParams.from_hardware(hw), None)
    if not np.array_equal(decoded.origin, np.arange(len(arrays[0]))):
        return arrays  # a trace with loop commands: the FSMs' own order already
    reads, writes = access_runs(decoded)
    unit = decoded.column("unit")
    rows = decoded.shape.sp_rows + decoded.shape.acc_rows + 1
    last_write = np.full((N_UNITS, rows), -1, np.int64)
    last_read = np.full((N_UNITS, rows), -1, np.int64)
    queue_depth = np.full(N_UNITS, -1, np.int64)
    floor = -1
    depth = np.zeros(len(unit), np.int64)

    def rows_of(runs: np.ndarray) -> np.ndarray:
        live = runs[:, 1] > 0
        return np.concatenate([r + np.arange(c) * st for r, c, st in runs[live]]
                              or [np.zeros(0, np.int64)]).astype(np.int64)

    for i, u in enumerate(unit.tolist()):
        if u >= N_UNITS:  # a fence: everything before, nothing after
            depth[i] = floor = max(floor, int(queue_depth.max())) + 1
            continue
        r, w = rows_of(reads[i]), rows_of(writes[i])
        other = np.arange(N_UNITS) != u
        after = max(floor, int(queue_depth[u]))
        if len(r):
            after = max(after, int(last_write[:, r][other].max()))
        if len(w):
            after = max(after, int(last_write[:, w][other].max()),
                        int(last_read[:, w][other].max()))
        depth[i] = queue_depth[u] = after + 1
        last_read[u, r] = np.maximum(last_read[u, r], depth[i])
        last_write[u, w] = np.maximum(last_write[u, w], depth[i])
    priority = np.full(len(unit), len(_FSM_PRIORITY))
    for queue, rank in _FSM_PRIORITY.items():
        priority[unit == queue] = rank
    order = np.lexsort((np.arange(len(unit)), priority, depth))
    return tuple(np.asarray(a)[order] for a in arrays)


def simulate_rows(rows: Sequence[RtlRow], model: RtlModel | None = None, *,
                  batch: int | None = None, dim: int | None = None, progress: Any = None,
                  failures: dict[int, Exception] | None = None) -> np.ndarray:
    """Predicted cycles of each row (timing only), in row order, each on the build it ran on
    (`generator_pe_dim`) unless ``dim`` names one array for all. With `failures` (a dict),
    a row that cannot be lowered is recorded there (row position -> the error) and predicted
    as NaN instead of ending the run (`prepare_rows`)."""
    jobs, plans = prepare_rows(rows, dim=dim, progress=progress, failures=failures)
    return run_jobs(jobs, plans, model, batch=batch, progress=progress)


def prepare_rows(rows: Sequence[RtlRow], *, dim: int | None = None, progress: Any = None,
                 failures: dict[int, Exception] | None = None
                 ) -> tuple[list, list[RowPlan | None]]:
    """Lower every row's problems once: ``(jobs, plans)`` for `run_jobs` (so the timing
    constants can be swept without lowering again). A job is ``(row position, problem
    position, hardware, trace arrays)``.

    A row whose program does not fit the chip (`LOWERING_ROOM` times its buffers) raises a
    `ConfigError` naming it; with `failures` (a dict) it is recorded there instead (position
    -> the `InfeasibleError`, or whatever `BacoError` its planning or lowering raised), its
    plan is None and it has no jobs."""
    from accel.lower import lower

    def lowered(pos: int, plan: RowPlan, hw: HardwareConfig) -> list:
        # A call is lowered into one loop's half of the memories and simulated alone, and
        # with the same call in the other half after it (`other_loop`).
        half = dataclasses.replace(hw, sp_kb=hw.sp_kb / 2, acc_kb=hw.acc_kb / 2)
        params = IsaParams.from_hardware(half)
        row_jobs = []
        for k, (layer, mapping) in enumerate(plan.problems):
            # The FireSim builds were generated without first-layer optimizations
            # ("nofirstlayer", `DOSA_CHIP_BUFFER_KB`): no pixel repeats.
            arrays = fsm_order(lower(layer, mapping, half, check=False,
                                     first_layer=False).trace.as_arrays(), half)
            second = other_loop(arrays, params.sp_rows, params.acc_rows)
            # The software fences once, after its last call.
            unfenced = np.asarray(arrays[0]) != int(Funct.FENCE)
            row_jobs.append((pos, 2 * k, hw, arrays))
            row_jobs.append((pos, 2 * k + 1, hw, tuple(np.concatenate([a[unfenced], b])
                                                       for a, b in zip(arrays, second))))
        return row_jobs

    jobs, plans = [], []
    for pos, row in enumerate(rows):
        try:
            plan = plan_row(row.layer, row.mapping, dim)
            try:
                row_jobs = lowered(pos, plan, rtl_chip(LOWERING_ROOM * row.sp_kb,
                                                       LOWERING_ROOM * row.acc_kb, plan.dim))
            except InfeasibleError:
                row_jobs = lowered(pos, plan, rtl_chip(
                    max(DOSA_CHIP_BUFFER_KB, LOWERING_ROOM * row.sp_kb),
                    max(DOSA_CHIP_BUFFER_KB, LOWERING_ROOM * row.acc_kb), plan.dim))
        except BacoError as exc:
            if failures is None:
                if isinstance(exc, InfeasibleError):
                    raise ConfigError(f"{row.layer.name}: the program does not fit the chip: "
                                      f"{exc}") from None
                raise
            failures[pos] = exc
            plan, row_jobs = None, []
        plans.append(plan)
        jobs.extend(row_jobs)
        if progress is not None:
            progress(pos + 1, len(rows), "lowered")
    return jobs, plans


def run_jobs(jobs: list, plans: Sequence[RowPlan | None], model: RtlModel | None = None, *,
             batch: int | None = None, progress: Any = None) -> np.ndarray:
    """Simulate prepared jobs (timing only, batched per hardware: `preferred_batch` unless
    `batch` says) and combine per row."""
    model = model or RtlModel()
    batch = batch or preferred_batch()
    groups: dict[HardwareConfig, list] = {}
    for job in jobs:
        groups.setdefault(job[2], []).append(job)
    cycles: dict[tuple[int, int], int] = {}
    done = 0
    for hw, group in groups.items():
        group.sort(key=lambda job: len(job[3][0]))
        for start in range(0, len(group), batch):
            part = group[start:start + batch]
            results = run_batch([job[3] for job in part], hw, functional=False,
                                timing_table=model.timing)
            for job, res in zip(part, results):
                cycles[(job[0], job[1])] = res.cycles
            done += len(part)
            if progress is not None:
                progress(done, len(jobs), "simulated")
    out = []
    for pos, plan in enumerate(plans):
        if plan is None:  # a row `prepare_rows` could not lower
            out.append(float("nan"))
            continue
        out.append(plan.combine([cycles[(pos, k)] for k in range(plan.simulations)],
                                model.host_cycles(plan.software)))
    return np.array(out, np.float64)


def validate_rtl_sim(path: str | pathlib.Path, *, limit: int | None = None,
                     model: RtlModel | None = None, held_out_every: int = 5,
                     progress: Any = None) -> dict[str, Any]:
    """Simulated vs RTL cycles over a DOSA RTL CSV.

    Returns ``{"rows", "pearson", "pearson_log", "spearman", "mape"}`` over all rows, plus the
    same over the held-out split (every ``held_out_every``-th row, ``"held_out"``) and the rest
    (``"train"``), and the timing constants used.
    """
    rows = read_rtl_csv(path, limit=limit)
    model = model or RtlModel()
    predicted = simulate_rows(rows, model, progress=progress)
    measured = np.array([r.cycles for r in rows])
    out: dict[str, Any] = metrics(predicted, measured)
    held = np.array([r.index % held_out_every == 0 for r in rows])
    if held.sum() >= 2 and (~held).sum() >= 2:
        out["held_out"] = metrics(predicted[held], measured[held])
        out["train"] = metrics(predicted[~held], measured[~held])
    out["model"] = {**dataclasses.asdict(model.timing),
                    "host_call_cycles": model.host_call_cycles,
                    "host_matmul_call_cycles": model.host_matmul_call_cycles}
    return out


__all__ = [
    "DOSA_CHIP_BUFFER_KB",
    "LOWERING_ROOM",
    "PE_DIMS",
    "RTL_DIM",
    "RowPlan",
    "RtlModel",
    "RtlRow",
    "fsm_order",
    "generator_extents",
    "generator_matmul_tile",
    "generator_pe_dim",
    "generator_tile",
    "metrics",
    "other_loop",
    "parse_row",
    "plan_row",
    "prepare_rows",
    "read_rtl_csv",
    "rtl_chip",
    "run_jobs",
    "simulate_rows",
    "validate_rtl_sim",
]
