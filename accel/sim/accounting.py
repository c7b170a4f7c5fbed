"""What a simulated trace does to each memory: the words every level reads, updates and fills,
counted from the decoded trace (`trace_accesses`), and which template level each of the
simulator's memories is (`gemmini_levels`). The energy of those counts is the performance
model's business; this only counts."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from accel.arch import Template
from accel.sim.decode import DecodedTrace, Op
from workloads.errors import ConfigError

if TYPE_CHECKING:  # accel.lower imports accel.sim: the allocation is only read here
    from accel.lower import Allocation

W, I, O = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class MemoryLevels:
    """The template level of each memory the simulator models."""

    registers: int
    accumulator: int
    scratchpad: int
    dram: int


def gemmini_levels(template: Template) -> MemoryLevels:
    """Which template level is each memory the simulator models: registers (W), accumulator
    (O), scratchpad (W, I), DRAM (W, I, O). Raises `ConfigError` for other templates."""
    keeps = [frozenset(lv.keeps) for lv in template.levels]
    want = [frozenset("W"), frozenset("O"), frozenset("WI"), frozenset("WIO")]
    if keeps != want:
        raise ConfigError(
            f"template {template.name!r}: the simulator runs Gemmini-like traces (levels keeping "
            f"W | O | W, I | W, I, O, innermost first); this template's levels keep "
            f"{[''.join(sorted(k)) for k in keeps]}")
    return MemoryLevels(registers=0, accumulator=1, scratchpad=2, dram=3)


def trace_accesses(decoded: DecodedTrace, alloc: Allocation, levels: MemoryLevels,
                   num_levels: int) -> dict[str, Any]:
    """Words each memory of the template reads, updates and fills as the trace runs.

    Counting rules (one access = one word, as `perfmodels.accesses` counts them):

    * DRAM: an mvin reads, an mvout writes (``updates``) its real elements (rows x cols;
      int32 partial sums and biases are one word per element, as the model counts O words);
      no padding (the DMA moves only real bytes). A bias is moved as the trace moves it: one
      int32 row per output row of a tile (DRAM stride 0), not once per channel. By
      destination: the scratchpad's weight regions (`Allocation.holds_weights`) -> W, the
      rest of the scratchpad -> I, the accumulator -> O.
    * Scratchpad and accumulator: every access is of whole DIM-wide rows (padded channels
      included, as `perfmodels.aware` charges them): an mvin fills ``rows x blocks x DIM``
      words; a compute reads its A rows (I) and a preload its weight rows (W) x DIM; a compute
      writes (``updates``) its output rows x DIM into the accumulator and, when it
      accumulates, reads them first; an mvout reads its rows x blocks x DIM; an mvout_spad
      (a fused chain's intermediate) reads its rows x DIM from the accumulator and fills as
      many into the scratchpad (I). A normalizer statistics pass (a softmax's max and sum of
      exponentials) reads its rows and writes nothing.
    * Registers: a preload that loads weights fills all DIM x DIM PE registers; every MAC the
      array spends (rows fed x DIM x DIM, padding included) reads one.
    * MACs: what the array spends (``array_macs``), as the instruction-aware model charges.

    Returns ``{"reads", "updates", "fills"}`` (float64 ``[level, tensor]``), ``"macs"``
    (the array's), ``"dram_read_bytes"`` and ``"dram_write_bytes"``.
    """
    col = {name: decoded.column(name).astype(np.int64) for name in (
        "op", "rows", "cols", "elem_bytes", "nblocks", "is_acc", "local", "accumulate",
        "a_garbage", "a_acc", "a_rows", "bd_garbage", "bd_acc", "bd_rows",
        "c_garbage", "c_acc", "c_accumulate", "c_rows")}
    dim = int(decoded.shape.dim)
    op = col["op"]
    stats = decoded.stat_passes()
    is_mvin, is_mvout = op == Op.MVIN, (op == Op.MVOUT) & ~stats
    is_pre = op == Op.PRELOAD
    is_comp = (op == Op.COMPUTE_PRELOADED) | (op == Op.COMPUTE_ACCUMULATED)
    elems = col["rows"] * col["cols"]
    local_words = col["rows"] * col["nblocks"] * dim
    in_weight = alloc.holds_weights(col["local"])
    to_acc = is_mvin & (col["is_acc"] == 1)
    to_w = is_mvin & (col["is_acc"] == 0) & in_weight
    to_i = is_mvin & (col["is_acc"] == 0) & ~in_weight

    reads = np.zeros((num_levels, 3))
    updates = np.zeros((num_levels, 3))
    fills = np.zeros((num_levels, 3))
    D, SP, ACC, REG = levels.dram, levels.scratchpad, levels.accumulator, levels.registers

    def total(mask: np.ndarray, values: np.ndarray) -> float:
        return float(np.sum(np.where(mask, values, 0)))

    # DRAM.
    reads[D, W] = total(to_w, elems)
    reads[D, I] = total(to_i, elems)
    reads[D, O] = total(to_acc, elems)
    updates[D, O] = total(is_mvout, elems)
    # Moves into and out of the local memories.
    fills[SP, W] = total(to_w, local_words)
    fills[SP, I] = total(to_i, local_words)
    fills[ACC, O] = total(to_acc, local_words)
    reads[ACC, O] += total(to_acc & (col["accumulate"] == 1), local_words)
    reads[ACC, O] += total((is_mvout | stats & (op == Op.MVOUT)) & (col["is_acc"] == 1),
                           local_words)
    reads[SP, I] += total(is_mvout & (col["is_acc"] == 0), local_words)
    # An on-chip move (a fused chain's intermediate): accumulator rows into the scratchpad.
    to_sp = op == Op.MVOUT_SPAD
    reads[ACC, O] += total(to_sp, col["rows"] * dim)
    fills[SP, I] += total(to_sp & ~stats, col["rows"] * dim)
    # The array's operands: A (inputs), B/D (weights) from the scratchpad or accumulator.
    a_live = is_comp & (col["a_garbage"] == 0)
    reads[SP, I] += total(a_live & (col["a_acc"] == 0), col["a_rows"] * dim)
    reads[ACC, O] += total(a_live & (col["a_acc"] == 1), col["a_rows"] * dim)
    bd_live = (is_pre | is_comp) & (col["bd_garbage"] == 0)
    reads[SP, W] += total(bd_live & (col["bd_acc"] == 0), col["bd_rows"] * dim)
    reads[ACC, O] += total(bd_live & (col["bd_acc"] == 1), col["bd_rows"] * dim)
    # Results: written into the accumulator (read first when accumulating), or the scratchpad.
    c_live = is_comp & (col["c_garbage"] == 0)
    c_words = col["c_rows"] * dim
    updates[ACC, O] = total(c_live & (col["c_acc"] == 1), c_words)
    reads[ACC, O] += total(c_live & (col["c_acc"] == 1) & (col["c_accumulate"] == 1), c_words)
    fills[SP, I] += total(c_live & (col["c_acc"] == 0), c_words)
    # The PE registers.
    fills[REG, W] = float(np.sum(is_pre & (col["bd_garbage"] == 0))) * dim * dim
    reads[REG, W] = float(decoded.array_macs)
    return {"reads": reads, "updates": updates, "fills": fills,
            "macs": int(decoded.array_macs),
            "dram_read_bytes": int(np.sum(np.where(is_mvin, elems * col["elem_bytes"], 0))),
            "dram_write_bytes": int(np.sum(np.where(is_mvout, elems * col["elem_bytes"], 0)))}


__all__ = ["MemoryLevels", "gemmini_levels", "trace_accesses"]
