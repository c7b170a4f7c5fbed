"""Where the default co-design run's wall-clock time goes, phase by phase.

Runs the README's main job (``baco run experiments/configs/resnet50.yaml``, or ``--config``)
through `baco.run.run_experiment` with ``profile=True`` (`baco.profile`): the seconds and calls
of each phase (descent rounds and their gradient steps, rounding, exact scoring, refinement,
``sim_hybrid`` rounds with their simulation, residual fitting and polish, the final pick,
each baseline, judging each contestant, the report), with lowering and simulation summed over
every phase, and the seconds JAX spent compiling within each (`jax.monitoring`) with its
persistent cache's hits. Timers are inclusive: a sub-row's seconds are part of its parent's.
The run's results are the same as without the profile. A second run reuses the persistent
compilation cache (`baco.compile_cache`), so compile seconds depend on what ran before; the
JSON gives the cache's hits, the JAX backend, and the load average at the start and end (the
machine may be shared).

Prints the table (``DIR/profile.md``) and one JSON object: the settings, the headline EDP,
the total, untimed and compile seconds, the top-level phases and the phases summed by name.
The run's folder is a temporary one unless ``--out`` names it.

    .venv/bin/python experiments/bench/codesign_profile.py [--config CONFIG.yaml] \\
        [--budget N] [--set KEY=VALUE ...] [--out DIR] [--progress]
    # a few minutes on 2 cores:
    .venv/bin/python experiments/bench/codesign_profile.py --budget 500 --set 'baselines=[]'
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

from baco.profile import PROFILE_JSON, PROFILE_MD
from baco.run import run_experiment

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "experiments" / "configs" / "resnet50.yaml"


def summary(profile: dict, results: dict, settings: dict) -> dict:
    """The JSON line: settings, headline EDP, totals, top-level phases and phases by name."""
    compiled = profile["compile"]
    return {
        **settings,
        "edp": results["edp"], "edp_yardstick": results["edp_yardstick"],
        "samples": results["samples"],
        "total_seconds": round(profile["total_seconds"], 3),
        "untimed_seconds": round(profile["untimed_seconds"], 3),
        "compile_seconds": round(compiled["seconds"], 3),
        "backend_compiles": compiled["backend_compiles"],
        "persistent_cache": compiled["persistent_cache"],
        "phases": {name: round(entry["seconds"], 3) for name, entry in profile["phases"].items()
                   if entry["depth"] == 0},
        "by_name": {name: round(entry["seconds"], 3)
                    for name, entry in profile["by_name"].items()},
        "jax": profile["jax"], "load_average": profile["load_average"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="experiment config")
    parser.add_argument("--budget", type=int, default=None,
                        help="codesign.budget_samples (default: the config's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="overrides", help="a config change, as `baco run --set`")
    parser.add_argument("--out", default=None, help="run folder (default: a temporary one)")
    parser.add_argument("--progress", action="store_true", help="show progress on stderr")
    args = parser.parse_args(argv)

    overrides = list(args.overrides)
    if args.budget is not None:
        overrides.append(f"codesign.budget_samples={args.budget}")
    with tempfile.TemporaryDirectory(prefix="codesign_profile_") as scratch:
        out = pathlib.Path(args.out) if args.out else pathlib.Path(scratch) / "run"
        results = run_experiment(args.config, out, progress=args.progress, overrides=overrides,
                                 profile=True)
        profile = json.loads((out / PROFILE_JSON).read_text())
        table = (out / PROFILE_MD).read_text()
    settings = {"config": args.config, "overrides": overrides, "out": args.out}
    line = summary(profile, results, settings)
    print(table, end="")
    print(json.dumps(line))
    sys.stdout.flush()
    return line


if __name__ == "__main__":
    main()
