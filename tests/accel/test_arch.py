"""HardwareConfig, presets and templates: the tables, the YAML forms, the errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from accel.arch import Expr, HardwareConfig, Template, level_arrays
from workloads.errors import ConfigError

PRESETS = ["eyeriss", "gemmini_default", "gemmini_dosa", "nvdla_large", "nvdla_small"]


def test_all_presets_load_and_evaluate():
    assert HardwareConfig.preset_names() == PRESETS
    for name in PRESETS:
        hw = HardwareConfig.preset(name)
        arrays = level_arrays(hw.template_spec, hw.to_params(), np)
        assert np.all(np.isfinite(arrays.energy_pj)) and np.all(arrays.energy_pj >= 0)
        assert np.isinf(arrays.capacity_kb[-1])          # DRAM is unbounded
        assert np.all(arrays.capacity_kb[:-1] >= 0)


def test_gemmini_presets_match_the_references():
    default = HardwareConfig.preset("gemmini_default")
    assert (default.pe_rows, default.pe_cols, default.sp_kb, default.acc_kb) == (16, 16, 256, 64)
    dosa = HardwareConfig.preset("gemmini_dosa")
    assert (dosa.pe_rows, dosa.sp_kb, dosa.acc_kb) == (16, 128, 32)


def test_gemmini_table_6_3_with_dosa_fits():
    """Seed 001 Table 6.3 at N_PE = 256, C_1 = 64 KB, C_2 = 256 KB, with DOSA's exact fits."""
    hw = HardwareConfig.preset("gemmini_default")
    a = level_arrays(hw.template_spec, hw.to_params(), np)
    np.testing.assert_allclose(a.mac_energy_pj, 0.5608)
    np.testing.assert_allclose(a.energy_pj[0], 0.48746172)
    np.testing.assert_allclose(a.energy_pj[1], 1.94 + 0.1005 * 64 / 16, rtol=1e-6)   # 2.342
    np.testing.assert_allclose(a.energy_pj[2], 0.49 + 0.02513 * 256, rtol=1e-6)      # 6.923
    np.testing.assert_allclose(a.energy_pj[3], 100.0)
    # bandwidth per instance: registers 2, accumulator 2 per column, scratchpad 2 * 16, DRAM 8
    np.testing.assert_allclose(a.bandwidth_words, [2, 2, 32, 8])
    np.testing.assert_allclose(a.instances, [256, 16, 1, 1])
    np.testing.assert_allclose(a.capacity_kb[1:3], [4.0, 256.0])   # 64 KiB over 16 columns
    np.testing.assert_allclose(a.fanout[1:3], [16, 16])


def test_level_arrays_numpy_and_jax_agree_and_differentiate():
    hw = HardwareConfig.preset("nvdla_large")
    template = hw.template_spec
    a_np = level_arrays(template, hw.to_params(), np)
    a_jx = jax.jit(lambda p: level_arrays(template, p))(hw.to_params())
    for x, y in zip(a_np, a_jx):
        np.testing.assert_allclose(x, np.asarray(y), rtol=1e-6)
    grad = jax.grad(lambda sp: level_arrays(template, hw.to_params()._replace(sp_kb=sp))
                    .energy_pj[2])(jnp.float32(512.0))
    np.testing.assert_allclose(grad, 0.02513, rtol=1e-5)


def test_unknown_preset_names_the_closest():
    with pytest.raises(ConfigError) as err:
        HardwareConfig.preset("gemini_default")
    assert "gemmini_default" in str(err.value) and "closest" in str(err.value)
    assert "nvdla_small" in str(err.value)  # the list of known names


def test_from_yaml_text_and_file(tmp_path):
    hw = HardwareConfig.from_yaml("template: gemmini\npe_rows: 8\npe_cols: 8\nsp_kb: 64\n")
    assert (hw.pe_rows, hw.sp_kb, hw.acc_kb) == (8, 64.0, 64.0)
    path = tmp_path / "mine.yaml"
    path.write_text("pe_rows: 32\npe_cols: 32\nacc_kb: 128\n")
    assert HardwareConfig.from_yaml(path).n_pe == 1024


@pytest.mark.parametrize("text, fragment", [
    ("pe_rows: [8\n", "malformed YAML"),
    ("pe_row: 8\n", "'pe_row'"),
    ("pe_rows: 0\n", "pe_rows"),
    ("pe_rows: eight\n", "pe_rows"),
    ("sp_kb: -1\n", "sp_kb"),
    ("dataflow: XS\n", "dataflow must be one of"),
    ("template: gemmni\n", "closest: 'gemmini'"),
    ("params: {nope: 1}\n", "nope"),
    ("- 1\n- 2\n", "expected a mapping"),
])
def test_bad_config_names_the_field(text, fragment):
    with pytest.raises(ConfigError) as err:
        HardwareConfig.from_yaml(text)
    assert fragment in str(err.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        HardwareConfig.from_yaml(tmp_path / "absent.yaml")


def test_expressions_refuse_code():
    allowed = ("pe_cols",)
    assert Expr.parse("2 * pe_cols", "f", allowed).evaluate({"pe_cols": 3}, np) == 6
    assert Expr.parse("max(pe_cols, 4) / 2", "f", allowed).evaluate({"pe_cols": 3}, np) == 2
    for bad in ("__import__('os')", "pe_cols.real", "[1, 2]", "pe_cols if 1 else 2", "lambda: 1"):
        with pytest.raises(ConfigError):
            Expr.parse(bad, "f", allowed)
    with pytest.raises(ConfigError, match="did you mean 'pe_cols'"):
        Expr.parse("2 * pe_col", "f", allowed)


TEMPLATE = """
name: tiny
square_array: false
params: {lanes: 4}
mac: {energy_pj: 1.0, area_mm2: 0.001}
levels:
  - name: Regs
    keeps: [W, I, O]
    instances: n_pe
    capacity_kb: 3 / 1024
    bandwidth_words: 3
    energy_pj: 0.5
    temporal_dims: []
  - name: Buffer
    keeps: [W, I, O]
    capacity_kb: sp_kb
    bandwidth_words: lanes
    energy_pj: 2
    energy_pj_per_kb: 0.1
    area_mm2_per_kb: 0.01
    spatial: {dims: [K, C], fanout: pe_rows * pe_cols}
  - name: DRAM
    keeps: [W, I, O]
    bandwidth_words: dram_bw_words
    energy_pj: 50
"""


def test_user_described_accelerator(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TEMPLATE)
    template = Template.load(str(path))
    assert template.tags == ("WIO", "WIO", "WIO")
    assert template.spatial_mask[1].tolist() == [False] * 4 + [True, True, False]
    hw = HardwareConfig(template=str(path), pe_rows=2, pe_cols=4, sp_kb=8,
                        params=(("lanes", 16.0),))
    a = level_arrays(template, hw.to_params(), np)
    np.testing.assert_allclose(a.bandwidth_words[1], 16.0)
    np.testing.assert_allclose(a.fanout[1], 8.0)
    np.testing.assert_allclose(a.energy_pj[1], 2 + 0.1 * 8)


@pytest.mark.parametrize("change, fragment", [
    (("keeps: [W, I, O]\n    bandwidth_words: dram_bw_words", "keeps: [W, I]\n    "
      "bandwidth_words: dram_bw_words"), "must keep W, I and O"),
    (("capacity_kb: sp_kb", "capacity_kb: sp_kbb"), "did you mean 'sp_kb'"),
    (("temporal_dims: []", "temporal_dims: [Z]"), "unknown dim 'Z'"),
    (("energy_pj: 2\n", "energy_pj: 2\n    colour: red\n"), "'colour'"),
    (("fanout: pe_rows * pe_cols", "fanout: open('x')"), "Call"),
])
def test_bad_template_names_the_level_and_field(tmp_path, change, fragment):
    path = tmp_path / "bad.yaml"
    assert change[0] in TEMPLATE
    path.write_text(TEMPLATE.replace(change[0], change[1]))
    with pytest.raises(ConfigError) as err:
        Template.load(str(path))
    assert fragment in str(err.value)


def test_the_on_chip_path_is_an_optional_template_entry():
    import yaml

    from accel.arch import TEMPLATE_DIR, hw_env

    hw = HardwareConfig.preset("gemmini_default")
    gemmini = hw.template_spec
    env = hw_env(gemmini, hw.to_params(), np)
    assert float(gemmini.path_area_mm2.evaluate(env, np)) == pytest.approx(1e-6 * 16 * 8)
    assert Template.load("eyeriss").path_area_mm2 is None
    raw = yaml.safe_load((TEMPLATE_DIR / "gemmini.yaml").read_text())
    raw["onchip_path"] = {"area_mm": 1}
    with pytest.raises(ConfigError, match="onchip_path"):
        Template.from_dict(raw, "bad")


def test_the_dram_port_is_the_dma_the_generator_builds():
    """Bus and in-flight requests follow the DRAM bandwidth by the generator's rule
    (`accel.dma`), the area follows them, and the relaxed area's gradient sees the need."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from accel import dma
    from accel.arch import level_arrays
    from accel.sim import TimingTable

    base = HardwareConfig.preset("gemmini_default")
    port = {}
    for words in (8.0, 16.0, 24.0, 64.0):
        hw = dataclasses.replace(base, dram_bw_words=words)
        bus, inflight = TimingTable().bus_bytes(hw), TimingTable().inflight_requests(hw)
        assert bus == int(dma.bus_bytes(words))
        port[words] = float(level_arrays(hw.template_spec, hw.to_params(), np).area_mm2[-1])
        assert port[words] == pytest.approx(0.3 * bus / 16 + 0.001 * inflight, rel=1e-6)
    assert TimingTable().bus_bytes(dataclasses.replace(base, dram_bw_words=64.0)) == 64
    assert port[8.0] < port[16.0] < port[24.0] < port[64.0]

    def area(words):
        hwp = base.to_params()._replace(dram_bw_words=words)
        return level_arrays(base.template_spec, hwp).area_mm2[-1]

    assert float(area(jnp.float32(24.0))) == pytest.approx(port[24.0], rel=1e-6)
    assert float(jax.grad(area)(jnp.float32(24.0))) > 0
