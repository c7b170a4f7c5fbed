"""`SimState`: everything the simulator carries from one instruction to the next.

A frozen dataclass registered as a JAX pytree (JAX MD style), updated with `SimState.set`. The
functional fields are ``None`` when only timing is simulated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class SimState:
    """Machine state between two instructions.

    Functional (``DIM`` = array side, ``SP``/``ACC`` = rows; every memory has one extra sink
    row or byte at the end that masked accesses use):

    * ``sp``: int8 ``[SP + 1, DIM]`` scratchpad; ``sp_ok``: bool, same shape, written yet;
    * ``acc``: int32 ``[ACC + 1, DIM]`` accumulator; ``acc_ok``: written yet;
    * ``dram``: uint8 ``[bytes + 1]``; ``dram_ok``: bool, initialized or stored to;
    * ``preloaded``, ``weights``: int32 ``[DIM, DIM]`` shadow and current WS weights (under OS,
      ``preloaded`` is the preloaded D); ``os_acc``, ``os_base``: int32 ``[DIM, DIM]`` the OS
      array's accumulators and the accumulator rows they add to;
    * ``error_index``: int32, first instruction that read never-written memory (-1: none);
      ``error_code``: which operand (`accel.sim.functional.ERROR_FIELDS`);
    * ``norm_running_max``, ``norm_max``, ``norm_sum``: int32 ``[NORM_STAT_IDS]`` and
      ``norm_inv_sum_exp``: float32 ``[NORM_STAT_IDS]``, the normalizer's statistics slots
      (``None`` unless the trace uses the normalizer, `accel.sim.functional`).

    Timing (cycles, int32; queues 0 load, 1 execute, 2 store):

    * ``last_issue``: when the last command entered the reservation station;
    * ``rs_done``: ``[3, 64]`` completion cycle of each queue's entries (a ring);
      ``rs_count``: ``[3]`` commands each queue has taken;
    * ``unit_free``: ``[3]`` when each queue can start its next command; ``unit_done``: ``[3]``
      latest completion per queue; ``all_done``: latest completion of anything;
    * ``dma_free``: ``[2]`` when the DMA's read (mvin) and write (mvout) channels are free;
    * ``mv_done``: ``[2, 16]`` completion of the last moves of the load and store controllers
      (a ring of their outstanding moves); ``mv_count``: ``[2]`` moves each has taken;
    * ``mesh_done``: ``[16]`` when the last computes leave the array (a ring of the mesh's tag
      queue); ``mesh_count``: computes issued;
    * ``w_time``, ``r_time``: ``[3, SP + ACC + 1]`` per queue and local row (accumulator rows
      after the scratchpad's), completion of the last command of that queue that wrote / read
      the row;
    * ``busy``: ``[3]`` cycles each queue was occupied.
    """

    sp: Any = None
    sp_ok: Any = None
    acc: Any = None
    acc_ok: Any = None
    dram: Any = None
    dram_ok: Any = None
    preloaded: Any = None
    weights: Any = None
    os_acc: Any = None
    os_base: Any = None
    error_index: Any = None
    error_code: Any = None
    norm_running_max: Any = None
    norm_max: Any = None
    norm_sum: Any = None
    norm_inv_sum_exp: Any = None
    last_issue: Any = None
    rs_done: Any = None
    rs_count: Any = None
    unit_free: Any = None
    unit_done: Any = None
    all_done: Any = None
    dma_free: Any = None
    mv_done: Any = None
    mv_count: Any = None
    mesh_done: Any = None
    mesh_count: Any = None
    w_time: Any = None
    r_time: Any = None
    busy: Any = None

    def set(self, **changes: Any) -> SimState:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **changes)


jax.tree_util.register_dataclass(
    SimState, data_fields=[f.name for f in dataclasses.fields(SimState)], meta_fields=[])

__all__ = ["SimState"]
