"""Mapping: Timeloop strings, validation, and the fit property."""

from __future__ import annotations

import csv
import itertools
import math
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from workloads.errors import ConfigError, InfeasibleError
from workloads.layer import DIMS, Layer

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSV = ROOT / "data" / "timeloop_gemmini_10k.csv"

GEMMINI = HardwareConfig.preset("gemmini_default")
SMALL = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=8, acc_kb=2, name="small")
LAYER = Layer.conv2d(R=3, S=3, P=8, Q=8, C=16, K=32, Hstride=2, Wstride=2)
EXAMPLE = "L3[WIO] K2 Q8 P2 C2 - L2[WI] N1 K16X - L1[O] S3 R3 P4 C8X - L0[W] N1"


def test_parse_fields():
    m = Mapping.from_timeloop(EXAMPLE)
    assert m.tags == ("W", "O", "WI", "WIO")
    assert m.temporal[3].tolist() == [1, 1, 2, 8, 2, 2, 1]    # R S P Q C K N
    assert m.spatial[2].tolist() == [1, 1, 1, 1, 1, 16, 1]
    assert m.spatial[1].tolist() == [1, 1, 1, 1, 8, 1, 1]
    # order is outermost first; unlisted (factor 1) dims come first
    assert [DIMS[d] for d in m.order[3]][-4:] == ["K", "Q", "P", "C"]
    assert m.stages.tolist() == [2, 2, 2, 1]
    assert m.to_timeloop() == EXAMPLE
    m.with_stages(1).validate(LAYER, GEMMINI)


def test_round_trip_of_every_dataset_string():
    with CSV.open(newline="") as handle:
        strings = [row["mapping.mapping"] for row in csv.DictReader(handle)]
    assert len(strings) > 1000
    for text in strings:
        assert Mapping.from_timeloop(text).to_timeloop() == text


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_round_trip_of_random_mappings(seed):
    rng = np.random.default_rng(seed)
    layer = Layer.conv2d(R=int(rng.choice([1, 3, 5])), S=int(rng.choice([1, 3])),
                         P=int(rng.choice([7, 12, 28])), Q=int(rng.choice([1, 14])),
                         C=int(rng.choice([3, 64, 96])), K=int(rng.choice([10, 128])),
                         N=int(rng.choice([1, 2])))
    m = Mapping.random(layer, GEMMINI, rng, fit=False)
    back = Mapping.from_timeloop(m.to_timeloop(), stages=1).replace(stages=m.stages)
    assert back == m and hash(back) == hash(m)
    assert back.to_timeloop() == m.to_timeloop()


@pytest.mark.parametrize("text, fragment", [
    ("", "non-empty"),
    ("L1[WIO] K2 - L1[O] N1", "found L1 where L0 was expected"),
    ("L1[WIO] K2 - X0[WI] N1", "expected e.g. 'L3[WIO]'"),
    ("L1[WIZ] K2 - L0[W] N1", "keeps 'WIZ'"),
    ("L1[WIO] K2 Z3 - L0[W] N1", "token 'Z3'"),
    ("L1[WIO] K2 K3 - L0[W] N1", "two temporal loops over K"),
    ("L1[WIO] K2X K4X - L0[W] N1", "two spatial factors for K"),
    ("L1[WIO] K0 - L0[W] N1", "at least 1"),
    ("L1[WIO] K2.5 - L0[W] N1", "token 'K2.5'"),
])
def test_malformed_strings_name_the_level_or_token(text, fragment):
    with pytest.raises(ConfigError) as err:
        Mapping.from_timeloop(text)
    assert fragment in str(err.value)


def _edit(text: str, old: str, new: str) -> Mapping:
    assert old in text
    return Mapping.from_timeloop(text.replace(old, new), stages=1)


@pytest.mark.parametrize("old, new, fragment", [
    ("K2 Q8", "K4 Q8", "dim K: factors multiply to 64"),
    ("P4 C8X", "P4 C2X", "dim C: factors multiply to 4"),
])
def test_factors_must_multiply_to_the_layer(old, new, fragment):
    with pytest.raises(InfeasibleError) as err:
        _edit(EXAMPLE, old, new).validate(LAYER, GEMMINI)
    assert fragment in str(err.value) and "the layer has" in str(err.value)


def _moved(m: Mapping, kind: str, level: int, dim: str, factor: int, src: int) -> Mapping:
    """`m` with a factor of `dim` moved from temporal level `src` to `kind` at `level`."""
    d = DIMS.index(dim)
    temporal, spatial = m.temporal.copy(), m.spatial.copy()
    temporal[src, d] //= factor
    (spatial if kind == "spatial" else temporal)[level, d] *= factor
    return m.replace(temporal=temporal, spatial=spatial)


BASE = Mapping.from_timeloop(EXAMPLE, stages=1)


@pytest.mark.parametrize("mapping, fragment", [
    (_moved(BASE, "spatial", 1, "K", 2, src=3), "L1 (Accumulator): spatial factor on K"),
    (_moved(BASE, "temporal", 0, "K", 2, src=3), "L0 (Registers): temporal loop over K"),
    (BASE.replace(stages=np.array([5, 1, 1, 1])), "stages must be 1..4"),
    (BASE.replace(stages=np.array([1, 1, 1, 2])), "outermost level has 1 stage"),
    (Mapping.from_timeloop(EXAMPLE.replace("L2[WI]", "L2[W]"), stages=1), "keeps [WI]"),
])
def test_validation_names_level_and_reason(mapping, fragment):
    with pytest.raises(InfeasibleError) as err:
        mapping.validate(LAYER, GEMMINI)
    assert fragment in str(err.value)


def test_fanout_is_bounded_by_the_array():
    layer = Layer.conv2d(R=3, S=3, P=8, Q=8, C=32, K=32, Hstride=2, Wstride=2)
    wide = Mapping.from_timeloop("L3[WIO] K2 Q8 P2 - L2[WI] N1 K16X - L1[O] S3 R3 P4 C32X "
                                 "- L0[W] N1", stages=1)
    with pytest.raises(InfeasibleError, match="use 32 PEs but the fan-out is 16"):
        wide.validate(layer, GEMMINI)
    wide.validate(layer, HardwareConfig(pe_rows=32, pe_cols=32))


def test_overflow_names_level_and_tensors():
    big = Mapping.from_timeloop("L3[WIO] N1 - L2[WI] P8 Q8 S3 R3 C2 K2 K16X - L1[O] C8X "
                                "- L0[W] N1", stages=1)
    big.validate(LAYER, GEMMINI)
    with pytest.raises(InfeasibleError) as err:
        big.validate(LAYER, HardwareConfig(pe_rows=16, pe_cols=16, sp_kb=8, acc_kb=64))
    msg = str(err.value)
    assert "L2 (Scratchpad)" in msg and "W 4608 words" in msg and "I " in msg
    # stages multiply the footprint
    sp_need = big.footprint_kb(LAYER, GEMMINI)[2]
    assert np.isclose(big.with_stages(4).footprint_kb(LAYER, GEMMINI)[2], 4 * sp_need)


def _independent_footprint_kb(m: Mapping, layer: Layer, hw: HardwareConfig) -> list[float]:
    """Tile bytes per level, by explicit products (not the shared tile_words formula)."""
    out = []
    template = hw.template_spec
    bits = {"W": hw.weight_bits, "I": hw.input_bits, "O": hw.acc_bits}
    for level in range(m.num_levels - 1):
        ext = {d: math.prod(int(m.temporal[l, i] * m.spatial[l, i]) for l in range(level + 1))
               for i, d in enumerate(DIMS)}
        rows = (ext["P"] - 1) * layer.Hstride + (ext["R"] - 1) * layer.Hdilation + 1
        cols = (ext["Q"] - 1) * layer.Wstride + (ext["S"] - 1) * layer.Wdilation + 1
        words = {"W": ext["R"] * ext["S"] * ext["C"] * ext["K"],
                 "I": ext["C"] * ext["N"] * rows * cols,
                 "O": ext["P"] * ext["Q"] * ext["K"] * ext["N"]}
        held = sum(words[t] * bits[t] for t in template.levels[level].keeps)
        out.append(held / 8 / 1024 * int(m.stages[level]))
    return out


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), preset=st.sampled_from(
    ["gemmini_default", "gemmini_dosa", "nvdla_small", "eyeriss"]))
def test_accepted_mappings_fit_their_buffers(seed, preset):
    """Property: validate accepts exactly the mappings whose tiles (x stages) fit."""
    hw = HardwareConfig.preset(preset)
    if preset == "gemmini_default":
        hw = SMALL  # small buffers, so that both outcomes occur
    rng = np.random.default_rng(seed)
    layer = Layer.conv2d(R=int(rng.choice([1, 3])), S=int(rng.choice([1, 3])),
                         P=int(rng.choice([4, 14])), Q=int(rng.choice([4, 14])),
                         C=int(rng.choice([8, 48])), K=int(rng.choice([16, 64])),
                         Hstride=int(rng.choice([1, 2])), Wstride=int(rng.choice([1, 2])))
    m = Mapping.random(layer, hw, rng, fit=False, stages=int(rng.integers(1, 5)))
    need = _independent_footprint_kb(m, layer, hw)
    caps = hw.capacities_kb()
    fits = all(need[l] <= caps[lv.name] * (1 + 1e-9)
               for l, lv in enumerate(hw.template_spec.levels[:-1]))
    if fits:
        m.validate(layer, hw)
    else:
        with pytest.raises(InfeasibleError, match="overflows"):
            m.validate(layer, hw)


def test_random_mappings_are_valid():
    rng = np.random.default_rng(3)
    for preset, layer in itertools.product(
            ["gemmini_default", "nvdla_large", "eyeriss"],
            [LAYER, Layer.gemm(M=64, K_red=512, N_out=256)]):
        hw = HardwareConfig.preset(preset)
        for _ in range(5):
            Mapping.random(layer, hw, rng).validate(layer, hw)


def test_equality_ignores_placement_of_loops_that_do_not_exist():
    a = Mapping.from_timeloop(EXAMPLE)
    order = a.order.copy()
    order[3] = np.roll(order[3][:3], 1).tolist() + order[3][3:].tolist()  # permute factor-1 dims
    b = a.replace(order=order)
    assert a == b and hash(a) == hash(b)
    assert a != a.with_stages(1)
    assert Mapping.from_dict(a.to_dict()) == a


def test_bad_array_shapes_are_config_errors():
    with pytest.raises(ConfigError, match="shape"):
        Mapping.create(np.ones((3, 7), int))
    with pytest.raises(ConfigError, match="permutation"):
        Mapping.create(np.ones((4, 7), int), order=np.zeros((4, 7), int))
    with pytest.raises(ConfigError, match="integers"):
        Mapping.create(np.full((4, 7), 1.5))
