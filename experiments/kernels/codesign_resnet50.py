"""Regenerate tests/dsl/data/resnet50_codesign.json: ResNet-50 co-designed by `baco.codesign`
with the small settings of tests/baco/data/tiny.yaml (seed 3), whose per-layer mappings the DSL
emitter tests compile and simulate. Takes about two minutes on two cores.

    /work/venv/bin/python experiments/kernels/codesign_resnet50.py [OUT.json]
"""
import pathlib
import sys

import workloads
from baco.codesign_loop import codesign
from baco.config import ExperimentConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else (
        ROOT / "tests" / "dsl" / "data" / "resnet50_codesign.json")
    config = ExperimentConfig.load(ROOT / "tests" / "baco" / "data" / "tiny.yaml").codesign
    result = codesign(workloads.load("resnet50"), config=config, progress=True)
    out.write_text(result.to_json())
    print(f"wrote {out}: {result.hardware.pe_rows}x{result.hardware.pe_cols} PEs, "
          f"EDP {result.edp:.4g}")


if __name__ == "__main__":
    main()
