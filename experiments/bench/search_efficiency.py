"""Best EDP against samples: the co-design and the baselines at equal budgets (seed 001 Fig. 6.11,
DOSA's 2.80x over random search and 12.59x over Bayesian optimization).

Runs the experiment config's co-design once at its budget and reads its running best at each
mark (its history: anytime), and runs every baseline named on the command line at the largest
mark. For every method and mark it prints the best EDP found within that many samples as the
search scored it (BACO: instruction-aware, padding counted; the baselines: the plain model,
which can only flatter them), and the final designs on the common scorers. Prints one JSON
object.

    /work/venv/bin/python experiments/bench/search_efficiency.py \\
        [--config experiments/configs/resnet50.yaml] [--marks 1000 5000] \\
        [--baselines random bo dosa]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from accel.design import design_of
from baco.codesign_loop import codesign
from baco.config import ExperimentConfig
from baco.networks import load_network
from baco.rounding import common_score
from baco.run import baselines


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/configs/resnet50.yaml")
    parser.add_argument("--marks", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--baselines", nargs="+", default=["random", "bo", "dosa"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    exp = ExperimentConfig.load(args.config)
    net = load_network(exp.network_source(), input_shapes=exp.input_shapes)
    hw = exp.hardware_config()
    layers, counts = list(net.layers), list(net.counts)
    registry = baselines()
    top = max(args.marks)
    out: dict = {"config": args.config, "network": net.name, "marks": args.marks, "methods": {}}

    def record(name: str, result, seconds: float) -> None:
        design = design_of(result.hardware, [r.mapping for r in result.layers])
        out["methods"][name] = {
            "samples": result.samples, "seconds": seconds,
            "best_edp_at": {str(m): result.best_edp_at(m) for m in args.marks},
            "final_edp_instruction_aware": common_score(layers, counts, design, True).edp,
            "final_edp_analytic": common_score(layers, counts, design, False).edp}
        print(f"{name}: {out['methods'][name]['best_edp_at']}", file=sys.stderr, flush=True)

    cfg = exp.codesign.replace(seed=args.seed, budget_samples=max(exp.codesign.budget_samples,
                                                                  top))
    start = time.perf_counter()
    record("baco", codesign(net, config=cfg, hardware=hw), time.perf_counter() - start)
    for name in args.baselines:
        start = time.perf_counter()
        result = registry[name](net, budget_samples=top, seed=args.seed)
        record(name, result, time.perf_counter() - start)
    mine = out["methods"]["baco"]["best_edp_at"]
    out["ratio_at"] = {name: {m: entry["best_edp_at"][m] / mine[m] for m in mine}
                       for name, entry in out["methods"].items() if name != "baco"}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
