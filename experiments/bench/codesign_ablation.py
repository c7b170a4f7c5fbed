"""Ablation of the co-design on one network at equal sample budgets (seed 001 Table 6.7 style).

Variants (each a change of `baco.CodesignConfig` from the experiment config's):

* ``full``: the config as shipped;
* ``no_descent``: ``descent: false`` -- the descent's share of the budget goes to exactly
  scored starts (the same random hardware and tiler / random-pruned start mappings), then
  refinement as usual;
* ``no_refinement``: ``refine_fraction: 0`` -- the whole budget to starts and descent;
* ``starts_only``: neither descent nor refinement: the budget spent on scored starts;
* ``importance``: the config as shipped -- exact refinement rounds go to the layers the
  importance scheduler picks (Eq. 6.7-6.9, abandonment);
* ``uniform``: importance off -- refinement rounds visit the layers in turn;
* ``mask_descent``: importance also masks the descent's gradient steps (only the chosen
  layers move each round);
* ``agnostic``: instruction awareness off (no DIM x DIM padding in the search).

Every design is judged on the three yardsticks (`baco.yardsticks`: simulated, instruction-aware,
plain). Prints one JSON object: per variant and seed the EDPs, samples and seconds, and per
variant the geometric mean EDP on each yardstick and its ratio to ``full``'s, and each
design's hardware (PE dim, buffers, DRAM words/cycle, area by the template's model).

    .venv/bin/python experiments/bench/codesign_ablation.py \\
        [--config experiments/configs/resnet50.yaml] [--seeds 0 1 2] [--variants ...] \\
        [--budget N] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

from accel.design import design_of
from baco.codesign_loop import codesign
from baco.config import ExperimentConfig
from baco.networks import load_network
from baco.yardsticks import YARDSTICKS, yardsticks
from perfmodels.energy import config_area_mm2

VARIANTS = ("full", "no_descent", "no_refinement", "starts_only", "importance", "uniform",
            "mask_descent", "agnostic")
DEFAULT_VARIANTS = ("full", "no_descent", "no_refinement", "starts_only")


def variant_config(base, name: str):
    imp = base.importance
    if name == "full":
        return base
    if name == "no_descent":
        return base.replace(descent=False)
    if name == "no_refinement":
        return base.replace(refine_fraction=0.0)
    if name == "starts_only":
        return base.replace(descent=False, refine_fraction=0.0)
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
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS),
                        choices=VARIANTS)
    parser.add_argument("--budget", type=int, default=None, help="override budget_samples")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="overrides", help="override a config key, as `baco run --set`")
    args = parser.parse_args(argv)

    exp = ExperimentConfig.load(args.config, args.overrides)
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
            judged = yardsticks(layers, counts, design, sram_step_kb=cfg.sram_step_kb,
                                area_budget_mm2=cfg.area_budget_mm2)
            edps = {y: (None if judged[y] is None else judged[y].edp) for y in YARDSTICKS}
            runs.setdefault(name, []).append({
                "seed": seed, **{f"edp_{y}": v for y, v in edps.items()},
                "samples": result.samples, "seconds": seconds,
                "starts_drawn": result.extra.get("starts_drawn"),
                "hardware": {"pe_dim": result.hardware.pe_rows, "sp_kb": result.hardware.sp_kb,
                             "acc_kb": result.hardware.acc_kb,
                             "dram_bw_words": result.hardware.dram_bw_words,
                             "area_mm2": config_area_mm2(result.hardware)}})
            print(f"{name} seed {seed}: " + ", ".join(
                f"{y} {v:.4g}" for y, v in edps.items() if v is not None)
                + f", {runs[name][-1]['hardware']}, {seconds:.0f} s", file=sys.stderr,
                flush=True)

    def geomean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values))

    summary = {name: {f"geomean_edp_{y}": geomean([r[f"edp_{y}"] for r in rows])
                      for y in YARDSTICKS if all(r[f"edp_{y}"] for r in rows)}
               for name, rows in runs.items()}
    if "full" in summary:           # how many times worse than the full search
        for name, figures in summary.items():
            figures.update({f"vs_full_{k[len('geomean_edp_'):]}": v / summary["full"][k]
                            for k, v in list(figures.items()) if k in summary["full"]})
    out = {"config": args.config, "network": net.name, "budget_samples": base.budget_samples,
           "seeds": args.seeds, "summary": summary, "runs": runs}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
