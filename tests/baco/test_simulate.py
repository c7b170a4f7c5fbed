"""`baco simulate RESULTS.json --check`: every layer of a result lowered, simulated, checked."""

import json

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.lower import split_epilogue
from accel.mapping import Mapping
from baco.cli import main
from baco.result import CodesignResult, LayerResult
from baco.simulate import simulate_result
from workloads.layer import Layer

HW = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=16, acc_kb=8)


def _result(layers, seed=0, hw=HW):
    rng = np.random.default_rng(seed)
    entries = []
    for layer in layers:
        mapping = Mapping.random(layer, hw, rng)
        entries.append(LayerResult(layer, 1, mapping, 100.0, 10.0))
    return CodesignResult("baco", "test", hw, tuple(entries), samples=1)


LAYERS = (
    Layer.conv2d(R=3, S=3, P=6, Q=5, C=5, K=9, Hstride=2, Wstride=1, pads=(1, 1, 1, 1),
                 epilogue=("bias", "relu"), name="conv"),
    Layer.gemm(M=13, K_red=20, N_out=11, epilogue=("add", "add"), name="gemm"),
    Layer(kind="gemv", C=30, K=17, epilogue=("div", "softmax"), name="gemv"),
)


@pytest.mark.parametrize("ops, fused, host", [
    (("bias", "relu"), ("bias", "relu"), ()),
    (("add", "add"), ("add",), ("add",)),
    (("relu", "add"), ("relu",), ("add",)),
    (("div", "add", "softmax"), (), ("div", "add", "softmax")),
    (("bias", "gelu", "relu"), ("bias", "gelu"), ("relu",)),    # I-GELU on the mvout
    (("bias", "clip"), ("bias",), ("clip",)),
])
def test_split_epilogue(ops, fused, host):
    assert split_epilogue(ops) == (fused, host)


def test_cli_checks_every_layer(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(_result(LAYERS).to_json())
    code = main(["simulate", str(path), "--check", "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["all_ok"] and report["checked"] == 3
    rows = report["layers"]
    assert [r["name"] for r in rows] == ["conv", "gemm", "gemv"]
    assert all(r["mismatches"] == 0 and r["outputs"] > 0 and r["sim_cycles"] > 0 for r in rows)
    assert rows[1]["host_ops"] == ["add"] and rows[2]["host_ops"] == ["div", "softmax"]
    # the search's own cycles (100 per layer here) beside the simulator's, and their gap
    assert all(r["model_cycles"] == 100.0 for r in rows)
    sim = [r["sim_cycles"] for r in rows]
    assert report["sim_latency_cycles"] == sum(sim)
    assert report["model_latency_cycles"] == 300.0
    assert report["model_vs_sim_mape"] == pytest.approx(np.mean([abs(100 - s) / s for s in sim]))


def test_table_view_prints_the_ratio_and_the_disagreement(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(_result(LAYERS[:1]).to_json())
    assert main(["simulate", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "model/sim" in out and "per-layer MAPE" in out and "network latency" in out


def test_a_layer_that_does_not_fit_fails_the_run(tmp_path):
    whole_layer_at_scratchpad = Mapping.from_timeloop(
        "L3[WIO] N1 - L2[WI] R3 S3 P6 Q5 C5 K9 - L1[O] N1 - L0[W] N1", stages=1)
    tiny = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=1, acc_kb=1)
    result = CodesignResult("baco", "test", tiny, (
        LayerResult(LAYERS[0], 1, whole_layer_at_scratchpad, 1.0, 1.0),), samples=1)
    records = simulate_result(result)
    assert not records[0].ok and records[0].instructions == 0
    assert "the scratchpad has 128 rows" in records[0].error, records[0].error
    path = tmp_path / "results.json"
    path.write_text(result.to_json())
    assert main(["simulate", str(path), "--quiet"]) == 1


def test_bad_input_is_one_line(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text("{not json")
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("baco: error:") and str(path) in err
    path.write_text(_result(LAYERS[:1]).to_json())
    assert main(["simulate", str(path), "--layers", "4"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "missing.json")]) == 2


def test_energy_and_edp_are_the_simulated_yardsticks(tmp_path, capsys):
    from accel.design import design_of
    from baco.yardsticks import simulate_design

    result = _result(LAYERS)
    records = simulate_result(result, check=False)
    stick, rows = simulate_design([r.layer for r in result.layers],
                                  [r.count for r in result.layers],
                                  design_of(HW, [r.mapping for r in result.layers]))
    assert stick.hardware == HW           # nothing grown: the same buffers, the same energy
    assert [r.energy_pj for r in records] == pytest.approx([x.energy_pj for x in rows])
    assert all(r.energy_pj > 0 for r in records)
    path = tmp_path / "results.json"
    path.write_text(result.to_json())
    assert main(["simulate", str(path), "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sim_energy_pj"] == pytest.approx(stick.energy_pj)
    assert report["sim_edp"] == pytest.approx(stick.edp)
    assert main(["simulate", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "energy pJ" in out and f"EDP {stick.edp:.4g} cycles*pJ" in out
