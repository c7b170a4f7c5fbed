"""How today's lowering does on the programs the chip ran: each row of a programs file
(``data/gemmini_rtl_baco_programs.csv``) is lowered again from its layer and mapping, and
both traces, the chip's and today's, are timed on the row's chip by the simulator; the race
check runs on today's.

    .venv/bin/python experiments/bench/relower_chip_programs.py \\
        [--file data/gemmini_rtl_baco_programs.csv] [--json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from accel.arch import HardwareConfig  # noqa: E402
from accel.dosa_csv import DATA_DIR  # noqa: E402
from accel.lower import lower  # noqa: E402
from accel.sim import find_races, run  # noqa: E402
from baco.program_validation import read_programs  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(DATA_DIR / "gemmini_rtl_baco_programs.csv"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for p in read_programs(args.file):
        preset = HardwareConfig.preset("gemmini_default")
        low = lower(p.layer, p.mapping, preset, acc_scale=p.acc_scale)
        then = run(p.trace, p.hw, functional=False, timing_table=p.timing).cycles
        now = run(low.trace, p.hw, functional=False, timing_table=p.timing).cycles
        rows.append({"id": p.id, "name": p.name, "then_cycles": then, "now_cycles": now,
                     "racing_now": find_races(low.trace, preset).racing})
    then = sum(r["then_cycles"] for r in rows)
    now = sum(r["now_cycles"] for r in rows)
    report = {"programs": len(rows), "then_cycles": then, "now_cycles": now,
              "speedup": then / now, "racing_now": [r["id"] for r in rows if r["racing_now"]],
              "per_program": rows}
    if args.json:
        print(json.dumps(report))
    else:
        for r in rows:
            print(f"{r['id']:>4} {r['name']:24s} {r['then_cycles']:>9d} -> {r['now_cycles']:>9d}"
                  f"  x{r['then_cycles'] / r['now_cycles']:.2f}"
                  f"{'  RACING' if r['racing_now'] else ''}")
        print(f"{len(rows)} programs: {then} -> {now} simulated cycles, x{then / now:.3f}; "
              f"racing now: {', '.join(report['racing_now']) or 'none'}")
    return report


if __name__ == "__main__":
    main()
