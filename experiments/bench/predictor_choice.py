"""Which predictor gives the lower simulated EDP for the seconds it takes (issue: speed, item 0).

For each network's config, each seed and each predictor (``analytic`` and ``sim_hybrid``;
both end on the fair contest's final pick by simulation, `baco.final_pick`), runs BACO alone
(``baselines=[]``) in its own process through ``codesign_profile.py`` and records the search's
seconds, the whole run's, and the judged (simulated) EDP of the design it returns. Then, so
the two meet at equal wall time, ``analytic`` runs again with the budget scaled by the ratio of
the mean search seconds (``--equal-time``): the faster predictor given the other's seconds.

Each run appends one JSON line to ``--out`` (runs already there are not run again, so an
interrupted bench resumes), and the end prints a table per network: the geometric means over
seeds of simulated EDP and the mean search seconds, and the verdict at equal time.

    .venv/bin/python experiments/bench/predictor_choice.py [--networks resnet50 bert] \\
        [--seeds 0 1 2] [--predictors sim_hybrid] [--equal-time] [--out predictor_choice.jsonl]
    # about an hour on 2 cores for both networks, three seeds, with --equal-time
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROFILE = pathlib.Path(__file__).resolve().parent / "codesign_profile.py"
PREDICTORS = ("analytic", "sim_hybrid")


def config_path(network: str) -> pathlib.Path:
    return ROOT / "experiments" / "configs" / f"{network}.yaml"


def run_one(network: str, seed: int, predictor: str, budget: int | None) -> dict:
    """One BACO-only run in a fresh process (no compiled program carried over in memory)."""
    command = [sys.executable, str(PROFILE), "--config", str(config_path(network)),
               "--set", "baselines=[]", "--set", f"codesign.seed={seed}",
               "--set", f"codesign.predictor={predictor}"]
    if budget is not None:
        command += ["--budget", str(budget)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{network} seed {seed} {predictor}: exit {done.returncode}\n"
                           f"{done.stderr[-3000:]}")
    line = json.loads(done.stdout.strip().splitlines()[-1])
    return {"network": network, "seed": seed, "predictor": predictor, "budget": budget,
            "samples": line["samples"], "edp": line["edp"],
            "edp_yardstick": line["edp_yardstick"],
            "search_seconds": line["phases"].get("search baco"),
            "total_seconds": line["total_seconds"],
            "compile_seconds": line["compile_seconds"],
            "load_average": line["load_average"]}


def key(row: dict) -> tuple:
    return row["network"], row["seed"], row["predictor"], row["budget"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: list[dict], network: str) -> list[str]:
    """Markdown rows: per (predictor, budget), geometric-mean simulated EDP and mean seconds."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["network"] == network:
            groups.setdefault((row["predictor"], row["budget"]), []).append(row)
    lines = [f"### {network}", "",
             "| predictor | budget | seeds | simulated EDP (geomean) | per seed | "
             "search s (mean) | run s (mean) |", "|---|---|---|---|---|---|---|"]
    for (predictor, budget), group in sorted(groups.items(), key=lambda g: (g[0][0],
                                                                           g[0][1] or 0)):
        group.sort(key=lambda r: r["seed"])
        per_seed = ", ".join(f"{r['edp']:.3e}" for r in group)
        search = sum(r["search_seconds"] for r in group) / len(group)
        total = sum(r["total_seconds"] for r in group) / len(group)
        lines.append(f"| {predictor} | {budget or 'config'} | {len(group)} | "
                     f"{geomean([r['edp'] for r in group]):.4e} | {per_seed} | {search:.0f} | "
                     f"{total:.0f} |")
    return lines + [""]


def mean_search_seconds(rows: list[dict], network: str, predictor: str) -> float:
    times = [r["search_seconds"] for r in rows if r["network"] == network
             and r["predictor"] == predictor and r["budget"] is None]
    return sum(times) / len(times)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=["resnet50", "bert"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--predictors", nargs="+", choices=PREDICTORS, default=list(PREDICTORS),
                        help="which to run (e.g. sim_hybrid alone, to check a change)")
    parser.add_argument("--equal-time", action="store_true",
                        help="also run analytic at the budget that takes sim_hybrid's seconds")
    parser.add_argument("--out", default="predictor_choice.jsonl", help="JSON lines, resumed")
    args = parser.parse_args(argv)
    if args.equal_time and set(args.predictors) != set(PREDICTORS):
        parser.error("--equal-time compares both predictors: leave --predictors out")
    out = pathlib.Path(args.out)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {key(r) for r in rows}

    def record(network: str, seed: int, predictor: str, budget: int | None) -> None:
        if (network, seed, predictor, budget) in done:
            return
        row = run_one(network, seed, predictor, budget)
        rows.append(row)
        with out.open("a") as sink:
            sink.write(json.dumps(row) + "\n")
        print(f"{network} seed {seed} {predictor} budget {budget or 'config'}: simulated EDP "
              f"{row['edp']:.4e}, search {row['search_seconds']:.0f} s", flush=True)

    for network in args.networks:
        for seed in args.seeds:
            for predictor in args.predictors:
                record(network, seed, predictor, None)
        if args.equal_time:
            ratio = (mean_search_seconds(rows, network, "sim_hybrid")
                     / mean_search_seconds(rows, network, "analytic"))
            config = yaml.safe_load(config_path(network).read_text())
            budget = int(round(config["codesign"]["budget_samples"] * ratio, -2))
            for seed in args.seeds:
                record(network, seed, "analytic", budget)
    for network in args.networks:
        print("\n".join(summarize(rows, network)))
    return rows


if __name__ == "__main__":
    main()
