"""The `baco` command line: thin parsing over the library; errors as one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
from collections.abc import Sequence

from baco.interrupts import raising_on_signals
from workloads.errors import BacoError

EXIT_BAD_INPUT = 2


def _cmd_workloads_list(args: argparse.Namespace) -> int:
    import workloads

    if args.json:
        print(json.dumps({"zoo": workloads.zoo_names(), "suites": workloads.suite_names()}))
        return 0
    from workloads.network import format_macs
    from workloads.suites import SUITE_SUMMARIES
    from workloads.zoo import describe

    print("zoo networks (parameters as NAME:key=value,...; sizes at the defaults):")
    for name in workloads.zoo_names():
        net = workloads.load(name)
        summary = describe(name).splitlines()[0].partition(": ")[2]
        print(f"  {name:13s} {net.total_layers:4d} layers ({net.unique_layers:2d} unique), "
              f"{format_macs(net.total_macs):>9s}  {summary}")
    print("benchmark suites (workloads.suite(NAME, seed=0); a case as SUITE/CASE):")
    for name in workloads.suite_names():
        macs = [net.total_macs for net in workloads.suite(name)]
        print(f"  {name:13s} {len(macs):4d} cases, {format_macs(min(macs))} to "
              f"{format_macs(max(macs))}  {SUITE_SUMMARIES[name]}")
    return 0


def _cmd_workloads_show(args: argparse.Namespace) -> int:
    from baco.networks import load_network
    from workloads import parse_input_shapes

    shapes = parse_input_shapes(args.input_shape) if args.input_shape else None
    net = load_network(args.network, input_shapes=shapes)
    if args.json:
        print(json.dumps(net.to_dict()))
        return 0
    _print_network(net)
    return 0


def _print_network(net) -> None:
    from rich.console import Console
    from rich.table import Table

    from workloads.network import format_macs

    table = Table(title=f"{net.name}: {net.unique_layers} unique of {net.total_layers} layers, "
                        f"{format_macs(net.total_macs)}")
    for col in ("#", "kind", "R", "S", "P", "Q", "C", "K", "N", "stride", "dil", "groups",
                "count", "MACs", "name"):
        table.add_column(col, justify="left" if col in ("kind", "name") else "right")
    for i, (layer, count) in enumerate(net):
        table.add_row(
            str(i), layer.kind, *(str(v) for v in layer.dims.values()),
            f"{layer.Hstride}x{layer.Wstride}", f"{layer.Hdilation}x{layer.Wdilation}",
            str(layer.groups), str(count), format_macs(layer.macs), layer.name)
    console = Console(width=max(Console().width, 140))
    console.print(table)
    summary = net.summary.to_dict()
    for part in ("layers", "epilogues", "folded", "skipped", "passes"):
        if any(summary[part].values()):
            items = ", ".join(f"{k}×{v}" for k, v in sorted(summary[part].items()) if v)
            console.print(f"{part}: {items}", highlight=False)
    for i, chain in enumerate(net.chains):
        path = " -> ".join((chain.names[0], *chain.between, *chain.names[1:]))
        console.print(f"chain {i}: {chain.kind}  {path}", highlight=False)
    if net.chains:
        from baco.fusion import fusion_groups
        groups, apart = fusion_groups(net)
        fusable = sum(g.instances for g in groups)
        console.print(f"codesign.fusion can fuse {fusable} of {len(net.chains)} chains"
                      + "".join(f"; {n} apart: {why}" for why, n in apart.items()),
                      highlight=False)


def _cmd_validate_timeloop(args: argparse.Namespace) -> int:
    from perfmodels.validate import validate_timeloop

    report = validate_timeloop(args.file)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['rows']} rows of {args.file}")
    for quantity in ("cycles", "energy"):
        print(f"  {quantity:7s} mean |rel err| {100 * report[f'{quantity}_mean_abs_rel_err']:.3f}%"
              f"   max |rel err| {100 * report[f'{quantity}_max_abs_rel_err']:.3f}%")
    return 0


def _run_overrides(args: argparse.Namespace) -> list[str]:
    """`baco run`'s ``--set`` changes, with ``--budget`` and ``--seed`` folded in."""
    overrides = list(args.overrides)
    if args.budget is not None:
        overrides.append(f"codesign.budget_samples={args.budget}")
    if args.seed is not None:
        overrides.append(f"codesign.seed={args.seed}")
    return overrides


def _cmd_run(args: argparse.Namespace) -> int:
    from baco.run import main_run

    return main_run(args.config, args.out, resume=args.resume, quiet=args.quiet,
                    emit_kernels=args.emit_kernels, overrides=_run_overrides(args),
                    force=args.force, profile=args.profile)


def _cmd_report(args: argparse.Namespace) -> int:
    from baco.report import main_report

    return main_report(args.results, args.out)


def _cmd_validate_programs(args: argparse.Namespace) -> int:
    from baco.program_validation import validate_programs
    from baco.yardsticks import YARDSTICKS

    report = validate_programs(args.file)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['programs']} programs of {args.file}, each on the chip its row describes")
    for name in YARDSTICKS:
        f = report["yardsticks"][name]
        print(f"  {name:17s} mape {100 * f['mape']:5.1f}%  worst {100 * f['max_abs_rel_err']:5.1f}%"
              f"  median ratio {f['median_ratio']:.2f}  pearson {f['pearson']:.3f}  spearman "
              f"{f['spearman']:.3f}")
    print(f"  racing (accel.sim.hazards): {', '.join(report['racing']) or 'none'}")
    print(f"  wrong on the chip (bit_exact false): {', '.join(report['wrong_on_chip']) or 'none'}")
    return 0


def _cmd_validate_rtl(args: argparse.Namespace) -> int:
    from baco.rtl_validation import MAX_SKIPPED_FRACTION, exit_status, validate_rtl

    report = validate_rtl(args.file, args.predictor, model=args.model, hardware=args.hardware,
                          limit=args.limit, held_out_fraction=args.holdout,
                          split_seed=args.split_seed)
    status = exit_status(report)
    listed = report.pop("skipped_rows")
    if args.json:
        if args.verbose:
            report["skipped_rows"] = listed
        print(json.dumps(report))
        return status
    print(f"{report['rows']} of {report['rows_total']} rows of {args.file}, predictor "
          f"{args.predictor}, hardware {report['hardware']}")
    for split in ("all", "train", "held_out"):
        figures = report if split == "all" else report.get(split)
        if figures and figures["pearson"] is not None:
            print(f"  {split:8s} rows {figures['rows']:5d}  pearson {figures['pearson']:.3f}  "
                  f"pearson_log {figures['pearson_log']:.3f}  spearman {figures['spearman']:.3f}"
                  f"  mape {100 * figures['mape']:.1f}%  pairwise "
                  f"{figures['pairwise_accuracy']:.3f}  top-{figures['k']} recall "
                  f"{figures['top_k_recall']:.3f}")
    if "split" in report:
        print(f"  (held_out: {100 * args.holdout:.0f}% of the layers, seed {args.split_seed}; "
              "pairwise accuracy and top-k recall within each layer)")
    if "residual_kept" in report:
        kept = report["residual_kept"]
        print(f"  residual kept (ensemble agreement): mean {kept['mean']:.3f}, min "
              f"{kept['min']:.3f}, {kept['rows_below_half']} rows below half")
    if report["skipped"]:
        counts = ", ".join(f"{reason}: {n}" for reason, n in sorted(report["skipped"].items()))
        print(f"  skipped {len(listed)} rows ({100 * report['skipped_fraction']:.1f}%; "
              f"more than {100 * MAX_SKIPPED_FRACTION:.0f}% fails the check): {counts}"
              + ("" if args.verbose else " (--verbose lists them)"))
        if args.verbose:
            for item in listed:
                print(f"    row {item['row']} (line {item['line']}): {item['reason']}: "
                      f"{item['error']}")
    return status


_COMMAND_MODULES: tuple[str, ...] = ("baco.cli_simulate", "baco.cli_reproduce",
                                      "baco.cli_surrogate", "baco.cli_export")
"""Modules with a ``register(commands)`` that adds their own subcommands to the parser."""


class _HelpFormatter(argparse.HelpFormatter):
    """Help that ends each option's text with its default (flags and unset options aside)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (action.option_strings and action.nargs != 0 and action.default is not None
                and action.default != [] and "default" not in text):
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """Every subcommand's parser is of this class (argparse builds them from the root's)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="baco", description="Co-design a DNN accelerator and its programs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    wl = commands.add_parser("workloads", help="list and inspect networks").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = wl.add_parser("list", help="zoo networks and benchmark suites")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_workloads_list)
    p = wl.add_parser("show", help="the layers of a zoo network or an ONNX file")
    p.add_argument("network", help="zoo name (e.g. resnet50, bert:seq=512) or FILE.onnx")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--input-shape", action="append", metavar="NAME=1x3x224x224",
                   help="static shape for a graph input with dynamic dims (repeatable; "
                   "default: the shapes the file declares)")
    p.set_defaults(func=_cmd_workloads_show)

    p = commands.add_parser("run", help="co-design a network and run its baselines",
                            description="Run the experiment of CONFIG.yaml: the co-design and "
                            "the baselines it lists; write DIR/config.yaml, DIR/results.json "
                            "and DIR/history.csv.")
    p.add_argument("config", metavar="CONFIG.yaml", help="experiment config, e.g. "
                   "experiments/configs/resnet50.yaml")
    p.add_argument("--out", metavar="DIR", help="output folder (default: the config's output, "
                   "else experiments/results/NAME); one that holds an earlier run is refused "
                   "without --resume or --force")
    p.add_argument("--resume", action="store_true",
                   help="continue from DIR/checkpoint/ to the same final result (pass the same "
                   "--budget/--seed/--set as the first run)")
    p.add_argument("--force", action="store_true",
                   help="overwrite DIR: remove an earlier run's outputs first")
    p.add_argument("--budget", type=int, metavar="N", default=None,
                   help="sample budget of the co-design and every baseline (default: the "
                   "config's codesign.budget_samples); same as --set codesign.budget_samples=N")
    p.add_argument("--seed", type=int, metavar="N", default=None,
                   help="seed of the co-design and every baseline (default: the config's "
                   "codesign.seed); same as --set codesign.seed=N")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="change one config value, dotted key and YAML value, e.g. --set "
                   "codesign.starts=4 (repeatable; checked like the file; default: none)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--emit-kernels", action="store_true",
                   help="also write each layer's @baco.jit kernel to DIR/kernels/")
    p.add_argument("--profile", action="store_true",
                   help="time the run's phases and JAX's compilations: write DIR/profile.json "
                   "and DIR/profile.md and print the table (results.json is unchanged)")
    p.set_defaults(func=_cmd_run)

    p = commands.add_parser("report", help="write a run's report (report.md, report.html, "
                            "plots)", description="Write report.md, a self-contained "
                            "report.html and the plots of a finished run from its results.json "
                            "(`baco run` writes them itself; this rebuilds them).")
    p.add_argument("results", metavar="RESULTS.json", help="a run's results.json or its folder")
    p.add_argument("--out", metavar="DIR", help="output folder (default: the results' folder)")
    p.set_defaults(func=_cmd_report)

    va = commands.add_parser("validate", help="check the models against measurements")
    va = va.add_subparsers(dest="against", required=True, metavar="DATA")
    p = va.add_parser("timeloop", help="the exact analytical model against Timeloop rows")
    p.add_argument("file", help="CSV in the format of data/timeloop_gemmini_10k.csv")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_validate_timeloop)
    p = va.add_parser("rtl", help="predicted cycles against Gemmini RTL measurements")
    p.add_argument("file", help="CSV in the format of data/gemmini_rtl_train.csv")
    p.add_argument("--predictor", choices=["analytic", "sim", "hybrid"], default="sim",
                   help="analytic: the exact model on the row's arch; sim: lower each row and "
                   "run the simulator's timing model; hybrid: analytic x the surrogate's "
                   "learned residual (needs --model)")
    p.add_argument("--model", metavar="PATH", default=None,
                   help="surrogate checkpoint folder (from `baco surrogate train`; default: none, "
                   "required by --predictor hybrid)")
    p.add_argument("--hardware", metavar="PRESET", default=None,
                   help="evaluate every row on this hardware preset (e.g. gemmini_default, the "
                   "chip DOSA's RTL ran on) instead of the row's arch columns (default: each "
                   "row's arch columns; the simulator's 16x16 array)")
    p.add_argument("--holdout", type=float, default=0.2,
                   help="also report this fraction of the layers apart (the split `baco "
                   "surrogate train` holds out with the same seed)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the held-out split")
    p.add_argument("--limit", type=int, default=None,
                   help="only the first N rows (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--verbose", action="store_true",
                   help="list the skipped rows (row index, reason, error); rows that cannot "
                   "be evaluated are skipped and counted, and the exit status is 1 when more "
                   "than 10%% of the rows are skipped")
    p.set_defaults(func=_cmd_validate_rtl)

    p = va.add_parser("programs", help="the simulator and both models against baco's own "
                      "programs run on the chip (a CSV, its traces in the folder of the same "
                      "stem: ID.npz), and the programs the race check flags")
    p.add_argument("file", help="a programs CSV, e.g. data/gemmini_rtl_baco_programs.csv")
    p.add_argument("--json", action="store_true", help="print JSON (keys programs, pearson, "
                   "spearman, mape, max_abs_rel_err, racing, bit_exact per program, ...)")
    p.set_defaults(func=_cmd_validate_programs)

    for module in _COMMAND_MODULES:
        importlib.import_module(module).register(commands)
    return parser


def _resume_hint(args: argparse.Namespace) -> str:
    if args.command == "run":
        from baco.run import saved_checkpoint

        where = saved_checkpoint(args.config, args.out, _run_overrides(args))
        if where is None:
            return "no checkpoint was written yet: rerun the same command to start over"
        return f"rerun with --resume to continue from the checkpoint in {where}"
    if args.command in ("reproduce", "sweep"):
        return "rerun the same command to continue (finished cases are kept)"
    return "nothing was written"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (0 done, 1 a check failed, 2 bad input, 130/143
    interrupted by SIGINT/SIGTERM)."""
    args = build_parser().parse_args(argv)
    with raising_on_signals():
        try:
            return args.func(args)
        except BacoError as exc:
            message = " ".join(str(exc).split())
            print(f"baco: error: {message}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            print(f"baco: interrupted ({signal.Signals(signum).name}); {_resume_hint(args)}",
                  file=sys.stderr)
            return 128 + signum


def entry() -> None:
    """The console script. After an interrupt it leaves at once, without the interpreter's
    teardown: JAX's runtime threads may still be busy with the work just abandoned, and
    tearing the interpreter down under them can crash the process."""
    from baco.compile_cache import enable
    from baco.sim_cache import enable_store
    enable()        # JAX's persistent compilation cache (`baco.compile_cache`)
    enable_store()  # the layers this machine simulated before (`baco.sim_cache`)
    code = main()
    if code > 128:
        # What the interpreter's exit would release and the work no longer needs: worker
        # pools' named semaphores (multiprocessing's own exit hook, less joining children).
        from multiprocessing import util
        getattr(util, "_run_finalizers", lambda minpriority: None)(0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
