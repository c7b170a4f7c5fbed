"""ResNet-50 co-design with the analytic and the hybrid predictor, same budget: EDPs as JSON.

Runs `baco.codesign("resnet50", config=CodesignConfig(..., predictor=P))` for P in
(analytic, hybrid) with the same seed and budget, then scores both final designs with both
models (the design found under one predictor, judged by the other), so the comparison says
whether the learned residual moved the search to a different design, and what each model thinks
of it.

    /work/venv/bin/python experiments/bench/surrogate_codesign.py --model PATH [--budget 1500]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from baco.codesign_loop import codesign
from baco.config import CodesignConfig
from perfmodels.analytic import exact_batch
from perfmodels.atformer.hybrid import load_hybrid


def _edps(result, hybrid) -> dict:
    layers = [r.layer for r in result.layers]
    mappings = [r.mapping for r in result.layers]
    counts = np.array([r.count for r in result.layers], np.float64)
    plain = exact_batch(layers, result.hardware, mappings, check=False)
    energy = float(np.asarray(plain.energy_pj, np.float64) @ counts)
    cycles_a = float(np.asarray(plain.cycles, np.float64) @ counts)
    cycles_h = float(hybrid.predict(layers, result.hardware, mappings) @ counts)
    return {"cycles_analytic": cycles_a, "cycles_hybrid": cycles_h, "energy_pj": energy,
            "edp_analytic": cycles_a * energy, "edp_hybrid": cycles_h * energy}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="surrogate checkpoint folder")
    parser.add_argument("--network", default="resnet50")
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--starts", type=int, default=4)
    parser.add_argument("--steps-per-start", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    hybrid = load_hybrid(args.model)
    out = {"benchmark": "surrogate_codesign", "network": args.network, "budget": args.budget,
           "model": args.model, "seed": args.seed}
    for predictor in ("analytic", "hybrid"):
        cfg = CodesignConfig(seed=args.seed, budget_samples=args.budget, starts=args.starts,
                             steps_per_start=args.steps_per_start, round_every=50,
                             predictor=predictor,
                             model=args.model if predictor == "hybrid" else None)
        start = time.perf_counter()
        result = codesign(args.network, config=cfg)
        hw = result.hardware
        out[predictor] = {
            "seconds": time.perf_counter() - start, "samples": result.samples,
            "reported_edp": result.edp,
            "hardware": {"pe": f"{hw.pe_rows}x{hw.pe_cols}", "sp_kb": hw.sp_kb,
                         "acc_kb": hw.acc_kb},
            "plain_models": _edps(result, hybrid)}
    json.dump(out, sys.stdout)
    print()
    return out


if __name__ == "__main__":
    main()
