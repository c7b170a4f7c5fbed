"""The reducers on hand-made case results: the numbers in the tables are the right
aggregates, and unavailable or infeasible entries are said to be so."""

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from baco.reproduce.ablation import missing_fields
from baco.reproduce.runner_io import spread
from baco.reproduce.runners import RUNNERS, parse_params
from baco.reproduce.store import Case, CaseStore, safe_id
from workloads.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _csv(path):
    return list(csv.DictReader(path.open()))


def _op(suite, case, method, cycles, energy, edp_plain=None):
    return {"suite": suite, "case": case, "method": method, "seed": 0,
            "scorer": "analytic", "cycles": cycles, "energy_pj": energy,
            "edp": cycles * energy, "edp_plain": edp_plain or cycles * energy, "samples": 1,
            "hardware": {"pe_rows": 16, "sp_kb": 1.0, "acc_kb": 1.0}}


def test_spread_picks_evenly_and_all_when_none():
    assert spread(170, 4) == [0, 56, 113, 169]
    assert spread(3, None) == [0, 1, 2] == spread(3, 10)


def test_operators_table_is_geomean_of_paired_ratios(tmp_path):
    methods = [{"label": "A", "search": "gemmini_default"}, {"label": "B", "search": "baco"}]
    params = parse_params("operators", {
        "suites": ["gemm"], "methods": methods, "reference": "B",
        "seed_table": {"gemm": {"A": [1, 2, 4.89]}}}, "t.yaml")
    results = {
        safe_id("gemm/1", "A", "s0"): _op("gemm", "gemm/1", "A", 4.0, 2.0),
        safe_id("gemm/1", "B", "s0"): _op("gemm", "gemm/1", "B", 1.0, 1.0),
        safe_id("gemm/2", "A", "s0"): _op("gemm", "gemm/2", "A", 9.0, 1.0),
        safe_id("gemm/2", "B", "s0"): _op("gemm", "gemm/2", "B", 1.0, 1.0),
        safe_id("gemm/3", "A", "s0"): {"infeasible": "A cannot run gemm/3: no mapping"},
        safe_id("gemm/3", "B", "s0"): _op("gemm", "gemm/3", "B", 5.0, 5.0),
    }
    text = RUNNERS["operators"].reduce(params, results, tmp_path, n_cases=8)
    rows = {r["method"]: r for r in _csv(tmp_path / "table.csv")}
    # A on the two cases both ran: ratios 8 and 9 -> geomean sqrt(72)
    assert float(rows["A"]["edp_ratio"]) == pytest.approx(math.sqrt(72))
    assert float(rows["A"]["cycles_geomean"]) == pytest.approx(6.0)
    assert rows["A"]["cases"] == "2" and rows["B"]["cases"] == "3"
    assert float(rows["B"]["edp_ratio"]) == 1.0
    assert rows["A"]["seed_edp_ratio"] == "4.89"
    assert "A: 1 case(s) it cannot run" in text and "no mapping" in text
    assert "PARTIAL: 6 of 8 cases" in text
    assert (tmp_path / "edp_ratio.png").exists() and (tmp_path / "cases.csv").exists()


def test_ablation_row_needing_a_missing_field_is_not_available(tmp_path):
    rows = [{"id": "a", "method": {"label": "a", "search": "gemmini_default", "budget": 1}},
            {"id": "b", "components": ["Block Partition"],
             "method": {"label": "b", "search": "baco", "budget": 10}},
            {"id": "e", "requires": ["no_such_field_xyz"], "components": ["Block Partition"],
             "method": {"label": "e", "search": "baco", "budget": 10,
                        "options": {"no_such_field_xyz": 1}}, "seed_improvement": 2.17}]
    params = parse_params("ablation", {"rows": rows, "seeds": [0, 1]}, "t.yaml")
    cases = RUNNERS["ablation"].cases(params)
    assert sorted(c.params["row"] for c in cases) == ["a", "a", "b", "b"]
    assert missing_fields(["no_such_field_xyz", "seed"]) == ["no_such_field_xyz"]
    results = {c.id: {"edp": 8.0 if c.params["row"] == "a" else 2.0 * (1 + c.params["seed"]),
                      "edp_plain": 1.0} for c in cases}
    text = RUNNERS["ablation"].reduce(params, results, tmp_path, len(cases))
    table = {r["row"]: r for r in _csv(tmp_path / "table.csv")}
    assert float(table["b"]["improvement"]) == pytest.approx(8.0 / math.sqrt(2.0 * 4.0))
    assert table["e"]["status"] == "not available" and table["e"]["improvement"] == ""
    assert "(e) not available: CodesignConfig has no field 'no_such_field_xyz'" in text


def test_rtl_reduce_splits_held_out_rows(tmp_path):
    params = parse_params("rtl_accuracy", {"predictors": ["analytic", "sim"],
                                           "held_out_every": 2}, "t.yaml")
    idx = np.arange(6)
    measured = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) * 100
    results = {
        "analytic": {"predictor": "analytic", "index": idx.tolist(),
                     "predicted": (measured * 2).tolist(), "measured": measured.tolist()},
        "sim__rows-00003-00006": {"predictor": "sim", "index": [3, 4, 5],
                                  "predicted": [400.0, 500.0, 700.0],
                                  "measured": [400.0, 500.0, 600.0]},
        "sim__rows-00000-00003": {"predictor": "sim", "index": [0, 1, 2],
                                  "predicted": [100.0, 200.0, 300.0],
                                  "measured": [100.0, 200.0, 300.0]},
    }
    RUNNERS["rtl_accuracy"].reduce(params, results, tmp_path, n_cases=3)
    table = {(r["predictor"], r["split"]): r for r in _csv(tmp_path / "table.csv")}
    assert table[("analytic", "all")]["rows"] == "6"
    assert float(table[("analytic", "held-out")]["mape"]) == pytest.approx(1.0)
    assert table[("sim", "held-out")]["rows"] == "3"          # rows 0, 2, 4
    assert float(table[("sim", "held-out")]["mape"]) == pytest.approx(0.0)
    assert float(table[("sim", "all")]["mape"]) == pytest.approx(100 / 600 / 6)
    assert (tmp_path / "predicted_vs_measured.png").exists()


def test_rtl_split_by_layer_holds_out_whole_layers():
    from baco.reproduce.rtl_accuracy import held_out
    from perfmodels.atformer.train import layer_key
    from perfmodels.validate import read_rows
    p = {"data": "data/gemmini_rtl_train.csv", "limit": None, "split": "layers",
         "held_out_fraction": 0.2, "split_seed": 0}
    rows = read_rows(ROOT / p["data"], strict=False, cycles_key="target.gemmini_cycle")
    index = np.array([r.index for r in rows])
    mask = held_out(p, index)
    keys = [layer_key(r.layer) for r in rows]
    held_keys = {k for k, m in zip(keys, mask) if m}
    assert held_keys and not held_keys & {k for k, m in zip(keys, mask) if not m}
    assert 0.1 < len(held_keys) / len(set(keys)) < 0.3
    # the same rows, asked in another order or in chunks, get the same answer
    assert np.array_equal(held_out(p, index[::-1]), mask[::-1])
    assert np.array_equal(held_out(p, index[:200]), mask[:200])
    with pytest.raises(ConfigError, match="params.split"):
        parse_params("rtl_accuracy", {"split": "tiles"}, "t.yaml")


def test_convergence_best_at_marks(tmp_path):
    from baco.reproduce.convergence import Convergence, _geomean_curve
    h = [[1, 10.0], [50, 4.0], [400, 1.0]]
    assert Convergence.best_at(h, 0) is None
    assert Convergence.best_at(h, 100) == 4.0
    assert _geomean_curve([h, [[10, 16.0]]]) == [(10, pytest.approx(math.sqrt(160))),
                                                 (50, pytest.approx(8.0)),
                                                 (400, pytest.approx(4.0))]


def test_convergence_judges_every_search_at_the_smaller_budgets_on_one_yardstick(tmp_path):
    methods = [{"label": "BACO", "search": "baco", "budget": 50},
               {"label": "Random", "search": "random", "budget": 50}]
    params = parse_params("convergence", {"methods": methods, "networks": ["resnet50"],
                                          "marks": [10, 50], "judged_at": [10]}, "t.yaml")
    cases = {c.id: c.params for c in RUNNERS["convergence"].cases(params)}
    assert cases[safe_id("resnet50", "Random", "s0", "b10")]["method"]["budget"] == 10
    assert len(cases) == 4

    def case(edp, sim, plain):
        return {"edp": edp, "edp_sim": sim, "edp_plain": plain, "cycles": edp, "energy_pj": 1.0,
                "samples": 50, "history": [[1, edp]]}
    results = {safe_id("resnet50", "BACO", "s0"): case(2.0, 4.0, 8.0),
               safe_id("resnet50", "Random", "s0"): case(6.0, 4.0, 4.0),
               safe_id("resnet50", "BACO", "s0", "b10"): case(1.0, 1.0, 1.0),
               safe_id("resnet50", "Random", "s0", "b10"): case(3.0, 0.5, 2.0)}
    text = RUNNERS["convergence"].reduce(params, results, tmp_path, 4)
    assert "on one yardstick" in text
    rows = {r["samples"]: r for r in _csv(tmp_path / "judged.csv")}
    assert [float(rows["10"][k]) for k in ("ratio_sim", "ratio", "ratio_plain")] == pytest.approx(
        [0.5, 3, 2])
    assert [float(rows["50"][k]) for k in ("ratio_sim", "ratio", "ratio_plain")] == pytest.approx(
        [1, 3, 0.5])
    with pytest.raises(ConfigError, match="params.judged_at"):
        RUNNERS["convergence"].check(
            parse_params("convergence", {"methods": methods, "judged_at": [0]}, "t.yaml"),
            "t.yaml")


def _timed(edp_by_sample, edp_by_second, seed=0, label="BACO"):
    return {"network": "resnet50", "method": label, "seed": seed, "edp": 1.0, "edp_sim": 1.0,
            "edp_plain": 1.0, "cycles": 1.0, "energy_pj": 1.0, "samples": 100,
            "search_seconds": 40.0, "history": edp_by_sample, "history_seconds": edp_by_second}


def test_convergence_best_at_wall_seconds_and_ratios(tmp_path):
    methods = [{"label": "BACO", "search": "baco", "budget": 100},
               {"label": "Random", "search": "random", "budget": 100}]
    params = parse_params("convergence", {"methods": methods, "networks": ["resnet50"],
                                          "seeds": [0, 1], "marks": [100],
                                          "time_marks": [5, 30]}, "t.yaml")
    # BACO: slower per sample but better; Random: fast, worse at the end
    results = {
        safe_id("resnet50", "BACO", "s0"): _timed([[1, 8.0], [90, 1.0]],
                                                  [[2.0, 8.0], [20.0, 1.0]]),
        safe_id("resnet50", "BACO", "s1"): _timed([[1, 2.0], [90, 1.0]],
                                                  [[3.0, 2.0], [25.0, 1.0]], seed=1),
        safe_id("resnet50", "Random", "s0"): _timed([[1, 4.0], [50, 2.0]],
                                                    [[0.1, 4.0], [1.0, 2.0]], label="Random"),
        safe_id("resnet50", "Random", "s1"): _timed([[1, 4.0], [50, 2.0]],
                                                    [[0.1, 4.0], [6.0, 2.0]], seed=1,
                                                    label="Random")}
    store = CaseStore(tmp_path)
    for cid in results:
        store.save(Case(cid, {}), results[cid], 1.0, ran_with={"backend": "local", "workers": 2})
    text = RUNNERS["convergence"].reduce(params, results, tmp_path, 4)
    rows = {r["method"]: r for r in _csv(tmp_path / "table.csv")}
    # @5s: BACO geomean(8, 2) = 4; Random geomean(2, 4) = sqrt(8); @30s: BACO 1, Random 2
    assert float(rows["BACO"]["best_edp_at_5s"]) == pytest.approx(4.0)
    assert float(rows["Random"]["best_edp_at_5s"]) == pytest.approx(math.sqrt(8))
    assert float(rows["Random"]["ratio_at_5s"]) == pytest.approx(math.sqrt(8) / 4)
    assert float(rows["Random"]["best_edp_at_30s"]) == pytest.approx(2.0)
    assert float(rows["Random"]["ratio_at_30s"]) == pytest.approx(2.0)
    assert float(rows["Random"]["ratio_at_100"]) == pytest.approx(2.0)
    assert "best EDP @5s" in text and "/ BACO @30s" in text
    assert "wall-clock seconds" in text and "--workers 2" in text
    assert (tmp_path / "convergence_time_resnet50.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="params.time_marks"):
        parse_params("convergence", {"methods": methods, "time_marks": [60, 0]}, "t.yaml")
    with pytest.raises(ConfigError, match="params.time_marks"):
        parse_params("convergence", {"methods": methods, "time_marks": [-1.5]}, "t.yaml")


def test_convergence_result_stored_without_seconds_still_reduces(tmp_path):
    methods = [{"label": "BACO", "search": "baco", "budget": 100},
               {"label": "Random", "search": "random", "budget": 100}]
    params = parse_params("convergence", {"methods": methods, "networks": ["resnet50"],
                                          "marks": [100], "time_marks": [5]}, "t.yaml")
    old = _timed([[1, 4.0]], [], label="Random")
    del old["history_seconds"]
    results = {safe_id("resnet50", "BACO", "s0"): _timed([[1, 2.0]], [[1.0, 2.0]]),
               safe_id("resnet50", "Random", "s0"): old}
    text = RUNNERS["convergence"].reduce(params, results, tmp_path, 2)
    rows = {r["method"]: r for r in _csv(tmp_path / "table.csv")}
    assert float(rows["Random"]["ratio_at_100"]) == pytest.approx(2.0)
    assert float(rows["BACO"]["best_edp_at_5s"]) == pytest.approx(2.0)
    assert rows["Random"]["best_edp_at_5s"] == rows["Random"]["ratio_at_5s"] == ""
    assert "1 of 2 run(s) stored no wall-clock series" in text
    assert "not recorded" in text                 # no case files: how they ran is unknown


def test_ablation_row_with_a_missing_surrogate_is_not_available(tmp_path):
    rows = [{"id": "a", "method": {"label": "a", "search": "gemmini_default", "budget": 1}},
            {"id": "e", "requires": ["seed"],
             "method": {"label": "e", "search": "baco", "budget": 10,
                        "options": {"model": str(tmp_path / "no-surrogate")}}}]
    params = parse_params("ablation", {"rows": rows}, "t.yaml")
    assert [c.params["row"] for c in RUNNERS["ablation"].cases(params)] == ["a"]
    text = RUNNERS["ablation"].reduce(params, {}, tmp_path, 1)
    assert "(e) not available: no surrogate at" in text and "baco surrogate train" in text
