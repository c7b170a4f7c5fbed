import pathlib

import pytest

TINY = """\
name: tiny
kind: end_to_end
description: two cheap methods on DeepBench's OCR convolutions
params:
  networks: ["deepbench:set=ocr"]
  seeds: [0]
  reference: Gemmini-Default
  methods:
    - {label: Gemmini-Default, search: gemmini_default, hardware: gemmini_default, budget: 1}
    - {label: NVDLA-Large, search: random_pruned, hardware: nvdla_large, budget: %(budget)d}
quick:
  seeds: [0]
"""


@pytest.fixture
def tiny_experiment(tmp_path) -> pathlib.Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY % {"budget": 16})
    return path
