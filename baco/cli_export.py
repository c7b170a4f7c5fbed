"""`baco export`: the subcommand's arguments (the work is in `baco.export`)."""

from __future__ import annotations

import argparse


def _cmd_export(args: argparse.Namespace) -> int:
    from baco.export import main_export

    return main_export(args.results, args.gemmini, args.timeloop, args.quiet)


def register(commands) -> None:
    p = commands.add_parser(
        "export", help="write a co-designed result as a Gemmini config or Timeloop inputs",
        description="Take RESULTS.json's design (from `baco run`) out of baco: --gemmini DIR "
        "writes a Chipyard GemminiArrayConfig (BacoGemminiConfig.scala) and each layer's "
        "tiled_conv/tiled_matmul tiling factors (baco_tiling.h), refusing a design Gemmini's "
        "generator does not build; --timeloop DIR writes Timeloop v3 inputs: arch.yaml and "
        "per layer LAYER/problem.yaml and LAYER/map.yaml, listed in layers.yaml.")
    p.add_argument("results", metavar="RESULTS.json", help="a results.json from `baco run`")
    p.add_argument("--gemmini", metavar="DIR", default=None,
                   help="write the Gemmini config and tiling header here (default: none)")
    p.add_argument("--timeloop", metavar="DIR", default=None,
                   help="write the Timeloop architecture, problems and mappings here "
                   "(default: none)")
    p.add_argument("--quiet", action="store_true", help="do not list the files written")
    p.set_defaults(func=_cmd_export)
