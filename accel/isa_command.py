"""`Command`: one RoCC command checked against its mnemonic's layout, with its named fields,
its binary word and its assembly line. `accel.isa.Instruction` adds Gemmini's typed
constructors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Self

import numpy as np

from accel.isa_encoding import U64_MAX, Funct, funct_of_word, rocc_word
from accel.isa_layouts import (
    Layout,
    layout_by_name,
    layout_of,
    pack,
    raws_from_text,
    raws_from_values,
    text_from_raw,
    value_from_raw,
    with_defaults,
)
from accel.trace_errors import trace_error


def _check_raw(funct: int, rs1: int, rs2: int) -> Layout:
    """The funct's layout, once the operands are integers that fit and leave reserved bits 0."""
    plain = type(funct) is int and type(rs1) is int and type(rs2) is int   # the common case
    for name, value in (() if plain else (("funct", funct), ("rs1", rs1), ("rs2", rs2))):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise trace_error(f"must be an integer, got {value!r}", field=name)
    if not (0 <= rs1 <= U64_MAX and 0 <= rs2 <= U64_MAX):
        name, value = ("rs1", rs1) if not 0 <= rs1 <= U64_MAX else ("rs2", rs2)
        raise trace_error(f"{value:#x} does not fit in 64 bits", field=name)
    layout = layout_of(funct, rs1)
    if rs1 & layout.reserved_mask("rs1") or rs2 & layout.reserved_mask("rs2"):
        for reg, value in (("rs1", rs1), ("rs2", rs2)):
            stray = value & layout.reserved_mask(reg)
            if not stray:
                continue
            bits = [b for b in range(64) if stray >> b & 1]
            raise trace_error(
                f"reserved bits {bits} are set ({stray:#x}); they must be zero",
                field=reg, mnemonic=layout.mnemonic,
            )
    return layout


@dataclasses.dataclass(frozen=True)
class Command:
    """A Gemmini command as bits: funct and the two 64-bit operand registers, validated on
    creation against the funct's layout (reserved bits zero).

    Make one with `build` (any mnemonic, named fields), `decode` (a binary word) or
    `from_text` (one assembly line); `accel.isa.Instruction` has a constructor per command.
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
        return {f.name: value_from_raw(f, raws[f.name]) for f in self._layout.operands}

    def __getitem__(self, name: str) -> Any:
        """One operand's value, e.g. ``ins["rows"]``."""
        try:
            return self.fields()[name]
        except KeyError:
            raise KeyError(f"{self.mnemonic} has no field {name!r}") from None

    def replace(self, **values: Any) -> Self:
        """A copy with some operands changed (values as in `build`)."""
        merged: dict[str, Any] = dict(self.raw_fields())
        raws = raws_from_values(self._layout, values)
        merged.update(raws)
        return type(self)._from_raws(self._layout, merged)

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def _from_raws(cls, layout: Layout, raws: Mapping[str, int]) -> Self:
        rs1, rs2 = pack(layout, raws)
        return cls(layout.funct, rs1, rs2)

    @classmethod
    def build(cls, mnemonic: str, **values: Any) -> Self:
        """Any instruction from its mnemonic and named operands; omitted ones take defaults.

        Values are Python values (``LocalAddr`` or raw int for addresses, floats for scales,
        names or ints for choices).
        """
        layout = layout_by_name(mnemonic)
        return cls._from_raws(layout, with_defaults(layout, raws_from_values(layout, values)))

    # -- binary --------------------------------------------------------------------------------

    def encode(self) -> tuple[int, int, int]:
        """(32-bit instruction word, rs1, rs2)."""
        return rocc_word(self.funct), self.rs1, self.rs2

    @classmethod
    def decode(cls, word: int, rs1: int = 0, rs2: int = 0) -> Self:
        """Inverse of `encode`; anything `encode` cannot produce raises `TraceError`."""
        funct = funct_of_word(word)
        if funct == Funct.FENCE:
            if rs1 or rs2:
                raise trace_error("fence takes no operands; rs1 and rs2 must be 0",
                                  field="rs1" if rs1 else "rs2", mnemonic="fence")
            return cls(Funct.FENCE)
        return cls(funct, rs1, rs2)

    # -- text ----------------------------------------------------------------------------------

    def to_text(self) -> str:
        """One assembly line: the mnemonic and every operand as ``name=value``."""
        raws = self.raw_fields()
        parts = [self.mnemonic]
        parts += [f"{f.name}={text_from_raw(f, raws[f.name])}" for f in self._layout.operands]
        return " ".join(parts)

    __str__ = to_text

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.to_text()}>"

    @classmethod
    def from_text(cls, line: str) -> Self:
        """Parse one assembly line (comments after ``#`` allowed; omitted operands default)."""
        code = line.split("#", 1)[0].split()
        if not code:
            raise trace_error("empty line: expected an instruction")
        mnemonic, *operands = code
        layout = layout_by_name(mnemonic)
        return cls._from_raws(layout, with_defaults(layout, raws_from_text(layout, operands)))


__all__ = ["Command"]
