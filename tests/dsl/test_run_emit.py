"""`baco run --emit-kernels`: the flag reaches the run, which writes one kernel per layer."""

from __future__ import annotations

import json
import pathlib

import pytest

import baco.codesign_loop
from baco.cli import build_parser
from baco.dsl.emit import load_source
from baco.result import CodesignResult
from baco.run import KERNELS_DIR, run_experiment

DATA = pathlib.Path(__file__).parent / "data"


def test_run_parser_has_emit_kernels():
    args = build_parser().parse_args(["run", "x.yaml", "--emit-kernels"])
    assert args.emit_kernels is True
    assert build_parser().parse_args(["run", "x.yaml"]).emit_kernels is False


@pytest.mark.slow
def test_run_experiment_writes_kernels_next_to_results(tmp_path, monkeypatch):
    design = CodesignResult.from_json((DATA / "resnet50_codesign.json").read_text())
    monkeypatch.setattr(baco.codesign_loop, "codesign", lambda *a, **k: design)
    config = tmp_path / "exp.yaml"
    config.write_text("name: emit\nnetwork: resnet50\nhardware: gemmini_default\n"
                      "codesign: {seed: 3, budget_samples: 10}\nbaselines: []\n")
    run_experiment(config, tmp_path / "out", progress=False, emit_kernels=True)
    files = sorted((tmp_path / "out" / KERNELS_DIR).glob("*.py"))
    assert len(files) == len(design.layers)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["edp"] > 0
    for path in files:
        assert hasattr(load_source(path.read_text(), str(path)), "launch")
