"""What Gemmini's generator builds (`accel.buildable`), and that every search's design and the
simulated yardstick's hardware are buildable."""

from __future__ import annotations

import dataclasses

import pytest

import workloads
from accel.arch import HardwareConfig
from accel.buildable import (
    buildable_hardware,
    grown_hardware,
    is_buildable,
    next_buildable_acc_kb,
    next_buildable_sp_kb,
    smallest_buildable,
    unbuildable_reason,
)
from accel.design import design_of
from accel.mapping import Mapping
from baco.search import BASELINES
from perfmodels.energy import smallest_area_mm2
from workloads import Layer
from workloads.errors import ConfigError

DEFAULT = HardwareConfig.preset("gemmini_default")
NET = workloads.Network.from_layers("toy", [
    Layer.conv2d(R=3, S=3, P=7, Q=7, C=16, K=24, pads=(1, 1, 1, 1)),
    Layer.gemm(M=3, K_red=40, N_out=10)])


def test_gemmini_default_and_dosa_presets_are_buildable():
    assert unbuildable_reason(DEFAULT) is None
    assert is_buildable(HardwareConfig.preset("gemmini_dosa"))


@pytest.mark.parametrize("fields, words", [
    ({"sp_kb": 912.0}, ("sp_bank_entries = 14592", "isPow2(sp_bank_entries)", "1024 KiB")),
    ({"acc_kb": 48.0}, ("acc_bank_entries = 384", "isPow2(acc_bank_entries)", "64 KiB")),
    ({"pe_rows": 12, "pe_cols": 12}, ("DIM 12", "powers of 2")),
    ({"pe_rows": 1, "pe_cols": 1}, ("DIM 1", ">= 2")),
    ({"pe_rows": 16, "pe_cols": 8}, ("must be square",)),
    ({"sp_kb": 1.0, "acc_kb": 4.0}, ("USABLE_SP_TILES >= TOTAL_ACC_TILES",)),
])
def test_unbuildable_configs_name_the_rule(fields, words):
    why = unbuildable_reason(dataclasses.replace(DEFAULT, **fields))
    assert why is not None and all(w in why for w in words), why


def test_next_buildable_sizes():
    assert next_buildable_sp_kb(16, 912) == 1024.0
    assert next_buildable_sp_kb(16, 0.3) == 1.0          # 4 banks x 16 rows x 16 B
    assert next_buildable_sp_kb(16, 256) == 256.0
    assert next_buildable_acc_kb(16, 1) == 2.0           # 2 banks x 16 rows x 64 B
    assert next_buildable_acc_kb(16, 48) == 64.0
    assert next_buildable_sp_kb(128, 1) == 64.0
    assert next_buildable_acc_kb(128, 130) == 256.0
    snapped = buildable_hardware(dataclasses.replace(DEFAULT, pe_rows=12, pe_cols=12,
                                                     sp_kb=3.0, acc_kb=48.0))
    assert (snapped.pe_rows, snapped.acc_kb) == (16, 64.0)
    assert snapped.sp_kb == 32.0        # 64 accumulator tiles need 66 scratchpad tiles
    assert is_buildable(snapped) and buildable_hardware(snapped) == snapped


def test_templates_without_rules_keep_sram_steps():
    eyeriss = HardwareConfig.preset("eyeriss")
    assert unbuildable_reason(dataclasses.replace(eyeriss, sp_kb=912.0)) is None
    assert grown_hardware(eyeriss, 0.5, sp_kb=130.2).sp_kb == 130.5
    assert smallest_buildable(eyeriss, 2.0).sp_kb == 2.0


def test_grown_and_smallest_gemmini_hardware_are_buildable():
    grown = grown_hardware(DEFAULT, 1.0, sp_kb=300.0)
    assert grown.sp_kb == 512.0 and grown.acc_kb == 64.0
    least = smallest_buildable(DEFAULT)
    assert is_buildable(least) and least.pe_rows == 2
    assert smallest_area_mm2(DEFAULT) == pytest.approx(
        smallest_area_mm2(dataclasses.replace(least, name="x")))


def _gemmini_yaml() -> dict:
    from accel.config_yaml import read_yaml
    from accel.template import TEMPLATE_DIR
    return read_yaml(TEMPLATE_DIR / "gemmini.yaml", "template")


def test_the_template_field_is_checked():
    from accel.template import Template
    assert Template.load("gemmini").buildable == "gemmini"
    assert Template.load("eyeriss").buildable is None
    with pytest.raises(ConfigError, match="buildable"):
        Template.from_dict({**_gemmini_yaml(), "buildable": "nvdla"})


@pytest.mark.parametrize("method, options", [
    ("random", {"mappings_per_hw": 20}),
    ("bo", {}),
    ("dosa", {"starts": 1, "gd_iters": 4, "round_steps": 2, "start_mappings_per_layer": 1}),
])
def test_every_searched_design_is_buildable(method, options):
    result = BASELINES[method](NET, budget_samples=12 if method == "dosa" else 40, seed=3,
                              **options)
    assert unbuildable_reason(result.hardware) is None


def test_random_draws_are_buildable():
    import numpy as np

    from baco.search.random_search import random_gemmini_hardware
    from baco.search.starts import random_hardware_within
    rng = np.random.default_rng(0)
    for i in range(200):
        assert is_buildable(random_gemmini_hardware(rng, i))
        assert is_buildable(random_hardware_within(rng, DEFAULT, 128, 100.0, None, 0.5))


def test_simulated_yardstick_snaps_an_unbuildable_design():
    from baco import yardsticks as ys
    layer = Layer.gemm(M=8, K_red=8, N_out=8)
    hw = dataclasses.replace(DEFAULT, pe_rows=8, pe_cols=8, sp_kb=5.0, acc_kb=3.0)
    mapping = Mapping.from_timeloop("L3[WIO] N1 - L2[WI] K8X - L1[O] P8 C8X - L0[W] N1",
                                    stages=1)
    stick, _ = ys.simulate_design([layer], [1], design_of(hw, [mapping]), cache=ys.SimCache())
    assert stick.grown and unbuildable_reason(stick.hardware) is None
    assert (stick.hardware.sp_kb, stick.hardware.acc_kb) == (8.0, 4.0)
