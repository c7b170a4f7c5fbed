"""Whether two commits give the same seeded results: the check a behaviour-preserving change
(a restructuring) must pass.

Each commit is checked out into a temporary work tree and runs, with this interpreter, the
default ResNet-50 co-design at ``--budget 2000``, a BERT co-design with fusion, and ``baco
reproduce table6_6 --quick``; their ``results.json`` and ``table.csv`` are compared field by
field, wall-clock fields aside. Prints every difference and exits 1 if there is one.

    python experiments/bench/same_results.py BEFORE [AFTER]     # AFTER: the work tree
    python experiments/bench/same_results.py BEFORE --save before.json  # BEFORE's side only
    python experiments/bench/same_results.py --load before.json [AFTER] # against a saved side

Run from the project root; each commit takes several minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = {
    "resnet50": ["run", "experiments/configs/resnet50.yaml", "--budget", "2000"],
    "bert_fusion": ["run", "experiments/configs/bert.yaml", "--budget", "1000",
                    "--set", "codesign.fusion=true", "--set", "codesign.predictor=analytic"],
    "table6_6": ["reproduce", "table6_6", "--quick"],
}
VOLATILE = {"seconds", "output", "out"}
"""Fields that measure wall time or name the output folder, not the result."""


def _volatile(key: str) -> bool:
    return key in VOLATILE


def run_all(source: pathlib.Path, out: pathlib.Path) -> dict[str, Any]:
    """Run every case with the code in ``source``; return ``{case: parsed outputs}``."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    found = {}
    for name, args in RUNS.items():
        folder = out / name
        cmd = [sys.executable, "-m", "baco", *args, "--out", str(folder), "--quiet"]
        print(f"[{source.name}] {name}: {' '.join(args)}", flush=True)
        subprocess.run(cmd, cwd=source, env=env, check=True, stdout=subprocess.DEVNULL)
        if (folder / "results.json").exists():
            found[name] = json.loads((folder / "results.json").read_text())
        else:
            with open(folder / "table.csv", newline="") as handle:
                found[name] = list(csv.DictReader(handle))
    return found


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Paths at which two parsed outputs differ (volatile keys skipped)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if _volatile(str(key)):
                continue
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'after' if key in b else 'before'}")
            else:
                out += differences(a[key], b[key], f"{where}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} before, {b!r} after"]


def checkout(rev: str, into: pathlib.Path) -> pathlib.Path:
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(into), rev], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return into


def _results_of(rev: str | None) -> dict[str, Any]:
    """The parsed outputs of every case run with commit `rev` (None: the work tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp)
        tree = ROOT if rev is None else checkout(rev, tmp_path / "tree")
        try:
            return run_all(tree, tmp_path / "out")
        finally:
            if tree != ROOT:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                               cwd=ROOT, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="*", metavar="REV",
                        help="BEFORE [AFTER] (commits; AFTER defaults to the work tree as it "
                        "is); with --load, AFTER only")
    parser.add_argument("--save", metavar="FILE",
                        help="run BEFORE only and write its results to FILE (JSON)")
    parser.add_argument("--load", metavar="FILE",
                        help="take BEFORE's results from FILE (written by --save)")
    args = parser.parse_args(argv)
    revs: list[str | None] = list(args.revs)
    if len(revs) > (1 if args.load or args.save else 2) or (not revs and not args.load):
        parser.error("give BEFORE [AFTER], BEFORE --save FILE, or --load FILE [AFTER]")
    before = json.loads(pathlib.Path(args.load).read_text()) if args.load else None
    if before is None:
        before = _results_of(revs.pop(0))
        if args.save:
            pathlib.Path(args.save).write_text(json.dumps(before))
            return 0
    diffs = differences(before, _results_of(revs[0] if revs else None))
    for name in RUNS:
        mine = [d for d in diffs if d.startswith(f".{name}")]
        print(f"{name}: {'identical' if not mine else f'{len(mine)} difference(s)'}")
        for d in mine[:20]:
            print(f"  {d}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
