"""The DOSA-format row parser and `validate_timeloop`."""

from __future__ import annotations

import csv
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from perfmodels.validate import hardware_from_row, layer_from_row, read_rows, validate_timeloop
from workloads.errors import ConfigError, InfeasibleError

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
CSV = DATA / "timeloop_gemmini_10k.csv"
RTL = DATA / "gemmini_rtl_train.csv"

HEADER = ["target.cycle", "target.energy", "target.area", "mapping.mapping", "arch.pe",
          "arch.meshX", "arch.mem1_depth", "arch.mem1_width", "arch.mem1_instances",
          "arch.mem2_depth", "arch.mem2_width", "arch.mem2_instances", "prob.C",
          "prob.Hdilation", "prob.Hstride", "prob.K", "prob.N", "prob.P", "prob.Q", "prob.R",
          "prob.S", "prob.Wdilation", "prob.Wstride"]
ROW = {"target.cycle": "20", "target.energy": "0.0197945", "target.area": "1",
       "mapping.mapping": "L3[WIO] K2 P4 - L2[WI] N1 K4X - L1[O] C2 C4X - L0[W] N1",
       "arch.pe": "256", "arch.meshX": "16", "arch.mem1_depth": "4096", "arch.mem1_width": "32",
       "arch.mem1_instances": "4", "arch.mem2_depth": "16384", "arch.mem2_width": "128",
       "arch.mem2_instances": "1", "prob.C": "8", "prob.Hdilation": "1", "prob.Hstride": "1",
       "prob.K": "8", "prob.N": "1", "prob.P": "4", "prob.Q": "1", "prob.R": "1", "prob.S": "1",
       "prob.Wdilation": "1", "prob.Wstride": "1"}


def _write(path: pathlib.Path, rows: list[dict]) -> pathlib.Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_row_to_hardware_and_layer():
    hw = hardware_from_row(ROW)
    assert (hw.pe_rows, hw.pe_cols, hw.sp_kb, hw.acc_kb) == (16, 16, 256.0, 64.0)
    layer = layer_from_row({**ROW, "prob.Wstride": "2", "prob.Hstride": "3"})
    # Timeloop pairs P with Wstride; Layer pairs P with Hstride
    assert (layer.Hstride, layer.Wstride) == (2, 3)


def test_validate_timeloop_on_a_small_file(tmp_path):
    """The hand-derived example of test_analytic, written as a row: exact agreement."""
    path = _write(tmp_path / "rows.csv", [ROW, {**ROW, "target.cycle": "25"}])
    summary = validate_timeloop(path)
    assert set(summary) == {"rows", "cycles_mean_abs_rel_err", "cycles_max_abs_rel_err",
                            "energy_mean_abs_rel_err", "energy_max_abs_rel_err"}
    assert summary["rows"] == 2
    np.testing.assert_allclose(summary["cycles_max_abs_rel_err"], 5 / 25, rtol=1e-5)
    np.testing.assert_allclose(summary["cycles_mean_abs_rel_err"], 0.1, rtol=1e-5)
    assert summary["energy_max_abs_rel_err"] < 1e-4


@pytest.mark.parametrize("change, error, fragment", [
    ({"mapping.mapping": "L3[WIO] K2 P4 - L2[WI] K4X"}, ConfigError, "row 2"),
    ({"mapping.mapping": "L3[WIO] K4 P4 - L2[WI] N1 K4X - L1[O] C2 C4X - L0[W] N1"},
     InfeasibleError, "dim K"),
    ({"arch.mem2_depth": "2"}, InfeasibleError, "L2 (Scratchpad)"),  # 32 B < W 32 + I 8
    ({"prob.C": "x"}, ConfigError, "'prob.C'"),
    ({"arch.pe": ""}, ConfigError, "'arch.pe'"),
    ({"target.cycle": "nan"}, ConfigError, "'target.cycle'"),
])
def test_bad_rows_name_the_row_and_field(tmp_path, change, error, fragment):
    path = _write(tmp_path / "bad.csv", [{**ROW, **change}])
    with pytest.raises(error) as err:
        read_rows(path)
    assert fragment in str(err.value)


def test_wrong_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        read_rows(tmp_path / "absent.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="missing columns"):
        read_rows(tmp_path / "other.csv")
    _write(tmp_path / "empty.csv", [])
    with pytest.raises(ConfigError, match="no data rows"):
        read_rows(tmp_path / "empty.csv")


def test_rtl_rows_parse_with_the_same_parser():
    rows = read_rows(RTL, limit=50, cycles_key="target.gemmini_cycle")
    assert len(rows) == 50
    assert all(r.cycles > 0 and r.hw.template == "gemmini" for r in rows)
    assert all(r.mapping.stages.tolist() == [2, 2, 2, 1] for r in rows)


def test_dataset_rows_parse_and_validate():
    rows = read_rows(CSV, limit=300)
    assert len(rows) == 300
    for row in rows:
        row.mapping.with_stages(1).validate(row.layer, row.hw)   # Timeloop's own check


@pytest.mark.slow
def test_throughput_benchmark_smoke():
    """The benchmark runs and reports finite figures (tiny batches; no timing is checked)."""
    script = ROOT / "experiments" / "bench" / "model_throughput.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--exact-batch", "96", "--grad-batch", "48",
         "--mappings-per-layer", "1", "--repeats", "1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["exact_evals_per_s"] > 0 and result["value_and_grad_per_s"] > 0
    assert result["outputs_finite"] and result["unique_layers"] == 24


def test_validation_scores_rows_outside_the_template_but_not_malformed_ones(tmp_path):
    """A row Timeloop evaluated is scored even if its tiles overflow our reading of the
    buffers; a row whose factors do not multiply to the layer is still an error."""
    path = _write(tmp_path / "tight.csv", [{**ROW, "arch.mem2_depth": "2"}])
    with pytest.raises(InfeasibleError, match="L2 \\(Scratchpad\\)"):
        read_rows(path)
    assert validate_timeloop(path)["rows"] == 1
    bad = _write(tmp_path / "bad.csv", [{**ROW, "mapping.mapping": ROW["mapping.mapping"]
                                         .replace("K2 P4", "K4 P4")}])
    with pytest.raises(InfeasibleError, match="dim K"):
        validate_timeloop(bad)
