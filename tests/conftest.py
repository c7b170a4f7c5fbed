"""Process-wide hygiene of the test run."""

from __future__ import annotations

import os
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


@pytest.fixture(autouse=True, scope="session")
def _compilation_cache(tmp_path_factory):
    """One persistent compilation cache for the run, shared with the processes tests start
    (`baco run` under signals, reproduce workers): each compiles what the first compiled.
    baco's own default (`baco.compile_cache`) points there too, so no test writes the user's
    ``~/.cache``. Under pytest-xdist the workers share one (their base folders are siblings),
    so a program one worker compiled the other loads."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / "jax-cache"
    path.mkdir(exist_ok=True)
    path = str(path)
    names = ("JAX_COMPILATION_CACHE_DIR", "BACO_CACHE_DIR")
    previous = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, path))
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", path)
    yield
    jax.config.update("jax_compilation_cache_dir", before)
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
