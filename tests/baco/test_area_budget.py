"""Area budgets: the relaxed penalty, the hard check at rounding, every searched baseline held
to the budget, bad budgets refused at load time, and the EDP-area Pareto front of a sweep."""

from __future__ import annotations

import csv
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import workloads
from accel.arch import HardwareConfig
from baco.cli import main
from baco.codesign_loop import codesign
from baco.config import CodesignConfig, ExperimentConfig
from baco.errors import ConfigError, InfeasibleError
from baco.objective import Settings, objective
from baco.rounding import Rounder
from perfmodels import relax
from perfmodels.energy import area_excess, config_area_mm2, hardware_area_mm2, smallest_area_mm2
from workloads.layer import Layer

GEMMINI = HardwareConfig.preset("gemmini_default")
NET = workloads.Network.from_layers("two", [Layer.gemm(M=128, K_red=256, N_out=256),
                                           Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=128)])
SMALL = workloads.Network.from_layers("small", [Layer.gemm(M=64, K_red=128, N_out=128)])
TINY_CFG = CodesignConfig(seed=0, budget_samples=120, starts=2, steps_per_start=40,
                          round_every=10, start_mappings=2, refine_moves=4)
PORT = 0.3 + 32 * 0.001
"""mm2: the DRAM interface the generator builds for the gemmini default's 8 words/cycle (a
128-bit bus, 32 requests in flight: `accel.dma`), in every area."""
BUDGET = 0.25 + PORT
"""mm2: the unbudgeted co-design of NET at TINY_CFG finds ~5 mm2 (64x64 PEs)."""


def _area(hw: HardwareConfig) -> float:
    return config_area_mm2(hw)


# --------------------------------------------------------------------------- the formula
def test_gemmini_default_area_and_smallest_design():
    # 16x16 PEs x 0.0008 + 256 KiB x 0.004 + 64 KiB x 0.008 + the DMA port
    # (accel/templates/gemmini.yaml)
    assert _area(GEMMINI) == pytest.approx(0.2048 + 1.024 + 0.512 + PORT, rel=1e-6)
    # the smallest design Gemmini's generator builds: 2x2 PEs, 1/64 KiB scratchpad (4 banks of
    # 2 rows of 2 bytes), 1/32 KiB accumulator (2 banks of 2 rows of 8 bytes)
    assert smallest_area_mm2(GEMMINI) == pytest.approx(
        4 * 0.0008 + 0.004 / 64 + 0.008 / 32 + PORT, rel=1e-6)
    # the relaxed formula is the exact one
    assert float(hardware_area_mm2(GEMMINI.template_spec, GEMMINI.to_params())) == \
        pytest.approx(_area(GEMMINI), rel=1e-6)


# --------------------------------------------------------------------------- the penalty
def _settings(budget):
    big = math.log(1e12)
    return Settings(aware=True, penalty=10.0, log_max_pe=math.log(128), log_max_sp_kb=big,
                    log_max_acc_kb=big, log_max_dram_bw=math.log(64), learning_rate=0.05,
                    decay_steps=10, lr_final_fraction=0.1, round_steps=10,
                    objective=objective, area_budget_mm2=budget)


def _inferred_area(theta, space):
    from perfmodels import aware as aware_model
    maps, _ = relax.decode(theta, space)
    hwp = aware_model.infer_hw(space.template, space.base, space.layers, maps, space.tau, True)
    return float(hardware_area_mm2(space.template, hwp))


def test_penalty_gradient_shrinks_free_hardware():
    space = relax.RelaxSpace.create(GEMMINI, list(NET.layers), hw_mode="free")
    theta = relax.init_random(jax.random.PRNGKey(1), space)
    hw = relax.RelaxedHardware(*(jnp.float32(np.log(x)) for x in (64, 64, 512, 256, 32)))

    def area(h):
        return hardware_area_mm2(space.template, relax.decode(theta._replace(hw=h), space)[1])

    start = float(area(hw))
    grad = jax.grad(lambda h: area_excess(space.template,
                                          relax.decode(theta._replace(hw=h), space)[1],
                                          start / 4))(hw)
    assert all(float(g) > 0 for g in (grad.log_pe_rows, grad.log_sp_kb, grad.log_acc_kb,
                                      grad.log_dram_bw_words))
    shrunk = jax.tree_util.tree_map(lambda x, g: x - 0.1 * g, hw, grad)
    assert float(area(shrunk)) < start


@pytest.mark.slow
@pytest.mark.parametrize("hw_mode", ["min_hw"])
def test_penalty_gradient_pushes_the_relaxed_area_down(hw_mode):
    space = relax.RelaxSpace.create(GEMMINI, list(NET.layers), counts=list(NET.counts),
                                    hw_mode=hw_mode)
    theta = relax.init_random(jax.random.PRNGKey(1), space)
    if hw_mode == "free":   # a large free array and buffers
        theta = theta._replace(hw=relax.RelaxedHardware(*(jnp.float32(np.log(x))
                                                          for x in (64, 64, 512, 256, 32))))

    def area_of(th):
        if hw_mode == "min_hw":
            return _inferred_area(th, space)
        _, hwp = relax.decode(th, space)
        return float(hardware_area_mm2(space.template, hwp))

    start = area_of(theta)
    budget = start / 4

    def penalty_only(th):   # the budgeted objective minus the unbudgeted one
        return objective(th, space, _settings(budget))[0] - objective(th, space, _settings(None))[0]

    step = jax.jit(jax.value_and_grad(penalty_only))
    value, _ = step(theta)
    assert float(value) == pytest.approx(10.0 * math.log(start / budget), rel=1e-3)
    for _ in range(20):
        _, grads = step(theta)
        theta = jax.tree_util.tree_map(lambda x, g: x - 0.05 * g, theta, grads)
    assert area_of(theta) < 0.9 * start
    # within the budget the penalty is zero and has no gradient
    def loss(settings):
        return jax.jit(jax.value_and_grad(lambda th: objective(th, space, settings)[0]))(theta)

    (v_loose, g_loose), (v_none, g_none) = loss(_settings(1e6)), loss(_settings(None))
    assert float(v_loose) == pytest.approx(float(v_none), rel=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(g_loose), jax.tree_util.tree_leaves(g_none)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_relax_edp_loss_carries_the_penalty():
    space = relax.RelaxSpace.create(GEMMINI, list(NET.layers), hw_mode="min_hw")
    theta = relax.init_random(jax.random.PRNGKey(0), space)
    free, held, excess = jax.jit(lambda th: (
        relax.edp_loss(th, space), relax.edp_loss(th, space, area_budget_mm2=0.02),
        area_excess(space.template, relax.evaluate(th, space).hw, 0.02)))(theta)
    expected = 10.0 * float(excess)
    assert expected > 0
    assert float(held - free) == pytest.approx(expected, rel=1e-4)


# --------------------------------------------------------------------------- rounding
def test_rounding_fits_or_rejects_designs_over_the_budget():
    layers = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64)]
    log_t = np.zeros((1, 1, 4, 7))
    log_s = np.zeros((1, 1, 4, 7))
    log_s[0, 0, 1, 4] = np.log(16)
    log_s[0, 0, 2, 5] = np.log(16)
    log_t[0, 0, 2, 2] = log_t[0, 0, 2, 3] = np.log(14)
    orders = np.tile(np.arange(7), (1, 1, 4, 1))
    stages = np.full((1, 1, 4), 2.0)
    free = Rounder(GEMMINI, layers).round(log_t, log_s, orders, stages)[0]
    assert _area(free.hw) > 0.1 + PORT
    # the tightest: a 1x1 array's area with 1 KiB buffers (the smallest buildable design's
    # 16-byte scratchpad holds no tile of this layer)
    for budget in (0.1 + PORT, 0.03 + PORT, 0.0008 + 0.004 + 0.008 + PORT):
        r = Rounder(GEMMINI, layers, area_budget_mm2=budget)
        design = r.round(log_t, log_s, orders, stages)[0]
        assert _area(design.hw) <= budget * (1 + 1e-6)
        r.check(design)                              # valid, and within the budget
        assert np.isfinite(r.score([design]).edp).all()
    # a design over the budget scores an infinite EDP and fails the check
    tight = Rounder(GEMMINI, layers, area_budget_mm2=0.1 + PORT)
    assert np.isinf(tight.score([free]).edp).all()
    with pytest.raises(InfeasibleError, match="area_budget_mm2"):
        tight.check(free)


# --------------------------------------------------------------------------- the co-design
@pytest.fixture(scope="module")
def unbudgeted():
    return codesign(NET, config=TINY_CFG)


def test_budgeted_codesign_stays_within_the_budget(unbudgeted):
    assert _area(unbudgeted.hardware) > BUDGET          # the budget binds
    held = codesign(NET, config=TINY_CFG.replace(area_budget_mm2=BUDGET))
    assert _area(held.hardware) <= BUDGET
    assert math.isfinite(held.edp) and held.samples <= TINY_CFG.budget_samples
    for point in held.history:
        assert math.isfinite(point.best_edp)


def test_codesign_refuses_a_budget_below_the_smallest_design():
    with pytest.raises(ConfigError, match=r"codesign\.area_budget_mm2.*0\.3355"):
        codesign(SMALL, config=TINY_CFG.replace(area_budget_mm2=0.001))


# --------------------------------------------------------------------------- baselines
def test_dosa_is_held_to_the_budget():
    from baco.search.dosa import dosa
    kw = {"budget_samples": 120, "starts": 2, "gd_iters": 40, "round_steps": 20,
          "start_mappings_per_layer": 2}
    free = dosa(NET, **kw)
    assert _area(free.hardware) > BUDGET
    held = dosa(NET, area_budget_mm2=BUDGET, **kw)
    assert _area(held.hardware) <= BUDGET
    assert held.extra["settings"]["area_budget_mm2"] == BUDGET


def test_random_search_rejects_hardware_over_the_budget():
    from baco.search.random_search import random_search
    result = random_search(SMALL, budget_samples=60, seed=0, mappings_per_hw=10,
                           area_budget_mm2=0.1 + PORT)
    assert _area(result.hardware) <= 0.1 + PORT
    assert all(_area(HardwareConfig(pe_rows=c["pe"], pe_cols=c["pe"], sp_kb=c["sp_kb"],
                                    acc_kb=c["acc_kb"])) <= 0.1 + PORT
               for c in result.extra["hardware"])
    assert result.extra["over_budget_hardware"] > 0
    with pytest.raises(InfeasibleError, match="area_budget_mm2"):
        random_search(SMALL, budget_samples=10, seed=0, area_budget_mm2=0.013 + PORT)


def test_bayes_opt_draws_and_ranks_only_hardware_within_the_budget():
    from baco.search.bayes_opt import bayes_opt
    budget = 0.3 + PORT
    result = bayes_opt(SMALL, budget_samples=36, seed=0, area_budget_mm2=budget)
    assert result.samples == 36
    assert _area(result.hardware) <= budget
    for c in result.extra["hardware"]:
        assert _area(HardwareConfig(pe_rows=c["pe"], pe_cols=c["pe"], sp_kb=c["sp_kb"],
                                    acc_kb=c["acc_kb"])) <= budget
    with pytest.raises(InfeasibleError, match="area_budget_mm2"):
        bayes_opt(SMALL, budget_samples=16, seed=0, area_budget_mm2=0.05 + PORT)


def test_fixed_hardware_baselines_record_the_budget():
    from baco.search._space import AreaBudgetWarning
    from baco.search.gemmini_tiler import gemmini_default
    from baco.search.random_pruned import random_pruned
    with pytest.warns(AreaBudgetWarning, match="over area_budget_mm2"):
        over = gemmini_default(SMALL, area_budget_mm2=1.0)
    assert over.extra["within_area_budget"] is False
    assert over.extra["area_mm2"] == pytest.approx(_area(GEMMINI))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fine = random_pruned(SMALL, budget_samples=8, seed=0, hardware="gemmini_default",
                             area_budget_mm2=2.2)
    assert fine.extra["within_area_budget"] is True
    with pytest.raises(ConfigError, match="area_budget_mm2"):
        gemmini_default(SMALL, area_budget_mm2=-1.0)


@pytest.mark.parametrize("name", ["random", "bo", "gemmini_default", "random_pruned", "dosa"])
def test_every_baseline_takes_the_keyword(name):
    import inspect

    from baco.run import baselines
    params = inspect.signature(baselines()[name]).parameters
    assert "area_budget_mm2" in params and params["area_budget_mm2"].default is None


# --------------------------------------------------------------------------- bad input
def _config(tmp_path, **codesign):
    data = yaml.safe_load((__import__("pathlib").Path(__file__).parent / "data" / "tiny.yaml")
                          .read_text())
    data["codesign"].update(codesign)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("value", [0.001, 0.0, -1.0])
def test_a_bad_budget_is_one_line_naming_the_field_and_the_smallest_area(tmp_path, value):
    path = _config(tmp_path, area_budget_mm2=value)
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert "codesign.area_budget_mm2" in message and "0.3355 mm2" in message
    assert str(path) in message


def test_fixed_mode_budget_below_the_fixed_hardware(tmp_path):
    path = _config(tmp_path, area_budget_mm2=1.0, hw_mode="fixed")
    with pytest.raises(ConfigError, match=r"codesign\.area_budget_mm2.*2\.073 mm2"):
        ExperimentConfig.load(path)
    ok = ExperimentConfig.load(_config(tmp_path, area_budget_mm2=0.5))
    assert ok.codesign.area_budget_mm2 == 0.5


def test_baco_run_with_a_bad_budget_exits_2_and_writes_nothing(tmp_path, capsys):
    path = _config(tmp_path, area_budget_mm2=0.001)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "codesign.area_budget_mm2" in err and "0.3355" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


# --------------------------------------------------------------------------- the front
def test_pareto_front():
    from baco.reproduce.tables import pareto_front
    assert pareto_front([1.0, 2.0, 3.0, 2.0, 1.5], [9.0, 4.0, 5.0, 4.0, 9.5]) == \
        [True, True, False, False, False]
    assert pareto_front([1.0, math.inf, 0.5], [1.0, 0.1, math.nan]) == [True, False, False]
    assert pareto_front([], []) == []


@pytest.mark.slow   # ~4 min: random designs at 0.3 mm2 (4x4 PEs) simulate 13 M instructions
@pytest.mark.filterwarnings("ignore::baco.search._space.AreaBudgetWarning")
def test_area_sweep_writes_the_pareto_front(tmp_path):
    from baco.reproduce import reproduce
    spec = {"name": "area_tiny", "kind": "area_sweep", "params": {
        "networks": ["bert:seq=16"], "area_budgets_mm2": [0.3 + PORT, 2.0, None],
        "reference": "Random",
        "methods": [
            {"label": "Default", "search": "gemmini_default", "budget": 1},
            {"label": "Random", "search": "random", "budget": 20,
             "options": {"mappings_per_hw": 10}}]}}
    path = tmp_path / "sweep_area_tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    outcome = reproduce(str(path), out=out, progress=False)
    assert outcome.cases == 6 and not outcome.failed
    assert (out / "pareto.png").stat().st_size > 0
    rows = list(csv.DictReader((out / "pareto.csv").open()))
    assert len(rows) == 6
    for row in rows:
        if row["method"] == "Random" and row["area_budget_mm2"]:
            assert float(row["area_mm2_plain"]) <= float(row["area_budget_mm2"])
            assert row["within_budget"] == "True"
    default = [r for r in rows if r["method"] == "Default"]
    assert [r["within_budget"] for r in default] == ["False", "True", "True"]
    assert sum(r["pareto"] == "True" for r in default) == 1     # one design, one front point
    random_rows = [r for r in rows if r["method"] == "Random"]
    flags = [r["pareto"] == "True" for r in random_rows]
    assert flags[0]                     # the smallest area is always on the front
    # resumable: a rerun reuses every case
    again = reproduce(str(path), out=out, progress=False)
    assert again.reused == 6 and again.ran == 0


def test_area_sweep_refuses_a_budget_below_the_smallest_design(tmp_path):
    from baco.reproduce.engine import plan
    spec = {"name": "x", "kind": "area_sweep", "params": {
        "networks": ["bert:seq=16"], "area_budgets_mm2": [0.001], "reference": "B",
        "methods": [{"label": "B", "search": "baco", "budget": 10}]}}
    path = tmp_path / "sweep_x.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"area_budgets_mm2\[0\].*0\.3355"):
        plan(str(path))
