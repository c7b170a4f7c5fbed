"""The three yardsticks of a design -- ``plain``, ``instruction_aware``, ``simulated`` -- and area.

A design (a `accel.design.Design`: hardware plus one `Mapping` per unique layer) is judged
three ways, each giving ``edp`` (cycles x pJ),
``latency_cycles`` and ``energy_pj`` of the whole network, with Eq. 6.9's convention
(`perfmodels.score.network_edp`): latency = sum over unique layers of count x cycles, energy =
sum of count x pJ, EDP = latency x energy. Each also splits ``energy_pj`` by event class
(``energy_pj_by_event``: useful and padded MACs, each level's accesses and idle energy; one
split, `perfmodels.energy.energy_by_event`, weighted by the same counts).

* ``plain``: the analytic model of the design as it is (`baco.rounding.common_score`,
  ``aware=False``; Timeloop-equivalent, what DOSA optimizes).
* ``instruction_aware``: the same model as DIM x DIM instructions run the design
  (`common_score`, ``aware=True``): array axes filled where the dims allow, padding counted,
  buffers grown or tiles shrunk to hold the padded rows, whichever scores better. Its
  ``hardware`` is the one it scored (``Score.design.hw``).
* ``simulated``: every unique layer lowered to a Gemmini trace (`accel.lower.lower`, with the
  epilogue ops the accelerator fuses, ``split_epilogue(layer.epilogue)[0]``, as
  `baco.simulate` does; the rest run on the host and are not counted) and timed on
  `accel.sim` (timing only: no data, same cycles as a functional run, whose timing half is
  the same scan step). Energy is the trace's accesses per memory times the template's energy
  per access, through the model's own formula (`perfmodels.energy.energy`, fed counts from
  the trace instead of the model's reuse analysis; see `accel.sim.trace_accesses`).

**What is simulated, on which hardware.** The design's *own* mappings (the programs its search
chose and ``baco simulate`` / ``--emit-kernels`` emit), not the instruction-aware scorer's
realization of them (which widens spatial factors or shrinks tiles: another program). Their
traces run on the design's PE array. The lowering stores every tile in DIM-wide rows
(padded channels included) and double-buffers as the mapping's stages say, which may need
more rows than the design's scratchpad or accumulator has (a design from a search that did
not count padding). Then the buffer is grown, to the next size the generator builds
(`accel.buildable`; in ``sram_step_kb`` steps on a template without its rules), to the largest
number of rows any layer's program allocates (`Allocation.sp_rows_used` /
``acc_rows_used``), like the instruction-aware scorer grows buffers for padded tiles: the
simulated figures are those of the hardware that can actually hold the lowered programs.
(A mapping that does not fit the design's hardware even by the model's footprint, or uses
more PEs than it has, is an error naming the layer.)
Buffer sizes do not change cycles in the timing model; they set the energy per access of the
scratchpad and accumulator and the area. ``simulated.hardware`` names that hardware and
``simulated.grown`` says whether it differs from the design's (on Gemmini also when the
design's own sizes were not buildable and were snapped up, the same for every contestant).

**Cache.** Simulating is the slow part, so each (layer, fused epilogue, mapping, design
hardware, timing table) is simulated once per process (`SimCache`; `Layer` equality ignores
the epilogue, so the fused ops are part of the key). What is cached does not depend on the
buffer growth above (cycles and access counts), so a hit is exact.

**Speed.** Timing only: the trace is decoded and scanned without data (same cycles as a
functional run). On a 2-core CPU a whole ResNet-50 design takes about 8-30 s cold
(``experiments/bench/simulate_design.py``: 2.2 M instructions for the Gemmini-default design,
about half lowering in Python, half the scan), and milliseconds warm. Traces run through
`accel.sim.run_batch`; on CPU, vmapping traces saves only a few percent per instruction
(measured: 8 equal traces 4%, 16 about 18%) while padding a batch to its longest trace costs
more for ResNet-50's spread of lengths, so there they run one by one (``batch=1``); on an
accelerator backend (``batch=16``) they run vmapped in groups of similar length
(`accel.sim.preferred_batch`).

>>> from accel.arch import HardwareConfig
>>> from accel.design import design_of
>>> from accel.mapping import Mapping
>>> from workloads.layer import Layer
>>> hw = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=4)
>>> layer = Layer.gemm(M=8, K_red=8, N_out=8)
>>> m = Mapping.from_timeloop("L3[WIO] K2 C2 - L2[WI] K4X - L1[O] C4X - L0[W] P8", stages=1)
>>> y = yardsticks([layer], [1], design_of(hw, [m]))
>>> [name for name in y.to_dict() if y.to_dict()[name] is not None][:4]
['plain', 'instruction_aware', 'simulated', 'area_mm2']
>>> y.simulated.latency_cycles == y.layers[0].cycles
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig, level_arrays, unit_area_mm2
from accel.buildable import grown_hardware
from accel.design import Design
from accel.isa import IsaParams
from accel.lower import Allocation, Lowered, gelu_on_chip, lower, padded_layer, split_epilogue
from accel.mapping import Mapping
from accel.sim import (
    CHUNK,
    MemoryLevels,
    TimingTable,
    gemmini_levels,
    preferred_batch,
    run_batch,
    trace_accesses,
)
from baco.errors import BacoError, ConfigError, InfeasibleError, ProgramTooLongError
from baco.profile import timed
from baco.rounding import common_score
from baco.sim_cache import DEFAULT_CACHE, SimCache
from perfmodels.accesses import Accesses
from perfmodels.aware import array_axes
from perfmodels.energy import Energy, area_mm2, energy, energy_by_event
from perfmodels.score import network_edp_exact, network_energy_by_event, network_totals
from workloads.layer import Layer

YARDSTICKS = ("plain", "instruction_aware", "simulated")


# --------------------------------------------------------------------------- results
@dataclasses.dataclass(frozen=True)
class Yardstick:
    """One yardstick's whole-network figures, on the hardware it scored."""

    edp: float
    latency_cycles: float
    energy_pj: float
    hardware: HardwareConfig
    area_mm2: float
    grown: bool = False
    energy_pj_by_event: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"edp": self.edp, "latency_cycles": self.latency_cycles,
                "energy_pj": self.energy_pj, "energy_pj_by_event": dict(self.energy_pj_by_event),
                "area_mm2": self.area_mm2, "grown": self.grown,
                "hardware": self.hardware.to_dict()}


@dataclasses.dataclass(frozen=True, eq=False)
class TraceCounts:
    """What one layer's lowered trace does, independent of buffer sizes (what is cached).

    ``reads``/``updates``/``fills``: words ``[level, tensor]`` in the template's layout
    (`accel.sim.trace_accesses`); ``macs``: useful MACs; ``array_macs``: what the DIM x DIM
    array spent (rows fed x DIM x DIM); ``sp_rows_used``/``acc_rows_used``: rows the program
    allocates.
    """

    cycles: int
    instructions: int
    macs: int
    array_macs: int
    reads: np.ndarray
    updates: np.ndarray
    fills: np.ndarray
    dram_read_bytes: int
    dram_write_bytes: int
    sp_rows_used: int
    acc_rows_used: int
    busy_cycles: dict[str, int]


@dataclasses.dataclass(frozen=True)
class SimulatedLayer:
    """One unique layer on the simulator: cycles and energy of one run, and its count."""

    index: int
    name: str
    count: float
    cycles: int
    energy_pj: float
    level_pj: tuple[float, ...]
    mac_pj: float
    pe_idle_pj: float
    instructions: int
    macs: int
    array_macs: int
    dram_read_bytes: int
    dram_write_bytes: int
    host_ops: tuple[str, ...]
    energy_pj_by_event: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["level_pj"] = list(self.level_pj)
        out["host_ops"] = list(self.host_ops)
        return out


@dataclasses.dataclass(frozen=True)
class Yardsticks:
    """A design's three yardsticks, the area of its own hardware, and the simulated layers.

    ``instruction_aware`` / ``simulated`` are None only when the template cannot be scored
    that way (no DIM x DIM array axes, no Gemmini simulator); ``unavailable`` says why.
    """

    plain: Yardstick
    instruction_aware: Yardstick | None
    simulated: Yardstick | None
    area_mm2: float
    layers: tuple[SimulatedLayer, ...] = ()
    unavailable: dict[str, str] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> Yardstick | None:
        if name not in YARDSTICKS:
            raise KeyError(name)
        return getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable: ``{"plain": {...}, "instruction_aware": {...}, "simulated":
        {...}, "area_mm2", "layers": [...], "unavailable": {...}}``."""
        out: dict[str, Any] = {}
        for name in YARDSTICKS:
            y = getattr(self, name)
            out[name] = None if y is None else y.to_dict()
        out["area_mm2"] = self.area_mm2
        out["layers"] = [x.to_dict() for x in self.layers]
        out["unavailable"] = dict(self.unavailable)
        return out


# --------------------------------------------------------------------------- cache
def cache_key(layer: Layer, mapping: Mapping, hw: HardwareConfig,
              timing_table: TimingTable | None = None) -> tuple:
    """The cache key of one simulated layer: the loop nest (`Layer` equality ignores name and
    epilogue), the fused epilogue ops, the mapping, the hardware and the timing constants."""
    fused, _ = split_epilogue(layer.epilogue)
    return (layer, fused, mapping, hw, timing_table or TimingTable())


MAX_INSTRUCTIONS = 4_000_000
"""The longest program of one layer the simulated yardstick builds: lowering is Python and
holds the program in memory (about 0.2 KB and 10 us per instruction; a 16x16 array runs
U-Net's 570x570 convolutions in tens of millions). Longer programs leave the simulated
yardstick unavailable, with the layer named, rather than the run out of memory."""


# --------------------------------------------------------------------------- what simulates
def simulation_unsupported(hw: HardwareConfig) -> str | None:
    """Why designs on `hw` cannot be simulated (None if they can)."""
    if hw.template != "gemmini":
        return (f"the simulator runs Gemmini's instruction set; template {hw.template!r} is "
                "another accelerator")
    try:
        gemmini_levels(hw.template_spec)
    except ConfigError as exc:
        return str(exc)
    if hw.pe_rows != hw.pe_cols:
        return (f"Gemmini traces need a square array; the hardware has {hw.pe_rows}x"
                f"{hw.pe_cols} PEs")
    return None


# --------------------------------------------------------------------------- energy and area
def trace_energy(counts: TraceCounts, hw: HardwareConfig) -> Energy:
    """Energy of one simulated layer on `hw`: `perfmodels.energy.energy` (MACs x EPA_PE + sum
    over levels of accesses x EPA, plus the levels' idle energy over the simulated cycles) on
    the trace's counts (`trace_accesses`)."""
    template = hw.template_spec
    zeros = np.zeros_like(counts.reads)
    acc = Accesses(macs=np.float64(counts.array_macs), tile_words=zeros, fills=counts.fills,
                   reads=counts.reads, updates=counts.updates,
                   log_refills=np.zeros(template.num_levels))
    out = energy(template, acc, level_arrays(template, hw.to_params(), np),
                 np.float64(counts.cycles), useful_macs=np.float64(counts.macs),
                 array_pes=np.float64(hw.pe_rows * hw.pe_cols))
    return Energy(*(np.asarray(x, np.float64) for x in out))


def units_area_mm2(hw: HardwareConfig, layers: Sequence[Layer], counts: Sequence[float],
                   fused: Sequence[Any] = ()) -> float:
    """The template's optional units a design runs `layers` with: the on-chip path when it
    fuses a chain (`baco.fusion.ChainGroup`), the normalizer when a fused chain applies a
    softmax, the I-GELU unit when a layer applies GELU on chip."""
    gelu = gelu_on_chip([x for x, c in zip(layers, counts) if c > 0])
    used = {"onchip_path": bool(fused), "normalizer": any(g.softmax for g in fused),
            "igelu_unit": gelu}
    return sum(unit_area_mm2(hw, unit) or 0.0 for unit, on in used.items() if on)


def hardware_area_mm2(hw: HardwareConfig) -> float:
    """The template's area model (`perfmodels.energy.area_mm2`, what the analytic model's
    ``Metrics.area_mm2`` reports) for `hw`."""
    hwp = hw.to_params()
    return float(area_mm2(hwp, level_arrays(hw.template_spec, hwp, np)))


# --------------------------------------------------------------------------- simulation
def _roomy(hw: HardwareConfig) -> HardwareConfig:
    """`hw` with buffers large enough for any tile, to size a program that does not fit."""
    return dataclasses.replace(hw, sp_kb=max(hw.sp_kb, 1 << 16), acc_kb=max(hw.acc_kb, 1 << 16))


def _grown(hw: HardwareConfig, sp_rows: int, acc_rows: int, step_kb: float
           ) -> HardwareConfig:
    """`hw` with the scratchpad / accumulator grown to hold the rows: to the next sizes the
    generator builds (`accel.buildable.grown_hardware`; on Gemmini also an unbuildable `hw`
    snapped up), or in `step_kb` steps on a template without rules."""
    dim = int(hw.pe_rows)
    need = {}
    for field, rows, bits in (("sp_kb", sp_rows, hw.input_bits), ("acc_kb", acc_rows,
                                                                   hw.acc_bits)):
        row_bytes = dim * max(1, int(bits) // 8)
        need[field] = rows * row_bytes / 1024.0
    out = grown_hardware(hw, step_kb, **need)
    for field, rows in (("sp_kb", sp_rows), ("acc_kb", acc_rows)):
        while IsaParams.from_hardware(out).rows_of(field[:-3]) < rows:   # floor in IsaParams
            out = grown_hardware(out, step_kb, **{field: getattr(out, field) + step_kb})
    return out


def _layer_label(index: int, layer: Layer) -> str:
    return f"layer {index} ({layer.name or layer.config_str()})"


def _lower(index: int, layer: Layer, mapping: Mapping, hw: HardwareConfig,
           max_instructions: int | None, step_kb: float) -> Lowered:
    """The layer's program on the design's buffers, or, when it needs more, on the buffers
    grown (in `step_kb` steps) to hold it: the lowering places tiles by the scratchpad's banks,
    so it lowers for the buffers the program then runs on."""
    fused, _ = split_epilogue(layer.epilogue)

    def on(target: HardwareConfig) -> Lowered:
        with timed("lowering"):
            return lower(layer, mapping, target, epilogue=fused, check=False,
                         max_instructions=max_instructions)

    try:
        mapping.validate(padded_layer(layer, mapping), hw)
        try:
            return on(hw)
        except InfeasibleError:
            need = on(_roomy(hw)).alloc
            return on(_grown(hw, need.sp_rows_used, need.acc_rows_used, step_kb))
    except BacoError as exc:
        raise type(exc)(f"simulated yardstick: {_layer_label(index, layer)} cannot be lowered "
                        f"on {hw.name or 'the design hardware'}: {exc}") from None


@dataclasses.dataclass(frozen=True, eq=False)
class _Job:
    """One lowered layer waiting for the simulator (the `Lowered` itself is dropped: its
    instruction objects take far more memory than the arrays)."""

    indices: tuple[int, ...]
    label: str
    arrays: Any
    alloc: Allocation
    macs: int
    hw: HardwareConfig          # the design's hardware, buffers grown if this program needs


def _prepare(indices: tuple[int, ...], layer: Layer, mapping: Mapping, hw: HardwareConfig,
             step_kb: float, max_instructions: int | None) -> _Job:
    low = _lower(indices[0], layer, mapping, hw, max_instructions, step_kb)
    alloc = low.alloc
    return _Job(indices, _layer_label(indices[0], layer), low.trace.as_arrays(), alloc,
                int(low.stats.macs),
                _grown(hw, alloc.sp_rows_used, alloc.acc_rows_used, step_kb))


def _run(jobs: list[_Job], hw: HardwareConfig, table: TimingTable) -> list[Any]:
    try:
        with timed("simulation"):
            return run_batch([j.arrays for j in jobs], hw, functional=False,
                             timing_table=table)
    except BacoError as exc:
        names = ", ".join(j.label for j in jobs)
        raise type(exc)(f"simulated yardstick: {names}: the simulator refused the trace: "
                        f"{exc}") from None


def _timing_runs(jobs: Iterator[_Job], table: TimingTable, batch: int
                 ) -> Iterator[tuple[_Job, Any]]:
    """Timing-only `SimResult` of each job, as they finish. One by one (``batch`` 1), else
    vmapped per hardware in groups of up to `batch` whose lengths (in scan chunks) are within
    25% of the group's longest."""
    if batch <= 1:
        for job in jobs:
            yield job, _run([job], job.hw, table)[0]
        return
    by_hw: dict[HardwareConfig, list[_Job]] = {}
    for job in jobs:
        by_hw.setdefault(job.hw, []).append(job)
    for hw, group_jobs in by_hw.items():
        chunks = {id(j): max(1, -(-len(j.arrays[0]) // CHUNK)) for j in group_jobs}
        todo = sorted(group_jobs, key=lambda j: -chunks[id(j)])
        while todo:
            group = [todo[0]] + [j for j in todo[1:batch]
                                 if chunks[id(j)] * 1.25 >= chunks[id(todo[0])]]
            if len(group) < min(batch, 8):  # run_batch pads a batch to 8: not worth it
                group = [todo[0]]
            yield from zip(group, _run(group, hw, table))
            todo = [j for j in todo if all(j is not g for g in group)]


def _trace_counts(res: Any, alloc: Allocation, instructions: int, macs: int, levels: MemoryLevels,
                  num_levels: int) -> TraceCounts:
    """What one timing run of a trace did (`TraceCounts`), its accesses from `trace_accesses`."""
    acc = trace_accesses(res.decoded, alloc, levels, num_levels)
    return TraceCounts(
        cycles=int(res.cycles), instructions=instructions, macs=macs,
        array_macs=int(res.decoded.array_macs), reads=acc["reads"], updates=acc["updates"],
        fills=acc["fills"], dram_read_bytes=acc["dram_read_bytes"],
        dram_write_bytes=acc["dram_write_bytes"], sp_rows_used=int(alloc.sp_rows_used),
        acc_rows_used=int(alloc.acc_rows_used), busy_cycles=dict(res.busy_cycles))


def _simulated_layer(c: TraceCounts, hw: HardwareConfig, **labels: Any) -> SimulatedLayer:
    """A `SimulatedLayer` from a trace's counts, its energy on `hw` (`trace_energy`), split by
    event class (`perfmodels.energy.energy_by_event`: the array's MACs beyond ``macs`` are
    ``mac_padded``)."""
    en = trace_energy(c, hw)
    lv = level_arrays(hw.template_spec, hw.to_params(), np)
    return SimulatedLayer(
        energy_pj_by_event=energy_by_event(hw.template_spec, en, lv, c.macs, c.cycles),
        cycles=c.cycles, energy_pj=float(en.energy_pj),
        level_pj=tuple(float(x) for x in en.level_pj), mac_pj=float(en.mac_pj),
        pe_idle_pj=float(en.pe_idle_pj), instructions=c.instructions, macs=c.macs,
        array_macs=c.array_macs, dram_read_bytes=c.dram_read_bytes,
        dram_write_bytes=c.dram_write_bytes, **labels)


def simulate_design(layers: Sequence[Layer], counts: Sequence[float], design: Design, *,
                    sram_step_kb: float = 1.0, cache: SimCache | None = None,
                    timing_table: TimingTable | None = None, batch: int | None = None,
                    progress: Callable[[int, int, str], None] | None = None,
                    max_instructions: int | None = MAX_INSTRUCTIONS
                    ) -> tuple[Yardstick, tuple[SimulatedLayer, ...]]:
    """The ``simulated`` yardstick of a design, and its per-layer figures.

    Every unique layer is lowered with its mapping (fused epilogue ops only), simulated for
    timing on the design's array (buffers grown if the programs need more rows, see the module
    docstring), and its energy counted from the trace. ``counts`` weight the layers as in
    `perfmodels.score.network_edp`. ``progress(done, total, layer_name)`` is called per layer
    simulated. A layer whose program passes `max_instructions` is not built
    (`ProgramTooLongError`, naming the layer; None: no cap).

    Raises:
      ConfigError: the template or array cannot run Gemmini traces.
      InfeasibleError, UnsupportedOpError, TraceError: a layer cannot be lowered or run; the
        message names the layer (`ProgramTooLongError`, a `TraceError`: its program passes
        `max_instructions`).
    """
    if len(layers) != len(counts):
        raise ConfigError(f"simulated yardstick: {len(layers)} layers but {len(counts)} counts")
    hw = design.hw
    why = simulation_unsupported(hw)
    if why is not None:
        raise ConfigError(f"simulated yardstick: {why}")
    mappings = design.mappings()
    if len(mappings) != len(layers):
        raise ConfigError(f"simulated yardstick: the design has {len(mappings)} mappings for "
                          f"{len(layers)} layers")
    levels = gemmini_levels(hw.template_spec)
    num_levels = hw.template_spec.num_levels
    table = timing_table or TimingTable()
    cache = DEFAULT_CACHE if cache is None else cache
    batch = preferred_batch() if batch is None else max(1, int(batch))
    keys = [cache_key(x, m, hw, table) for x, m in zip(layers, mappings)]
    found: dict[int, TraceCounts] = {}
    missing: dict[tuple, list[int]] = {}
    for b, key in enumerate(keys):
        if key in missing:          # the same layer twice in one design: simulate it once
            missing[key].append(b)
            continue
        hit = cache.get(key)
        if hit is not None and max_instructions is not None and hit.instructions > max_instructions:
            hit = None      # simulated under a looser cap (the store): lowered to fail as before
        if hit is None:
            missing[key] = [b]
        else:
            found[b] = hit
    total = len(layers)
    done = len(found)
    if progress is not None and found:
        progress(done, total, "simulated before, reused")
    if missing:
        jobs = (_prepare(tuple(idx), layers[idx[0]], mappings[idx[0]], hw, sram_step_kb,
                         max_instructions) for idx in missing.values())
        for job, res in _timing_runs(jobs, table, batch):
            b = job.indices[0]
            with timed("trace accounting"):
                entry = _trace_counts(res, job.alloc, len(job.arrays[0]), job.macs, levels,
                                      num_levels)
            cache.put(keys[b], entry)
            for i in job.indices:
                found[i] = entry
            done += len(job.indices)
            if progress is not None:
                progress(done, total, layers[b].name or layers[b].config_str())
    per_layer = [found[b] for b in range(total)]
    sim_hw = _grown(hw, max(c.sp_rows_used for c in per_layer),
                    max(c.acc_rows_used for c in per_layer), sram_step_kb)
    out = []
    for b, (layer, c) in enumerate(zip(layers, per_layer)):
        out.append(_simulated_layer(c, sim_hw, index=b, name=layer.name or layer.config_str(),
                                    count=float(counts[b]),
                                    host_ops=split_epilogue(layer.epilogue)[1]))
    edp, latency, energy_pj = network_totals([x.cycles for x in out],
                                             [x.energy_pj for x in out], counts)
    stick = Yardstick(edp=float(edp), latency_cycles=float(latency),
                      energy_pj=float(energy_pj), hardware=sim_hw,
                      area_mm2=hardware_area_mm2(sim_hw), grown=sim_hw != hw,
                      energy_pj_by_event=_events(out))
    return stick, tuple(out)


def simulate_chain(lowered: Any, *, timing_table: TimingTable | None = None
                   ) -> SimulatedLayer:
    """A fused GEMM chain (`accel.lower.chain.LoweredChain`) on the simulator: cycles of its
    one trace, its energy counted from the trace as `simulate_design` counts a layer's (the
    intermediate's on-chip move included), and the DRAM bytes it moves."""
    hw = lowered.hw
    why = simulation_unsupported(hw)
    if why is not None:
        raise ConfigError(f"simulated chain: {why}")
    with timed("simulation"):
        res = run_batch([lowered.trace.as_arrays()], hw, functional=False,
                        timing_table=timing_table or TimingTable())[0]
    names = [x.name or x.config_str() for x in (lowered.first, lowered.second)]
    return simulated_run(res, lowered.alloc, len(lowered.trace),
                         int(lowered.first.macs + lowered.second.macs), hw, index=0,
                         name=" -> ".join(names), count=1.0, host_ops=())


def simulated_run(res: Any, alloc: Allocation, instructions: int, macs: int,
                  hw: HardwareConfig, **labels: Any) -> SimulatedLayer:
    """One simulator run of a lowered trace (`accel.sim.run`'s result) counted as the simulated
    yardstick counts a layer: its cycles and its energy on `hw` (`trace_energy`)."""
    t = hw.template_spec
    c = _trace_counts(res, alloc, instructions, macs, gemmini_levels(t), t.num_levels)
    return _simulated_layer(c, hw, **labels)


def _with_chains(stick: Yardstick, per_layer: tuple[SimulatedLayer, ...], fused: Sequence[Any],
                 hw: HardwareConfig, timing_table: TimingTable | None
                 ) -> tuple[Yardstick, tuple[SimulatedLayer, ...]]:
    """The simulated yardstick with each fused group's instances run as one chain trace."""
    from accel.lower import lower_gemm_chain
    from baco.fusion import plan_chain_tiles

    layers = list(per_layer)
    chains = []
    for group in fused:
        first, second = group.layers
        try:
            with timed("lowering"):
                low = lower_gemm_chain(first, second, hw, plan_chain_tiles(first, second, hw))
        except BacoError as exc:
            raise type(exc)(f"simulated yardstick: fused chain {' -> '.join(group.names)}: "
                            f"{exc}") from None
        chain = simulate_chain(low, timing_table=timing_table)
        chains.append(dataclasses.replace(chain, index=len(per_layer) + len(chains),
                                          name=" -> ".join(group.names),
                                          count=float(group.instances)))
        for b in (group.first, group.second):
            layers[b] = dataclasses.replace(layers[b], count=layers[b].count - group.instances)
    out = tuple(layers + chains)
    edp, latency, energy_pj = network_edp_exact(out)
    return dataclasses.replace(stick, edp=edp, latency_cycles=latency, energy_pj=energy_pj,
                               energy_pj_by_event=_events(out)), out


def _events(rows: Sequence[SimulatedLayer]) -> dict[str, float]:
    return network_energy_by_event([x.energy_pj_by_event for x in rows], [x.count for x in rows])


# --------------------------------------------------------------------------- all three
def _aware_unsupported(hw: HardwareConfig) -> str | None:
    try:
        array_axes(hw.template_spec)
    except ConfigError as exc:
        return str(exc)
    return None


def yardsticks(layers: Sequence[Layer], counts: Sequence[float], design: Design, *,
               sram_step_kb: float = 1.0, area_budget_mm2: float | None = None,
               cache: SimCache | None = None,
               timing_table: TimingTable | None = None, batch: int | None = None,
               progress: Callable[[int, int, str], None] | None = None,
               max_instructions: int | None = MAX_INSTRUCTIONS,
               fused: Sequence[Any] = ()) -> Yardsticks:
    """The design's ``plain``, ``instruction_aware`` and ``simulated`` yardsticks and the area
    of its hardware (`Yardsticks`; ``.to_dict()`` for JSON).

    ``plain`` and ``instruction_aware`` are `baco.rounding.common_score` with ``aware`` False
    and True (buffers grown for padded rows only within `area_budget_mm2`, if given);
    ``simulated`` is `simulate_design` (`cache`, `timing_table`, `batch` and
    `progress` go there). ``area_mm2`` is the template's area model for ``design.hw``; each
    yardstick also carries the hardware it scored and that hardware's area. A yardstick the
    template does not support (instruction awareness needs DIM x DIM array axes, the simulator
    the Gemmini template and a square array) is None, with the reason in ``unavailable``; so
    is ``simulated`` when a layer's program passes `max_instructions` (`MAX_INSTRUCTIONS`).

    ``fused``: the design's fused GEMM chains (`baco.fusion.ChainGroup`, as a result records
    them). Each yardstick then runs their instances as one chain: the plain and
    instruction-aware ones by the chain's model (`perfmodels.fusion.chain_cost`, the per-load
    latency off and on), the simulated one by lowering the chain to one trace on the design's
    hardware (`simulate_chain`, tiles by `baco.fusion.plan_chain_tiles`); the simulated layers
    then list each chain after the layers, the layers' counts less its instances. The areas
    then include the template's on-chip path (and its normalizer where a fused chain applies a
    softmax), and the I-GELU unit where a layer applies GELU on chip (`units_area_mm2`).
    """
    from baco.fusion import FusionPlan

    unavailable: dict[str, str] = {}
    counts = [float(c) for c in counts]
    plans = {aware: FusionPlan(tuple(fused), tuple(counts), aware=aware, forced=True)
             if fused else None for aware in (False, True)}
    plain_score = common_score(layers, counts, design, False, sram_step_kb,
                               fusion=plans[False])
    plain = Yardstick(edp=plain_score.edp, latency_cycles=plain_score.latency_cycles,
                      energy_pj=plain_score.energy_pj, hardware=design.hw,
                      area_mm2=hardware_area_mm2(design.hw),
                      energy_pj_by_event=plain_score.energy_pj_by_event)
    aware = None
    why = _aware_unsupported(design.hw)
    if why is None:
        s = common_score(layers, counts, design, True, sram_step_kb, area_budget_mm2,
                         fusion=plans[True])
        aware = Yardstick(edp=s.edp, latency_cycles=s.latency_cycles, energy_pj=s.energy_pj,
                          hardware=s.design.hw, area_mm2=hardware_area_mm2(s.design.hw),
                          grown=s.design.hw != design.hw,
                          energy_pj_by_event=s.energy_pj_by_event)
    else:
        unavailable["instruction_aware"] = why
    simulated, per_layer = None, ()
    why = simulation_unsupported(design.hw)
    if why is None:
        try:
            simulated, per_layer = simulate_design(
                layers, counts, design, sram_step_kb=sram_step_kb, cache=cache,
                timing_table=timing_table, batch=batch, progress=progress,
                max_instructions=max_instructions)
            if fused:
                simulated, per_layer = _with_chains(simulated, per_layer, fused, design.hw,
                                                    timing_table)
        except ProgramTooLongError as exc:
            unavailable["simulated"] = str(exc)
    else:
        unavailable["simulated"] = why
    extra = units_area_mm2(design.hw, layers, counts, fused)
    if extra:
        plain, aware, simulated = (None if y is None else dataclasses.replace(
            y, area_mm2=y.area_mm2 + extra) for y in (plain, aware, simulated))
    return Yardsticks(plain=plain, instruction_aware=aware, simulated=simulated,
                      area_mm2=plain.area_mm2, layers=per_layer, unavailable=unavailable)


__all__ = [
    "DEFAULT_CACHE",
    "MAX_INSTRUCTIONS",
    "YARDSTICKS",
    "SimCache",
    "SimulatedLayer",
    "TraceCounts",
    "Yardstick",
    "Yardsticks",
    "cache_key",
    "gemmini_levels",
    "hardware_area_mm2",
    "simulate_design",
    "simulation_unsupported",
    "simulate_chain",
    "simulated_run",
    "trace_accesses",
    "trace_energy",
    "yardsticks",
]
