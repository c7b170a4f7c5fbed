"""Transfer: pre-train on simulator labels, fine-tune on <= 100 RTL rows, vs from scratch.

Reads a simulator-labelled CSV of one hardware configuration (`baco dataset generate --n N
--out FILE`; the 16x16 Gemmini by default) and ``data/gemmini_rtl_train.csv`` (its
rows' features on the 16x16 array they ran on), holds out 20% of the RTL layers (seeded), and
prints one JSON object with the held-out figures of the pre-trained-only, fine-tuned and
from-scratch models and of the analytical model (`perfmodels.atformer.transfer`).

    /work/venv/bin/python -m baco dataset generate --n 120 --out /tmp/sim.csv
    /work/venv/bin/python experiments/bench/surrogate_transfer.py --sim /tmp/sim.csv
"""

from __future__ import annotations

import argparse
import json
import sys

from accel.dosa_csv import RTL_CSV
from perfmodels.atformer import train as atf
from perfmodels.atformer.model import ModelConfig
from perfmodels.atformer.transfer import transfer_experiment




def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", required=True, help="simulator-labelled CSV")
    parser.add_argument("--rtl", default=str(RTL_CSV))
    parser.add_argument("--shots", type=int, default=100)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--ensemble", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--finetune-epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _, sim = atf.read_dataset(args.sim)
    _, rtl = atf.read_dataset(args.rtl, array_dim=16)
    cfg = atf.TrainConfig(model=ModelConfig(width=args.width, heads=4, layers=2,
                                            mlp_width=args.width),
                          epochs=args.epochs, ensemble=args.ensemble, relative_weight=1.0,
                          batch_size=32, seed=args.seed)
    out = transfer_experiment(sim, rtl, shots=args.shots, config=cfg,
                              finetune_epochs=args.finetune_epochs, seed=args.seed)
    out = {"benchmark": "surrogate_transfer", "sim": args.sim, "rtl": args.rtl, **out}
    json.dump(out, sys.stdout)
    print()
    return out


if __name__ == "__main__":
    main()
