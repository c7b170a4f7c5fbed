"""The Gemmini instruction set: encodings, typed constructors, decoded fields, assembly text.

Every Gemmini command is a RoCC R-type instruction on the **custom-3** opcode (0x7B) with
funct3 = 3 (xs1 = xs2 = 1, xd = 0), rd = x0 and funct7 = the Gemmini funct; its two 64-bit
operands travel in rs1 and rs2 (reference: dosa-gemmini-isa.md §B.1-B.4, `gemmini.h`,
`GemminiISA.scala`). An `Instruction` is the triple (funct, rs1, rs2); its 32-bit word is a
function of the funct alone, so a trace stores the word only to be a faithful RISC-V stream.

``fence`` is not a Gemmini command but the base-ISA ``fence iorw, iorw`` (`gemmini_fence()`
is ``asm volatile("fence")``). It is kept in traces as the pseudo-funct `Funct.FENCE` (128,
outside the 7-bit funct range) and encodes to its real word, 0x0FF0000F.

``mvout_spad`` (`Funct.MVOUT_SPAD`, funct 64) is a baco extension, not a Gemmini command: it
moves accumulator rows into scratchpad rows through the mvout read path (``config_st``'s scale
and activation, round half to even, int8 saturation) without touching DRAM, so a fused GEMM
chain keeps its intermediate on chip. Its funct is a free custom-3 funct7 (Gemmini uses 0-25
and 126), so it encodes to a real RoCC word; rs1 = the source accumulator address, rs2 =
rows<<48 | cols<<32 | the destination scratchpad address.

Each mnemonic has a `Layout`: the named bit fields of rs1 and rs2. Bits outside every field are
reserved and must be zero, and every field must fit its width, so each valid (funct, rs1, rs2)
has exactly one text form and the text and binary round trips are exact. Local (scratchpad /
accumulator) addresses are `LocalAddr` values: bit 31 accumulator, bit 30 accumulate, bit 29
full-width read, bits 28-26 the normalizer command, bits 25-0 the row; 0xFFFFFFFF is the
garbage address.

>>> mvin = Instruction.mvin(dram_addr=0x1000, sp_addr=0, rows=16, cols=16)
>>> mvin.to_text()
'mvin dram=0x1000 sp=0x0000 rows=16 cols=16'
>>> hex(mvin.encode()[0])
'0x4c5b07b'
>>> Instruction.decode(*mvin.encode()) == mvin
True
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from workloads.errors import ConfigError, TraceError

# ---------------------------------------------------------------------------------------------
# Encoding constants (RoCC on custom-3).

OPCODE_CUSTOM3 = 0b1111011  # 0x7B, RISC-V custom-3 (RV128 reserved, used by RoCC)
FUNCT3_RS1_RS2 = 0b011  # xd=0, xs1=1, xs2=1: two source registers, no result
# The register indices are nominal: a trace carries the operand values themselves. We use
# a1/a2 (x11, x12) for every instruction so that a word decodes to exactly one Instruction.
RS1_REG = 11
RS2_REG = 12
FENCE_WORD = 0x0FF0000F  # fence iorw, iorw
GARBAGE_ADDR = 0xFFFFFFFF  # gemmini.h GARBAGE_ADDR ((uint32_t)(-1))
U64_MAX = (1 << 64) - 1


class Funct(enum.IntEnum):
    """Gemmini funct7 values (gemmini.h `k_*`, GemminiISA.scala), plus baco's `MVOUT_SPAD`
    extension and the `FENCE` pseudo-funct (see the module docstring)."""

    CONFIG = 0
    MVIN2 = 1
    MVIN = 2
    MVOUT = 3
    COMPUTE_PRELOADED = 4
    COMPUTE_ACCUMULATED = 5
    PRELOAD = 6
    FLUSH = 7
    LOOP_WS = 8
    LOOP_WS_CONFIG_BOUNDS = 9
    LOOP_WS_CONFIG_ADDRS_AB = 10
    LOOP_WS_CONFIG_ADDRS_DC = 11
    LOOP_WS_CONFIG_STRIDES_AB = 12
    LOOP_WS_CONFIG_STRIDES_DC = 13
    MVIN3 = 14
    LOOP_CONV_WS = 15
    LOOP_CONV_WS_CONFIG_1 = 16
    LOOP_CONV_WS_CONFIG_2 = 17
    LOOP_CONV_WS_CONFIG_3 = 18
    LOOP_CONV_WS_CONFIG_4 = 19
    LOOP_CONV_WS_CONFIG_5 = 20
    LOOP_CONV_WS_CONFIG_6 = 21
    MVOUT_SPAD = 64  # baco extension: accumulator -> scratchpad, see the module docstring
    FENCE = 128  # not a RoCC command: the base-ISA fence, see the module docstring


class ConfigType(enum.IntEnum):
    """rs1[1:0] of a CONFIG (funct 0) instruction: which configuration it sets."""

    EX = 0
    LD = 1
    ST = 2
    NORM = 3  # CONFIG_BERT in gemmini.h: normalizer constants for layernorm / softmax / I-GELU


class Dataflow(enum.IntEnum):
    OS = 0  # output stationary
    WS = 1  # weight stationary


class Activation(enum.IntEnum):
    NONE = 0
    RELU = 1
    LAYERNORM = 2
    IGELU = 3
    SOFTMAX = 4


class NormCmd(enum.IntEnum):
    """The normalizer command of a move from the accumulator (local address bits 28-26)."""

    RESET = 0
    SUM = 1
    MEAN = 2
    VARIANCE = 3
    INV_STDDEV = 4
    MAX = 5
    SUM_EXP = 6
    INV_SUM_EXP = 7


STAT_CMDS = (NormCmd.MAX, NormCmd.SUM_EXP, NormCmd.INV_SUM_EXP)
"""The commands of a statistics pass: a softmax's row maximum and sum of exponentials, read
through the normalizer and written nowhere."""


# ---------------------------------------------------------------------------------------------
# Errors.


def trace_error(
    detail: str,
    *,
    field: str | None = None,
    index: int | None = None,
    line: int | None = None,
    source: str | None = None,
    mnemonic: str | None = None,
) -> TraceError:
    """A `TraceError` whose message and attributes name where the problem is.

    The attributes ``index``, ``line``, ``field``, ``source``, ``mnemonic`` and ``detail`` let
    callers (and tests) check the location without parsing the message.
    """
    prefix = ""
    if source is not None:
        prefix = f"{source}:{line}: " if line is not None else f"{source}: "
    elif line is not None:
        prefix = f"line {line}: "
    where = []
    if index is not None:
        where.append(f"instruction #{index}" + (f" ({mnemonic})" if mnemonic else ""))
    elif mnemonic:
        where.append(mnemonic)
    if field is not None:
        where.append(f"field {field!r}")
    err = TraceError(prefix + (", ".join(where) + ": " if where else "") + detail)
    err.detail = detail
    err.field = field
    err.index = index
    err.line = line
    err.source = source
    err.mnemonic = mnemonic
    return err


def with_context(err: TraceError, **context: Any) -> TraceError:
    """The same error with more location (index, line, source) filled in where it was unknown."""
    merged = {
        key: getattr(err, key, None)
        for key in ("field", "index", "line", "source", "mnemonic")
    }
    for key, value in context.items():
        if merged.get(key) is None:
            merged[key] = value
    return trace_error(getattr(err, "detail", str(err)), **merged)


# ---------------------------------------------------------------------------------------------
# Local addresses.

_ROW_BITS = 26
_ROW_MASK = (1 << _ROW_BITS) - 1


@dataclasses.dataclass(frozen=True)
class LocalAddr:
    """A 32-bit scratchpad / accumulator address (LocalAddr.scala, README "Local addressing").

    ``row`` is bits 25-0 (Gemmini's `data` plus its unused garbage bits), ``norm`` bits 28-26
    (the normalizer command `gemmini.h` ORs in for layernorm and softmax). The flags are raw
    bits: ``accumulate`` (bit 30) only means something for accumulator writes and ``full``
    (bit 29) for accumulator reads, but any combination is representable so decoding is exact.

    >>> LocalAddr.accumulator(0x10, accumulate=True).raw == (3 << 30) | 0x10
    True
    >>> LocalAddr.from_raw(GARBAGE_ADDR).is_garbage
    True
    """

    row: int
    acc: bool = False
    accumulate: bool = False
    full: bool = False
    norm: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.row, bool) or not isinstance(self.row, (int, np.integer)):
            raise trace_error(f"row must be an integer, got {self.row!r}", field="row")
        if not 0 <= self.row <= _ROW_MASK:
            raise trace_error(
                f"row {self.row} does not fit in {_ROW_BITS} bits (0..{_ROW_MASK})", field="row"
            )
        if not 0 <= self.norm <= 7:
            raise trace_error(f"norm command {self.norm} does not fit in 3 bits", field="norm")
        object.__setattr__(self, "row", int(self.row))

    @classmethod
    def sp(cls, row: int) -> LocalAddr:
        """Scratchpad row ``row``."""
        return cls(row)

    @classmethod
    def accumulator(
        cls, row: int, *, accumulate: bool = False, full: bool = False, norm: int = 0
    ) -> LocalAddr:
        """Accumulator row ``row``; ``accumulate`` adds on write, ``full`` reads int32 rows."""
        return cls(row, True, bool(accumulate), bool(full), norm)

    @classmethod
    def garbage(cls) -> LocalAddr:
        """The garbage address: "no input" for A, zeros for B/D, "do not write" for C."""
        return cls.from_raw(GARBAGE_ADDR)

    @classmethod
    def from_raw(cls, raw: int) -> LocalAddr:
        raw = int(raw)
        if not 0 <= raw <= 0xFFFFFFFF:
            raise trace_error(f"local address {raw:#x} does not fit in 32 bits", field="local")
        return cls(
            raw & _ROW_MASK,
            bool(raw >> 31 & 1),
            bool(raw >> 30 & 1),
            bool(raw >> 29 & 1),
            raw >> 26 & 7,
        )

    @property
    def raw(self) -> int:
        return (
            int(self.acc) << 31
            | int(self.accumulate) << 30
            | int(self.full) << 29
            | self.norm << 26
            | self.row
        )

    @property
    def is_garbage(self) -> bool:
        return self.raw == GARBAGE_ADDR

    @property
    def space(self) -> str:
        """``"sp"`` or ``"acc"``: which memory the row indexes."""
        return "acc" if self.acc else "sp"

    def to_text(self) -> str:
        """``0x0010`` (scratchpad), ``acc:0x0010+accumulate+full+norm2``, or ``garbage``."""
        if self.is_garbage:
            return "garbage"
        if not self.acc:
            if self.accumulate or self.full or self.norm:
                return f"{self.raw:#010x}"  # odd flag bits on a scratchpad address: raw form
            return f"{self.row:#06x}"
        text = f"acc:{self.row:#06x}"
        if self.accumulate:
            text += "+accumulate"
        if self.full:
            text += "+full"
        if self.norm:
            text += f"+norm{self.norm}"
        return text

    @classmethod
    def from_text(cls, text: str) -> LocalAddr:
        """Inverse of `to_text`; also accepts ``sp:ROW`` and a raw 32-bit integer."""
        if text == "garbage":
            return cls.garbage()
        space, sep, rest = text.partition(":")
        if not sep:
            return cls.from_raw(_parse_int(text))
        if space not in ("sp", "acc"):
            raise trace_error(f"unknown address space {space!r} in {text!r}; use sp: or acc:")
        row_text, *flags = rest.split("+")
        accumulate = full = False
        norm = 0
        for flag in flags:
            if flag == "accumulate":
                accumulate = True
            elif flag == "full":
                full = True
            elif flag.startswith("norm") and flag[4:].isdigit():
                norm = int(flag[4:])
            else:
                raise trace_error(
                    f"unknown local-address flag {flag!r} in {text!r}; "
                    "use +accumulate, +full or +normN"
                )
        return cls(_parse_int(row_text), space == "acc", accumulate, full, norm)


# ---------------------------------------------------------------------------------------------
# Field layouts.


@dataclasses.dataclass(frozen=True)
class Field:
    """One named bit field of rs1 or rs2.

    ``kind`` says how the field reads and prints: ``int`` (decimal), ``hex`` (addresses),
    ``bool``, ``local`` (`LocalAddr`), ``f32`` (an IEEE float32 bit pattern, printed as its
    value) or ``choice`` (a small enum printed by name). ``default`` (None = required) is used
    by the typed constructors and by text parsing when the operand is omitted; ``fixed``
    marks a selector (config type) that is part of the mnemonic, not an operand.
    """

    name: str
    reg: str
    lsb: int
    width: int
    kind: str = "int"
    default: Any = 0
    choices: tuple[str, ...] = ()
    fixed: int | None = None

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    @property
    def max(self) -> int:
        return (1 << self.width) - 1


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mnemonic's funct, its rs1/rs2 fields, and the bits that must be zero."""

    mnemonic: str
    funct: int
    fields: tuple[Field, ...]

    @property
    def operands(self) -> tuple[Field, ...]:
        """The fields shown in text (selectors excluded), in text order."""
        return tuple(f for f in self.fields if f.fixed is None)

    @functools.cache  # noqa: B019 - layouts are a fixed, module-level set
    def reserved_mask(self, reg: str) -> int:
        """Bits of ``reg`` no field uses (they must be zero); cached, as every decode asks."""
        used = 0
        for f in self.fields:
            if f.reg == reg:
                used |= f.mask
        return U64_MAX & ~used

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def _f(name, reg, lsb, width, kind="int", default=0, choices=(), fixed=None) -> Field:
    return Field(name, reg, lsb, width, kind, default, choices, fixed)


_ACT2 = ("none", "relu", "layernorm", "igelu")
_ACT3 = ("none", "relu", "layernorm", "igelu", "softmax")
_REQ = None  # a required operand


def _move(mnemonic: str, funct: Funct) -> Layout:
    # gemmini_extended_mvin / mvout: rs1 = DRAM byte address, rs2 = rows<<48 | cols<<32 | addr.
    return Layout(mnemonic, funct, (
        _f("dram", "rs1", 0, 64, "hex", _REQ),
        _f("sp", "rs2", 0, 32, "local", _REQ),
        _f("rows", "rs2", 48, 16, "int", _REQ),
        _f("cols", "rs2", 32, 16, "int", _REQ),
    ))


def _pair(mnemonic: str, funct: Funct, x: str, y: str) -> Layout:
    # preload / compute: rs1 and rs2 are each rows<<48 | cols<<32 | local address.
    return Layout(mnemonic, funct, (
        _f(x, "rs1", 0, 32, "local", _REQ),
        _f(f"{x}_rows", "rs1", 48, 16, "int", _REQ),
        _f(f"{x}_cols", "rs1", 32, 16, "int", _REQ),
        _f(y, "rs2", 0, 32, "local", _REQ),
        _f(f"{y}_rows", "rs2", 48, 16, "int", _REQ),
        _f(f"{y}_cols", "rs2", 32, 16, "int", _REQ),
    ))


def _two(mnemonic: str, funct: Funct, x: str, y: str, kind: str = "hex") -> Layout:
    # Two bare 64-bit operands: loop addresses (hex) or strides (int, in elements).
    return Layout(mnemonic, funct, (
        _f(x, "rs1", 0, 64, kind, _REQ), _f(y, "rs2", 0, 64, kind, _REQ),
    ))


def _packed(mnemonic: str, funct: Funct, rs1: list, rs2: list) -> Layout:
    # (name, lsb, width) lists, for the loop_conv_ws configs; all plain integers.
    return Layout(mnemonic, funct, tuple(
        [_f(n, "rs1", lsb, w) for n, lsb, w in rs1] + [_f(n, "rs2", lsb, w) for n, lsb, w in rs2]
    ))


LAYOUTS: dict[str, Layout] = {layout.mnemonic: layout for layout in (
    # gemmini_extended3_config_ex; ConfigExRs1 / ConfigExRs2 in GemminiISA.scala.
    # Text shows operands in layout order, so the important ones come first.
    Layout("config_ex", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.EX),
        _f("dataflow", "rs1", 2, 1, "choice", Dataflow.WS, ("os", "ws")),
        _f("act", "rs1", 3, 2, "choice", 0, _ACT2),
        _f("a_stride", "rs1", 16, 16, "int", 1),
        _f("c_stride", "rs2", 48, 16, "int", 1),
        _f("a_transpose", "rs1", 8, 1, "bool"),
        _f("b_transpose", "rs1", 9, 1, "bool"),
        _f("set_only_strides", "rs1", 7, 1, "bool"),
        _f("acc_scale", "rs1", 32, 32, "f32", 1.0),
        _f("sys_shift", "rs2", 0, 32),
        _f("relu6_shift", "rs2", 32, 16),
    )),
    # gemmini_extended5_config_ld; ConfigMvinRs1. rs2 is the DRAM row stride in bytes.
    Layout("config_ld", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.LD),
        _f("id", "rs1", 3, 2),
        _f("stride", "rs2", 0, 64, "int", _REQ),
        _f("block_stride", "rs1", 16, 16, "int", _REQ),
        _f("scale", "rs1", 32, 32, "f32", 1.0),
        _f("shrunk", "rs1", 2, 1, "bool"),
        _f("pixel_repeats", "rs1", 8, 8, "int", 1),
    )),
    # gemmini_extended2_config_st; ConfigMvoutRs1 / ConfigMvoutRs2.
    Layout("config_st", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.ST),
        _f("stride", "rs2", 0, 32, "int", _REQ),
        _f("act", "rs1", 2, 2, "choice", 0, _ACT2),
        _f("acc_scale", "rs2", 32, 32, "f32", 1.0),
        _f("pool_stride", "rs1", 4, 2),
        _f("pool_size", "rs1", 6, 2),
        _f("pool_out_dim", "rs1", 24, 8),
        _f("porows", "rs1", 32, 8),
        _f("pocols", "rs1", 40, 8),
        _f("orows", "rs1", 48, 8),
        _f("ocols", "rs1", 56, 8),
        _f("upad", "rs1", 8, 2),
        _f("lpad", "rs1", 10, 2),
    )),
    # gemmini_config_bert (CONFIG_BERT = 3): normalizer / I-GELU constants.
    Layout("config_norm", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.NORM),
        _f("stat_id", "rs1", 8, 8),
        _f("act_msb", "rs1", 16, 1, "bool"),
        _f("set_stats_id_only", "rs1", 17, 1, "bool"),
        _f("q_const_type", "rs1", 18, 1, "bool"),
        _f("q_const", "rs1", 32, 32),
        _f("igelu_qb", "rs2", 0, 32),
        _f("igelu_qc", "rs2", 32, 32),
    )),
    _move("mvin", Funct.MVIN),
    _move("mvin2", Funct.MVIN2),
    _move("mvin3", Funct.MVIN3),
    _move("mvout", Funct.MVOUT),
    # baco extension (module docstring): rs1 = source accumulator address, rs2 as a move's.
    Layout("mvout_spad", Funct.MVOUT_SPAD, (
        _f("src", "rs1", 0, 32, "local", _REQ),
        _f("dst", "rs2", 0, 32, "local", _REQ),
        _f("rows", "rs2", 48, 16, "int", _REQ),
        _f("cols", "rs2", 32, 16, "int", _REQ),
    )),
    _pair("preload", Funct.PRELOAD, "bd", "c"),
    _pair("compute_preloaded", Funct.COMPUTE_PRELOADED, "a", "bd"),
    _pair("compute_accumulated", Funct.COMPUTE_ACCUMULATED, "a", "bd"),
    Layout("flush", Funct.FLUSH, (_f("skip", "rs1", 0, 1, "bool"),)),
    # gemmini_loop_ws: five configs, then LOOP_WS itself.
    Layout("loop_ws_config_bounds", Funct.LOOP_WS_CONFIG_BOUNDS, (
        _f("i", "rs2", 0, 16, "int", _REQ),
        _f("j", "rs2", 16, 16, "int", _REQ),
        _f("k", "rs2", 32, 16, "int", _REQ),
        _f("pad_i", "rs1", 0, 16),
        _f("pad_j", "rs1", 16, 16),
        _f("pad_k", "rs1", 32, 16),
    )),
    _two("loop_ws_config_addrs_ab", Funct.LOOP_WS_CONFIG_ADDRS_AB, "a", "b"),
    _two("loop_ws_config_addrs_dc", Funct.LOOP_WS_CONFIG_ADDRS_DC, "d", "c"),
    _two("loop_ws_config_strides_ab", Funct.LOOP_WS_CONFIG_STRIDES_AB, "a_stride", "b_stride",
         "int"),
    _two("loop_ws_config_strides_dc", Funct.LOOP_WS_CONFIG_STRIDES_DC, "d_stride", "c_stride",
         "int"),
    Layout("loop_ws", Funct.LOOP_WS, (
        _f("ex_accumulate", "rs1", 0, 1, "bool"),
        _f("full_c", "rs1", 1, 1, "bool"),
        _f("low_d", "rs1", 2, 1, "bool"),
        _f("act", "rs1", 8, 3, "choice", 0, _ACT3),
        _f("b_spad_id", "rs1", 16, 2),
        _f("a_spad_id", "rs1", 18, 2),
        _f("a_transpose", "rs2", 0, 1, "bool"),
        _f("b_transpose", "rs2", 1, 1, "bool"),
        _f("is_resadd", "rs2", 2, 1, "bool"),
    )),
    # gemmini_loop_conv_ws: CONFIG_1..6 (funct 16-21), then LOOP_CONV_WS (15).
    _packed("loop_conv_ws_config_1", Funct.LOOP_CONV_WS_CONFIG_1,
            [("batch_size", 0, 16), ("in_row_dim", 16, 16), ("in_channels", 32, 16),
             ("out_channels", 48, 16)],
            [("out_row_dim", 0, 16), ("pool_out_row_dim", 16, 16), ("out_col_dim", 32, 16),
             ("stride", 48, 8), ("padding", 56, 8)]),
    _packed("loop_conv_ws_config_2", Funct.LOOP_CONV_WS_CONFIG_2,
            [("pool_padding", 0, 8), ("pool_stride", 8, 8), ("pool_size", 16, 16),
             ("pool_out_col_dim", 32, 16), ("kernel_dim", 48, 16)],
            [("pochs", 0, 16), ("pocols", 16, 16), ("porows", 32, 16), ("batches", 48, 16)]),
    _packed("loop_conv_ws_config_3", Funct.LOOP_CONV_WS_CONFIG_3,
            [("lpad", 0, 16), ("kchs", 16, 16), ("kcols", 32, 16), ("krows", 48, 16)],
            [("in_col_dim", 0, 16), ("plpad", 16, 8), ("dpad", 24, 8), ("upad", 32, 16),
             ("rpad", 48, 16)]),
    _packed("loop_conv_ws_config_4", Funct.LOOP_CONV_WS_CONFIG_4,
            [("kernel_dilation", 0, 10), ("pdpad", 10, 11), ("pupad", 21, 11),
             ("prpad", 32, 16), ("orows", 48, 16)],
            [("ocols", 0, 16), ("out_stride", 16, 16), ("weight_stride", 32, 16),
             ("in_stride", 48, 16)]),
    _two("loop_conv_ws_config_5", Funct.LOOP_CONV_WS_CONFIG_5, "weights", "output"),
    _two("loop_conv_ws_config_6", Funct.LOOP_CONV_WS_CONFIG_6, "bias", "input"),
    Layout("loop_conv_ws", Funct.LOOP_CONV_WS, (
        _f("no_bias", "rs1", 0, 1, "bool"),
        _f("wrot180", "rs1", 1, 1, "bool"),
        _f("trans_output_1203", "rs1", 2, 1, "bool"),
        _f("trans_weight_1203", "rs1", 3, 1, "bool"),
        _f("trans_weight_0132", "rs1", 4, 1, "bool"),
        _f("trans_input_3120", "rs1", 5, 1, "bool"),
        _f("dw", "rs1", 6, 1, "bool"),
        _f("max_pixels_per_row", "rs1", 8, 8, "int", 1),
        _f("b_spad_id", "rs1", 16, 2),
        _f("a_spad_id", "rs1", 18, 2),
        _f("no_pool", "rs2", 0, 1, "bool"),
        _f("downsample", "rs2", 1, 1, "bool"),
        _f("input_dilated", "rs2", 2, 1, "bool"),
        _f("activation", "rs2", 3, 3, "choice", 0, _ACT3),
    )),
    Layout("fence", Funct.FENCE, ()),
)}

MNEMONICS: tuple[str, ...] = tuple(LAYOUTS)
_CONFIG_LAYOUTS = {
    ConfigType.EX: LAYOUTS["config_ex"],
    ConfigType.LD: LAYOUTS["config_ld"],
    ConfigType.ST: LAYOUTS["config_st"],
    ConfigType.NORM: LAYOUTS["config_norm"],
}
_BY_FUNCT = {
    layout.funct: layout for layout in LAYOUTS.values() if layout.funct != Funct.CONFIG
}


def layout_of(funct: int, rs1: int = 0) -> Layout:
    """The layout for a funct (and, for CONFIG, the config type in rs1[1:0])."""
    if funct == Funct.CONFIG:
        return _CONFIG_LAYOUTS[ConfigType(rs1 & 3)]
    try:
        return _BY_FUNCT[funct]
    except KeyError:
        raise trace_error(
            f"unknown funct {funct}; Gemmini functs are 0-21 (and {int(Funct.MVOUT_SPAD)} for "
            f"mvout_spad, {int(Funct.FENCE)} for fence)",
            field="funct",
        ) from None


# ---------------------------------------------------------------------------------------------
# Value parsing and printing.


def _parse_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise trace_error(f"{text!r} is not an integer (decimal, 0x.., 0b.. or 0o..)") from None
    if value < 0:
        raise trace_error(f"{text!r} is negative; fields are unsigned")
    return value


def f32_bits(value: float) -> int:
    """The IEEE float32 bit pattern of ``value`` (round to nearest even)."""
    try:
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    except OverflowError:
        raise trace_error(f"{value!r} overflows float32") from None


def f32_value(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _f32_text(bits: int) -> str:
    value = f32_value(bits)
    if not math.isnan(value):
        text = str(np.float32(value))  # shortest text that round-trips the float32
        if f32_bits(float(text)) == bits:
            return text
    return f"{bits:#010x}"  # NaN payloads (and any value the shortest form would not restore)


def _raw_from_text(f: Field, text: str) -> int:
    """A field's raw bits from its text (the inverse of `_text_from_raw`)."""
    if f.kind == "local":
        return LocalAddr.from_text(text).raw
    if f.kind == "f32":
        if text.lower().startswith("0x"):
            return _parse_int(text)
        try:
            return f32_bits(float(text))
        except ValueError:
            raise trace_error(f"{text!r} is not a float (or 0x.. float32 bits)") from None
    if f.kind == "bool" and text in ("true", "false"):
        return int(text == "true")
    if f.kind == "choice" and text in f.choices:
        return f.choices.index(text)
    return _parse_int(text)


def _text_from_raw(f: Field, raw: int) -> str:
    if f.kind == "local":
        return LocalAddr.from_raw(raw).to_text()
    if f.kind == "hex":
        return f"{raw:#x}"
    if f.kind == "f32":
        return _f32_text(raw)
    if f.kind == "choice" and raw < len(f.choices):
        return f.choices[raw]
    return str(raw)


def _raw_from_value(f: Field, value: Any) -> int:
    """A field's raw bits from a Python value (a typed-constructor argument)."""
    if f.kind == "local":
        if isinstance(value, LocalAddr):
            return value.raw
    elif f.kind == "f32":
        if isinstance(value, (float, np.floating)) or (
            isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        ):
            return f32_bits(float(value))
        raise trace_error(f"expected a float, got {value!r}", field=f.name)
    elif f.kind == "choice" and isinstance(value, str):
        if value in f.choices:
            return f.choices.index(value)
        raise trace_error(f"{value!r} is not one of {f.choices}", field=f.name)
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise trace_error(f"expected an integer, got {value!r}", field=f.name)


def _value_from_raw(f: Field, raw: int) -> Any:
    if f.kind == "local":
        return LocalAddr.from_raw(raw)
    if f.kind == "bool":
        return bool(raw)
    if f.kind == "f32":
        return f32_value(raw)
    return raw


def _pack(layout: Layout, raws: Mapping[str, int]) -> tuple[int, int]:
    regs = {"rs1": 0, "rs2": 0}
    for f in layout.fields:
        raw = f.fixed if f.fixed is not None else raws[f.name]
        if not 0 <= raw <= f.max:
            raise trace_error(
                f"value {raw} ({raw:#x}) does not fit in {f.width} bits (max {f.max})",
                field=f.name, mnemonic=layout.mnemonic,
            )
        regs[f.reg] |= raw << f.lsb
    return regs["rs1"], regs["rs2"]


# ---------------------------------------------------------------------------------------------
# Hardware numbers the ISA needs to check ranges.


@dataclasses.dataclass(frozen=True)
class IsaParams:
    """The few hardware numbers that give an instruction's fields meaning.

    Defaults are Gemmini's `defaultConfig` (dosa-gemmini-isa.md §B.5): a 16x16 array, a
    256 KiB scratchpad of 16-byte rows in 4 banks, a 64 KiB accumulator of 16x4-byte rows in 2
    banks, int8 inputs, int32 accumulators, 64-byte DMA beats.
    """

    dim: int = 16
    sp_rows: int = 16384
    sp_banks: int = 4
    acc_rows: int = 1024
    acc_banks: int = 2
    input_bytes: int = 1
    acc_bytes: int = 4
    dma_max_bytes: int = 64

    def __post_init__(self) -> None:
        for name in ("dim", "sp_rows", "sp_banks", "acc_rows", "acc_banks", "input_bytes",
                     "acc_bytes", "dma_max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"IsaParams.{name} must be a positive integer, got {value!r}")

    @property
    def max_block_len(self) -> int:
        """DIM-wide blocks one mvin may move into the scratchpad (gemmini_params MAX_BLOCK_LEN)."""
        return max(1, self.dma_max_bytes // (self.dim * self.input_bytes))

    @property
    def max_block_len_acc(self) -> int:
        """The same for int32 rows into the accumulator (MAX_BLOCK_LEN_ACC)."""
        return max(1, self.dma_max_bytes // (self.dim * self.acc_bytes))

    def rows_of(self, space: str) -> int:
        return self.acc_rows if space == "acc" else self.sp_rows

    @property
    def sp_bank_rows(self) -> int:
        """Rows per scratchpad bank: the execute unit reads one row per bank per cycle."""
        return max(1, self.sp_rows // self.sp_banks)

    @classmethod
    def from_hardware(cls, hw: Any) -> IsaParams:
        """The ISA's view of an `accel.arch.HardwareConfig` (read by attribute name).

        Rows are DIM elements wide: ``sp_kb`` KiB of ``input_bits`` elements and ``acc_kb``
        KiB of ``acc_bits`` elements. Gemmini's ISA addresses a square DIM x DIM array.
        """
        if hw.pe_rows != hw.pe_cols:
            raise ConfigError(
                f"hardware {getattr(hw, 'name', '') or hw!r}: Gemmini traces need a square "
                f"array, got {hw.pe_rows}x{hw.pe_cols} PEs")
        dim = int(hw.pe_rows)
        input_bytes = max(1, int(hw.input_bits) // 8)
        acc_bytes = max(1, int(hw.acc_bits) // 8)
        return cls(
            dim=dim,
            sp_rows=int(hw.sp_kb * 1024) // (dim * input_bytes),
            acc_rows=int(hw.acc_kb * 1024) // (dim * acc_bytes),
            input_bytes=input_bytes,
            acc_bytes=acc_bytes,
        )


# ---------------------------------------------------------------------------------------------
# Instructions.


def _check_raw(funct: int, rs1: int, rs2: int) -> Layout:
    for name, value in (("funct", funct), ("rs1", rs1), ("rs2", rs2)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise trace_error(f"must be an integer, got {value!r}", field=name)
    for name, value in (("rs1", rs1), ("rs2", rs2)):
        if not 0 <= value <= U64_MAX:
            raise trace_error(f"{value:#x} does not fit in 64 bits", field=name)
    layout = layout_of(funct, rs1)
    for reg, value in (("rs1", rs1), ("rs2", rs2)):
        stray = value & layout.reserved_mask(reg)
        if stray:
            bits = [b for b in range(64) if stray >> b & 1]
            raise trace_error(
                f"reserved bits {bits} are set ({stray:#x}); they must be zero",
                field=reg, mnemonic=layout.mnemonic,
            )
    return layout


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One Gemmini command: funct and the two 64-bit operand registers, validated on creation.

    Build one with a typed constructor (`mvin`, `preload`, `config_ex`, ...), `build` (any
    mnemonic, named fields), `decode` (a binary word) or `from_text` (one assembly line).

    >>> ins = Instruction.preload(LocalAddr.garbage(), LocalAddr.accumulator(0), 16, 16, 16, 16)
    >>> ins.fields()["c"].acc, ins.mnemonic
    (True, 'preload')
    """

    funct: int
    rs1: int = 0
    rs2: int = 0

    def __post_init__(self) -> None:
        layout = _check_raw(self.funct, self.rs1, self.rs2)
        object.__setattr__(self, "funct", int(self.funct))
        object.__setattr__(self, "rs1", int(self.rs1))
        object.__setattr__(self, "rs2", int(self.rs2))
        object.__setattr__(self, "_layout", layout)

    # -- views ---------------------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def mnemonic(self) -> str:
        return self._layout.mnemonic

    def raw_fields(self) -> dict[str, int]:
        """Every operand's raw bits, by name (selectors excluded)."""
        regs = {"rs1": self.rs1, "rs2": self.rs2}
        return {f.name: (regs[f.reg] >> f.lsb) & f.max for f in self._layout.operands}

    def fields(self) -> dict[str, Any]:
        """Named operands as Python values: ints, bools, floats and `LocalAddr` addresses."""
        raws = self.raw_fields()
        return {f.name: _value_from_raw(f, raws[f.name]) for f in self._layout.operands}

    def __getitem__(self, name: str) -> Any:
        """One operand's value, e.g. ``ins["rows"]``."""
        try:
            return self.fields()[name]
        except KeyError:
            raise KeyError(f"{self.mnemonic} has no field {name!r}") from None

    def replace(self, **values: Any) -> Instruction:
        """A copy with some operands changed (values as in `build`)."""
        merged: dict[str, Any] = dict(self.raw_fields())
        raws = _raws_from_values(self._layout, values)
        merged.update(raws)
        return Instruction._from_raws(self._layout, merged)

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def _from_raws(cls, layout: Layout, raws: Mapping[str, int]) -> Instruction:
        rs1, rs2 = _pack(layout, raws)
        return cls(layout.funct, rs1, rs2)

    @classmethod
    def build(cls, mnemonic: str, **values: Any) -> Instruction:
        """Any instruction from its mnemonic and named operands; omitted ones take defaults.

        Values are Python values (``LocalAddr`` or raw int for addresses, floats for scales,
        names or ints for choices).
        """
        layout = _layout_by_name(mnemonic)
        raws = _raws_from_values(layout, values)
        for f in layout.operands:
            if f.name not in raws:
                if f.default is None:
                    raise trace_error("required operand is missing", field=f.name,
                                      mnemonic=mnemonic)
                raws[f.name] = _raw_from_value(f, f.default)
        return cls._from_raws(layout, raws)

    @classmethod
    def mvin(cls, dram_addr: int, sp_addr: LocalAddr | int, rows: int, cols: int) -> Instruction:
        """DRAM -> scratchpad/accumulator, stride and scale from ``config_ld`` id 0."""
        return cls.build("mvin", dram=dram_addr, sp=sp_addr, rows=rows, cols=cols)

    @classmethod
    def mvin2(cls, dram_addr: int, sp_addr: LocalAddr | int, rows: int, cols: int) -> Instruction:
        """As `mvin`, with the ``config_ld`` id 1 settings (B by convention)."""
        return cls.build("mvin2", dram=dram_addr, sp=sp_addr, rows=rows, cols=cols)

    @classmethod
    def mvin3(cls, dram_addr: int, sp_addr: LocalAddr | int, rows: int, cols: int) -> Instruction:
        """As `mvin`, with the ``config_ld`` id 2 settings (D / bias by convention)."""
        return cls.build("mvin3", dram=dram_addr, sp=sp_addr, rows=rows, cols=cols)

    @classmethod
    def mvout(cls, dram_addr: int, sp_addr: LocalAddr | int, rows: int, cols: int) -> Instruction:
        """Scratchpad/accumulator -> DRAM, stride, activation and scale from ``config_st``."""
        return cls.build("mvout", dram=dram_addr, sp=sp_addr, rows=rows, cols=cols)

    @classmethod
    def mvout_spad(cls, src: LocalAddr | int, dst: LocalAddr | int, rows: int,
                   cols: int) -> Instruction:
        """Accumulator -> scratchpad, scaled and activated by ``config_st`` as `mvout` (baco
        extension): keeps an intermediate on chip."""
        return cls.build("mvout_spad", src=src, dst=dst, rows=rows, cols=cols)

    @classmethod
    def preload(
        cls, bd_addr: LocalAddr | int, c_addr: LocalAddr | int,
        bd_rows: int, bd_cols: int, c_rows: int, c_cols: int,
    ) -> Instruction:
        """Load B (WS) or D (OS) into the array and name C, the next compute's output."""
        return cls.build("preload", bd=bd_addr, c=c_addr, bd_rows=bd_rows, bd_cols=bd_cols,
                         c_rows=c_rows, c_cols=c_cols)

    @classmethod
    def compute_preloaded(
        cls, a_addr: LocalAddr | int, bd_addr: LocalAddr | int,
        a_rows: int, a_cols: int, bd_rows: int, bd_cols: int,
    ) -> Instruction:
        """Push A through the array using the just-preloaded weights (COMPUTE_AND_FLIP)."""
        return cls.build("compute_preloaded", a=a_addr, bd=bd_addr, a_rows=a_rows,
                         a_cols=a_cols, bd_rows=bd_rows, bd_cols=bd_cols)

    @classmethod
    def compute_accumulated(
        cls, a_addr: LocalAddr | int, bd_addr: LocalAddr | int,
        a_rows: int, a_cols: int, bd_rows: int, bd_cols: int,
    ) -> Instruction:
        """Push A through the array reusing the weights already there (COMPUTE_AND_STAY)."""
        return cls.build("compute_accumulated", a=a_addr, bd=bd_addr, a_rows=a_rows,
                         a_cols=a_cols, bd_rows=bd_rows, bd_cols=bd_cols)

    @classmethod
    def config_ex(
        cls, dataflow: int | str = Dataflow.WS, act: int | str = Activation.NONE, *,
        sys_shift: int = 0, acc_scale: float = 1.0, c_stride: int = 1, a_stride: int = 1,
        a_transpose: bool = False, b_transpose: bool = False, set_only_strides: bool = False,
        relu6_shift: int = 0,
    ) -> Instruction:
        """Execute-unit configuration (gemmini_extended3_config_ex)."""
        return cls.build("config_ex", dataflow=dataflow, act=act, sys_shift=sys_shift,
                         acc_scale=acc_scale, c_stride=c_stride, a_stride=a_stride,
                         a_transpose=a_transpose, b_transpose=b_transpose,
                         set_only_strides=set_only_strides, relu6_shift=relu6_shift)

    @classmethod
    def config_ld(
        cls, stride_bytes: int, *, scale: float = 1.0, shrunk: bool = False,
        block_stride: int = 16, pixel_repeats: int = 1, id: int = 0,
    ) -> Instruction:
        """Load-unit configuration for mvin ``id`` 0/1/2 (gemmini_extended5_config_ld).

        ``block_stride`` is the scratchpad rows between the DIM-wide blocks of one mvin;
        gemmini.h passes DIM.
        """
        return cls.build("config_ld", stride=stride_bytes, scale=scale, shrunk=shrunk,
                         block_stride=block_stride, pixel_repeats=pixel_repeats, id=id)

    @classmethod
    def config_st(
        cls, stride_bytes: int, *, act: int | str = Activation.NONE, acc_scale: float = 1.0,
        pool_stride: int = 0, pool_size: int = 0, pool_out_dim: int = 0, porows: int = 0,
        pocols: int = 0, orows: int = 0, ocols: int = 0, upad: int = 0, lpad: int = 0,
    ) -> Instruction:
        """Store-unit configuration (gemmini_extended2_config_st)."""
        return cls.build("config_st", stride=stride_bytes, act=act, acc_scale=acc_scale,
                         pool_stride=pool_stride, pool_size=pool_size,
                         pool_out_dim=pool_out_dim, porows=porows, pocols=pocols, orows=orows,
                         ocols=ocols, upad=upad, lpad=lpad)

    @classmethod
    def config_norm(cls, **values: Any) -> Instruction:
        """Normalizer constants (gemmini_config_bert); fields as in `LAYOUTS["config_norm"]`."""
        return cls.build("config_norm", **values)

    @classmethod
    def config_igelu(cls, qb: int, qc: int) -> Instruction:
        """``config_norm`` setting I-GELU's signed 32-bit constants ``(qb, qc)`` (like any
        ``config_norm`` without ``set_stats_id_only``, it also sets i-exp's ``qln2`` to 0 and
        clears the activation's most significant bit)."""
        return cls.config_norm(igelu_qb=qb & 0xFFFFFFFF, igelu_qc=qc & 0xFFFFFFFF)

    @classmethod
    def config_softmax(cls, qln2: int, qln2_inv: int, qb: int,
                       qc: int) -> tuple[Instruction, Instruction]:
        """The two ``config_norm`` Gemmini's software issues before a softmax: one register
        holds ``q_const``, so ``qln2`` (type 0) and ``qln2_inv`` (type 1) take one each; both
        set the activation's most significant bit (softmax = 4 once ``config_st``'s act is none)
        and i-exp's ``(qb, qc)``. All four are signed 32-bit (`accel.lower.iexp_constants`)."""
        mask = 0xFFFFFFFF
        return tuple(cls.config_norm(q_const=value & mask, q_const_type=kind, act_msb=True,
                                     igelu_qb=qb & mask, igelu_qc=qc & mask)
                     for kind, value in ((0, qln2), (1, qln2_inv)))

    @classmethod
    def config_norm_stats(cls, stat_id: int) -> Instruction:
        """``config_norm`` choosing only the normalizer's statistics slot for the next moves
        (``set_stats_id_only``: the constants and activation stay), as Gemmini's software does
        between rows of a softmax."""
        return cls.config_norm(stat_id=stat_id, set_stats_id_only=True)

    @classmethod
    def flush(cls, skip: bool = False) -> Instruction:
        """Flush the accelerator TLB (``skip`` drops the current request)."""
        return cls.build("flush", skip=skip)

    @classmethod
    def fence(cls) -> Instruction:
        """Wait until every earlier command has completed."""
        return cls(Funct.FENCE)

    @classmethod
    def loop_ws(
        cls, *, i: int, j: int, k: int, a: int, b: int, c: int, d: int = 0,
        a_stride: int, b_stride: int, c_stride: int, d_stride: int = 0,
        pad_i: int = 0, pad_j: int = 0, pad_k: int = 0,
        a_transpose: bool = False, b_transpose: bool = False, full_c: bool = False,
        low_d: bool = False, ex_accumulate: bool = False, act: int | str = 0,
        a_spad_id: int = 0, b_spad_id: int = 0, is_resadd: bool = False,
    ) -> tuple[Instruction, ...]:
        """The six-instruction `gemmini_loop_ws` sequence; i, j, k count DIM-tiles."""
        return (
            cls.build("loop_ws_config_bounds", i=i, j=j, k=k, pad_i=pad_i, pad_j=pad_j,
                      pad_k=pad_k),
            cls.build("loop_ws_config_addrs_ab", a=a, b=b),
            cls.build("loop_ws_config_addrs_dc", d=d, c=c),
            cls.build("loop_ws_config_strides_ab", a_stride=a_stride, b_stride=b_stride),
            cls.build("loop_ws_config_strides_dc", d_stride=d_stride, c_stride=c_stride),
            cls.build("loop_ws", ex_accumulate=ex_accumulate, full_c=full_c, low_d=low_d,
                      act=act, a_spad_id=a_spad_id, b_spad_id=b_spad_id,
                      a_transpose=a_transpose, b_transpose=b_transpose, is_resadd=is_resadd),
        )

    @classmethod
    def loop_conv_ws(cls, **values: Any) -> tuple[Instruction, ...]:
        """The seven-instruction `gemmini_loop_conv_ws` sequence (CONFIG_1..6, LOOP_CONV_WS).

        Keyword arguments are the fields of those seven layouts (names are unique across
        them); omitted ones take their defaults.
        """
        names = [f"loop_conv_ws_config_{n}" for n in range(1, 7)] + ["loop_conv_ws"]
        remaining = dict(values)
        out = []
        for name in names:
            own = {f.name for f in LAYOUTS[name].operands}
            out.append(cls.build(name, **{k: remaining.pop(k) for k in list(remaining)
                                          if k in own}))
        if remaining:
            raise trace_error(f"unknown loop_conv_ws operands {sorted(remaining)}",
                              field=min(remaining), mnemonic="loop_conv_ws")
        return tuple(out)

    # -- binary --------------------------------------------------------------------------------

    def encode(self) -> tuple[int, int, int]:
        """(32-bit instruction word, rs1, rs2)."""
        if self.funct == Funct.FENCE:
            return FENCE_WORD, 0, 0
        word = (
            self.funct << 25 | RS2_REG << 20 | RS1_REG << 15 | FUNCT3_RS1_RS2 << 12
            | 0 << 7 | OPCODE_CUSTOM3
        )
        return word, self.rs1, self.rs2

    @classmethod
    def decode(cls, word: int, rs1: int = 0, rs2: int = 0) -> Instruction:
        """Inverse of `encode`; anything `encode` cannot produce raises `TraceError`."""
        if isinstance(word, bool) or not isinstance(word, (int, np.integer)) or not (
            0 <= word <= 0xFFFFFFFF
        ):
            raise trace_error(f"instruction word {word!r} is not a 32-bit integer", field="word")
        word = int(word)
        if word == FENCE_WORD:
            if rs1 or rs2:
                raise trace_error("fence takes no operands; rs1 and rs2 must be 0",
                                  field="rs1" if rs1 else "rs2", mnemonic="fence")
            return cls(Funct.FENCE)
        opcode = word & 0x7F
        if opcode != OPCODE_CUSTOM3:
            raise trace_error(
                f"opcode {opcode:#09b} is not custom-3 ({OPCODE_CUSTOM3:#09b}) and the word "
                f"{word:#010x} is not fence ({FENCE_WORD:#010x})", field="opcode")
        for name, value, expect in (
            ("funct3", word >> 12 & 7, FUNCT3_RS1_RS2),
            ("rd", word >> 7 & 31, 0),
            ("rs1_reg", word >> 15 & 31, RS1_REG),
            ("rs2_reg", word >> 20 & 31, RS2_REG),
        ):
            if value != expect:
                raise trace_error(f"is {value}, expected {expect}", field=name)
        return cls(word >> 25, rs1, rs2)

    # -- text ----------------------------------------------------------------------------------

    def to_text(self) -> str:
        """One assembly line: the mnemonic and every operand as ``name=value``."""
        raws = self.raw_fields()
        parts = [self.mnemonic]
        parts += [f"{f.name}={_text_from_raw(f, raws[f.name])}" for f in self._layout.operands]
        return " ".join(parts)

    __str__ = to_text

    def __repr__(self) -> str:
        return f"<Instruction {self.to_text()}>"

    @classmethod
    def from_text(cls, line: str) -> Instruction:
        """Parse one assembly line (comments after ``#`` allowed; omitted operands default)."""
        code = line.split("#", 1)[0].split()
        if not code:
            raise trace_error("empty line: expected an instruction")
        mnemonic, *operands = code
        layout = _layout_by_name(mnemonic)
        by_name = {f.name: f for f in layout.operands}
        raws: dict[str, int] = {}
        for token in operands:
            name, sep, text = token.partition("=")
            if not sep or not name or not text:
                raise trace_error(f"operand {token!r} is not name=value", mnemonic=mnemonic,
                                  field=name or None)
            if name not in by_name:
                raise trace_error(
                    f"{mnemonic} has no operand {name!r}; operands: {', '.join(by_name)}",
                    field=name, mnemonic=mnemonic)
            if name in raws:
                raise trace_error("operand given twice", field=name, mnemonic=mnemonic)
            try:
                raws[name] = _raw_from_text(by_name[name], text)
            except TraceError as err:
                raise trace_error(err.detail, field=name, mnemonic=mnemonic) from None
        for f in layout.operands:
            if f.name not in raws:
                if f.default is None:
                    raise trace_error("required operand is missing", field=f.name,
                                      mnemonic=mnemonic)
                raws[f.name] = _raw_from_value(f, f.default)
        return cls._from_raws(layout, raws)


def _layout_by_name(mnemonic: str) -> Layout:
    try:
        return LAYOUTS[mnemonic]
    except KeyError:
        raise trace_error(f"unknown mnemonic {mnemonic!r}; known: {', '.join(MNEMONICS)}",
                          field="mnemonic") from None


def _raws_from_values(layout: Layout, values: Mapping[str, Any]) -> dict[str, int]:
    by_name = {f.name: f for f in layout.operands}
    raws = {}
    for name, value in values.items():
        if name not in by_name:
            raise trace_error(
                f"{layout.mnemonic} has no operand {name!r}; operands: {', '.join(by_name)}",
                field=name, mnemonic=layout.mnemonic)
        try:
            raws[name] = _raw_from_value(by_name[name], value)
        except TraceError as err:
            raise trace_error(err.detail, field=name, mnemonic=layout.mnemonic) from None
    return raws


__all__ = [
    "FENCE_WORD",
    "GARBAGE_ADDR",
    "LAYOUTS",
    "MNEMONICS",
    "OPCODE_CUSTOM3",
    "Activation",
    "ConfigType",
    "Dataflow",
    "Field",
    "Funct",
    "Instruction",
    "IsaParams",
    "Layout",
    "LocalAddr",
    "NormCmd",
    "STAT_CMDS",
    "f32_bits",
    "f32_value",
    "layout_of",
    "trace_error",
    "with_context",
]
