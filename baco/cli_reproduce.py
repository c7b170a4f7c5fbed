"""``baco reproduce`` and ``baco sweep``: thin parsing over `baco.reproduce`.

    baco reproduce --list
    baco reproduce NAME [--quick] [--out DIR] [--backend local|ray] [--workers N] [--quiet]
    baco sweep CONFIG.yaml [--quick] [--out DIR] [--backend local|ray] [--workers N] [--quiet]

Both resume: rerunning the same command loads the finished cases from ``DIR/cases/``.
"""

from __future__ import annotations

import argparse

from workloads.errors import ConfigError


def _common(p: argparse.ArgumentParser) -> None:
    from baco.reproduce import BACKENDS

    p.add_argument("--quick", action="store_true",
                   help="the experiment's quick: sizes (fewer cases and samples)")
    p.add_argument("--out", metavar="DIR", help="output folder (default "
                   "experiments/results/reproduce/NAME[-quick])")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="local: this process (--workers 1) or worker processes; ray: a Ray "
                   "cluster (RAY_ADDRESS, else a local one; pip install 'baco[ray]')")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="cases running at once (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "reproduce", help="reproduce a table or figure of the seed (resumable)",
        description="Run one experiment of experiments/configs/ (a table or figure of seed 001 "
        "chapter 6) and write DIR/table.md, DIR/table.csv and PNG plots; one JSON per finished "
        "case in DIR/cases/, so rerunning resumes.")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="experiment name (see --list) or an experiment file")
    p.add_argument("--list", action="store_true", help="list the experiments")
    _common(p)
    p.set_defaults(func=_cmd_reproduce)

    p = commands.add_parser(
        "sweep", help="run an experiment file over many networks or seeds",
        description="Run the experiment file CONFIG (e.g. experiments/configs/"
        "sweep_networks.yaml): its cases in local processes (--workers) or on Ray "
        "(--backend ray); resumable like baco reproduce.")
    p.add_argument("config", metavar="CONFIG.yaml", help="experiment file")
    _common(p)
    p.set_defaults(func=_cmd_sweep)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    if args.list:
        from baco.reproduce import find_experiment, known_names
        for name in known_names():
            exp = find_experiment(name)
            print(f"{name:10s} {exp.description.splitlines()[0] if exp.description else ''}")
        return 0
    if not args.name:
        raise ConfigError("baco reproduce needs an experiment NAME (see baco reproduce --list)")
    return _run(args.name, args)


def _cmd_sweep(args: argparse.Namespace) -> int:
    if not args.config.endswith((".yaml", ".yml")):
        raise ConfigError(f"sweep config {args.config!r}: expected a .yaml experiment file")
    return _run(args.config, args)


def _run(name: str, args: argparse.Namespace) -> int:
    from baco.reproduce import reproduce

    outcome = reproduce(name, quick=args.quick, out=args.out, backend=args.backend,
                        workers=args.workers, progress=not args.quiet)
    print(outcome.table)
    print(f"{outcome.cases} cases ({outcome.ran} run, {outcome.reused} reused) in "
          f"{outcome.seconds:.0f} s; wrote {', '.join(outcome.files)} in {outcome.out}")
    return 0


__all__ = ["register"]
