"""The surrogate's MAPE calibration (`perfmodels.atformer.train.mape_scale`): fitted on the
validation layers when training ends, a constant factor on every prediction, saved with the
checkpoint and used by every consumer (the hybrid, `baco validate rtl`)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from accel.sim.rtl import metrics
from baco.rtl_validation import validate_rtl
from perfmodels.atformer import train as T
from perfmodels.atformer.hybrid import Hybrid
from perfmodels.atformer.model import ModelConfig
from workloads.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]
RTL = ROOT / "data" / "gemmini_rtl_train.csv"
SIGMA = 0.6
"""Spread of the synthetic multiplicative noise (log-normal): wide, as the RTL rows' is."""
CONFIG = T.TrainConfig(model=ModelConfig(width=8, heads=2, layers=1, mlp_width=8), epochs=2,
                       batch_size=32, patience=2, val_fraction=0.3)


def _mape(p: np.ndarray, m: np.ndarray) -> float:
    return float(np.mean(np.abs(p - m) / m))


def test_mape_scale_is_the_least_mape_factor():
    rng = np.random.default_rng(0)
    measured = np.exp(rng.normal(8.0, 1.0, 301))
    predicted = measured * np.exp(rng.normal(0.2, SIGMA, 301))
    s = T.mape_scale(predicted, measured)
    grid = np.exp(np.linspace(-2.0, 2.0, 4001))
    best = min(_mape(g * predicted, measured) for g in grid)
    assert _mape(s * predicted, measured) <= best + 1e-12
    # below the geometric mean's factor, as MAPE wants under multiplicative noise
    assert s < np.exp(-np.mean(np.log(predicted / measured)))
    assert T.mape_scale([1.0], [2.0]) == 1.0          # nothing to fit


@pytest.fixture(scope="module")
def noisy():
    """Real RTL rows' tokens (many layers), labelled 2x the analytic cycles times log-normal
    noise, split by layer into training rows and test rows."""
    rows, data = T.read_dataset(RTL, limit=400, array_dim=16)
    rng = np.random.default_rng(1)
    y = (np.asarray(data.tokens.log_cycles, np.float64) + np.log(2.0)
         + rng.normal(0.0, SIGMA, len(data)))
    data = T.Dataset(data.tokens, y.astype(np.float32), data.group)
    test = T.split_by_group(data.group, 0.3, seed=7)
    return data.take(np.flatnonzero(~test)), data.take(np.flatnonzero(test))


@pytest.fixture(scope="module")
def calibrated(noisy):
    return T.train(noisy[0], CONFIG)


def _uncalibrated(surrogate: T.Surrogate) -> T.Surrogate:
    return T.Surrogate(surrogate.config, surrogate.params,
                       surrogate.stats._replace(log_scale=np.float32(0.0)), surrogate.template)


def test_training_fits_the_scale_on_the_validation_layers(noisy, calibrated):
    fit, _ = noisy
    val = fit.take(np.flatnonzero(T.split_by_group(fit.group, CONFIG.val_fraction,
                                                   CONFIG.seed + 1)))
    measured = np.exp(np.asarray(val.log_measured, np.float64))
    raw = _uncalibrated(calibrated).predict_tokens(val.tokens)
    assert calibrated.scale == pytest.approx(T.mape_scale(raw, measured), rel=1e-5)
    assert calibrated.scale < 0.95
    cal = calibrated.info["calibration"]
    assert cal["rows"] == len(val) and cal["val_mape_calibrated"] < cal["val_mape"] - 0.02
    np.testing.assert_allclose(calibrated.predict_tokens(val.tokens), raw * calibrated.scale,
                               rtol=1e-4)


def test_calibration_lowers_unseen_layers_mape_and_keeps_correlations(noisy, calibrated):
    _, test = noisy
    measured = np.exp(np.asarray(test.log_measured, np.float64))
    before = metrics(_uncalibrated(calibrated).predict_tokens(test.tokens), measured)
    after = metrics(calibrated.predict_tokens(test.tokens), measured)
    assert after["mape"] < before["mape"] - 0.02
    for key in ("pearson", "pearson_log", "spearman"):
        assert after[key] == pytest.approx(before[key], abs=1e-6)


def test_no_validation_layers_no_calibration(noisy):
    plain = T.train(noisy[0], dataclasses.replace(CONFIG, val_fraction=0.0))
    assert plain.scale == 1.0 and plain.info["calibration"] == {"scale": 1.0, "rows": 0}


def test_fine_tuning_refits_the_scale(noisy, calibrated):
    tuned = T.train(noisy[0], CONFIG, init=calibrated)
    again = T.train(noisy[0], CONFIG, init=_uncalibrated(calibrated))
    assert tuned.scale == pytest.approx(again.scale, rel=1e-5)


def test_checkpoint_keeps_the_scale_and_reads_format_1(noisy, calibrated, tmp_path):
    _, test = noisy
    path = T.save(calibrated, tmp_path / "s")
    loaded = T.load(path)
    assert loaded.scale == pytest.approx(calibrated.scale, rel=1e-6)
    np.testing.assert_allclose(loaded.predict_tokens(test.tokens),
                               calibrated.predict_tokens(test.tokens), rtol=1e-6)
    meta = json.loads((path / "surrogate.json").read_text())
    assert meta["format"] == T.FORMAT_VERSION == 2
    old = dict(meta, format=1, stats={k: v for k, v in meta["stats"].items()
                                      if k != "log_scale"})
    (path / "surrogate.json").write_text(json.dumps(old))
    assert T.load(path).scale == 1.0                     # as a format-1 file was trained
    (path / "surrogate.json").write_text(json.dumps(dict(meta, format=3)))
    with pytest.raises(ConfigError, match="unknown format 3"):
        T.load(path)


def test_every_consumer_applies_the_scale(noisy, calibrated, tmp_path):
    _, test = noisy
    hybrid, plain = Hybrid(calibrated), Hybrid(_uncalibrated(calibrated))
    shift = (np.asarray(hybrid.log_residual_tokens(test.tokens))
             - np.asarray(plain.log_residual_tokens(test.tokens)))
    np.testing.assert_allclose(shift, np.log(calibrated.scale), atol=1e-5)
    path = T.save(T.Surrogate(calibrated.config, calibrated.params, calibrated.stats,
                              calibrated.template, dict(calibrated.info, array_dim=16)),
                  tmp_path / "v")
    report = validate_rtl(RTL, "hybrid", model=str(path), limit=20, held_out_fraction=0.0)
    assert report["calibration_scale"] == pytest.approx(calibrated.scale)
    assert report["rows"] == 20 and not report["skipped"]
    rows, data = T.read_dataset(RTL, limit=20, array_dim=16)
    expected = metrics(calibrated.predict_tokens(data.tokens),
                       np.exp(np.asarray(data.log_measured, np.float64)))
    assert report["mape"] == pytest.approx(expected["mape"], rel=1e-5)
