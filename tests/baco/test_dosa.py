"""The DOSA-style baseline: same budget accounting and result type, deterministic, registered."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import workloads
from baco.config import ExperimentConfig
from baco.errors import ConfigError
from baco.run import baselines
from baco.search.dosa import dosa

TINY = ExperimentConfig.load(Path(__file__).parent / "data" / "tiny.yaml")
NET = workloads.load(TINY.network)
OPTIONS = dict(TINY.baselines[0].options)
BUDGET = 150


@pytest.fixture(scope="module")
def reference():
    return dosa(NET, budget_samples=BUDGET, seed=0, **OPTIONS)


def test_dosa_spends_its_budget_and_its_design_validates(reference):
    result = reference
    assert result.method == "dosa" and result.extra["scorer"] == "analytic"
    assert BUDGET - 4 <= result.samples <= BUDGET
    assert result.history and math.isclose(result.history[-1].best_edp, result.edp,
                                           rel_tol=1e-9)
    edps = [h.best_edp for h in result.history]
    assert edps == sorted(edps, reverse=True)
    assert max(result.hardware.pe_rows, result.hardware.pe_cols) <= 128
    for r in result.layers:
        r.mapping.validate(r.layer, result.hardware)
        assert r.mapping.stages[:-1].tolist() == [2, 2, 2]       # fixed stages


def test_dosa_is_deterministic(reference):
    again = dosa(NET, budget_samples=BUDGET, seed=0, **OPTIONS)
    assert again.edp == reference.edp and again.samples == reference.samples
    assert [r.mapping for r in again.layers] == [r.mapping for r in reference.layers]


def test_dosa_is_a_registered_baseline():
    assert baselines()["dosa"] is dosa


@pytest.mark.parametrize("options", [{"starts": 0}, {"learning_rate": -1.0},
                                     {"gd_iters": 2.5}])
def test_bad_options(options):
    with pytest.raises(ConfigError):
        dosa(NET, budget_samples=BUDGET, seed=0, **options)
