"""`baco.codesign` end to end on a tiny network: it improves, it is deterministic, it resumes
to the same result, and it recovers from non-finite losses."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import baco
import workloads
from baco import codesign_loop as codesign_module
from baco.codesign_loop import CodesignWarning, codesign
from baco.config import ExperimentConfig
from baco.objective import Settings
from baco.search import make_optimizer, run_round
from perfmodels import relax

TINY = ExperimentConfig.load(Path(__file__).parent / "data" / "tiny.yaml")
NET = workloads.load(TINY.network)          # BERT at sequence 16: 5 GEMMs, repeated
CFG = TINY.codesign                         # shared with test_run: one compilation


@pytest.fixture(scope="module")
def reference():
    return codesign(NET, config=CFG)


def test_a_short_codesign_improves_over_its_start_and_validates(reference, comparable):
    result = reference
    assert result.method == "baco" and result.network == NET.name and result.seed == 3
    assert result.samples == CFG.budget_samples
    assert [r.count for r in result.layers] == list(NET.counts)
    first, last = result.history[0], result.history[-1]
    assert last.best_edp < first.best_edp                  # descent and refinement helped
    assert math.isclose(last.best_edp, result.edp, rel_tol=1e-9)
    assert [h.samples for h in result.history] == sorted(h.samples for h in result.history)
    assert max(result.hardware.pe_rows, result.hardware.pe_cols) <= CFG.max_pe_dim
    for r in result.layers:
        r.mapping.validate(r.layer, result.hardware)
    assert result.extra["scorer"] == "instruction_aware"
    assert result.extra["edp_analytic"] <= result.edp * (1 + 1e-6)   # padding only adds
    again = baco.CodesignResult.from_json(result.to_json())
    assert comparable(again) == comparable(result)


def test_same_seed_same_result(reference, comparable):
    assert comparable(codesign(NET, config=CFG)) == comparable(reference)
    other = codesign(NET, config=CFG.replace(seed=4))
    assert other.samples == reference.samples


def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, reference, comparable,
                                                          killed_after_round):
    path = tmp_path / "state.npz"
    killed_after_round(NET, config=CFG, checkpoint=path)
    assert path.exists()
    resumed = codesign(NET, config=CFG, checkpoint=path, resume=True)
    assert comparable(resumed) == comparable(reference)
    # a finished checkpoint gives the result again; a different config is refused
    assert comparable(codesign(NET, config=CFG, checkpoint=path, resume=True)) == \
        comparable(reference)
    with pytest.raises(baco.errors.ConfigError, match="different config"):
        codesign(NET, config=CFG.replace(learning_rate=0.01), checkpoint=path, resume=True)


def test_non_finite_losses_restore_the_last_good_point(monkeypatch):
    def broken(theta, space, settings):
        """A loss that is NaN everywhere (no model inside: a small program to compile)."""
        loss = jnp.nan * jnp.sum(theta.mappings.temporal_logits)
        return loss, (loss, loss)

    monkeypatch.setattr(codesign_module, "objective", broken)
    cfg = CFG.replace(budget_samples=80, refine_fraction=0.2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = codesign(NET, config=cfg)
    messages = [str(w.message) for w in caught if issubclass(w.category, CodesignWarning)]
    assert messages and "restored its last good point" in messages[0]
    assert result.extra["warnings"] == messages
    assert math.isfinite(result.edp)
    for r in result.layers:
        r.mapping.validate(r.layer, result.hardware)


def test_run_round_goes_back_to_the_last_finite_point():
    """A loss that turns NaN past a threshold: the start returns to its last point with a
    finite loss (not the first NaN one) and stops for the round."""
    space = relax.RelaxSpace.create(baco.search.starts.base_hardware("gemmini", None),
                                    list(NET.layers), hw_mode="min_hw")
    theta = relax.init_random(jax.random.PRNGKey(0), space)
    x0 = float(theta.mappings.temporal_logits[0, 1, 2])

    def climbing(th, sp, st):
        x = th.mappings.temporal_logits[0, 1, 2]
        loss = -x
        return jnp.where(x > x0 + 0.25, jnp.nan, loss), (loss, loss)

    settings = Settings(aware=False, penalty=1.0, log_max_pe=5.0, log_max_sp_kb=30.0,
                        log_max_acc_kb=30.0, log_max_dram_bw=4.0, learning_rate=0.1,
                        decay_steps=100, lr_final_fraction=1.0, round_steps=6,
                        objective=climbing)
    opt = make_optimizer(settings)
    thetas = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], theta)
    states = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], opt.init(theta))
    out, _, last, finite = run_round(thetas, states, jnp.ones((1, NET.unique_layers)), jnp.ones(1),
                                     jnp.array([6]), space, settings=settings)
    x = float(out.mappings.temporal_logits[0, 0, 1, 2])
    assert not bool(finite[0])
    assert x0 < x <= x0 + 0.25 + 1e-6          # the last point whose loss was finite
    assert np.isfinite(float(last[0]))


def test_masked_layers_do_not_move():
    search = codesign_module._Search(NET, baco.search.starts.base_hardware("gemmini", None), CFG)
    theta = relax.init_random(jax.random.PRNGKey(1), search.problem.space)
    opt = make_optimizer(search.problem.settings)
    thetas = jax.tree_util.tree_map(lambda a: jnp.stack([jnp.asarray(a)] * 2), theta)
    states = jax.tree_util.tree_map(lambda a: jnp.stack([jnp.asarray(a)] * 2), opt.init(theta))
    masks = jnp.array([[1.0, 0.0, 1.0, 1.0, 1.0], [1.0] * 5])
    out, _, _, finite = run_round(thetas, states, masks, jnp.ones(2), jnp.array([3, 3]),
                                  search.problem.space, settings=search.problem.settings)
    assert bool(finite.all())
    before, after = theta.mappings.temporal_logits, out.mappings.temporal_logits
    np.testing.assert_array_equal(after[0, 1], before[1])       # layer 1 masked in start 0
    assert not np.allclose(after[0, 0], before[0])
    assert not np.allclose(after[1, 1], before[1])              # and free in start 1


def test_bad_inputs_fail_clearly():
    with pytest.raises(baco.errors.InfeasibleError, match="max_sp_kb"):
        codesign(NET, config=CFG.replace(max_sp_kb=0.01))   # below Gemmini's least: 1/64 KiB
    with pytest.raises(baco.errors.WorkloadError):
        codesign("no_such_network", config=CFG)


def test_without_descent_the_budget_goes_to_scored_starts_then_refinement(reference):
    """``descent: false``: the same start draws, exactly scored, no gradient steps; the
    refinement phase is unchanged."""
    cfg = CFG.replace(descent=False)
    result = codesign(NET, config=cfg)
    assert result.samples <= cfg.budget_samples
    per_start = cfg.start_mappings + 1
    descent_budget = round(cfg.budget_samples * (1 - cfg.refine_fraction))
    assert result.extra["starts_drawn"] == descent_budget // per_start
    assert result.extra["starts_drawn"] > reference.extra["starts_drawn"]
    assert result.history and result.history[-1].best_edp == result.edp
    for r in result.layers:
        r.mapping.validate(r.layer, result.hardware)
