"""Simulator-labelled datasets: sampling, the CSV round trip, and (slow) a real generation."""

from __future__ import annotations

import numpy as np
import pytest

from accel.lower import EPILOGUE_OPS
from baco import dataset
from perfmodels.analytic import exact_batch
from perfmodels.atformer import train as atf
from workloads.errors import ConfigError

HW = dataset.dataset_hardware()


def test_sampled_points_fit_and_are_seeded():
    a = dataset.sample_points(6, HW, seed=3, networks=("resnet50",))
    b = dataset.sample_points(6, HW, seed=3, networks=("resnet50",))
    assert len(a) == 6
    assert [m.to_timeloop() for _, m in a] == [m.to_timeloop() for _, m in b]
    for layer, m in a:
        m.validate(layer, HW)
    with pytest.raises(ConfigError, match="--n"):
        dataset.sample_points(0, HW, seed=0)
    with pytest.raises(ConfigError, match="--n"):
        dataset.generate(0, "unused.csv")


def test_csv_round_trip_reads_back_the_same_points(tmp_path):
    points = dataset.sample_points(5, HW, seed=1, networks=("resnet50", "bert"))
    cycles = np.arange(1, 6) * 1000.0
    out = tmp_path / "d.csv"
    dataset.write_csv(out, HW, points, cycles, np.ones(5), source="test")
    rows, data = atf.read_dataset(out)
    assert [r.mapping.to_timeloop() for r in rows] == [m.to_timeloop() for _, m in points]
    assert rows[0].hw.pe_rows == HW.pe_rows and rows[0].hw.sp_kb == pytest.approx(HW.sp_kb)
    assert rows[0].hw.acc_kb == pytest.approx(HW.acc_kb)
    np.testing.assert_allclose(np.exp(data.log_measured), cycles, rtol=1e-5)
    # the layers read back score exactly as the sampled ones (strides/dilations preserved)
    want = exact_batch([p[0] for p in points], HW, [p[1] for p in points], check=False).cycles
    np.testing.assert_allclose(np.exp(data.tokens.log_cycles), want, rtol=1e-5)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_generate_labels_with_the_simulator(tmp_path):
    summary = dataset.generate(3, tmp_path / "sim.csv", seed=0, networks=("resnet50",))
    rows, data = atf.read_dataset(summary.path)
    assert summary.rows == len(rows) == 3
    assert np.all(np.exp(data.log_measured) > 0)


def test_layers_with_host_epilogues_are_lowered_without_them(tmp_path, capsys):
    """BERT's attention scores end in div/add/softmax, which the accelerator cannot run: the
    dataset lowers them with the part it can fuse and names them in one warning line."""
    from baco.cli import main

    pool, host_ops = dataset._layer_pool(("bert:seq=16",))
    dropped = [(layer, ops) for layer, ops in zip(pool, host_ops) if ops]
    assert dropped and all(set(ops) - {"bias", "relu"} for _, ops in dropped)
    assert all(set(layer.epilogue) <= set(EPILOGUE_OPS) for layer in pool)

    out = tmp_path / "sim.csv"
    code = main(["dataset", "generate", "--n", "12", "--out", str(out), "--networks",
                 "bert:seq=16", "--seed", "1"])
    captured = capsys.readouterr()
    assert code == 0 and out.exists()
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "without the epilogue" in warnings[0]
    assert any(layer.name in warnings[0] for layer, _ in dropped)
    rows, _ = atf.read_dataset(out)
    assert len(rows) == 12
