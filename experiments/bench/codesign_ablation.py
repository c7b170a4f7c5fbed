"""Ablation of the co-design on one network at equal sample budgets (seed 001 Table 6.7 style).

Variants (each a change of `baco.CodesignConfig` from the experiment config's):

* ``importance``: the config as shipped -- exact refinement rounds go to the layers the
  importance scheduler picks (Eq. 6.7-6.9, abandonment);
* ``uniform``: importance off -- refinement rounds visit the layers in turn;
* ``mask_descent``: importance also masks the descent's gradient steps (only the chosen
  layers move each round);
* ``agnostic``: instruction awareness off (no DIM x DIM padding in the search).

Every design is scored on the experiment's common scorer (`baco.rounding.common_score`,
instruction-aware: padding counted) and on the plain analytic model. Prints one JSON object:
per variant and seed the EDPs, samples and seconds, and per variant the geometric mean EDP.

    /work/venv/bin/python experiments/bench/codesign_ablation.py \\
        [--config experiments/configs/resnet50.yaml] [--seeds 0 1 2] [--variants ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

from baco.codesign import codesign
from baco.config import ExperimentConfig
from baco.networks import load_network
from baco.rounding import common_score, design_of

VARIANTS = ("importance", "uniform", "mask_descent", "agnostic")


def variant_config(base, name: str):
    imp = base.importance
    if name == "importance":
        return base.replace(importance=dataclasses.replace(imp, enabled=True,
                                                           mask_descent=False))
    if name == "uniform":
        return base.replace(importance=dataclasses.replace(imp, enabled=False))
    if name == "mask_descent":
        return base.replace(importance=dataclasses.replace(imp, enabled=True,
                                                           mask_descent=True))
    if name == "agnostic":
        return base.replace(instruction_aware=False)
    raise SystemExit(f"unknown variant {name!r}; choose from {VARIANTS}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/configs/resnet50.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--budget", type=int, default=None, help="override budget_samples")
    args = parser.parse_args(argv)

    exp = ExperimentConfig.load(args.config)
    net = load_network(exp.network_source(), input_shapes=exp.input_shapes)
    hw = exp.hardware_config()
    layers, counts = list(net.layers), list(net.counts)
    base = exp.codesign if args.budget is None else exp.codesign.replace(
        budget_samples=args.budget)
    runs: dict[str, list[dict]] = {}
    for name in args.variants:
        for seed in args.seeds:
            cfg = variant_config(base, name).replace(seed=seed)
            start = time.perf_counter()
            result = codesign(net, config=cfg, hardware=hw)
            seconds = time.perf_counter() - start
            design = design_of(result.hardware, [r.mapping for r in result.layers])
            aware = common_score(layers, counts, design, True, cfg.sram_step_kb).edp
            plain = common_score(layers, counts, design, False, cfg.sram_step_kb).edp
            runs.setdefault(name, []).append({
                "seed": seed, "edp_instruction_aware": aware, "edp_analytic": plain,
                "samples": result.samples, "seconds": seconds,
                "hardware": [result.hardware.pe_rows, result.hardware.sp_kb,
                             result.hardware.acc_kb]})
            print(f"{name} seed {seed}: {aware:.4g} (plain {plain:.4g}), {seconds:.0f} s",
                  file=sys.stderr, flush=True)

    def geomean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values))

    summary = {name: {"geomean_edp_instruction_aware": geomean([r["edp_instruction_aware"]
                                                                for r in rows]),
                      "geomean_edp_analytic": geomean([r["edp_analytic"] for r in rows])}
               for name, rows in runs.items()}
    out = {"config": args.config, "network": net.name, "budget_samples": base.budget_samples,
           "seeds": args.seeds, "summary": summary, "runs": runs}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
