"""`baco.profile`: inclusive phase times that add up, JAX's compiles counted, `--profile`."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from baco.cli import main
from baco.profile import COMPILE, Profile, profiling, timed

TINY = Path(__file__).parent / "data" / "tiny.yaml"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nested_phases_are_inclusive_and_the_table_counts_each_second_once():
    clock = Clock()
    profile = Profile(clock=clock)
    with profiling(profile):
        with timed("search"):
            clock.now += 1.0
            with timed("lowering"):
                clock.now += 2.0
            with timed("lowering"):
                clock.now += 3.0
        with timed("judge"):
            with timed("lowering"):
                clock.now += 4.0
                with timed("lowering"):      # nested in itself: counted once by name
                    clock.now += 0.25
        clock.now += 0.5                     # outside every phase
    clock.now += 100.0                       # after the profile stopped
    doc = profile.to_dict()
    assert {name: (e["seconds"], e["calls"], e["depth"]) for name, e in doc["phases"].items()} \
        == {"search": (6.0, 1, 0), "search / lowering": (5.0, 2, 1), "judge": (4.25, 1, 0),
            "judge / lowering": (4.25, 1, 1), "judge / lowering / lowering": (0.25, 1, 2)}
    assert doc["total_seconds"] == 10.75
    assert doc["untimed_seconds"] == 0.5
    assert doc["by_name"]["lowering"] == {"seconds": 9.25, "calls": 3}
    table = profile.table()
    assert "| search | 6.00 | 55.8% | 1 |" in table
    assert "| · lowering | 5.00 | 46.5% | 2 |" in table
    assert "| · · lowering | 0.25 | 2.3% | 1 |" in table
    assert "| (untimed) | 0.50 | 4.7% |  |" in table
    assert "| **total** | 10.75 | 100.0% |  |" in table
    assert "| lowering | 9.25 | 86.0% | 3 |" in table       # summed over the phases


def test_off_timed_is_one_shared_context_and_records_nothing():
    assert timed("a") is timed("b")
    with profiling(None) as nothing:
        assert nothing is None
        assert timed("a") is timed("b")


def test_the_listener_counts_a_real_compile_and_nothing_for_a_cached_call():
    @jax.jit
    def f(x):
        return jnp.sin(x) * 3.0625 + jnp.cos(x) / 7.0

    x = jnp.arange(7.0)
    profile = Profile()
    with profiling(profile):
        with timed("first call"):
            f(x).block_until_ready()
        first = profile.compile()
        with timed("second call"):
            f(x).block_until_ready()
    second = profile.compile()
    assert first["backend_compiles"] >= 1 and first["seconds"] > 0
    assert first["backend_compile_seconds"] > 0 and first["traces"] >= 1
    assert second["backend_compiles"] == first["backend_compiles"]
    assert second["seconds"] == first["seconds"]
    phases = profile.phases()
    assert phases[("first call", COMPILE)][1] == first["backend_compiles"]
    assert ("second call", COMPILE) not in phases
    assert phases[("first call", COMPILE)][0] <= phases[("first call",)][0]
    f(x + 1.0).block_until_ready()               # after the profile: not counted
    assert profile.compile()["seconds"] == second["seconds"]


def test_run_profile_writes_the_phases_and_leaves_results_json_unchanged(tiny_run, tmp_path,
                                                                         capsys):
    out = tmp_path / "run"
    assert main(["run", str(TINY), "--out", str(out), "--quiet", "--profile"]) == 0
    printed = capsys.readouterr().out
    assert (out / "results.json").read_bytes() == (tiny_run / "results.json").read_bytes()
    doc = json.loads((out / "profile.json").read_text())
    phases = doc["phases"]
    # (lowering and simulation only where a layer was not simulated before in this process)
    for name in ("load network", "search baco", "search baco / descent round",
                 "search baco / descent round / gradient steps", "search baco / refinement round",
                 "search baco / final pick", "baseline dosa", "baseline dosa / gradient steps",
                 "judge baco", "judge dosa", "results and report"):
        assert phases[name]["calls"] >= 1 and phases[name]["seconds"] >= 0, name
    assert doc["by_name"]["exact scoring"]["calls"] > 0
    assert doc["by_name"]["rounding"]["calls"] > 0
    top = sum(e["seconds"] for e in phases.values() if e["depth"] == 0)
    assert top + doc["untimed_seconds"] == pytest.approx(doc["total_seconds"])
    for name, entry in phases.items():          # a sub-row is part of its parent
        parent = name.rpartition(" / ")[0]
        if parent:
            assert entry["seconds"] <= phases[parent]["seconds"] + 1e-9, name
    assert {"seconds", "backend_compiles", "persistent_cache"} <= set(doc["compile"])
    assert doc["jax"]["version"] == jax.__version__
    assert len(doc["load_average"]["start"]) == 3
    table = (out / "profile.md").read_text()
    assert "| **total** |" in table and "| · final pick |" in table
    assert table in printed
