"""The DOSA-style baseline: same budget accounting and result type, deterministic, registered;
DOSA's per-workload learning rates, rounding and greedy per-layer DRAM order."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig
from baco.config import ExperimentConfig
from baco.errors import ConfigError
from baco.rounding import Rounder
from baco.run import baselines
from baco.search.dosa import (
    DRAM_ORDERS,
    dosa,
    dosa_learning_rate,
    greedy_dram_orders,
    round_mapping,
)
from perfmodels.score import network_edp
from workloads.layer import Layer

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


# -- DOSA's per-workload learning rates ---------------------------------------------------------

def test_dosa_learning_rates_follow_dosas_table():
    # ucb-bar/dosa dataset/dse/mapping_driven_hw_search.py::search_network, EDP target
    assert dosa_learning_rate("resnet50") == 7.5e-5
    assert dosa_learning_rate("retinanet") == 7.5e-5
    assert dosa_learning_rate("unet") == 5e-5
    assert dosa_learning_rate("U-Net") == 5e-5
    assert dosa_learning_rate("rnnt") == 5e-5
    for other in ("bert", "bert:seq=16", "deepbench", "mobilenet_v2", "vgg16", "tiny"):
        assert dosa_learning_rate(other) == 1e-5


def test_dosa_takes_the_networks_rate_by_default(reference):
    assert "learning_rate" not in OPTIONS
    assert reference.extra["settings"]["learning_rate"] == dosa_learning_rate(NET.name) == 1e-5


def test_experiment_files_pass_dosas_rate_for_their_network():
    configs = sorted((Path(__file__).parents[2] / "experiments" / "configs").glob("*.yaml"))
    checked = 0
    for path in configs:
        try:
            config = ExperimentConfig.load(path)
        except Exception:          # a reproduce spec (figures, tables), not a run config
            continue
        for spec in config.baselines:
            if spec.name == "dosa" and "learning_rate" in spec.options:
                assert spec.options["learning_rate"] == dosa_learning_rate(config.network), path
                checked += 1
    assert checked >= 4


# -- DOSA's rounding ------------------------------------------------------------------------------

def test_round_mapping_rounds_spatial_factors_first():
    # K = 12 (dim 5): temporal 3 at L1, spatial 8 at L2. DOSA rounds every spatial factor
    # first: 8 -> 6 (nearest divisor of 12), then the temporal 3 -> 2 (of the 2 left).
    t = np.ones((1, 4, 7)); s = np.ones((1, 4, 7))
    t[0, 1, 5] = 3.0
    s[0, 2, 5] = 8.0
    dims = np.array([[1, 1, 1, 1, 1, 12, 1]])
    T, S = round_mapping(dims, t, s, np.array([np.inf, 128, 128, np.inf]))
    assert S[0, 2, 5] == 6 and T[0, 1, 5] == 2 and T[0, 3, 5] == 1
    # the PE bound: a spatial factor is rounded to a divisor that fits
    s[0, 2, 5] = 200.0
    dims[0, 5] = 256
    T, S = round_mapping(dims, t, s, np.array([np.inf, 128, 128, np.inf]))
    assert S[0, 2, 5] == 128 and (T * S).prod(axis=1)[0].tolist() == dims[0].tolist()


# -- DOSA's greedy per-layer DRAM order ---------------------------------------------------------

# Three layers whose tiles make each prefer another DRAM order (both fewer cycles and less energy):
# layer 0 weight-, layer 1 input-, layer 2 output-stationary. Temporal factors of L1..DRAM (R S P
# Q C K N); C16 spatial at the accumulator and K16 at the scratchpad; L0 all 1.
_BIG = Layer.conv2d(R=1, S=1, P=8, Q=8, C=1024, K=1024)
_WIDE = Layer.conv2d(R=1, S=1, P=32, Q=32, C=64, K=512)
_MIXED_LAYERS = [_BIG, _WIDE, _BIG]
_MIXED_TILES = [
    [[1, 1, 4, 1, 64, 1, 1], [1, 1, 2, 1, 1, 8, 1], [1, 1, 1, 8, 1, 8, 1]],
    [[1, 1, 2, 4, 1, 1, 1], [1, 1, 4, 2, 1, 1, 1], [1, 1, 4, 4, 4, 32, 1]],
    [[1, 1, 8, 4, 1, 64, 1], [1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 2, 64, 1, 1]],
]


def _mixed_case():
    hw = HardwareConfig.preset("gemmini_default")
    rounder = Rounder(hw, _MIXED_LAYERS, hw_mode="min_hw", aware=False, nearest="linear")
    n = len(_MIXED_LAYERS)
    temporal = np.ones((n, 4, 7), np.int64)
    temporal[:, 1:] = np.array(_MIXED_TILES)
    spatial = np.ones((n, 4, 7), np.int64)
    spatial[:, 1, 4] = 16
    spatial[:, 2, 5] = 16
    stages = np.tile(np.array([2, 2, 2, 1]), (n, 1))
    orders = []
    for dram in DRAM_ORDERS:
        order = np.tile(np.arange(7)[::-1], (n, 4, 1))
        order[:, -1] = np.asarray(dram)[::-1]
        orders.append(order)
    designs = rounder.finish(np.stack([temporal] * 3), np.stack([spatial] * 3), np.stack(orders),
                             np.stack([stages] * 3))
    return rounder, designs, orders


def test_greedy_dram_order_gives_each_layer_its_best():
    rounder, designs, orders = _mixed_case()
    metrics = rounder.score(designs)
    counts = [1.0] * len(_MIXED_LAYERS)
    for b in range(len(_MIXED_LAYERS)):             # the case: layer b prefers order b outright
        others = [k for k in range(3) if k != b]
        assert all(metrics.cycles[b, b] <= metrics.cycles[k, b] for k in others)
        assert all(metrics.energy_pj[b, b] < metrics.energy_pj[k, b] for k in others)
    for start in ([0, 0, 0], [2, 2, 2], [1, 0, 1]):
        pick, edp = greedy_dram_orders(metrics.cycles, metrics.energy_pj, counts,
                                       np.array(start))
        assert pick.tolist() == [0, 1, 2]
        assert edp < network_edp(metrics, counts)[0].min()
    # a layer's DRAM order changes neither the hardware nor the other layers: the mixed design
    # scores exactly what the greedy choice computed from the three uniform ones
    mixed = np.stack([orders[k][b] for b, k in enumerate(pick)])
    chosen = dataclasses.replace(designs[0], order=mixed)
    again = network_edp(rounder.score([chosen]), counts)[0][0]
    assert math.isclose(again, edp, rel_tol=1e-6)


def test_greedy_dram_order_keeps_the_current_order_unless_one_is_better():
    cycles = np.array([[2.0, 1.0], [3.0, 1.0], [1.0, 1.0]])   # candidate 2: the current orders
    energy = np.array([[2.0, 1.0], [3.0, 1.0], [1.0, 1.0]])
    pick, edp = greedy_dram_orders(cycles, energy, [1, 1], np.array([2, 2]))
    assert pick.tolist() == [2, 2] and edp == 4.0
    pick, _ = greedy_dram_orders(cycles, energy, [1, 1], np.array([1, 1]))
    assert pick.tolist() == [2, 1]                   # layer 1: all equal, the current one stays
