"""The Gemmini instruction set: encodings, typed constructors, decoded fields, assembly text.

Every Gemmini command is a RoCC R-type instruction on the **custom-3** opcode (0x7B) with
funct3 = 3 (xs1 = xs2 = 1, xd = 0), rd = x0 and funct7 = the Gemmini funct; its two 64-bit
operands travel in rs1 and rs2 (reference: dosa-gemmini-isa.md §B.1-B.4, `gemmini.h`,
`GemminiISA.scala`). An `Instruction` is the triple (funct, rs1, rs2); its 32-bit word is a
function of the funct alone, so a trace stores the word only to be a faithful RISC-V stream.

The pieces live beside this module: the word, the functs and the enums (and the ``fence`` and
``mvout_spad`` pseudo-commands) in `accel.isa_encoding`; operand values, `LocalAddr` among them,
in `accel.isa_values`; each mnemonic's `Layout` in `accel.isa_layouts`; the checked triple with
its fields, word and text (`Command`, which `Instruction` extends with a constructor per
command) in `accel.isa_command`; located `TraceError`s in `accel.trace_errors`. Every name is
importable from here.

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
from typing import Any

from accel.isa_command import Command
from accel.isa_encoding import (
    FENCE_WORD,
    GARBAGE_ADDR,
    OPCODE_CUSTOM3,
    STAT_CMDS,
    Activation,
    ConfigType,
    Dataflow,
    Funct,
    NormCmd,
)
from accel.isa_layouts import LAYOUTS, MNEMONICS, Field, Layout, layout_of
from accel.isa_values import LocalAddr, f32_bits, f32_value
from accel.trace_errors import trace_error, with_context
from workloads.errors import ConfigError

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


@dataclasses.dataclass(frozen=True, repr=False)
class Instruction(Command):
    """One Gemmini command: funct and the two 64-bit operand registers, validated on creation.

    Build one with a typed constructor (`mvin`, `preload`, `config_ex`, ...), `build` (any
    mnemonic, named fields), `decode` (a binary word) or `from_text` (one assembly line);
    `Command` holds the fields, the binary word and the text.

    >>> ins = Instruction.preload(LocalAddr.garbage(), LocalAddr.accumulator(0), 16, 16, 16, 16)
    >>> ins.fields()["c"].acc, ins.mnemonic
    (True, 'preload')
    """

    # -- typed constructors --------------------------------------------------------------------

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


__all__ = [
    "FENCE_WORD",
    "GARBAGE_ADDR",
    "LAYOUTS",
    "MNEMONICS",
    "OPCODE_CUSTOM3",
    "Activation",
    "Command",
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
