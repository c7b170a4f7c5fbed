"""What a template's generator can build: the rules a `HardwareConfig` must meet, and the
smallest buildable sizes at least given ones.

A template opts in with its YAML field ``buildable`` (``buildable: gemmini``); a template
without it has no rules here, and rounding gives its buffers whole ``sram_step_kb`` steps.

Gemmini's rules are the generator's own checks, read from ucb-bar/gemmini (commit 8c3f992):

* src/main/scala/gemmini/GemminiConfigs.scala, the ``require``s near the end of the class
  body (lines 273-278): ``require(isPow2(sp_bank_entries), "each SRAM bank must have a
  power-of-2 rows...")``, ``require(sp_bank_entries % (meshRows * tileRows) == 0, ...)``,
  ``require(meshColumns * tileColumns == meshRows * tileRows, "the systolic array must be
  square")``, ``require(meshColumns * tileColumns >= 2, ...)``, ``require(isPow2(meshColumns *
  tileColumns), "the systolic array's dimensions must be powers of 2")`` and
  ``require(acc_bank_entries % (meshRows * tileRows) == 0, ...)``, where (lines 107-114)
  ``sp_bank_entries = kb * 1024 * 8 / (sp_banks * sp_width)`` with ``sp_width = DIM *
  inputType.getWidth`` and ``acc_bank_entries = kb * 1024 * 8 / (acc_banks * DIM *
  accType.getWidth)``;
* the same class body, line 257: ``assert(USABLE_SP_TILES >= TOTAL_ACC_TILES, ...)`` with
  ``USABLE_SP_TILES = (SP_ROWS / DIM) - 2`` and ``TOTAL_ACC_TILES = ACC_ROWS / DIM``;
* src/main/scala/gemmini/LocalAddr.scala, lines 46-48: ``LocalAddr.+`` does
  ``require(isPow2(acc_bank_entries))``, and LoadController.scala line 74 (``localaddr +
  row_counter``) elaborates it in every build, so the accumulator's banks need a power-of-two
  number of rows as well;
* Configs.scala ``defaultConfig``: ``sp_banks = 4``, ``acc_banks = 2`` (`accel.isa.IsaParams`,
  the one copy of them here).

So at DIM 16 (int8 inputs, int32 accumulators) the buildable scratchpads are 1 KiB x 2^j (4
banks x 16 rows x 16 bytes) and the accumulators 2 KiB x 2^j; at DIM 128, 64 KiB x 2^j and
128 KiB x 2^j.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from accel.isa import IsaParams

_BANKS = {"sp_kb": IsaParams.sp_banks, "acc_kb": IsaParams.acc_banks}
_BITS = {"sp_kb": "input_bits", "acc_kb": "acc_bits"}
_TOL = 1e-9


def has_rules(hw: Any) -> bool:
    """Whether `hw`'s template names a generator's rules (its ``buildable`` field)."""
    return hw.template_spec.buildable is not None


def _pow2_up(x: Any) -> Any:
    """The smallest power of two >= `x` (>= 1), elementwise."""
    x = np.maximum(np.asarray(x, np.float64), 1.0)
    return np.exp2(np.ceil(np.log2(x) - _TOL))


def buildable_dim_below(dim: int) -> int:
    """The largest buildable Gemmini array side <= `dim` (2 if `dim` is smaller)."""
    return max(2, 1 << (max(1, int(dim)).bit_length() - 1))


def next_buildable_dim(dim: Any) -> Any:
    """The smallest buildable Gemmini array side >= `dim`: a power of two, at least 2."""
    out = np.maximum(_pow2_up(dim), 2.0)
    return int(out) if np.ndim(out) == 0 else out.astype(np.int64)


def unit_kb(field: str, dim: Any, bits: Any) -> Any:
    """The smallest buildable size of ``sp_kb``/``acc_kb`` at array side `dim` with `bits`
    words: every bank holds DIM rows of DIM words (`bank_entries` a power of two, a multiple
    of DIM, so DIM x 2^j)."""
    return _BANKS[field] * np.asarray(dim, np.float64) ** 2 * np.asarray(bits, np.float64) \
        / 8 / 1024


def bank_entries(field: str, dim: int, kb: float, bits: int) -> float:
    """Rows per bank of a ``sp_kb``/``acc_kb`` buffer of `kb` KiB (GemminiConfigs.scala's
    ``sp_bank_entries`` / ``acc_bank_entries``)."""
    return kb * 1024 * 8 / (_BANKS[field] * dim * bits)


def next_buildable_kb(field: str, dim: Any, kb: Any, bits: Any) -> Any:
    """The smallest buildable ``sp_kb``/``acc_kb`` >= `kb` at array side `dim` (elementwise;
    a float for scalars)."""
    unit = unit_kb(field, dim, bits)
    out = unit * _pow2_up(np.asarray(kb, np.float64) / unit)
    return float(out) if np.ndim(out) == 0 else out


def next_buildable_sp_kb(dim: Any, kb: Any, input_bits: Any = 8) -> Any:
    """The smallest buildable scratchpad (KiB) >= `kb` at array side `dim`."""
    return next_buildable_kb("sp_kb", dim, kb, input_bits)


def next_buildable_acc_kb(dim: Any, kb: Any, acc_bits: Any = 32) -> Any:
    """The smallest buildable accumulator (KiB) >= `kb` at array side `dim`."""
    return next_buildable_kb("acc_kb", dim, kb, acc_bits)


def buildable_below_kb(hw: Any, field: str, kb: float) -> float | None:
    """The largest buildable ``sp_kb``/``acc_kb`` <= `kb` on `hw`'s array squared up to a
    buildable DIM (None if none is)."""
    dim, bits = next_buildable_dim(max(hw.pe_rows, hw.pe_cols)), int(getattr(hw, _BITS[field]))
    unit = float(unit_kb(field, dim, bits))
    if kb < unit * (1 - _TOL):
        return None
    return unit * 2.0 ** math.floor(math.log2(kb / unit) + _TOL)


def _tiles_kb(hw: Any) -> float:
    """The scratchpad (KiB) that USABLE_SP_TILES >= TOTAL_ACC_TILES asks of `hw`'s
    accumulator: its rows plus two DIM x DIM tiles, in scratchpad rows."""
    dim = int(hw.pe_rows)
    acc_rows = hw.acc_kb * 1024 * 8 / (dim * hw.acc_bits)
    return (acc_rows + 2 * dim) * dim * hw.input_bits / 8 / 1024


def unbuildable_reason(hw: Any) -> str | None:
    """Why Gemmini's generator rejects `hw` (the rule and the Scala check it follows), or None
    if it builds it (or `hw`'s template has no rules)."""
    if not has_rules(hw):
        return None
    if hw.pe_rows != hw.pe_cols:
        return (f"the array is {hw.pe_rows}x{hw.pe_cols}: Gemmini's is square "
                "(GemminiConfigs.scala: require(meshColumns * tileColumns == meshRows * "
                "tileRows, \"the systolic array must be square\"))")
    dim = int(hw.pe_rows)
    if dim < 2 or dim & (dim - 1):
        return (f"DIM {dim} is not a power of two >= 2 (GemminiConfigs.scala: "
                "require(meshColumns * tileColumns >= 2) and require(isPow2(meshColumns * "
                "tileColumns), \"the systolic array's dimensions must be powers of 2\"))")
    for field, name, where in (
            ("sp_kb", "sp_bank_entries", "GemminiConfigs.scala: require(isPow2(sp_bank_entries)"
             ") and require(sp_bank_entries % (meshRows * tileRows) == 0)"),
            ("acc_kb", "acc_bank_entries", "GemminiConfigs.scala: require(acc_bank_entries % "
             "(meshRows * tileRows) == 0); LocalAddr.scala: require(isPow2(acc_bank_entries))")):
        kb = float(getattr(hw, field))
        rows = bank_entries(field, dim, kb, int(getattr(hw, _BITS[field])))
        ok = rows >= dim and abs(rows - round(rows)) < _TOL and round(rows) % dim == 0 \
            and not (round(rows) & (round(rows) - 1))
        if not ok:
            return (f"{field} = {kb:g} KiB at DIM {dim} gives {name} = {rows:g} rows per bank "
                    f"of {_BANKS[field]}, not DIM x a power of two ({where}); the next "
                    f"buildable size is "
                    f"{next_buildable_kb(field, dim, kb, getattr(hw, _BITS[field])):g} KiB")
    if hw.sp_kb < _tiles_kb(hw) * (1 - _TOL):
        return (f"sp_kb = {hw.sp_kb:g} KiB holds fewer DIM x DIM tiles, less two, than the "
                f"{hw.acc_kb:g} KiB accumulator (GemminiConfigs.scala: "
                "assert(USABLE_SP_TILES >= TOTAL_ACC_TILES))")
    return None


def is_buildable(hw: Any) -> bool:
    return unbuildable_reason(hw) is None


def buildable_hardware(hw: Any, sram_step_kb: float = 1.0, **fields: Any) -> Any:
    """The smallest buildable `hw`-like config holding `hw` (`fields` replaced first): on a
    template with rules, the array squared up to the next buildable DIM and each buffer up to
    its next buildable size (the scratchpad further, if the accumulator's tiles ask it); on
    one without, buffers up to whole `sram_step_kb` steps."""
    hw = dataclasses.replace(hw, **fields) if fields else hw
    if not has_rules(hw):
        step = float(sram_step_kb)

        def up(kb: float) -> float:
            return float(max(step, math.ceil(kb / step - 1e-6) * step))

        return dataclasses.replace(hw, sp_kb=up(hw.sp_kb), acc_kb=up(hw.acc_kb))
    dim, sp_kb, acc_kb = buildable_sizes(max(hw.pe_rows, hw.pe_cols), hw.sp_kb, hw.acc_kb,
                                         hw.input_bits, hw.acc_bits)
    return dataclasses.replace(hw, pe_rows=int(dim), pe_cols=int(dim), sp_kb=float(sp_kb),
                               acc_kb=float(acc_kb))


def buildable_sizes(pe_dim: Any, sp_kb: Any, acc_kb: Any, input_bits: Any = 8,
                    acc_bits: Any = 32) -> tuple[Any, Any, Any]:
    """`buildable_hardware`'s ``(DIM, sp_kb, acc_kb)`` elementwise (a grid of Gemmini
    configurations at once): the next buildable DIM, each buffer up to its next buildable
    size, the scratchpad further where USABLE_SP_TILES >= TOTAL_ACC_TILES asks it."""
    dim = next_buildable_dim(pe_dim)
    acc = next_buildable_acc_kb(dim, acc_kb, acc_bits)
    acc_rows = np.asarray(acc) * 1024 * 8 / (np.asarray(dim) * np.asarray(acc_bits))
    tiles_kb = (acc_rows + 2 * np.asarray(dim)) * np.asarray(dim) * np.asarray(input_bits) \
        / 8 / 1024
    sp = next_buildable_sp_kb(dim, np.maximum(sp_kb, tiles_kb), input_bits)
    return dim, sp, acc


def grown_hardware(hw: Any, sram_step_kb: float = 1.0, **need_kb: float) -> Any:
    """`hw` with each named buffer (``sp_kb=``, ``acc_kb=``) grown, where it holds less, to
    hold `need_kb` KiB: with rules, to the smallest buildable config holding both (the rest
    snapped too); without, the grown buffers to whole `sram_step_kb` steps, the rest kept."""
    grow = {f: float(kb) for f, kb in need_kb.items()
            if float(kb) > float(getattr(hw, f)) * (1 + _TOL)}
    if has_rules(hw):
        return buildable_hardware(hw, **grow)
    step = float(sram_step_kb)
    grow = {f: float(max(step, math.ceil(kb / step - 1e-6) * step)) for f, kb in grow.items()}
    return dataclasses.replace(hw, **grow) if grow else hw


def smallest_buildable(hw: Any, sram_step_kb: float = 1.0) -> Any:
    """The least hardware of `hw`'s template a search may reach: with rules, the smallest
    buildable array and buffers; without, a 1 x 1 array and one `sram_step_kb` per buffer."""
    if not has_rules(hw):
        return dataclasses.replace(hw, pe_rows=1, pe_cols=1, sp_kb=float(sram_step_kb),
                                   acc_kb=float(sram_step_kb))
    return buildable_hardware(hw, pe_rows=1, pe_cols=1, sp_kb=1e-9, acc_kb=1e-9)


__all__ = ["bank_entries", "buildable_below_kb", "buildable_dim_below", "buildable_hardware",
           "buildable_sizes", "grown_hardware", "has_rules", "is_buildable",
           "next_buildable_acc_kb", "next_buildable_dim", "next_buildable_kb",
           "next_buildable_sp_kb", "smallest_buildable", "unbuildable_reason", "unit_kb"]
