"""Instruction emission with configuration caching, and the statistics of what was emitted.

The `Emitter` packs operands straight into rs1/rs2 integers (the layouts of `accel.isa`, which
`Instruction` re-checks on construction) and issues a ``config_ld`` / ``config_st`` /
``config_ex`` only when the state a move or compute needs differs from the current one, as
``gemmini.h`` does by hand.
"""

from __future__ import annotations

import collections
import dataclasses

from accel.isa import Activation, Dataflow, Funct, Instruction, IsaParams, layout_of
from workloads.errors import ProgramTooLongError, TraceError

GARBAGE = 0xFFFFFFFF
ACC_BIT = 1 << 31
ACCUMULATE_BIT = 1 << 30
FULL_BIT = 1 << 29


_U64 = (1 << 64) - 1
_LAYOUTS: dict[tuple[int, int], tuple] = {}


def _checked_new(funct: int, rs1: int, rs2: int) -> Instruction:
    """An `Instruction` whose operands were checked against cached reserved-bit masks.

    ``Instruction(funct, rs1, rs2)`` type-checks and looks its layout up on every call, which
    dominates lowering a layer of a million instructions; this performs the same reserved-bit
    and range checks with the layout looked up once per funct, and defers to the constructor
    (and its error message) whenever a check fails.
    """
    key = (funct, rs1 & 3 if funct == Funct.CONFIG else 0)
    entry = _LAYOUTS.get(key)
    if entry is None:
        layout = layout_of(funct, rs1)
        entry = _LAYOUTS[key] = (layout, layout.reserved_mask("rs1"),
                                 layout.reserved_mask("rs2"))
    layout, mask1, mask2 = entry
    if rs1 & mask1 or rs2 & mask2 or not (0 <= rs1 <= _U64 and 0 <= rs2 <= _U64):
        return Instruction(funct, rs1, rs2)
    ins = object.__new__(Instruction)
    object.__setattr__(ins, "funct", int(funct))
    object.__setattr__(ins, "rs1", int(rs1))
    object.__setattr__(ins, "rs2", int(rs2))
    object.__setattr__(ins, "_layout", layout)
    return ins


def _fast_path_agrees() -> bool:
    """Whether `_checked_new` builds what the constructor builds (else it is not used)."""
    try:
        probe = (Funct.PRELOAD, 3 << 48 | 4 << 32 | 7, 2 << 48 | 4 << 32 | (1 << 31) | 9)
        fast, slow = _checked_new(*probe), Instruction(*probe)
        return (fast == slow and fast.layout is slow.layout and fast.to_text() == slow.to_text()
                and hash(fast) == hash(slow))
    except (AttributeError, TypeError, ValueError, TraceError):  # Instruction changed
        return False


new_instruction = _checked_new if _fast_path_agrees() else Instruction


def operand(rows: int, cols: int, addr: int) -> int:
    """``rows << 48 | cols << 32 | addr``: the rs2 of a move, either operand of preload/compute."""
    return rows << 48 | cols << 32 | addr


def acc_addr(row: int, *, accumulate: bool = False, full: bool = False, norm: int = 0) -> int:
    """An accumulator address; ``norm``: the normalizer command (`accel.isa.NormCmd`)."""
    return (ACC_BIT | (ACCUMULATE_BIT if accumulate else 0) | (FULL_BIT if full else 0)
            | norm << 26 | row)


@dataclasses.dataclass(frozen=True)
class LowerStats:
    """What a lowered trace does.

    ``macs`` are the layer's useful MACs; ``block_macs`` the MACs of the compute blocks as
    issued (rows x Cs x Ks, so they equal ``macs`` when every block is covered exactly once);
    ``array_macs`` what the DIM x DIM array spends (rows x DIM x DIM, padding included).
    """

    instructions: dict[str, int]
    computes: int
    preloads: int
    macs: int
    block_macs: int
    array_macs: int
    dram_read_bytes: int
    dram_write_bytes: int
    weight_tile_loads: int
    input_tile_loads: int
    output_tile_visits: int
    partial_spills: int

    @property
    def total_instructions(self) -> int:
        return sum(self.instructions.values())

    @property
    def utilization(self) -> float:
        """Useful MACs per MAC the array spends."""
        return self.macs / self.array_macs if self.array_macs else 0.0


class Emitter:
    """Builds the instruction list; tracks configuration state and traffic counters."""

    def __init__(self, params: IsaParams, max_instructions: int | None = None) -> None:
        self.params = params
        self.max_instructions = max_instructions
        self.out: list[Instruction] = []
        self.ld: dict[int, tuple] = {}
        self.st: tuple | None = None
        self.a_stride: int | None = None
        self.ex: tuple | None = None
        self.dram_read_bytes = 0
        self.dram_write_bytes = 0
        self.block_macs = 0
        self.array_macs = 0
        self.computes = 0
        self.preloads = 0

    def check_length(self) -> None:
        """Raise `ProgramTooLongError` once the program passes ``max_instructions``."""
        if self.max_instructions is not None and len(self.out) > self.max_instructions:
            raise ProgramTooLongError(f"the program passes {self.max_instructions} "
                                      "instructions")

    # ------------------------------------------------------------------ configuration
    def config_ex(self, *, dataflow: int = Dataflow.WS, act: int = Activation.NONE) -> None:
        self.out.append(Instruction.config_ex(dataflow, act, a_stride=1))
        self.ex = (dataflow, act)
        self.a_stride = 1

    def set_a_stride(self, stride: int) -> None:
        """config_ex with set_only_strides: keeps dataflow, activation and scale."""
        if stride == self.a_stride:
            return
        dataflow, act = self.ex
        self.out.append(Instruction.config_ex(dataflow, act, a_stride=stride,
                                              set_only_strides=True))
        self.a_stride = stride

    def config_ld(self, ld_id: int, stride_bytes: int, *, block_stride: int | None = None,
                  shrunk: bool = False, pixel_repeats: int = 1) -> None:
        block = self.params.dim if block_stride is None else block_stride
        want = (stride_bytes, block, shrunk, pixel_repeats)
        if self.ld.get(ld_id) == want:
            return
        self.out.append(Instruction.config_ld(stride_bytes, shrunk=shrunk, block_stride=block,
                                              pixel_repeats=pixel_repeats, id=ld_id))
        self.ld[ld_id] = want

    def config_norm(self, igelu_qb: int, igelu_qc: int) -> None:
        """The I-GELU constants."""
        self.out.append(Instruction.config_igelu(igelu_qb, igelu_qc))

    def config_softmax(self, qln2: int, qln2_inv: int, qb: int, qc: int) -> None:
        """The softmax's i-exp constants and activation (which a later config_st clears)."""
        self.out.extend(Instruction.config_softmax(qln2, qln2_inv, qb, qc))
        self.st = None

    def config_st(self, stride_bytes: int, *, act: int = Activation.NONE,
                  acc_scale: float = 1.0) -> None:
        want = (stride_bytes, act, acc_scale)
        if self.st == want:
            return
        self.out.append(Instruction.config_st(stride_bytes, act=act, acc_scale=acc_scale))
        self.st = want

    # ------------------------------------------------------------------ moves
    def mvin(self, ld_id: int, dram: int, local: int, rows: int, cols: int,
             elem_bytes: int) -> None:
        funct = (Funct.MVIN, Funct.MVIN2, Funct.MVIN3)[ld_id]
        self.out.append(new_instruction(funct, dram, operand(rows, cols, local)))
        self.dram_read_bytes += rows * cols * elem_bytes

    def mvout(self, dram: int, local: int, rows: int, cols: int, elem_bytes: int) -> None:
        self.out.append(new_instruction(Funct.MVOUT, dram, operand(rows, cols, local)))
        self.dram_write_bytes += rows * cols * elem_bytes

    def fence(self) -> None:
        self.out.append(Instruction.fence())

    def counts(self) -> dict[str, int]:
        return dict(collections.Counter(ins.mnemonic for ins in self.out))


__all__ = [
    "ACCUMULATE_BIT",
    "ACC_BIT",
    "FULL_BIT",
    "GARBAGE",
    "Emitter",
    "LowerStats",
    "acc_addr",
    "new_instruction",
    "operand",
]
