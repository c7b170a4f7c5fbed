"""Bit fields, local addresses and forward fills: what the trace decoder's stages share.

`accel.sim.decode` runs in stages that live in their own modules (the configuration state in
`accel.sim.decode_config`, the moves in `accel.sim.decode_moves`, the preloads and computes in
`accel.sim.decode_execute`). Every stage reads named fields out of the raw ``rs1`` / ``rs2``
words, splits local addresses into their flag bits, forward fills state over the instruction
index and names the first bad instruction by its index in the caller's trace. Those helpers
live here, below all the stages: `accel.sim.decode` imports the stages, so they cannot import
it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from accel.isa import STAT_CMDS, Layout, trace_error
from workloads.errors import TraceError

GARBAGE = 0xFFFFFFFF
ROW_MASK = (1 << 26) - 1  # a local address's row bits (below the normalizer command's)
STATS = np.array([int(c) for c in STAT_CMDS])  # `accel.isa.STAT_CMDS`, for np.isin


def u64(value: int) -> np.uint64:
    return np.uint64(value)


def bits(reg: np.ndarray, lsb: int, width: int) -> np.ndarray:
    return (reg >> u64(lsb)) & u64((1 << width) - 1)


def field(layout: Layout, name: str, rs1: np.ndarray, rs2: np.ndarray) -> np.ndarray:
    f = layout.field(name)
    return bits(rs1 if f.reg == "rs1" else rs2, f.lsb, f.width)


def f32(raw: np.ndarray) -> np.ndarray:
    return raw.astype(np.uint32).view(np.float32)


def forward_fill(mask: np.ndarray, values: np.ndarray, default: Any) -> np.ndarray:
    """At each index, the value of the last masked index at or before it (else ``default``)."""
    n = mask.shape[0]
    last = np.maximum.accumulate(np.where(mask, np.arange(n), -1)) if n else np.zeros(0, int)
    out = values[np.maximum(last, 0)] if n else values[:0]
    return np.where(last >= 0, out, default)


def split_local(raw: np.ndarray) -> dict[str, np.ndarray]:
    """A local address's parts (int64 ``raw``): the accumulator (bit 31), accumulate (30) and
    full-width (29) bits, the normalizer command (28-26) and the row."""
    return {"acc": (raw >> 31) & 1, "accumulate": (raw >> 30) & 1, "full": (raw >> 29) & 1,
            "norm": (raw >> 26) & 7, "row": raw & ROW_MASK}


@dataclasses.dataclass(frozen=True)
class Words:
    """The raw words the stages decode (CISC loops already expanded) and, for each, its index
    in the caller's trace (``origin``), which errors name."""

    rs1: np.ndarray
    rs2: np.ndarray
    origin: np.ndarray

    def __len__(self) -> int:
        return int(self.origin.shape[0])

    def field(self, layout: Layout, name: str) -> np.ndarray:
        """Field ``name`` of ``layout`` in every instruction (uint64)."""
        return field(layout, name, self.rs1, self.rs2)

    def fail(self, k: int, detail: str, field: str, mnemonic: str | None = None) -> TraceError:
        """The `TraceError` for decoded instruction ``k``, named by its origin."""
        return trace_error(detail, field=field, index=int(self.origin[k]), mnemonic=mnemonic)


__all__ = ["GARBAGE", "ROW_MASK", "STATS", "Words", "bits", "f32", "field", "forward_fill",
           "split_local", "u64"]
