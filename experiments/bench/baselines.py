"""EDP and wall time of the baseline searches on one network (default ResNet-50).

Runs, each with its sample budget and seed:

* ``gemmini_default``: Gemmini's library tiler on ``gemmini_default`` (1 sample);
* ``random`` and ``bo`` at every ``--budgets`` value (DOSA's protocols, co-searching Gemmini
  hardware);
* ``random_pruned`` on every ``--presets`` hardware with ``--pruned-samples`` mappings per
  layer (the seed's end-to-end protocol: 10,000).

Model code is compiled once per template by a warm-up run on a one-layer network before the
timed runs, so the times are search times. Prints one JSON object per run (method, hardware,
samples, EDP in pJ x cycles and in uJ x cycles as DOSA's tables, latency, energy, seconds) and,
with ``--out DIR``, writes each `CodesignResult` as JSON there.

    /work/venv/bin/python experiments/bench/baselines.py [--network resnet50] [--seed 0]
        [--budgets 1000 5000] [--pruned-samples 10000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import workloads
from baco.networks import load_network
from baco.search import BASELINES
from workloads.files import write_atomic


def _record(result, seconds: float) -> dict:
    return {"method": result.method, "network": result.network, "seed": result.seed,
            "hardware": result.hardware.name or result.hardware.to_dict(),
            "pe": result.hardware.pe_rows, "sp_kb": result.hardware.sp_kb,
            "acc_kb": result.hardware.acc_kb, "samples": result.samples,
            "edp": result.edp, "edp_uj_cycles": result.edp / 1e6,
            "latency_cycles": result.latency_cycles, "energy_pj": result.energy_pj,
            "seconds": round(seconds, 2)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet50")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--pruned-samples", type=int, default=10000)
    parser.add_argument("--presets", nargs="*",
                        default=["eyeriss", "nvdla_small", "nvdla_large"])
    parser.add_argument("--methods", nargs="*",
                        default=["gemmini_default", "random", "bo", "random_pruned"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    net = load_network(args.network)
    out_dir = pathlib.Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)

    warm = workloads.Network.from_layers("warm-up", [net.layers[0]])
    BASELINES["random"](warm, budget_samples=8, seed=0)
    for preset in args.presets:
        BASELINES["random_pruned"](warm, budget_samples=8, seed=0, hardware=preset)

    runs = []
    if "gemmini_default" in args.methods:
        runs.append(("gemmini_default", {"budget_samples": 1}))
    for budget in args.budgets:
        for method in ("random", "bo"):
            if method in args.methods:
                runs.append((method, {"budget_samples": budget}))
    if "random_pruned" in args.methods:
        for preset in args.presets:
            runs.append(("random_pruned", {"budget_samples": args.pruned_samples,
                                           "hardware": preset}))
    records = []
    for method, options in runs:
        start = time.perf_counter()
        result = BASELINES[method](net, seed=args.seed, **options)
        record = _record(result, time.perf_counter() - start)
        records.append(record)
        print(json.dumps(record), flush=True)
        if out_dir:
            name = f"{method}-{options.get('hardware', '')}-{result.samples}-s{args.seed}.json"
            write_atomic(out_dir / name, result.to_json())
    return records


if __name__ == "__main__":
    main()
