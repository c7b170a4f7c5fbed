"""Gemmini's RoCC encoding: the custom-3 word, the functs, and the enums its fields take.

Every Gemmini command is a RoCC R-type instruction on the **custom-3** opcode (0x7B) with
funct3 = 3 (xs1 = xs2 = 1, xd = 0), rd = x0 and funct7 = the Gemmini funct, so its 32-bit word
is a function of the funct alone (`rocc_word`, `funct_of_word`).

``fence`` is not a Gemmini command but the base-ISA ``fence iorw, iorw`` (`gemmini_fence()`
is ``asm volatile("fence")``). It is kept in traces as the pseudo-funct `Funct.FENCE` (128,
outside the 7-bit funct range) and encodes to its real word, 0x0FF0000F.

``mvout_spad`` (`Funct.MVOUT_SPAD`, funct 64) is a baco extension, not a Gemmini command: it
moves accumulator rows into scratchpad rows through the mvout read path (``config_st``'s scale
and activation, round half to even, int8 saturation) without touching DRAM, so a fused GEMM
chain keeps its intermediate on chip. Its funct is a free custom-3 funct7 (Gemmini uses 0-25
and 126), so it encodes to a real RoCC word; rs1 = the source accumulator address, rs2 =
rows<<48 | cols<<32 | the destination scratchpad address.
"""

from __future__ import annotations

import enum

import numpy as np

from accel.trace_errors import trace_error

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
# The 32-bit word.


def rocc_word(funct: int) -> int:
    """The 32-bit word of a command with this funct (fence: its base-ISA word)."""
    if funct == Funct.FENCE:
        return FENCE_WORD
    return (
        funct << 25 | RS2_REG << 20 | RS1_REG << 15 | FUNCT3_RS1_RS2 << 12
        | 0 << 7 | OPCODE_CUSTOM3
    )


def funct_of_word(word: int) -> int:
    """The funct of a 32-bit word; a word `rocc_word` cannot produce raises `TraceError`."""
    if isinstance(word, bool) or not isinstance(word, (int, np.integer)) or not (
        0 <= word <= 0xFFFFFFFF
    ):
        raise trace_error(f"instruction word {word!r} is not a 32-bit integer", field="word")
    word = int(word)
    if word == FENCE_WORD:
        return Funct.FENCE
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
    return word >> 25


__all__ = [
    "FENCE_WORD",
    "FUNCT3_RS1_RS2",
    "GARBAGE_ADDR",
    "OPCODE_CUSTOM3",
    "RS1_REG",
    "RS2_REG",
    "STAT_CMDS",
    "U64_MAX",
    "Activation",
    "ConfigType",
    "Dataflow",
    "Funct",
    "NormCmd",
    "funct_of_word",
    "rocc_word",
]
