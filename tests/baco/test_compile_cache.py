"""No recompilation inside a run: a refitted `Hybrid` of the same shape reuses the compiled
descent and exact scores, as do other numbers in the descent's settings; and JAX's persistent
compilation cache (`baco.compile_cache`) goes where the environment says, or nowhere."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig, stack_hw
from baco import compile_cache
from baco.codesign_problem import CodesignProblem
from baco.config import ExperimentConfig
from baco.search import make_optimizer, run_round
from baco.sim_hybrid import FINE_TUNE
from perfmodels.atformer import Hybrid, Surrogate
from perfmodels.atformer.features import NUM_FEATURES
from perfmodels.atformer.hybrid import _residual_grid
from perfmodels.atformer.train import Stats, init_params
from perfmodels.score import design_arrays

ROOT = Path(__file__).resolve().parents[2]
TINY = ExperimentConfig.load(Path(__file__).parent / "data" / "tiny.yaml")
NET = workloads.load(TINY.network)
HW = HardwareConfig.preset("gemmini_default")


def _hybrid(seed: int) -> Hybrid:
    """A residual of the sim_hybrid fit's shape, its parameters drawn from `seed` (as a refit
    gives: another seed, other values, the same arrays' shapes and dtypes)."""
    params = jax.tree_util.tree_map(np.asarray, init_params(
        FINE_TUNE.model, jax.random.PRNGKey(seed), FINE_TUNE.ensemble, 8))
    rng = np.random.default_rng(seed)
    stats = Stats(rng.normal(size=NUM_FEATURES).astype(np.float32),
                  rng.uniform(1, 2, NUM_FEATURES).astype(np.float32), np.float32(0.1 * seed),
                  np.float32(0.5), np.float32(0.0))
    return Hybrid(Surrogate(dataclasses.replace(FINE_TUNE, seed=seed), params, stats,
                            HW.template_spec.name))


def _designs(problem: CodesignProblem) -> list:
    from accel.design import design_of
    from baco.search.gemmini_tiler import gemmini_default
    out = []
    for dim in (8, 16):
        hw = dataclasses.replace(HW, pe_rows=dim, pe_cols=dim)
        result = gemmini_default(NET, hardware=hw)
        out.append(design_of(result.hardware, [r.mapping for r in result.layers]))
    return out


def test_a_refitted_hybrid_scores_without_compiling_again():
    problem = CodesignProblem(NET, HW, TINY.codesign.replace(predictor="sim_hybrid"),
                              _hybrid(1))
    designs = _designs(problem)
    first = problem.rounder.score(designs).cycles
    compiled = _residual_grid.jitted._cache_size()
    problem.use_hybrid(_hybrid(2))
    second = problem.rounder.score(designs).cycles
    assert _residual_grid.jitted._cache_size() == compiled
    assert not np.allclose(first, second)          # the new parameters are the ones used
    # and the traced parameters give what the hybrid itself predicts, design by design
    hwps = stack_hw([d.hw for d in designs])
    maps = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *[design_arrays(d) for d in designs])
    grid = problem.hybrid.residual_grid(problem.rounder.template, problem.rounder.packed, hwps,
                                        maps)
    one = jax.jit(lambda layer, hwp, m: problem.hybrid.log_residual(
        problem.rounder.template, layer, hwp, m))
    layer0 = jax.tree_util.tree_map(lambda a: a[0], problem.rounder.packed)
    hwp1 = jax.tree_util.tree_map(lambda a: a[1], hwps)
    m10 = jax.tree_util.tree_map(lambda a: a[1, 0], maps)
    assert np.isclose(grid[1, 0], float(one(layer0, hwp1, m10)), rtol=1e-5)


@pytest.mark.slow   # compiles BACO's descent step for a hybrid (over a minute of CPU);
# the scoring test above checks the hybrid as traced parameters in seconds
def test_a_refitted_hybrid_descends_without_compiling_again():
    problem = CodesignProblem(NET, HW, TINY.codesign.replace(predictor="sim_hybrid"),
                              _hybrid(1))
    designs = _designs(problem)
    theta = jax.tree_util.tree_map(jnp.asarray, problem.relaxed(
        designs[0].mappings(), problem.config.init_softness, designs[0].hw))
    thetas = jax.tree_util.tree_map(lambda a: a[None], theta)
    states = jax.tree_util.tree_map(lambda a: a[None],
                                    make_optimizer(problem.settings).init(theta))
    masks, scales, steps = jnp.ones((1, len(problem.layers))), jnp.ones(1), jnp.array([2])

    def descend() -> np.ndarray:
        out = run_round(thetas, states, masks, scales, steps, problem.space,
                        settings=problem.settings, predictor=problem.hybrid)
        return np.asarray(out[2])

    first = descend()
    compiled = run_round.jitted._cache_size()
    problem.use_hybrid(_hybrid(2))
    second = descend()
    assert run_round.jitted._cache_size() == compiled
    assert np.all(np.isfinite(first)) and not np.allclose(first, second)


def _round_hlo(problem: CodesignProblem, settings) -> str:
    """BACO's descent round for `problem`, traced and lowered (not compiled) with `settings`."""
    designs = _designs(problem)
    theta = jax.tree_util.tree_map(jnp.asarray, problem.relaxed(
        designs[0].mappings(), problem.config.init_softness, designs[0].hw))
    thetas = jax.tree_util.tree_map(lambda a: a[None], theta)
    states = jax.tree_util.tree_map(lambda a: a[None], make_optimizer(settings).init(theta))
    masks, scales, steps = jnp.ones((1, len(problem.layers))), jnp.ones(1), jnp.array([2])
    return run_round.lower(thetas, states, masks, scales, steps, problem.space,
                           settings=settings).as_text()


def test_other_numbers_in_the_settings_lower_to_the_same_descent_program():
    """The learning rate, its schedule, the penalty, the limits and the area budget are traced:
    a config that changes them compiles nothing new (the same program, and so the same
    persistent-cache entry). Whether there is an area budget at all is part of the program."""
    problem = CodesignProblem(NET, HW, TINY.codesign, None)
    base = problem.settings
    other = dataclasses.replace(base, learning_rate=0.3, decay_steps=77, lr_final_fraction=0.5,
                                penalty=3.0, log_max_pe=2.0, log_max_sp_kb=5.0,
                                log_max_acc_kb=4.0, log_max_dram_bw=1.0)
    assert _round_hlo(problem, other) == _round_hlo(problem, base)
    budgeted = _round_hlo(problem, dataclasses.replace(base, area_budget_mm2=2.0))
    assert budgeted == _round_hlo(problem, dataclasses.replace(base, area_budget_mm2=7.5))
    assert budgeted != _round_hlo(problem, base)


@pytest.mark.parametrize("learning_rate, decay_steps, alpha", [
    (0.05, 300, 0.1), (7.5e-5, 40, 0.0), (0.3, 7, 0.5), (1e-3, 1, 0.25)])
def test_the_traced_cosine_schedule_is_optaxs_bit_for_bit(learning_rate, decay_steps, alpha):
    import optax

    from baco.search.descent import cosine_schedule
    problem = CodesignProblem(NET, HW, TINY.codesign, None)
    settings = dataclasses.replace(problem.settings, learning_rate=learning_rate,
                                   decay_steps=decay_steps, lr_final_fraction=alpha)
    counts = jnp.arange(decay_steps + 3, dtype=jnp.int32)
    theirs = jax.jit(jax.vmap(optax.cosine_decay_schedule(learning_rate, decay_steps,
                                                          alpha=alpha)))(counts)
    ours = jax.jit(lambda s, c: jax.vmap(cosine_schedule(s))(c))(settings, counts)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("env, expected", [
    ({"BACO_CACHE_DIR": "/c/here", "XDG_CACHE_HOME": "/x"}, "/c/here"),
    ({"XDG_CACHE_HOME": "/x"}, "/x/baco/jax"),
    ({"BACO_JAX_CACHE": "1", "XDG_CACHE_HOME": "/x"}, "/x/baco/jax"),
    ({"BACO_JAX_CACHE": "/legacy"}, "/legacy"),
    ({"BACO_JAX_CACHE": "0", "BACO_CACHE_DIR": "/c"}, None),
    ({"BACO_JAX_CACHE": "off"}, None),
])
def test_the_cache_folder_follows_the_environment(env, expected):
    where = compile_cache.folder(env)
    assert (None if where is None else where.as_posix()) == expected


def test_the_default_folder_is_the_users_cache():
    assert compile_cache.folder({}) == Path.home() / ".cache" / "baco" / "jax"


_JIT = ("import jax; jax.config.update('jax_persistent_cache_min_compile_time_secs', 0); "
        "print(float(jax.jit(lambda x: x * 3.0 + 1.0)(2.0)))")
_BEFORE = "from baco.compile_cache import enable; enable(); " + _JIT   # as the CLI: no jax yet
_AFTER = "import jax; from baco.compile_cache import enable; enable(); " + _JIT   # as the API


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("JAX_COMPILATION_CACHE_DIR", "BACO_CACHE_DIR", "BACO_JAX_CACHE")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**base, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
                                         **env}, timeout=300)


@pytest.mark.parametrize("code", [_BEFORE, _AFTER], ids=["before-jax", "after-jax"])
def test_compiled_programs_are_written_to_the_cache_folder(tmp_path, code):
    out = _python(code, BACO_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "7.0"
    assert list((tmp_path / "cache").iterdir())


def test_nothing_is_written_with_the_cache_off(tmp_path):
    out = _python(_AFTER, BACO_CACHE_DIR=str(tmp_path / "cache"), BACO_JAX_CACHE="0",
                  XDG_CACHE_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "home"))
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "xdg").exists()
    assert not (tmp_path / "home").exists()


def test_an_unwritable_folder_leaves_the_cache_off_with_one_warning(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    out = _python(_BEFORE, BACO_CACHE_DIR=str(tmp_path / "file" / "cache"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "7.0"
    warnings = [line for line in out.stderr.splitlines() if "compilation cache" in line]
    assert len(warnings) == 1 and "cannot write" in warnings[0]
