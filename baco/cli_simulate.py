"""`baco simulate`: the subcommand's arguments (the work is in `baco.simulate`)."""

from __future__ import annotations

import argparse

from workloads.errors import ConfigError


def _layers(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--layers {text!r}: expected comma-separated layer indices, "
                          "e.g. 0,3,7") from None


def _cmd_simulate(args: argparse.Namespace) -> int:
    from baco.simulate import main_simulate

    layers = _layers(args.layers) if args.layers else None
    return main_simulate(args.results, args.check, args.seed, layers, args.json, args.quiet)


def register(commands) -> None:
    p = commands.add_parser(
        "simulate", help="run a co-designed result's layers on the simulator",
        description="Lower every unique layer of RESULTS.json (from `baco run`) with its "
        "mapping on its hardware, run it on the simulator with random int8 inputs, and "
        "report instructions and cycles; --check compares each output with numpy. Exit "
        "status 1 if any layer fails.")
    p.add_argument("results", metavar="RESULTS.json", help="a results.json from `baco run`")
    p.add_argument("--check", action="store_true", help="compare every output with numpy")
    p.add_argument("--layers", metavar="I,J,...", help="only these layer indices (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_cmd_simulate)
