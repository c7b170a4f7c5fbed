"""Gemmini's DMA as its generator is configured for a design's DRAM bandwidth.

``Configs.scala`` fixes ``dma_buswidth`` (128 bits in ``defaultConfig``) and
``max_in_flight_mem_reqs`` (16); a design that streams more than 16 bytes a cycle needs a wider
bus (a 64-byte/cycle design a 512-bit one), and one whose round trip outlasts its requests
needs more of them in flight. These rules build both, so the simulator times (`accel.sim.timing`)
and the template prices (``dma_bus_bytes``, ``dma_inflight`` in a template's expressions) the
same DMA. With ``xp`` jax.numpy the values stay the generator's powers of two and the gradient
follows the unrounded need (a straight-through estimate), so a relaxed search sees the cost of
more bandwidth.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Gemmini's round trip (`accel.gemmini_timing`), the default the in-flight count is sized for.
from accel.gemmini_timing import DRAM_LATENCY_CYCLES, ROUND_TRIP_EXTRA_CYCLES

MIN_BUS_BYTES = 16          # defaultConfig's dma_buswidth = 128
MIN_INFLIGHT_REQUESTS = 16  # defaultConfig's max_in_flight_mem_reqs


def dram_bytes_per_cycle(dram_bw_words: Any, input_bits: Any, xp: Any = np) -> Any:
    """The DRAM bandwidth in bytes a cycle (a word is an input element, at least a byte)."""
    return dram_bw_words * xp.maximum(1.0, xp.floor(xp.asarray(input_bits, xp.float32) / 8))


def _pow2_at_least(need: Any, floor: int, xp: Any) -> Any:
    if xp is np:
        need = np.asarray(need, np.float64)
        return np.maximum(floor, 2.0 ** np.ceil(np.log2(np.maximum(need, 1.0))))
    import jax

    smooth = xp.maximum(floor, need)
    exact = xp.maximum(floor, 2.0 ** xp.ceil(xp.log2(xp.maximum(need, 1.0))))
    return smooth + jax.lax.stop_gradient(exact - smooth)


def bus_bytes(dram_bytes_per_cycle: Any, xp: Any = np) -> Any:
    """Bytes per beat: defaultConfig's 128 bits, widened to the next power of two that carries
    the DRAM bandwidth in one beat a cycle."""
    return _pow2_at_least(dram_bytes_per_cycle, MIN_BUS_BYTES, xp)


def inflight_requests(dram_bytes_per_cycle: Any,
                      round_trip_cycles: Any = DRAM_LATENCY_CYCLES + ROUND_TRIP_EXTRA_CYCLES,
                      xp: Any = np) -> Any:
    """Requests a direction keeps out: enough one-beat (16-byte) requests to stream the DRAM
    bandwidth over a round trip, as a power of two of at least defaultConfig's 16. A direction
    issues at most one request a cycle, so more than a round trip's worth never helps (at a
    51-cycle round trip: 32 for 8 bytes/cycle, as the measured chip has; 64 for 16 and more).
    """
    rows_per_cycle = xp.minimum(1.0, dram_bytes_per_cycle / MIN_BUS_BYTES)
    return _pow2_at_least(round_trip_cycles * rows_per_cycle, MIN_INFLIGHT_REQUESTS, xp)


__all__ = ["DRAM_LATENCY_CYCLES", "MIN_BUS_BYTES", "MIN_INFLIGHT_REQUESTS",
           "ROUND_TRIP_EXTRA_CYCLES", "bus_bytes", "dram_bytes_per_cycle",
           "inflight_requests"]
