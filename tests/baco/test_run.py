"""`baco run`: the three output files, identical for one seed, resumable, nothing on error."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

import baco.codesign_loop
from baco.cli import main
from baco.config import ExperimentConfig

TINY = Path(__file__).parent / "data" / "tiny.yaml"
ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def first_run(tiny_run, tiny_run_stderr):
    """The tiny experiment, its progress on a stderr that is not a terminal: its folder and
    what it wrote there."""
    return tiny_run, tiny_run_stderr


@pytest.fixture(scope="module")
def first(first_run):
    return first_run[0]


def test_run_writes_config_results_and_history(first):
    from baco.report import PLOTS, REPORT_FILES
    assert sorted(p.name for p in first.iterdir()) == sorted([
        "checkpoint", "config.yaml", "history.csv", "results.json", *REPORT_FILES, *PLOTS])
    doc = json.loads((first / "results.json").read_text())
    for key in ("edp", "latency_cycles", "energy_pj", "samples", "hardware", "layers",
                "baselines", "history", "scorer", "edp_analytic"):
        assert key in doc
    assert doc["scorer"] == "instruction_aware"
    # the final pick's simulated layers (at most top_k x layers) on top of the budget
    assert 180 < doc["samples"] <= 180 + 4 * 5 and len(doc["layers"]) == 5
    assert doc["final_pick"] == "simulated" and doc["final_pick_candidates"] > 1
    assert doc["edp"] == pytest.approx(doc["latency_cycles"] * doc["energy_pj"], rel=1e-9)
    dosa = doc["baselines"]["dosa"]
    for key in ("edp", "samples", "edp_analytic", "edp_as_reported", "edp_ratio",
                "hardware"):
        assert key in dosa
    assert dosa["edp_ratio"] == pytest.approx(dosa["edp"] / doc["edp"])
    for entry in (doc, dosa):
        assert entry["area_mm2"] > 0
        for name in ("plain", "instruction_aware", "simulated"):
            figures = entry["yardsticks"][name]
            assert figures["edp"] == pytest.approx(
                figures["latency_cycles"] * figures["energy_pj"], rel=1e-9)
            events = figures["energy_pj_by_event"]
            assert {"mac_useful", "mac_padded", "dram", "dram_idle"} <= set(events)
            assert sum(events.values()) == pytest.approx(figures["energy_pj"], rel=1e-6)
        assert entry["yardsticks"]["plain"]["edp"] == pytest.approx(entry["edp_analytic"])
        assert entry["final_pick"] == "simulated"
    # the headline figures are the judge's, and every per-layer figure names its yardstick
    assert doc["edp_yardstick"] == "simulated" and doc["layers_yardstick"] == "instruction_aware"
    for entry in (doc, dosa):
        assert entry["edp"] == pytest.approx(entry["yardsticks"]["simulated"]["edp"])
        assert entry["latency_cycles"] == pytest.approx(
            sum(r["count"] * r["cycles"] for r in entry["simulated_layers"]))
    assert dosa["layers_yardstick"] == "plain" and len(dosa["layers"]) == 5
    assert doc["history_yardstick"] == "instruction-aware model"
    assert dosa["history_yardstick"] == "plain model"
    for name, ratio in dosa["edp_ratios"].items():
        assert ratio == pytest.approx(dosa["yardsticks"][name]["edp"]
                                      / doc["yardsticks"][name]["edp"])
    assert len(doc["simulated_layers"]) == 5
    assert doc["yardsticks"]["simulated"]["latency_cycles"] == pytest.approx(sum(
        row["count"] * row["cycles"] for row in doc["simulated_layers"]))
    rows = list(csv.DictReader((first / "history.csv").open()))
    assert {(r["method"], r["yardstick"]) for r in rows} == {
        ("baco", "instruction-aware model"), ("dosa", "plain model")}
    assert (doc["history_yardstick"], dosa["history_yardstick"]) == (
        "instruction-aware model", "plain model")
    for method in ("baco", "dosa"):          # the best never rises; seconds since the start
        best = [float(r["best_edp"]) for r in rows if r["method"] == method]
        seconds = [float(r["seconds"]) for r in rows if r["method"] == method]
        assert best and all(0 < b < a for a, b in zip(best, best[1:]))
        assert all(b >= a >= 0 for a, b in zip(seconds, seconds[1:]))
    written = ExperimentConfig.from_dict(yaml.safe_load((first / "config.yaml").read_text()))
    assert written.codesign == ExperimentConfig.load(TINY).codesign


def test_off_a_terminal_the_run_writes_plain_timestamped_phase_lines(first_run):
    _, lines = first_run
    stamped = re.compile(r"\[\d\d:\d\d:\d\d \+\d+(m\d\ds|s|h\d\dm)\] ")
    ours = [line for line in lines if "phase: " in line or line.startswith("[")]
    assert ours and all(stamped.match(line) for line in ours)
    assert not any("\x1b" in line for line in ours)        # no terminal control codes
    phases = [line.split("phase: ")[1].split("  ")[0] for line in ours if "phase: " in line]
    for phase in ("compiling baco", "search baco", "compiling dosa", "search dosa",
                  "final pick baco 1/", "final pick dosa 1/", "judging baco", "judging dosa"):
        assert any(p.startswith(phase) for p in phases), phase
    assert any(re.search(r"phase: final pick baco 1/\d+  \[\d/5\] \S", line) for line in ours)
    assert any(re.search(r"phase: search baco  samples \d+/180  best EDP \S+ "
                         r"\(instruction-aware model\)  elapsed \d+ s", line) for line in ours)


def test_same_seed_gives_an_identical_results_json(first, tmp_path):
    assert main(["run", str(TINY), "--out", str(tmp_path), "--quiet"]) == 0
    for name in ("results.json", "config.yaml"):
        assert (tmp_path / name).read_bytes() == (first / name).read_bytes()


def test_a_run_killed_mid_way_resumes_to_the_same_results(first, tmp_path, monkeypatch,
                                                           capsys):
    original = baco.codesign_loop.codesign

    def killed_in_round_4(*args, **kwargs):
        def kill(info):
            if info.round == 4:
                raise KeyboardInterrupt
        return original(*args, on_round=kill, **kwargs)

    monkeypatch.setattr(baco.codesign_loop, "codesign", killed_in_round_4)
    code, _, err = run(capsys, "run", TINY, "--out", tmp_path, "--quiet")
    assert code == 130 and "--resume" in err
    assert not (tmp_path / "results.json").exists()
    assert (tmp_path / "checkpoint" / "baco.npz").exists()
    monkeypatch.setattr(baco.codesign_loop, "codesign", original)
    code, out, _ = run(capsys, "run", TINY, "--out", tmp_path, "--resume", "--quiet")
    assert code == 0 and "baco vs dosa:" in out
    versus = next(line for line in out.splitlines() if "baco vs dosa:" in line)
    assert all(name in versus for name in ("simulated", "instr.-aware", "plain"))
    assert (tmp_path / "results.json").read_bytes() == (first / "results.json").read_bytes()


@pytest.mark.parametrize("edit, needle", [
    (("  round_every: 10", "  round_evry: 10"), "codesign.round_evry"),
    (("  starts: 2", "  starts: two"), "codesign.starts"),
    (("  - name: dosa", "  - name: dosaa"), "unknown baseline 'dosaa'"),
    (("  - name: dosa", "  - dosa\n  - name: dosa"), "lists 'dosa' twice (give one a label"),
    (("  - name: dosa", "  - name: dosa\n    label: baco"), "'baco' names the co-design"),
    (("{starts: 2,", "{area_budget_mm2: same, starts: 2,"),
     "baselines[0].options.area_budget_mm2: a number of mm2 or 'match'"),
    (("baselines:", "final_pick: {mode: best}\nbaselines:"), "final_pick.mode"),
])
def test_a_bad_config_fails_in_one_line_and_writes_nothing(tmp_path, capsys, edit, needle):
    text = TINY.read_text()
    assert edit[0] in text
    config = tmp_path / "bad.yaml"
    config.write_text(text.replace(edit[0], edit[1]))
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "run", config, "--out", out)
    assert code == 2 and stdout == ""
    assert needle in err and str(config) in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_readme_quick_start_is_the_resnet50_codesign():
    readme = (ROOT / "README.md").read_text()
    first_command = re.findall(r"```bash\n(python3 -m venv .*?)\n```", readme)[0]
    assert "baco run experiments/configs/resnet50.yaml" in first_command
    assert ExperimentConfig.load(ROOT / "experiments" / "configs" / "resnet50.yaml")


def test_a_fused_suite_case_runs_marks_its_layers_and_simulates_its_chain(tmp_path, capsys):
    config = yaml.safe_load((ROOT / "experiments/configs/bmm_chain_fusion.yaml").read_text())
    config["codesign"]["budget_samples"] = 200
    config["baselines"] = []
    path = tmp_path / "fused.yaml"
    path.write_text(yaml.safe_dump(config))
    code, _, err = run(capsys, "run", path, "--out", tmp_path / "out", "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [x.get("fused_with") for x in doc["layers"]] == [["G10/gemm2"], ["G10/gemm1"]]
    assert [(x["name"], x["count"]) for x in doc["simulated_layers"]] == [
        ("G10/gemm1", 0.0), ("G10/gemm2", 0.0), ("G10/gemm1 -> G10/gemm2", 1.0)]
    assert doc["yardsticks"]["simulated"]["latency_cycles"] == doc["simulated_layers"][2][
        "cycles"]
    for name in ("plain", "instruction_aware", "simulated"):
        figures = doc["yardsticks"][name]
        assert sum(figures["energy_pj_by_event"].values()) == pytest.approx(
            figures["energy_pj"], rel=1e-6)
    code, out, err = run(capsys, "simulate", tmp_path / "out" / "results.json", "--check",
                         "--json", "--quiet")
    assert code == 0, err
    report = json.loads(out)
    assert report["all_ok"] and report["layers"][2]["name"] == "G10/gemm1 -> G10/gemm2"
    assert report["layers"][2]["checked"] and report["layers"][2]["mismatches"] == 0


@pytest.mark.slow
def test_with_free_hardware_the_baselines_get_the_bandwidth_baco_chose(tmp_path, capsys):
    """``hw_mode: free`` picks the DRAM bandwidth; the baselines, which cannot, run with the
    one BACO's design has, and results.json shows each method's hardware. A labelled second
    DOSA-style search is held to BACO's area (``area_budget_mm2: match``)."""
    config = yaml.safe_load(TINY.read_text())
    config["codesign"].update(hw_mode="free", max_dram_bw_words=32)
    iso = {"name": "dosa", "label": "dosa_iso_area",
           "options": {**config["baselines"][0]["options"], "area_budget_mm2": "match"}}
    config["baselines"] = ["gemmini_default"] + config["baselines"] + [iso]
    path = tmp_path / "free.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = run(capsys, "run", path, "--out", tmp_path / "out", "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    chosen = doc["hardware"]["dram_bw_words"]
    assert chosen in {1.0, 2.0, 4.0, 8.0, 16.0, 32.0}
    for name in ("gemmini_default", "dosa"):
        assert doc["baselines"][name]["hardware"]["dram_bw_words"] == chosen
    assert doc["baselines"]["gemmini_default"]["hardware"]["pe_rows"] == 16
    assert f"DRAM {chosen:g} words/cycle" in out
    held = doc["baselines"]["dosa_iso_area"]
    assert held["method"] == "dosa" and held["area_mm2"] <= doc["area_mm2"] * (1 + 1e-6)
    assert "baco vs dosa_iso_area:" in out
    written = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert written["baselines"][2] == iso


def test_a_baseline_cut_short_is_flagged_in_results_and_summary(first):
    import dataclasses

    from baco.run import _short_search, summary_lines
    from baco.simulate import load_result

    result = load_result(first / "results.json")
    short = dataclasses.replace(result, extra={"settings": {"starts": 7}, "starts_drawn": 3})
    (warning,) = _short_search(short)
    assert "drew 3 of its 7 starts" in warning
    assert _short_search(dataclasses.replace(
        result, extra={"settings": {"starts": 7}, "starts_drawn": 7})) == []
    doc = json.loads((first / "results.json").read_text())
    doc["baselines"]["dosa"]["warnings"] = [warning]
    assert any(line.strip().startswith("warning: dosa drew 3 of its 7 starts")
               for line in summary_lines(doc))


def test_a_resumed_run_judges_without_simulating_again(first, tmp_path):
    from baco.final_pick import judge_result
    from baco.sim_cache import DEFAULT_CACHE, SimCache
    from baco.simulate import load_result

    saved = first / "checkpoint" / "sim_cache.pkl"
    DEFAULT_CACHE.clear()
    assert DEFAULT_CACHE.load(saved) > 0
    doc = json.loads((first / "results.json").read_text())
    judged = judge_result(load_result(first / "results.json"))
    assert DEFAULT_CACHE.misses == 0 and DEFAULT_CACHE.hits > 0
    assert judged.simulated.edp == doc["yardsticks"]["simulated"]["edp"]
    # a file that is not a cache adds nothing (its layers are simulated again)
    (tmp_path / "other.pkl").write_bytes(b"not a pickle")
    assert SimCache().load(tmp_path / "other.pkl") == 0
