"""`baco validate rtl`: predicted vs measured Gemmini RTL cycles, for each predictor.

* ``analytic``: the exact analytical model on each row's ``arch.*`` hardware
  (`perfmodels.validate`);
* ``sim``: the simulator's RTL timing model (`accel.sim.rtl.simulate_rows`);
* ``hybrid``: the analytical model times the trained surrogate's residual (``--model PATH``,
  from `baco surrogate train`), on the hardware the surrogate was trained for.

Figures (`perfmodels.atformer.metrics.fidelity`): Pearson (linear and log), Spearman, MAPE,
pairwise accuracy and top-k recall within each layer. With ``held_out_fraction`` the rows of a
seeded fraction of the layers are also reported apart (``"held_out"``, ``"train"``): the split
`baco surrogate train` holds out with the same seed, so a hybrid is judged on unseen layers.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from perfmodels.atformer.metrics import fidelity
from workloads.errors import ConfigError

__all__ = ["PREDICTORS", "validate_rtl"]

PREDICTORS = ("analytic", "sim", "hybrid")


def validate_rtl(path: str | os.PathLike, predictor: str = "sim", *, model: str | None = None,
                 limit: int | None = None, held_out_fraction: float = 0.2,
                 split_seed: int = 0, progress: Any = None) -> dict[str, Any]:
    """Figures of `predictor` on an RTL CSV (see the module docstring)."""
    from perfmodels.atformer import train as atf

    if predictor not in PREDICTORS:
        raise ConfigError(f"validate rtl: --predictor must be one of {PREDICTORS}, got "
                          f"{predictor!r}")
    if predictor == "hybrid" and model is None:
        raise ConfigError("validate rtl: --predictor hybrid needs --model PATH (a folder "
                          "written by `baco surrogate train`)")
    if predictor != "hybrid" and model is not None:
        raise ConfigError("validate rtl: --model applies to --predictor hybrid only")
    surrogate = atf.load(model) if model is not None else None
    array_dim = (surrogate.info.get("array_dim") if surrogate is not None else None)
    _, data = atf.read_dataset(path, limit=limit, array_dim=array_dim)
    measured = np.exp(np.asarray(data.log_measured, np.float64))
    if predictor == "analytic":
        predicted = np.exp(np.asarray(data.tokens.log_cycles, np.float64))
    elif predictor == "hybrid":
        predicted = surrogate.predict_tokens(data.tokens)
    else:
        from accel.sim.rtl import read_rtl_csv, simulate_rows
        sim_rows = read_rtl_csv(path, limit=limit)
        predicted = np.asarray(simulate_rows(sim_rows, progress=progress), np.float64)
        measured = np.array([r.cycles for r in sim_rows], np.float64)
    report: dict[str, Any] = {"file": str(path), "predictor": predictor,
                              **fidelity(predicted, measured, data.group)}
    if model is not None:
        report["model"] = str(model)
    if held_out_fraction > 0 and len(np.unique(data.group)) >= 2:
        held = atf.split_by_group(data.group, held_out_fraction, split_seed)
        for name, mask in (("held_out", held), ("train", ~held)):
            if mask.sum() >= 2:
                report[name] = fidelity(predicted[mask], measured[mask], data.group[mask])
        report["split"] = {"by": "layer", "fraction": held_out_fraction, "seed": split_seed}
    return report
