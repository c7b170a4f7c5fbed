"""Transfer learning: pre-train on simulator labels, fine-tune on at most 100 RTL rows.

`transfer_experiment` takes a simulator-labelled dataset of one hardware configuration (a file
from `baco dataset generate`, read as data) and RTL rows; holds out a seeded fraction of the RTL
*layers*; draws ``shots`` rows from the other layers; and trains two models on those rows:
one fine-tuned from the simulator-pre-trained model (its feature normalisation kept, the
residual offset re-estimated on the shots), one from scratch with the same configuration. Both
are scored on the held-out rows, with the analytical model's figures beside them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from perfmodels.atformer import train as _train
from perfmodels.atformer.metrics import fidelity
from workloads.errors import ConfigError

__all__ = ["transfer_experiment"]


def transfer_experiment(sim: _train.Dataset, rtl: _train.Dataset, *, shots: int = 100,
                        config: _train.TrainConfig | None = None,
                        finetune_epochs: int | None = None, held_out_fraction: float = 0.2,
                        seed: int = 0) -> dict[str, Any]:
    """Figures of "pre-trained + fine-tuned" vs "from scratch" on held-out RTL layers."""
    cfg = config or _train.TrainConfig()
    if not 1 <= shots <= 100:
        raise ConfigError(f"transfer: shots must be in [1, 100], got {shots}")
    held = _train.split_by_group(rtl.group, held_out_fraction, seed)
    pool = np.flatnonzero(~held)
    rng = np.random.default_rng(seed)
    picks = rng.choice(pool, size=min(shots, len(pool)), replace=False)
    few, test = rtl.take(picks), rtl.take(np.flatnonzero(held))
    measured = np.exp(np.asarray(test.log_measured, np.float64))

    pre = _train.train(sim, cfg)
    tune_cfg = dataclasses.replace(cfg, epochs=finetune_epochs or cfg.epochs,
                                   lr=cfg.lr * 0.5)
    tuned = _train.train(few, tune_cfg, init=pre)
    scratch = _train.train(few, cfg)
    analytic = np.exp(np.asarray(test.tokens.log_cycles, np.float64))
    return {
        "shots": len(picks), "sim_rows": len(sim), "held_out_rows": len(test),
        "held_out_layers": len(np.unique(test.group)), "seed": seed,
        "pretrained_only": fidelity(pre.predict_tokens(test.tokens), measured, test.group),
        "finetuned": fidelity(tuned.predict_tokens(test.tokens), measured, test.group),
        "scratch": fidelity(scratch.predict_tokens(test.tokens), measured, test.group),
        "analytic": fidelity(analytic, measured, test.group),
        "seconds": {"pretrain": pre.info["seconds"], "finetune": tuned.info["seconds"],
                    "scratch": scratch.info["seconds"]},
        "config": cfg.to_dict(),
    }
