"""Run decoded traces through `lax.scan`: one compiled simulator per machine shape and length.

A trace is padded with NOP rows to a multiple of `CHUNK` instructions and runs as consecutive
`CHUNK`-long scans that carry the state; the DRAM image is padded to a power-of-two size and the
memories to power-of-two rows (`accel.sim.decode.memory_bucket`). So one hardware shape compiles
once (per batch size, and once more for timing only), whatever the traces' lengths. `run`
simulates one trace; `run_batch` stacks several (same hardware) and `vmap`s the scan.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from accel.isa import IsaParams, trace_error
from accel.sim import functional as data_model
from accel.sim import timing
from accel.sim.decode import COL, DecodedTrace, Op, decode, pad_decoded
from accel.sim.functional import ERROR_DETAILS, ERROR_FIELDS, FuncStatic
from accel.sim.memory import DramImage
from accel.sim.state import SimState
from accel.sim.timing import TimingTable
from workloads.errors import ConfigError

UNIT_NAMES = ("load", "execute", "store")
CHUNK = 1024  # instructions per compiled scan call; traces run chunk after chunk
_MNEMONIC_OF_OP = {Op.MVIN: "mvin", Op.MVOUT: "mvout", Op.PRELOAD: "preload",
                   Op.COMPUTE_PRELOADED: "compute_preloaded",
                   Op.COMPUTE_ACCUMULATED: "compute_accumulated", Op.MVOUT_SPAD: "mvout_spad"}


@dataclasses.dataclass(frozen=True, eq=False)
class SimResult:
    """What a simulation produced.

    ``cycles``: total cycles until the last command completed; ``busy_cycles``: cycles each
    queue (load, execute, store) was occupied; ``start_cycles`` / ``end_cycles``: int32 per
    decoded instruction (``origin`` maps them to the caller's trace indices, CISC loops expand
    to several); ``macs`` / ``array_macs``: the computes' useful MACs and what the array spent
    (`DecodedTrace`); ``dram``: the final DRAM bytes (None when only timing was simulated);
    ``image``: the `DramImage` the run started from, if any, so `read` can name tensors;
    ``decoded``: the `DecodedTrace` that ran (its columns say what each instruction moved;
    `DecodedTrace.dram_read_bytes` / ``dram_write_bytes`` count the DRAM bytes).
    """

    cycles: int
    busy_cycles: dict[str, int]
    start_cycles: np.ndarray
    end_cycles: np.ndarray
    origin: np.ndarray
    macs: int
    array_macs: int
    dram: np.ndarray | None = None
    image: DramImage | None = None
    decoded: DecodedTrace | None = dataclasses.field(default=None, repr=False)

    @property
    def instructions(self) -> int:
        return int(self.start_cycles.shape[0])

    def read(self, name: str) -> np.ndarray:
        """A named tensor of the final DRAM (needs a `DramImage` input)."""
        if self.dram is None or self.image is None:
            raise ConfigError("SimResult.read needs a functional run started from a DramImage")
        return self.image.read(name, self.dram)

    def utilization(self) -> dict[str, float]:
        """Fraction of the run each queue was busy."""
        return {k: (v / self.cycles if self.cycles else 0.0) for k, v in self.busy_cycles.items()}


@dataclasses.dataclass(frozen=True)
class _Prepared:
    decoded: DecodedTrace
    cost: np.ndarray
    reads: np.ndarray
    writes: np.ndarray
    dram: np.ndarray | None
    dram_ok: np.ndarray | None
    image: DramImage | None


def _dram_arrays(dram: Any, initialized: Any) -> tuple[np.ndarray, np.ndarray, DramImage | None]:
    if isinstance(dram, DramImage):
        data, ok = dram.to_arrays()
        return data, ok, dram
    if dram is None:
        data = np.zeros(0, np.uint8)
    else:
        data = np.asarray(dram)
        if data.dtype != np.uint8:
            if data.ndim != 1:
                raise ConfigError(f"dram must be a 1-D uint8 array or a DramImage, got "
                                  f"{data.dtype} {data.shape}")
            data = data.view(np.uint8)
        data = data.reshape(-1)
    ok = (np.ones(data.shape, bool) if initialized is None
          else np.asarray(initialized, bool).reshape(-1))
    if ok.shape != data.shape:
        raise ConfigError(f"initialized mask has {ok.shape[0]} entries for {data.shape[0]} bytes")
    return data, ok, None


def _prepare(trace: Any, hw: Any, dram: Any, initialized: Any, dram_base: int,
             table: TimingTable, with_data: bool) -> _Prepared:
    params = IsaParams.from_hardware(hw)
    if with_data:
        data, ok, image = _dram_arrays(dram, initialized)
        if image is not None:
            dram_base = image.base
        decoded = decode(trace, params, data.shape[0], dram_base, hw.dataflow)
    else:
        data = ok = image = None
        decoded = decode(trace, params, None, dram_base, hw.dataflow)
    reads, writes = timing.access_runs(decoded)
    return _Prepared(decoded, timing.costs(decoded, table, hw), reads, writes, data, ok, image)


def _pow2(n: int, minimum: int) -> int:
    return max(minimum, 1 << max(0, (int(n) - 1).bit_length()))


@functools.cache
def _simulator(fstatic: FuncStatic | None, dim: int, sp_rows: int, acc_rows: int,
               batched: bool):
    """The jitted scan for one machine shape (lengths and batch sizes retrace as needed)."""
    sink = sp_rows + acc_rows

    def simulate(state, ints, floats, cost, reads, writes, params, first):
        def body(s, xs):
            row, frow, crow, rd, wr, k = xs
            if fstatic is not None:
                s = data_model.step(s, row, frow, k, fstatic)
            return timing.step(s, row, crow, rd, wr, params, dim, sink)

        index = first + jnp.arange(ints.shape[0], dtype=jnp.int32)
        return lax.scan(body, state, (ints, floats, cost, reads, writes, index))

    if batched:
        simulate = jax.vmap(simulate, in_axes=(0, 0, 0, 0, 0, 0, None, None))
    return jax.jit(simulate, donate_argnums=(0,))


def _init_state(prep: _Prepared, fstatic: FuncStatic | None) -> SimState:
    shape = prep.decoded.shape
    fields = timing.init_state(shape.sp_rows + shape.acc_rows + 1)
    if fstatic is not None:
        dram = np.zeros(fstatic.dram_len, np.uint8)
        dram_ok = np.zeros(fstatic.dram_len, bool)
        dram[:prep.dram.shape[0]] = prep.dram
        dram_ok[:prep.dram.shape[0]] = prep.dram_ok
        fields.update(data_model.init_state(fstatic, jnp.asarray(dram),
                                            jnp.asarray(dram_ok)))
    return SimState(**fields)


def _padded_inputs(prep: _Prepared, length: int) -> tuple[np.ndarray, ...]:
    ints, floats = pad_decoded(prep.decoded, length)
    n = len(prep.decoded)

    def pad(a: np.ndarray) -> np.ndarray:
        out = np.zeros((length,) + a.shape[1:], a.dtype)
        out[:n] = a
        return out

    return ints, floats, pad(prep.cost), pad(prep.reads), pad(prep.writes)


def _fstatic(preps: Sequence[_Prepared], with_data: bool) -> FuncStatic | None:
    if not with_data:
        return None
    shape = preps[0].decoded.shape
    size = max(p.dram.shape[0] for p in preps)
    return FuncStatic(
        dim=shape.dim, sp_rows=shape.sp_rows, acc_rows=shape.acc_rows,
        dram_len=_pow2(size + 1, 1 << 20), max_blocks=shape.max_blocks, row_bytes=shape.row_bytes,
        uses_os=any(p.decoded.uses_os for p in preps),
        reads_acc=any(p.decoded.reads_acc_operands for p in preps),
        moves_to_spad=any(p.decoded.moves_to_spad for p in preps),
        normalizer=any(p.decoded.uses_norm for p in preps),
        pixel_repeats=any(p.decoded.pixel_repeats for p in preps),
        sp_half_rows=preps[0].decoded.sp_half_rows)


def _result(prep: _Prepared, state: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray,
            with_data: bool) -> SimResult:
    decoded = prep.decoded
    n = len(decoded)
    if with_data and int(state["error_index"]) >= 0:
        k = int(state["error_index"])
        code = int(state["error_code"])
        op = Op(int(decoded.ints[k, COL["op"]]))
        raise trace_error(ERROR_DETAILS[code], field=ERROR_FIELDS[code],
                          index=int(decoded.origin[k]), mnemonic=_MNEMONIC_OF_OP.get(op))
    start, end = start[:n], end[:n]
    cycles = int(state["all_done"])
    if cycles < 0 or (n and (int(end.min()) < -1 or np.any(end < start))):
        raise ConfigError("the simulated cycle count overflowed int32 (about 2.1e9 cycles); "
                          "split the trace")
    return SimResult(
        cycles=cycles,
        busy_cycles={name: int(v) for name, v in zip(UNIT_NAMES, state["busy"])},
        start_cycles=start, end_cycles=end, origin=decoded.origin,
        macs=decoded.macs, array_macs=decoded.array_macs,
        dram=(state["dram"][:prep.dram.shape[0]].copy() if with_data else None),
        image=prep.image, decoded=decoded)


def run(trace: Any, hw: Any, dram: Any = None, *, initialized: Any = None, dram_base: int = 0,
        timing_table: TimingTable | None = None, functional: bool = True) -> SimResult:
    """Simulate one trace on hardware ``hw`` (an `accel.arch.HardwareConfig`).

    Args:
      trace: a `Trace`, or ``(funct, rs1, rs2)`` integer arrays.
      hw: the hardware (array side, scratchpad and accumulator sizes, DRAM bandwidth, default
        dataflow).
      dram: a `DramImage`, or a flat uint8 array (byte 0 at address ``dram_base``).
      initialized: for a plain array, which bytes hold data (default: all).
      timing_table: timing constants (default `TimingTable()`).
      functional: False simulates timing only (no data, ``dram`` ignored).

    Returns:
      A `SimResult` with the cycles and, for a functional run, the final DRAM.

    Raises:
      TraceError: naming the instruction index and field, for a malformed or unexecutable
        trace, or a read of never-written memory.
    """
    return run_batch([trace], hw, [dram], initialized=[initialized], dram_base=dram_base,
                     timing_table=timing_table, functional=functional)[0]


def preferred_batch() -> int:
    """How many traces to `run_batch` together. On CPU one: a vmapped scan saves only a few
    percent per instruction there (8 equal traces 4%, 16 about 18%), while padding a batch to
    its longest trace and to 8 lanes costs more (the 55 chip programs of
    ``data/gemmini_rtl_baco_programs.csv``: 1.6x slower in three batches than one by one,
    identical cycles). On an accelerator backend 16, in groups of similar length."""
    return 1 if jax.default_backend() == "cpu" else 16


def run_batch(traces: Sequence[Any], hw: Any, drams: Sequence[Any] | None = None, *,
              initialized: Sequence[Any] | None = None, dram_base: int = 0,
              timing_table: TimingTable | None = None, functional: bool = True,
              ) -> list[SimResult]:
    """Simulate several traces on one hardware shape in one vmapped scan.

    The traces are padded to a common power-of-two length and the DRAM images to a common size;
    results come back in order. A single trace runs unbatched (no vmap).
    """
    table = timing_table or TimingTable()
    traces = list(traces)
    if not traces:
        return []
    drams = list(drams) if drams is not None else [None] * len(traces)
    inits = list(initialized) if initialized is not None else [None] * len(traces)
    if not len(drams) == len(inits) == len(traces):
        raise ConfigError("run_batch: traces, drams and initialized must have equal lengths")
    preps = [_prepare(t, hw, d, i, dram_base, table, functional)
             for t, d, i in zip(traces, drams, inits)]
    fstatic = _fstatic(preps, functional)
    shape = preps[0].decoded.shape
    longest = max(len(p.decoded) for p in preps)
    length = max(1, -(-longest // CHUNK)) * CHUNK
    chunk = CHUNK
    batched = len(preps) > 1
    count = len(preps)
    if batched:  # pad the batch to a power of two >= 8 (repeats of the last trace, dropped)
        preps = preps + [preps[-1]] * (max(8, 1 << (count - 1).bit_length()) - count)
    sim = _simulator(fstatic, shape.dim, shape.sp_rows, shape.acc_rows, batched)
    inputs = [_padded_inputs(p, length) for p in preps]
    states = [_init_state(p, fstatic) for p in preps]
    params = jnp.asarray(table.scan_params(shape.dim, hw))
    if batched:
        state = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        stacked = [np.stack(parts) for parts in zip(*inputs)]
    else:
        state, stacked = states[0], list(inputs[0])
    starts, ends = [], []
    axis = 1 if batched else 0
    for first in range(0, length, chunk):
        part = [jnp.asarray(np.take(a, np.arange(first, first + chunk), axis=axis))
                for a in stacked]
        state, (start, end) = sim(state, *part, params, jnp.int32(first))
        starts.append(start)
        ends.append(end)
    final = state
    start = jnp.concatenate(starts, axis=axis)
    end = jnp.concatenate(ends, axis=axis)
    keep = ["all_done", "busy"] + (["error_index", "error_code", "dram"] if functional else [])
    host = {name: np.asarray(getattr(final, name)) for name in keep}
    start, end = np.asarray(start), np.asarray(end)
    if not batched:
        return [_result(preps[0], host, start, end, functional)]
    return [_result(p, {k: v[b] for k, v in host.items()}, start[b], end[b], functional)
            for b, p in enumerate(preps[:count])]


__all__ = ["UNIT_NAMES", "SimResult", "preferred_batch", "run", "run_batch"]
