"""Timing shared by the benches (imported from beside them: they run as scripts)."""

from __future__ import annotations

import time

import jax


def time_repeats(fn, repeats: int) -> tuple[list[float], list[float]]:
    """Wall-clock and process-CPU seconds of each repeat of ``fn``, after a compiling warm-up
    (the CPU seconds show how much of the machine the run had)."""
    jax.block_until_ready(fn())
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn())
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu
