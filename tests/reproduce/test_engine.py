"""`baco reproduce`/`baco sweep` end to end on a tiny experiment: outputs, resume after an
interruption, failures, CLI errors."""

import csv
import json
import subprocess
import sys

import pytest

from baco.cli import main
from baco.reproduce import executor, reproduce
from workloads.errors import BacoError


def _mtimes(out):
    return {p.name: (p.stat().st_mtime_ns, p.read_text()) for p in (out / "cases").iterdir()}


def test_sweep_writes_table_csv_plots_and_resumes(tiny_experiment, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(tiny_experiment), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "2 cases (2 run, 0 reused)" in printed
    for name in ("table.md", "table.csv", "edp_ratio.png", "experiment.json", "run.json",
                 "tradeoff_deepbench-set=ocr.png", "layers_deepbench-set=ocr.png"):
        assert (out / name).exists(), name
    assert (out / "edp_ratio.png").read_bytes()[:4] == b"\x89PNG"
    cases = {p.stem: json.loads(p.read_text()) for p in (out / "cases").iterdir()}
    assert len(cases) == 2
    # The table's EDPs are the case files' (one seed: no averaging).
    rows = list(csv.DictReader((out / "table.csv").open()))
    default = cases["deepbench-set=ocr__Gemmini-Default__s0"]["result"]
    nvdla = cases["deepbench-set=ocr__NVDLA-Large__s0"]["result"]
    by_method = {r["method"]: r for r in rows}
    assert float(by_method["Gemmini-Default"]["edp"]) == pytest.approx(default["edp"])
    assert float(by_method["NVDLA-Large"]["edp_ratio"]) == pytest.approx(
        nvdla["edp"] / default["edp"])
    assert nvdla["scorer"] == "analytic" and default["scorer"] == "instruction_aware"
    assert nvdla["samples"] == 16

    before = _mtimes(out)
    assert main(["sweep", str(tiny_experiment), "--out", str(out), "--quiet"]) == 0
    assert "2 cases (0 run, 2 reused)" in capsys.readouterr().out
    assert _mtimes(out) == before


def test_interrupted_run_resumes_without_redoing_finished_cases(tiny_experiment, tmp_path,
                                                                monkeypatch, capsys):
    out = tmp_path / "out"
    real = executor.execute
    calls = []

    def interrupt_second(kind, params):
        calls.append(params["method"]["label"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(kind, params)

    monkeypatch.setattr(executor, "execute", interrupt_second)
    assert main(["sweep", str(tiny_experiment), "--out", str(out), "--quiet"]) == 130
    assert "rerun the same command to continue" in capsys.readouterr().err
    finished = _mtimes(out)
    assert len(finished) == 1

    ran = []
    monkeypatch.setattr(executor, "execute",
                        lambda kind, params: (ran.append(params["method"]["label"]),
                                              real(kind, params))[1])
    outcome = reproduce(str(tiny_experiment), out=out, progress=False)
    assert (outcome.ran, outcome.reused) == (1, 1)
    assert ran == [calls[1]]                       # only the interrupted case ran again
    after = _mtimes(out)
    for name, stamp in finished.items():
        assert after[name] == stamp                # the finished case's file is untouched


def test_changed_budget_reruns_only_the_changed_cases(tiny_experiment, tmp_path):
    out = tmp_path / "out"
    reproduce(str(tiny_experiment), out=out, progress=False)
    text = tiny_experiment.read_text().replace("budget: 16", "budget: 24")
    tiny_experiment.write_text(text)
    outcome = reproduce(str(tiny_experiment), out=out, progress=False)
    assert (outcome.ran, outcome.reused) == (1, 1)
    result = json.loads((out / "cases" / "deepbench-set=ocr__NVDLA-Large__s0.json").read_text())
    assert result["result"]["samples"] == 24


def test_failed_case_is_reported_and_the_rest_kept(tiny_experiment, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real = executor.execute

    def fail_nvdla(kind, params):
        if params["method"]["label"] == "NVDLA-Large":
            raise RuntimeError("boom")
        return real(kind, params)

    monkeypatch.setattr(executor, "execute", fail_nvdla)
    with pytest.raises(BacoError, match=r"1 of 2 cases failed \(first: .*NVDLA-Large__s0: "
                                        r"RuntimeError: boom\)"):
        reproduce(str(tiny_experiment), out=out, progress=False)
    assert len(list((out / "cases").iterdir())) == 1
    assert "PARTIAL: 1 of 2 cases" in (out / "table.md").read_text()


def test_cli_errors_are_one_line_exit_2(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "baco", *args], capture_output=True,
                              text=True, check=False)

    bad = run("reproduce", "table6_8")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("baco: error: unknown experiment 'table6_8'")
    assert "fig6_11" in bad.stderr
    listed = run("reproduce", "--list")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "fig6_10", "fig6_11", "fig6_12", "table6_6", "table6_7"]
    typo = tmp_path / "t.yaml"
    typo.write_text("name: t\nkind: end_to_end\nparams: {methods: [], netwroks: [x]}\n")
    bad = run("sweep", str(typo))
    assert bad.returncode == 2 and "unknown key 'params.netwroks'" in bad.stderr
    bad = run("reproduce", "table6_6", "--workers", "0")
    assert bad.returncode == 2 and "workers must be >= 1" in bad.stderr
