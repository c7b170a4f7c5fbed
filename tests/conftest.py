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
    so a program one worker compiled the other loads: every program, however fast it compiled
    (each worker would compile it again otherwise)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / "jax-cache"
    path.mkdir(exist_ok=True)
    path = str(path)
    # BACO_SIM_CACHE off: every test simulates what it checks (the store's own tests turn
    # baco.sim_cache's store on in a folder of their own).
    settings = {"JAX_COMPILATION_CACHE_DIR": path, "BACO_CACHE_DIR": path,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "BACO_SIM_CACHE": "off"}
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    before = (jax.config.jax_compilation_cache_dir,
              jax.config.jax_persistent_cache_min_compile_time_secs)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
