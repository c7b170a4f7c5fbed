"""Gemmini's timing figures have one copy (`accel.gemmini_timing`): the simulator's defaults and
the names a template's expressions use."""

import numpy as np
import pytest

from accel import dma, gemmini_timing
from accel.arch import HardwareConfig, Template
from accel.sim import TimingTable
from accel.template import hw_env
from workloads.errors import ConfigError


def test_the_simulator_defaults_to_the_figures_templates_name():
    table = TimingTable()
    assert {name: getattr(table, name) for name in gemmini_timing.TEMPLATE_NAMES} == (
        gemmini_timing.TEMPLATE_NAMES)
    assert (dma.DRAM_LATENCY_CYCLES, dma.ROUND_TRIP_EXTRA_CYCLES) == (
        table.dram_latency_cycles, table.dma_round_trip_extra_cycles)


def test_a_template_expression_sees_the_figures():
    hw = HardwareConfig.preset("gemmini_default")
    env = hw_env(hw.template_spec, hw.to_params(), np)
    assert {name: env[name] for name in gemmini_timing.TEMPLATE_NAMES} == (
        gemmini_timing.TEMPLATE_NAMES)


def test_the_gemmini_template_names_its_timing_instead_of_copying_it():
    t = Template.load("gemmini")
    timing = set(gemmini_timing.TEMPLATE_NAMES)
    assert timing & set(t.levels[t.level_index("DRAM")].latency_cycles.names)
    for kind in ("compute", "load", "store"):
        cost = t.instruction(kind)
        for field in ("latency_cycles", "in_flight"):
            assert timing & set(getattr(cost, field).names), (kind, field)
    assert t.instruction("compute").min_cycles.names == ("min_compute_rows",)


def test_a_template_parameter_cannot_shadow_a_figure():
    raw = {"name": "t", "mac": {"energy_pj": 1}, "params": {"mvin_write_cycles": 3},
           "levels": [{"name": "DRAM", "keeps": ["W", "I", "O"]}]}
    with pytest.raises(ConfigError, match="shadows a built-in name"):
        Template.from_dict(raw)

