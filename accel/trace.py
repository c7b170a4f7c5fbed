"""`Trace`: a sequence of Gemmini instructions, its file formats, and what each one touches.

Two file formats, chosen by suffix in `Trace.save` / `Trace.load`:

* text (``.s``, ``.asm``, ``.txt``): one instruction per line in the assembly of
  `Instruction.to_text`, ``#`` comments and blank lines allowed;
* binary (``.bin``, ``.trace``): a 16-byte header ``<8sHHI`` = magic ``b"BACOTRC\\0"``,
  format version, reserved (0), instruction count; then per instruction the 32-bit word and the
  64-bit rs1 and rs2, little endian (20 bytes, ``<IQQ``).

`Trace.accesses` is the one place that says which scratchpad rows, accumulator rows, DRAM bytes
and configuration registers each instruction reads and writes, following the configuration
instructions before it (strides, block strides, transposes, pooling) the way Gemmini's
reservation station does. The scheduler builds its dependences from it and `Trace.validate`
checks its ranges.

>>> from accel.isa import Instruction
>>> trace = Trace([Instruction.config_ld(16), Instruction.mvin(0x1000, 0, 16, 16)])
>>> print(trace.to_text(), end="")
config_ld id=0 stride=16 block_stride=16 scale=1.0 shrunk=0 pixel_repeats=1
mvin dram=0x1000 sp=0x0000 rows=16 cols=16
>>> Trace.from_bytes(trace.to_bytes()) == trace
True
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, overload

import numpy as np

from accel.isa import (
    STAT_CMDS,
    Instruction,
    IsaParams,
    LocalAddr,
    trace_error,
    with_context,
)
from workloads.errors import TraceError
from workloads.files import write_atomic

MAGIC = b"BACOTRC\0"
VERSION = 1
_HEADER = struct.Struct("<8sHHI")
_RECORD = np.dtype([("word", "<u4"), ("rs1", "<u8"), ("rs2", "<u8")])  # packed: 20 bytes
TEXT_SUFFIXES = (".s", ".asm", ".txt")
BINARY_SUFFIXES = (".bin", ".trace")


class TraceArrays(NamedTuple):
    """Struct-of-arrays form for the JAX simulator: three uint64 arrays of shape ``[n]``.

    ``funct`` holds `Funct` values (128 for fence); rs1 and rs2 are the raw operands. With
    ``jax_enable_x64`` off JAX would narrow uint64, so split into 32-bit halves before `jnp`.
    """

    funct: np.ndarray
    rs1: np.ndarray
    rs2: np.ndarray


# ---------------------------------------------------------------------------------------------
# What an instruction touches.


@dataclasses.dataclass(frozen=True)
class Region:
    """A half-open range ``[start, stop)`` of one address space.

    Spaces: ``"sp"`` and ``"acc"`` (rows), ``"dram"`` (bytes), and configuration state
    (``"cfg.ex"``, ``"cfg.ld0"``..``"cfg.ld2"``, ``"cfg.st"``, ``"cfg.loop_ws"``,
    ``"cfg.loop_conv"``) and ``"array"`` (the weights/partial sums held in the systolic array),
    each a single cell ``[0, 1)``. ``field`` names the operand it came from, for messages.
    """

    space: str
    start: int
    stop: int
    field: str = dataclasses.field(default="", compare=False)

    @classmethod
    def cell(cls, space: str, field: str = "") -> Region:
        """A one-cell space: a configuration register, the array state, or a CPU register."""
        return cls(space, 0, 1, field)

    def overlaps(self, other: Region) -> bool:
        """Whether the two share a cell (empty ranges share none)."""
        return (self.space == other.space and self.start < self.stop
                and other.start < other.stop and self.start < other.stop
                and other.start < self.stop)


@dataclasses.dataclass(frozen=True)
class Access:
    """What one instruction reads and writes, and how much work it is.

    ``rows`` counts the DIM-wide rows it moves (mvin/mvout) or pushes through the array
    (preload/compute; for loop instructions, an estimate from their bounds); latency models
    scale with it. A ``barrier`` (fence, and the CISC loops whose footprint is not modelled)
    orders against everything before and after it.
    """

    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    rows: int = 0
    barrier: bool = False


def _runs(space: str, base: int, count: int, stride: int, length: int, field: str) -> list[Region]:
    """``count`` runs of ``length`` units every ``stride`` units from ``base``, merged.

    A zero stride means the same run repeated (Gemmini reads one DRAM row for a zero stride).
    """
    if count <= 0 or length <= 0:
        return []
    if stride == 0:
        count = 1
    if stride <= length:
        return [Region(space, base, base + (count - 1) * stride + length, field)]
    return [Region(space, base + n * stride, base + n * stride + length, field)
            for n in range(count)]


@dataclasses.dataclass
class _ConfigState:
    """The configuration registers that change what later instructions touch."""

    dim: int
    ld_stride: list = dataclasses.field(default_factory=lambda: [None] * 4)
    ld_block_stride: list = dataclasses.field(default_factory=list)
    ld_shrunk: list = dataclasses.field(default_factory=lambda: [False] * 4)
    st_stride: int | None = None
    pool_stride: int = 0
    pool_out_dim: int = 0
    porows: int = 0
    pocols: int = 0
    a_stride: int = 1
    c_stride: int = 1
    a_transpose: bool = False
    pending_c: tuple[Region, ...] = ()
    pending_c_accumulates: bool = False
    loop_ws: dict = dataclasses.field(default_factory=dict)
    loop_conv: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ld_block_stride = [self.dim] * 4  # gemmini.h's default block_mvin_stride is DIM


def _local(addr: LocalAddr, count: int, stride: int, length: int, field: str) -> list[Region]:
    if addr.is_garbage:
        return []
    return _runs(addr.space, addr.row, count, stride, length, field)




def _stats_pass(local: LocalAddr) -> bool:
    return local.acc and not local.is_garbage and local.norm in STAT_CMDS


def _stats_access(local: list[Region], rows: int) -> Access:
    """A statistics pass reads its rows and the normalizer's state, and writes only that."""
    norm = Region.cell("norm")
    return Access((Region.cell("cfg.st"), Region.cell("cfg.ex"), norm, *local), (norm,),
                  rows=rows)


def _check_norm(local: LocalAddr, rows: int, fail, field: str) -> None:
    if local.norm and local.norm not in STAT_CMDS:
        raise fail(f"normalizer command {local.norm} (layernorm's) is not supported; use 5 "
                   "(max), 6 (sum of exponentials) or 7 (its inverse)", field)
    if local.norm and rows != 1:
        raise fail(f"a normalizer command moves one row, not {rows}", "rows")


def _access(ins: Instruction, state: _ConfigState, params: IsaParams) -> Access:
    """One instruction's `Access`, updating ``state`` for the instructions after it."""
    m, f, dim = ins.mnemonic, ins.fields(), params.dim
    if m in ("mvin", "mvin2", "mvin3"):
        ld = {"mvin": 0, "mvin2": 1, "mvin3": 2}[m]
        dst: LocalAddr = f["sp"]
        rows, cols = f["rows"], f["cols"]
        elem = params.acc_bytes if dst.acc and not state.ld_shrunk[ld] else params.input_bytes
        row_bytes = cols * elem
        stride = state.ld_stride[ld] if state.ld_stride[ld] is not None else row_bytes
        blocks = math.ceil(cols / dim)
        local = _local(dst, blocks, state.ld_block_stride[ld], rows, "sp")
        dram = _runs("dram", f["dram"], rows, stride, row_bytes, "dram")
        reads = [Region.cell(f"cfg.ld{ld}"), *dram]
        if dst.acc and dst.accumulate:
            reads += local  # accumulate-on-write reads the old rows
        return Access(tuple(reads), tuple(local), rows=blocks * rows)
    if m == "mvout":
        src: LocalAddr = f["sp"]
        rows, cols = f["rows"], f["cols"]
        elem = params.acc_bytes if src.acc and src.full else params.input_bytes
        row_bytes = cols * elem
        stride = state.st_stride if state.st_stride is not None else row_bytes
        if _stats_pass(src):
            return _stats_access(_local(src, math.ceil(cols / dim), dim, rows, "sp"),
                                 math.ceil(cols / dim) * rows)
        if state.pool_stride and src.acc and not src.is_garbage:
            # Pooling reads the rest of the accumulator bank (as the reservation station
            # assumes) and writes a pooled window we bound by its last output row.
            bank_rows = max(1, params.acc_rows // params.acc_banks)
            bank_stop = (src.row // bank_rows + 1) * bank_rows
            local = [Region("acc", src.row, bank_stop, "sp")]
            out_rows = max(1, (max(state.porows, 1) - 1) * state.pool_out_dim
                           + max(state.pocols, 1))
            dram = _runs("dram", f["dram"], out_rows, stride, row_bytes, "dram")
        else:
            local = _local(src, math.ceil(cols / dim), dim, rows, "sp")
            dram = _runs("dram", f["dram"], rows, stride, row_bytes, "dram")
        # Stores also read the execute config: Gemmini orders a store after an earlier
        # config_ex and a config_ex after earlier stores (ReservationStation.scala).
        reads = (Region.cell("cfg.st"), Region.cell("cfg.ex"), *local)
        return Access(reads, tuple(dram), rows=math.ceil(cols / dim) * rows)
    if m == "mvout_spad":
        # The store path's read-out, written to scratchpad rows instead of DRAM.
        rows = f["rows"]
        local = _local(f["src"], 1, 0, rows, "src")
        if _stats_pass(f["src"]):
            return _stats_access(local, rows)
        reads = (Region.cell("cfg.st"), Region.cell("cfg.ex"), *local)
        return Access(reads, tuple(_local(f["dst"], 1, 0, rows, "dst")), rows=rows)
    if m == "preload":
        bd: LocalAddr = f["bd"]
        c: LocalAddr = f["c"]
        reads = (Region.cell("cfg.ex"), *_local(bd, 1, 0, f["bd_rows"], "bd"))
        # C is written by the compute this preload pairs with, so hand it over.
        state.pending_c = tuple(_local(c, f["c_rows"], state.c_stride, 1, "c"))
        state.pending_c_accumulates = c.acc and c.accumulate and not c.is_garbage
        return Access(reads, (Region.cell("array"),), rows=f["bd_rows"])
    if m in ("compute_preloaded", "compute_accumulated"):
        a: LocalAddr = f["a"]
        bd = f["bd"]
        a_count = f["a_cols"] if state.a_transpose else f["a_rows"]
        reads = [Region.cell("cfg.ex"), Region.cell("array"),
                 *_local(a, a_count, state.a_stride, 1, "a"),
                 *_local(bd, 1, 0, f["bd_rows"], "bd")]
        writes = [Region.cell("array"), *state.pending_c]
        if state.pending_c_accumulates:
            reads += state.pending_c
        state.pending_c, state.pending_c_accumulates = (), False
        return Access(tuple(reads), tuple(writes), rows=f["a_rows"])
    if m == "config_ex":
        state.a_stride, state.c_stride = f["a_stride"], f["c_stride"]
        if not f["set_only_strides"]:
            state.a_transpose = f["a_transpose"]
        return Access(writes=(Region.cell("cfg.ex"),))
    if m == "config_norm":
        return Access(writes=(Region.cell("cfg.ex"),))
    if m == "config_ld":
        ld = f["id"]
        state.ld_stride[ld] = f["stride"]
        state.ld_block_stride[ld] = f["block_stride"]
        state.ld_shrunk[ld] = f["shrunk"]
        return Access(writes=(Region.cell(f"cfg.ld{ld}"),))
    if m == "config_st":
        state.st_stride = f["stride"]
        state.pool_stride, state.pool_out_dim = f["pool_stride"], f["pool_out_dim"]
        state.porows, state.pocols = f["porows"], f["pocols"]
        return Access(writes=(Region.cell("cfg.st"),))
    if m.startswith("loop_ws_config"):
        state.loop_ws.update(f)
        return Access(writes=(Region.cell("cfg.loop_ws"),))
    if m == "loop_ws":
        lw = state.loop_ws
        tiles = lw.get("i", 0) * lw.get("j", 0) * lw.get("k", 0)
        return Access(reads=(Region.cell("cfg.loop_ws"),), rows=tiles * dim, barrier=True)
    if m.startswith("loop_conv_ws_config"):
        state.loop_conv.update(f)
        return Access(writes=(Region.cell("cfg.loop_conv"),))
    if m == "loop_conv_ws":
        lc = state.loop_conv
        pixels = lc.get("batches", 0) * lc.get("orows", 0) * lc.get("ocols", 0)
        macs_rows = (pixels * math.ceil(lc.get("pochs", 0) / dim) * lc.get("krows", 0)
                     * lc.get("kcols", 0) * math.ceil(lc.get("kchs", 0) / dim))
        return Access(reads=(Region.cell("cfg.loop_conv"),), rows=macs_rows, barrier=True)
    if m == "fence":
        return Access(barrier=True)
    if m == "flush":
        return Access()
    raise AssertionError(f"no access model for {m}")  # every mnemonic is covered above


def _max_cols(ins: Instruction, local: LocalAddr, shrunk: bool, params: IsaParams) -> int:
    if ins.mnemonic == "mvout":
        elem = params.acc_bytes if local.acc and local.full else params.input_bytes
    else:
        elem = params.acc_bytes if local.acc and not shrunk else params.input_bytes
    return max(1, params.dma_max_bytes // (params.dim * elem)) * params.dim


# ---------------------------------------------------------------------------------------------
# Traces.


@dataclasses.dataclass(frozen=True)
class Trace(Sequence):
    """An immutable sequence of `Instruction`; equal traces have equal instructions."""

    instructions: tuple[Instruction, ...] = ()

    def __init__(self, instructions: Iterable[Instruction] = ()) -> None:
        items = tuple(instructions)
        for index, ins in enumerate(items):
            if not isinstance(ins, Instruction):
                raise trace_error(f"expected an Instruction, got {type(ins).__name__}",
                                  index=index)
        object.__setattr__(self, "instructions", items)

    # -- sequence ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.instructions)

    @overload
    def __getitem__(self, index: int) -> Instruction: ...
    @overload
    def __getitem__(self, index: slice) -> Trace: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Trace(self.instructions[index])
        return self.instructions[index]

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __add__(self, other: Iterable[Instruction]) -> Trace:
        return Trace((*self.instructions, *other))

    def __repr__(self) -> str:
        return f"Trace(<{len(self)} instructions>)"

    # -- text ----------------------------------------------------------------------------------

    def to_text(self) -> str:
        """One assembly line per instruction (see `Instruction.to_text`)."""
        return "".join(ins.to_text() + "\n" for ins in self.instructions)

    @classmethod
    def from_text(cls, text: str, source: str | None = None) -> Trace:
        """Parse assembly; errors name ``source``, the line and the instruction index."""
        out = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.split("#", 1)[0].strip():
                continue
            try:
                out.append(Instruction.from_text(line))
            except TraceError as err:
                raise with_context(err, index=len(out), line=line_no, source=source) from None
        return cls(out)

    # -- binary --------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        records = np.zeros(len(self), dtype=_RECORD)
        for n, ins in enumerate(self.instructions):
            records[n] = ins.encode()
        return _HEADER.pack(MAGIC, VERSION, 0, len(self)) + records.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, source: str | None = None) -> Trace:
        """Parse the binary format; a bad magic, version or length raises `TraceError`."""
        if len(data) < _HEADER.size:
            raise trace_error(f"truncated header: {len(data)} bytes, need {_HEADER.size}",
                              field="header", source=source)
        magic, version, reserved, count = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise trace_error(f"bad magic {magic!r}; expected {MAGIC!r} (not a baco trace?)",
                              field="magic", source=source)
        if version != VERSION:
            raise trace_error(f"unsupported version {version}; this reader knows {VERSION}",
                              field="version", source=source)
        if reserved != 0:
            raise trace_error(f"reserved header field is {reserved}, expected 0",
                              field="reserved", source=source)
        body = memoryview(data)[_HEADER.size:]
        need = count * _RECORD.itemsize
        if len(body) < need:
            whole = len(body) // _RECORD.itemsize
            raise trace_error(
                f"truncated: the header promises {count} instructions ({need} bytes) but "
                f"{len(body)} bytes follow", index=whole, field="record", source=source)
        if len(body) > need:
            raise trace_error(f"{len(body) - need} trailing bytes after {count} instructions",
                              field="record", index=count, source=source)
        records = np.frombuffer(body, dtype=_RECORD, count=count)
        out = []
        for n, (word, rs1, rs2) in enumerate(records.tolist()):
            try:
                out.append(Instruction.decode(word, rs1, rs2))
            except TraceError as err:
                raise with_context(err, index=n, source=source) from None
        return cls(out)

    # -- files ---------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write text or binary by suffix (see module docstring), atomically."""
        path = Path(path)
        data = self.to_text().encode() if _is_text(path) else self.to_bytes()
        write_atomic(path, data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Trace:
        path = Path(path)
        is_text = _is_text(path)
        data = path.read_bytes()
        if is_text:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as err:
                raise trace_error(f"not UTF-8 text at byte {err.start}", source=str(path)) from None
            return cls.from_text(text, source=str(path))
        return cls.from_bytes(data, source=str(path))

    # -- arrays --------------------------------------------------------------------------------

    def as_arrays(self) -> TraceArrays:
        """``(funct, rs1, rs2)`` as uint64 arrays of shape ``[len(self)]``."""
        n = len(self)
        funct = np.fromiter((i.funct for i in self.instructions), dtype=np.uint64, count=n)
        rs1 = np.fromiter((i.rs1 for i in self.instructions), dtype=np.uint64, count=n)
        rs2 = np.fromiter((i.rs2 for i in self.instructions), dtype=np.uint64, count=n)
        return TraceArrays(funct, rs1, rs2)

    @classmethod
    def from_arrays(cls, funct, rs1, rs2) -> Trace:
        """Inverse of `as_arrays`; each row is validated like any instruction."""
        funct, rs1, rs2 = (np.asarray(a, dtype=np.uint64).tolist() for a in (funct, rs1, rs2))
        if not len(funct) == len(rs1) == len(rs2):
            raise trace_error(f"array lengths differ: {len(funct)}, {len(rs1)}, {len(rs2)}")
        out = []
        for n, triple in enumerate(zip(funct, rs1, rs2)):
            try:
                out.append(Instruction(*triple))
            except TraceError as err:
                raise with_context(err, index=n) from None
        return cls(out)

    # -- semantics -----------------------------------------------------------------------------

    def accesses(self, params: IsaParams = IsaParams(), check: bool = False) -> tuple[Access, ...]:
        """Per instruction, the regions it reads and writes (see the module docstring).

        With ``check``, also validate as `validate` does (one pass for both).
        """
        state = _ConfigState(params.dim)
        if not check:
            return tuple(_access(ins, state, params) for ins in self.instructions)
        return tuple(self._checked(params, state))

    def validate(self, params: IsaParams = IsaParams()) -> None:
        """Raise `TraceError` at the first instruction that does not fit the hardware.

        Checks: rows and cols within the array and DMA limits, config_ld ids 0-2, no
        mvin/mvout to the garbage address, mvout_spad from a plain accumulator address to a
        plain scratchpad one, and every scratchpad/accumulator range inside the memory
        (``params.sp_rows`` / ``params.acc_rows``).
        """
        for _ in self._checked(params, _ConfigState(params.dim)):
            pass

    def _checked(self, params: IsaParams, state: _ConfigState) -> Iterator[Access]:
        dim = params.dim
        for index, ins in enumerate(self.instructions):
            def fail(detail: str, field: str) -> TraceError:
                return trace_error(detail, field=field, index=index, mnemonic=ins.mnemonic)

            m, f = ins.mnemonic, ins.fields()
            if m in ("mvin", "mvin2", "mvin3", "mvout"):
                local: LocalAddr = f["sp"]
                if local.is_garbage:
                    raise fail("a move needs a real local address, not garbage", "sp")
                if f["rows"] > dim:
                    raise fail(f"rows {f['rows']} exceed the array dimension {dim}", "rows")
                if local.norm and m != "mvout":
                    raise fail("normalizer commands (bits 28-26) only go with moves out of the "
                               "accumulator", "sp")
                if local.norm and (not local.acc or local.full):
                    raise fail("a normalizer command needs an accumulator address without the "
                               "full-width bit", "sp")
                _check_norm(local, f["rows"], fail, "sp")
                ld = {"mvin": 0, "mvin2": 1, "mvin3": 2}.get(m)
                shrunk = state.ld_shrunk[ld] if ld is not None else False
                limit = _max_cols(ins, local, shrunk, params)
                if f["cols"] > limit:
                    raise fail(f"cols {f['cols']} exceed {limit} (DMA of "
                               f"{params.dma_max_bytes} bytes per row)", "cols")
            elif m == "mvout_spad":
                src, dst = f["src"], f["dst"]
                if not src.acc or src.is_garbage or src.accumulate or src.full:
                    raise fail("the source must be a plain accumulator address (no "
                               "accumulate or full-width bits)", "src")
                _check_norm(src, f["rows"], fail, "src")
                if dst.acc or dst.raw != dst.row:
                    raise fail("the destination must be a plain scratchpad address", "dst")
                for name in ("rows", "cols"):
                    if f[name] > dim:
                        raise fail(f"{name} {f[name]} exceed the array dimension {dim}", name)
            elif m in ("preload", "compute_preloaded", "compute_accumulated"):
                for name in f:
                    if name.endswith(("_rows", "_cols")) and f[name] > dim:
                        raise fail(f"{name} {f[name]} exceeds the array dimension {dim}", name)
            elif m == "config_ld" and f["id"] > 2:
                raise fail(f"id {f['id']} is not a load state (0, 1 or 2)", "id")
            access = _access(ins, state, params)
            for region in (*access.reads, *access.writes):
                if region.space in ("sp", "acc"):
                    capacity = params.rows_of(region.space)
                    if region.stop > capacity:
                        name = "scratchpad" if region.space == "sp" else "accumulator"
                        raise fail(
                            f"{name} rows {region.start}..{region.stop - 1} are out of range: "
                            f"the {name} has {capacity} rows", region.field or "sp")
            yield access


def _is_text(path: Path) -> bool:
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return True
    if suffix in BINARY_SUFFIXES:
        return False
    raise trace_error(
        f"unknown trace file suffix {suffix!r}; use {', '.join(TEXT_SUFFIXES)} for text or "
        f"{', '.join(BINARY_SUFFIXES)} for binary", source=str(path))


__all__ = [
    "BINARY_SUFFIXES",
    "MAGIC",
    "TEXT_SUFFIXES",
    "VERSION",
    "Access",
    "Region",
    "Trace",
    "TraceArrays",
]
