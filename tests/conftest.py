"""Process-wide hygiene of the test run."""

from __future__ import annotations

import pathlib

import jax
import pytest

MAPS = pathlib.Path("/proc/self/maps")
MAX_MAPPINGS = 30000
"""Memory mappings after which a module's end frees JAX's compiled programs. Every compiled
XLA CPU program keeps its own mappings; one process running the whole suite compiles thousands
and would reach Linux's default ``vm.max_map_count`` (65530), where XLA's next compilation
fails or crashes."""


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs_when_mappings_run_high():
    yield
    if MAPS.exists() and len(MAPS.read_text().splitlines()) > MAX_MAPPINGS:
        jax.clear_caches()
