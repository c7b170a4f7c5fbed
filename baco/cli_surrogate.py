"""`baco dataset generate` and `baco surrogate train`: thin parsing over `baco.dataset` and
`perfmodels.atformer.train`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def _cmd_dataset_generate(args: argparse.Namespace) -> int:
    from baco.dataset import dataset_hardware, generate

    networks = tuple(n for n in args.networks.split(",") if n)

    def progress(done: int, total: int, what: str) -> None:
        if not args.quiet and (done == total or done % 10 == 0):
            print(f"{what} {done}/{total}", file=sys.stderr)

    summary = generate(args.n, args.out, seed=args.seed,
                       hw=dataset_hardware(args.array_dim, args.sp_kb, args.acc_kb),
                       networks=networks, progress=progress)
    if args.json:
        print(json.dumps(summary.__dict__))
    else:
        print(f"wrote {summary.rows} simulator-labelled rows ({summary.layers} layers, "
              f"{summary.hardware}) to {summary.path}")
    if summary.host_epilogue_rows and not args.quiet:
        print(f"baco: warning: {summary.host_epilogue_rows} rows of "
              f"{len(summary.host_epilogue_layers)} layers were lowered without the epilogue "
              f"ops the accelerator cannot run (they run on the host, outside the simulated "
              f"cycles): {'; '.join(summary.host_epilogue_layers)}", file=sys.stderr)
    return 0


def _cmd_surrogate_train(args: argparse.Namespace) -> int:
    import numpy as np

    from perfmodels.atformer import (
        ModelConfig,
        Surrogate,
        TrainConfig,
        fidelity,
        read_dataset,
        save,
        split_by_group,
        train_surrogate,
    )
    from workloads.errors import ConfigError

    if not 0.0 <= args.holdout < 1.0:
        raise ConfigError(f"surrogate train: --holdout must be in [0, 1), got {args.holdout}")
    config = TrainConfig(
        model=ModelConfig(width=args.width, heads=args.heads, layers=args.layers,
                          mlp_width=args.width),
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
        ensemble=args.ensemble, patience=args.patience, rank_weight=args.rank_weight,
        relative_weight=args.relative_weight)
    warnings: list[str] = []
    _, data = read_dataset(args.data, limit=args.limit, array_dim=args.array_dim,
                           warnings=warnings)
    for line in warnings:
        print(f"baco: warning: {line}", file=sys.stderr)
    held = (split_by_group(data.group, args.holdout, args.split_seed)
            if args.holdout > 0 else np.zeros(len(data), bool))
    fit = data.take(np.flatnonzero(~held))

    def progress(record: dict[str, Any]) -> None:
        if not args.quiet:
            print(f"epoch {record['epoch']:4d}  train {record['train_loss']:.4f}  "
                  f"val mse {record['val_mse']:.4f}  {record['seconds']:.0f}s", file=sys.stderr)

    surrogate = train_surrogate(fit, config, progress=progress)
    info = dict(surrogate.info, data=str(args.data), array_dim=args.array_dim,
                holdout={"by": "layer", "fraction": args.holdout, "seed": args.split_seed})
    if held.any():
        test = data.take(np.flatnonzero(held))
        measured = np.exp(np.asarray(test.log_measured, np.float64))
        info["held_out"] = {
            "hybrid": fidelity(surrogate.predict_tokens(test.tokens), measured, test.group),
            "analytic": fidelity(np.exp(np.asarray(test.tokens.log_cycles, np.float64)),
                                 measured, test.group)}
    surrogate = Surrogate(surrogate.config, surrogate.params, surrogate.stats,
                          surrogate.template, info)
    save(surrogate, args.out)
    summary = {"out": str(args.out), "rows": len(fit), "seconds": info["seconds"],
               "epochs_run": info["epochs_run"], "scale": surrogate.scale,
               "held_out": info.get("held_out")}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"trained on {len(fit)} rows in {info['seconds']:.0f}s "
              f"({info['epochs_run']} epochs); saved to {args.out}")
        cal = info.get("calibration") or {}
        if cal.get("rows"):
            print(f"  MAPE calibration x{cal['scale']:.3f} on {cal['rows']} validation rows "
                  f"(their MAPE {100 * cal['val_mape']:.1f}% -> "
                  f"{100 * cal['val_mape_calibrated']:.1f}%)")
        for name, fig in (info.get("held_out") or {}).items():
            print(f"  held out ({fig['rows']} rows, unseen layers) {name:8s} pearson "
                  f"{fig['pearson']:.3f}  pearson_log {fig['pearson_log']:.3f}  spearman "
                  f"{fig['spearman']:.3f}  mape {100 * fig['mape']:.1f}%")
    return 0


def _array_dim(text: str) -> int | str:
    """``--array-dim``: a positive integer, or ``build`` (`accel.dosa_csv.BUILD`)."""
    from accel.dosa_csv import BUILD

    if text == BUILD:
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'build', got {text!r}")
    return value


def register(commands: Any) -> None:
    """Add ``dataset generate`` and ``surrogate train`` to the `baco` parser."""
    ds = commands.add_parser("dataset", help="simulator-labelled datasets").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = ds.add_parser("generate", help="sample (layer, mapping) points on one hardware "
                      "configuration and label them with the simulator")
    p.add_argument("--n", type=int, required=True, help="number of rows")
    p.add_argument("--out", required=True, metavar="FILE.csv", help="output CSV (DOSA format)")
    p.add_argument("--seed", type=int, default=0, help="seed of the layer and mapping draws")
    p.add_argument("--networks", default="resnet50,bert,unet",
                   help="comma-separated zoo networks whose layers are sampled")
    p.add_argument("--array-dim", type=int, default=16, help="PE array rows = columns")
    p.add_argument("--sp-kb", type=float, default=256.0, help="scratchpad KiB of the hardware")
    p.add_argument("--acc-kb", type=float, default=64.0, help="accumulator KiB of the hardware")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_dataset_generate)

    sg = commands.add_parser("surrogate", help="the learned cycle model").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = sg.add_parser("train", help="train the ATFormer residual on a DOSA-format CSV")
    p.add_argument("--data", required=True, metavar="FILE.csv",
                   help="RTL rows (data/gemmini_rtl_train.csv) or `baco dataset "
                   "generate` output")
    p.add_argument("--out", required=True, metavar="PATH", help="checkpoint folder")
    p.add_argument("--holdout", type=float, default=0.2,
                   help="fraction of the layers held out for testing (0: train on all)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the held-out split")
    p.add_argument("--array-dim", type=_array_dim, default=None,
                   help="the PE array the cycles were measured on, if not the rows' arch.pe: "
                   "N (an N x N array) or 'build' (each row on the FireSim build its fan-out "
                   "picked, as DOSA's RTL rows ran; default: each row's arch.pe)")
    p.add_argument("--limit", type=int, default=None,
                   help="only the first N rows (default: all)")
    p.add_argument("--epochs", type=int, default=80, help="most training epochs")
    p.add_argument("--batch-size", type=int, default=64, help="rows per training step")
    p.add_argument("--width", type=int, default=32,
                   help="model width (the seed's ATFormer is 512; 32 trains in minutes on two "
                   "CPU cores and predicts ~100x faster, at similar held-out accuracy here)")
    p.add_argument("--heads", type=int, default=4, help="attention heads per layer")
    p.add_argument("--layers", type=int, default=2, help="transformer encoder layers")
    p.add_argument("--ensemble", type=int, default=4,
                   help="members trained side by side (vmapped); the prediction is their mean")
    p.add_argument("--rank-weight", type=float, default=0.1,
                   help="weight of the pairwise ranking term of the loss")
    p.add_argument("--relative-weight", type=float, default=1.0,
                   help="weight of the MAPE term of the loss (beside log-cycle MSE)")
    p.add_argument("--patience", type=int, default=30,
                   help="stop after this many epochs without a better validation loss")
    p.add_argument("--lr", type=float, default=7e-4, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation and batches")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_surrogate_train)
