"""The values an ISA operand holds besides plain bits: unsigned integers written in any base,
float32 bit patterns (scales), and `LocalAddr`, a scratchpad or accumulator address with its
flag bits (bit 31 accumulator, bit 30 accumulate, bit 29 full-width read, bits 28-26 the
normalizer command, bits 25-0 the row; 0xFFFFFFFF is the garbage address).
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np

from accel.isa_encoding import GARBAGE_ADDR
from accel.trace_errors import trace_error

# ---------------------------------------------------------------------------------------------
# Numbers.


def parse_uint(text: str) -> int:
    """An unsigned integer from decimal, 0x.., 0b.. or 0o.. text."""
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


def f32_text(bits: int) -> str:
    value = f32_value(bits)
    if not math.isnan(value):
        text = str(np.float32(value))  # shortest text that round-trips the float32
        if f32_bits(float(text)) == bits:
            return text
    return f"{bits:#010x}"  # NaN payloads (and any value the shortest form would not restore)



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
            return cls.from_raw(parse_uint(text))
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
        return cls(parse_uint(row_text), space == "acc", accumulate, full, norm)


__all__ = ["LocalAddr", "f32_bits", "f32_text", "f32_value", "parse_uint"]
