"""The hybrid predictor in the co-design config, `baco validate rtl` and `baco surrogate`."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import workloads
from accel.arch import HardwareConfig
from accel.mapping import Mapping
from baco import cli
from baco.codesign_loop import codesign
from baco.config import CodesignConfig, ExperimentConfig
from perfmodels import aware as aware_model
from perfmodels.analytic import exact_batch
from perfmodels.atformer import train as atf
from perfmodels.atformer.model import ModelConfig
from workloads.errors import ConfigError
from workloads.layer import Layer

ROOT = pathlib.Path(__file__).resolve().parents[2]
RTL = ROOT / "data" / "gemmini_rtl_train.csv"
HW = HardwareConfig.preset("gemmini_default")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """A tiny surrogate trained two epochs on synthetic labels (3x the analytic cycles)."""
    layers = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64), Layer.gemm(M=64, K_red=64,
                                                                         N_out=64)] * 4
    m = [Mapping.from_timeloop("L3[WIO] K4 C4 Q14 P14 S3 R3 - L2[WI] N1 K16X - L1[O] N1 C16X "
                               "- L0[W] N1"),
         Mapping.from_timeloop("L3[WIO] P4 K4 - L2[WI] C4 P16 K16X - L1[O] N1 C16X - L0[W] N1")
         ] * 4
    data = atf.dataset_from_points(layers, [HW] * 8, m, np.full(8, 1e5))
    cfg = atf.TrainConfig(model=ModelConfig(width=8, heads=2, layers=1, mlp_width=8),
                          epochs=2, batch_size=4, val_fraction=0.0)
    return str(atf.save(atf.train(data, cfg), tmp_path_factory.mktemp("m") / "model"))


def test_config_predictor_is_checked(tmp_path):
    assert CodesignConfig().predictor == "analytic"
    with pytest.raises(ConfigError, match="predictor"):
        CodesignConfig(predictor="oracle")
    with pytest.raises(ConfigError, match="codesign.model"):
        CodesignConfig(predictor="hybrid")
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nnetwork: resnet50\ncodesign: {predictor: hybrid, model: m/}\n")
    assert ExperimentConfig.load(path).codesign.model == "m/"


def test_hybrid_codesign_with_a_missing_model_is_a_config_error(tmp_path):
    net = workloads.Network.from_layers("tiny", [Layer.gemm(M=64, K_red=64, N_out=64)])
    cfg = CodesignConfig(budget_samples=20, starts=1, steps_per_start=10, round_every=5,
                         predictor="hybrid", model=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="not a surrogate checkpoint"):
        codesign(net, config=cfg)


@pytest.mark.slow
def test_hybrid_codesign_completes_and_reports_hybrid_cycles(model_path):
    net = workloads.Network.from_layers("tiny", [Layer.gemm(M=64, K_red=64, N_out=64),
                                                 Layer.conv2d(R=3, S=3, P=14, Q=14, C=32,
                                                              K=64)])
    cfg = CodesignConfig(budget_samples=40, starts=2, steps_per_start=10, round_every=5,
                         predictor="hybrid", model=model_path)
    result = codesign(net, config=cfg)
    assert result.samples <= 40 and np.isfinite(result.edp)
    assert result.extra["predictor"] == "hybrid"
    hybrid = atf.load(model_path)
    layers = [r.layer for r in result.layers]
    mappings = [r.mapping for r in result.layers]
    learned = hybrid.predict(layers, result.hardware, mappings)
    plain = exact_batch(layers, result.hardware, mappings, check=False).cycles
    aware = [float(aware_model.exact(l, result.hardware, m, aware=True).cycles)
             for l, m in zip(layers, mappings)]
    # reported cycles = instruction-aware analytic cycles x exp(the learned residual)
    want = np.asarray(aware) * learned / plain
    got = np.array([r.latency_cycles for r in result.layers])
    np.testing.assert_allclose(got, want, rtol=1e-3)
    assert not np.allclose(got, aware, rtol=1e-3)     # the residual did change them


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_rtl_analytic_and_hybrid_json(capsys, model_path):
    code, out, _ = run(capsys, "validate", "rtl", str(RTL), "--predictor", "analytic",
                       "--limit", "60", "--json")
    report = json.loads(out)
    assert code == 0 and report["rows"] == 60 and report["predictor"] == "analytic"
    keys = {"pearson", "pearson_log", "spearman", "mape", "pairwise_accuracy", "top_k_recall"}
    assert keys <= set(report) and keys <= set(report["held_out"])
    assert report["held_out"]["rows"] + report["train"]["rows"] == 60
    code, out, _ = run(capsys, "validate", "rtl", str(RTL), "--predictor", "hybrid",
                       "--model", model_path, "--limit", "60", "--json")
    hybrid = json.loads(out)
    assert code == 0 and hybrid["rows"] == 60 and hybrid["mape"] != report["mape"]


def test_validate_rtl_bad_predictor_arguments_are_one_line(capsys, model_path):
    code, _, err = run(capsys, "validate", "rtl", str(RTL), "--predictor", "hybrid")
    assert code == 2 and "--model" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "validate", "rtl", str(RTL), "--predictor", "analytic",
                       "--model", model_path)
    assert code == 2 and "hybrid only" in err
    code, _, err = run(capsys, "validate", "rtl", str(RTL), "--predictor", "hybrid",
                       "--model", "no/such/model")
    assert code == 2 and "no/such/model" in err and len(err.strip().splitlines()) == 1


def test_surrogate_train_cli_writes_a_loadable_checkpoint(capsys, tmp_path):
    out_dir = tmp_path / "s"
    code, out, _ = run(capsys, "surrogate", "train", "--data", str(RTL), "--out", str(out_dir),
                       "--limit", "120", "--epochs", "1", "--width", "8", "--heads", "2",
                       "--layers", "1", "--ensemble", "1", "--quiet", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["held_out"]["hybrid"]["rows"] > 0
    assert summary["held_out"]["analytic"]["rows"] == summary["held_out"]["hybrid"]["rows"]
    assert atf.load(out_dir).info["holdout"]["fraction"] == 0.2


def test_surrogate_train_bad_data_is_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    code, _, err = run(capsys, "surrogate", "train", "--data", str(bad), "--out",
                       str(tmp_path / "o"))
    assert code == 2 and "bad.csv" in err and "missing columns" in err
