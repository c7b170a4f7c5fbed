"""`baco.verdict`: the simulated verdict between two designs, taken apart."""

import math

import numpy as np
import pytest

from accel.arch import HardwareConfig, level_arrays
from accel.design import design_of
from accel.mapping import Mapping
from baco import verdict
from baco import yardsticks as ys
from baco.verdict import verdict_lines
from workloads.layer import Layer

HW = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=16, acc_kb=8, name="small")
LAYERS = (
    Layer.conv2d(R=3, S=3, P=6, Q=5, C=3, K=9, pads=(1, 1, 1, 1), name="rgb"),
    Layer.gemm(M=16, K_red=24, N_out=16, name="gemm"),
)
COUNTS = (2, 3)


def _judged(seed):
    rng = np.random.default_rng(seed)
    design = design_of(HW, [Mapping.random(layer, HW, rng) for layer in LAYERS])
    return ys.yardsticks(LAYERS, COUNTS, design, cache=ys.SimCache())


@pytest.fixture(scope="module")
def pair():
    return _judged(0), _judged(1)


def test_a_contestant_splits_its_simulated_figures(pair):
    mine, _ = pair
    out = verdict.contestant(mine)
    assert out["latency_cycles"] == pytest.approx(mine.simulated.latency_cycles, rel=1e-12)
    assert out["energy_pj"] == pytest.approx(mine.simulated.energy_pj, rel=1e-12)
    assert out["edp_by_padded_mac"]["table"] == pytest.approx(mine.simulated.edp, rel=1e-12)
    assert sum(x["latency_share"] for x in out["layers"]) == pytest.approx(1.0)
    assert sum(x["energy_share"] for x in out["layers"]) == pytest.approx(1.0)
    # The C=3 conv pads the array's rows: its padded MACs re-priced, cycles unchanged.
    lv = level_arrays(HW.template_spec, mine.simulated.hardware.to_params(), np)
    padded = math.fsum(x.count * (x.array_macs - x.macs) for x in mine.layers)
    assert padded > 0
    lat = out["latency_cycles"]
    for assumption, pj in (("zero", 0.0), ("full", float(lv.mac_energy_pj))):
        energy = out["energy_pj"] + padded * (pj - float(lv.mac_padded_energy_pj))
        assert out["edp_by_padded_mac"][assumption] == pytest.approx(lat * energy, rel=1e-9)
    assert (out["edp_by_padded_mac"]["zero"] < out["edp_by_padded_mac"]["table"]
            < out["edp_by_padded_mac"]["full"])


def test_versus_takes_the_ratio_apart(pair):
    mine, theirs = pair
    out = verdict.versus(theirs, mine)
    assert out["edp_ratio"] == pytest.approx(theirs.simulated.edp / mine.simulated.edp,
                                             rel=1e-9)
    assert out["latency_ratio"] * out["energy_ratio"] == pytest.approx(out["edp_ratio"])
    assert out["edp_ratio_by_padded_mac"]["table"] == pytest.approx(out["edp_ratio"])
    # The largest layer (most MACs x count) is the GEMM; without it, only the conv is left.
    assert out["largest_layer_out"]["layer"] == "gemm"
    conv_t = [x for x in theirs.layers if x.name == "rgb"][0]
    conv_m = [x for x in mine.layers if x.name == "rgb"][0]
    alone = (conv_t.cycles * conv_t.energy_pj) / (conv_m.cycles * conv_m.energy_pj)
    assert out["largest_layer_out"]["edp_ratio"] == pytest.approx(alone, rel=1e-9)
    assert out["worst_layer_out"]["edp_ratio"] <= out["largest_layer_out"]["edp_ratio"]
    assert out["worst_layer_out"]["layer"] in {"rgb", "gemm"}
    # A design against itself: even on every count.
    self_out = verdict.versus(mine, mine)
    assert all(v == pytest.approx(1.0) for v in self_out["edp_ratio_by_padded_mac"].values())
    assert self_out["worst_layer_out"]["edp_ratio"] == pytest.approx(1.0)
    lines = verdict_lines(out)
    assert "latency" in lines[0] and "without the largest layer (gemm)" in lines[1]


def test_an_unknown_assumption_is_refused(pair):
    with pytest.raises(ValueError, match="padded-MAC assumption"):
        verdict.padded_mac_pj(pair[0], "half")
