"""Fig. 6.12 (kind ``rtl_accuracy``): predicted against measured cycles on DOSA's Gemmini RTL
rows, for the analytic, simulated and hybrid predictors."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import pathlib
from typing import Any

import numpy as np

from baco.reproduce.runner_io import missing_note, save_plot, write_outputs
from baco.reproduce.spec import PROJECT_ROOT
from baco.reproduce.store import Case
from baco.reproduce.tables import fmt
from workloads.errors import ConfigError

PREDICTORS = ("analytic", "sim", "hybrid")


@dataclasses.dataclass(frozen=True)
class RtlParams:
    """Fig. 6.12: predicted against measured cycles on DOSA's Gemmini RTL rows.

    ``data`` is relative to the project root. Held out (``split``): ``rows``, every
    ``held_out_every``-th row (the split the simulator's constants were fitted around,
    `accel.sim.rtl`), or ``layers``, every row of a seeded ``held_out_fraction`` of the
    distinct layers (`perfmodels.atformer.train.split_by_group`, ``split_seed``): no row of a
    held-out layer is seen in training. The hybrid trains on the rest. ``hybrid`` holds
    `perfmodels.atformer.TrainConfig` keys.
    """

    data: str = "data/gemmini_rtl_train.csv"
    limit: int | None = None
    predictors: list[str] = dataclasses.field(default_factory=lambda: list(PREDICTORS))
    chunk_rows: int = 200
    split: str = "rows"
    held_out_every: int = 5
    held_out_fraction: float = 0.2
    split_seed: int = 0
    hybrid: dict[str, Any] = dataclasses.field(default_factory=dict)
    hybrid_array_dim: int | None = None
    seed_correlation: dict[str, float] = dataclasses.field(default_factory=dict)


def hybrid_unavailable() -> str | None:
    """Why the hybrid (analytic + ATFormer) predictor cannot run here, or None."""
    if importlib.util.find_spec("perfmodels.atformer") is None:
        return "perfmodels.atformer is not installed (issue 7)"
    try:
        mod = importlib.import_module("perfmodels.atformer")
    except Exception as exc:  # noqa: BLE001 - any import failure makes it unavailable
        return f"perfmodels.atformer does not import ({type(exc).__name__}: {exc})"
    missing = [n for n in ("read_dataset", "TrainConfig") if not hasattr(mod, n)]
    if _trainer() is None:
        missing.append("train_surrogate")
    if missing:
        return f"perfmodels.atformer has no {', '.join(missing)}"
    return None


def _trainer() -> Any:
    """The surrogate's training function (``perfmodels.atformer.train_surrogate``, or the
    ``train`` function of ``perfmodels.atformer.train``), or None."""
    import perfmodels.atformer as at
    fn = getattr(at, "train_surrogate", None)
    if callable(fn):
        return fn
    try:
        fn = getattr(importlib.import_module("perfmodels.atformer.train"), "train", None)
    except ImportError:
        return None
    return fn if callable(fn) else None


def _split_of(params: RtlParams) -> dict[str, Any]:
    if params.split == "rows":
        return {"held_out_every": params.held_out_every}
    return {"split": "layers", "held_out_fraction": params.held_out_fraction,
            "split_seed": params.split_seed}


def held_out(p: dict[str, Any], index: np.ndarray) -> np.ndarray:
    """Which of the rows `index` (row numbers of ``p["data"]``) are held out by the split
    ``p`` describes (`RtlParams`)."""
    index = np.asarray(index)
    if p.get("split", "rows") == "rows":
        return index % p["held_out_every"] == 0
    held = _held_out_rows(str((PROJECT_ROOT / p["data"]).resolve()), p.get("limit"),
                          float(p["held_out_fraction"]), int(p["split_seed"]))
    return np.isin(index, held)


@functools.lru_cache(maxsize=8)
def _held_out_rows(path: str, limit: int | None, fraction: float, seed: int) -> np.ndarray:
    """Row numbers of the held-out layers' rows (the groups are `layer_key`s over all rows,
    so every predictor's cases share one split)."""
    from perfmodels.atformer import layer_key, split_by_group
    from perfmodels.validate import read_rows
    rows = read_rows(path, limit=limit, strict=False, cycles_key="target.gemmini_cycle")
    keys: dict[tuple, int] = {}
    group = np.array([keys.setdefault(layer_key(r.layer), len(keys)) for r in rows])
    return np.array([r.index for r in rows])[split_by_group(group, fraction, seed)]


class RtlAccuracy:
    kind = "rtl_accuracy"
    Params = RtlParams

    def check(self, params: RtlParams, where: str) -> None:
        for p in params.predictors:
            if p not in PREDICTORS:
                raise ConfigError(f"{where}: params.predictors: unknown predictor {p!r} "
                                  f"(known: {', '.join(PREDICTORS)})")
        if not self.path(params).exists():
            raise ConfigError(f"{where}: params.data: {self.path(params)} does not exist")
        if params.chunk_rows < 1 or params.held_out_every < 2:
            raise ConfigError(f"{where}: params.chunk_rows must be >= 1 and "
                              "params.held_out_every >= 2")
        if params.split not in ("rows", "layers"):
            raise ConfigError(f"{where}: params.split must be 'rows' or 'layers', got "
                              f"{params.split!r}")
        if not 0.0 < params.held_out_fraction < 1.0:
            raise ConfigError(f"{where}: params.held_out_fraction must be in (0, 1), got "
                              f"{params.held_out_fraction}")

    @staticmethod
    def path(params: RtlParams) -> pathlib.Path:
        return (PROJECT_ROOT / params.data).resolve()

    def n_rows(self, params: RtlParams) -> int:
        with self.path(params).open() as fh:
            n = sum(1 for _ in fh) - 1
        return n if params.limit is None else min(n, params.limit)

    def cases(self, params: RtlParams) -> list[Case]:
        base = {"data": params.data, "limit": params.limit,
                "held_out_every": params.held_out_every}
        out = []
        for p in params.predictors:
            if p == "sim":
                n = self.n_rows(params)
                for start in range(0, n, params.chunk_rows):
                    stop = min(n, start + params.chunk_rows)
                    out.append(Case(f"sim__rows-{start:05d}-{stop:05d}",
                                    {**base, "predictor": p, "start": start, "stop": stop}))
            elif p == "hybrid" and hybrid_unavailable():
                continue
            else:
                extra = ({"train": params.hybrid, "array_dim": params.hybrid_array_dim,
                          **_split_of(params)} if p == "hybrid" else {})
                out.append(Case(p, {**base, "predictor": p, **extra}))
        return out

    @staticmethod
    def run_case(p: dict[str, Any]) -> dict[str, Any]:
        p = {**p, "data": str((PROJECT_ROOT / p["data"]).resolve())}
        pred = p["predictor"]
        if pred == "sim":
            from accel.sim import read_rtl_csv, simulate_rows
            rows = read_rtl_csv(p["data"], limit=p["stop"])[p["start"]:p["stop"]]
            cycles = simulate_rows(rows)
            return {"predictor": pred, "index": [r.index for r in rows],
                    "predicted": [float(c) for c in cycles],
                    "measured": [r.cycles for r in rows],
                    "summary": f"rows {p['start']}-{p['stop']} simulated"}
        if pred == "analytic":
            from perfmodels.validate import evaluate_rows, read_rows
            rows = read_rows(p["data"], limit=p["limit"], strict=False,
                             cycles_key="target.gemmini_cycle")
            cycles = np.asarray(evaluate_rows(rows).cycles, np.float64)
            return {"predictor": pred, "index": [r.index for r in rows],
                    "predicted": [float(c) for c in cycles],
                    "measured": [r.cycles for r in rows],
                    "summary": f"{len(rows)} rows scored"}
        # hybrid: train the residual on the training split, predict every row
        reason = hybrid_unavailable()
        if reason:
            raise ConfigError(f"hybrid predictor: {reason}")
        import perfmodels.atformer as at
        rows, data = at.read_dataset(p["data"], limit=p["limit"], array_dim=p["array_dim"])
        index = np.array([r.index for r in rows])
        train_rows = np.flatnonzero(~held_out(p, index))
        surrogate = _trainer()(data.take(train_rows), at.TrainConfig.from_dict(p["train"]))
        cycles = surrogate.predict_tokens(data.tokens)
        return {"predictor": pred, "index": index.tolist(),
                "predicted": [float(c) for c in cycles], "measured": [r.cycles for r in rows],
                "summary": f"trained on {len(train_rows)} rows, MAPE calibration "
                           f"x{getattr(surrogate, 'scale', 1.0):.3f}",
                "train_info": json.loads(json.dumps(surrogate.info, default=str))}

    def reduce(self, params: RtlParams, results: dict[str, dict], out: pathlib.Path,
               n_cases: int) -> str:
        from accel.sim import metrics
        from baco.plots import predicted_vs_measured
        series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for pred in params.predictors:
            parts = sorted((r for r in results.values() if r.get("predictor") == pred),
                           key=lambda r: r["index"][0])
            if parts:
                idx = np.concatenate([r["index"] for r in parts])
                series[pred] = (idx, np.concatenate([r["predicted"] for r in parts]),
                                np.concatenate([r["measured"] for r in parts]))
        header = ["Predictor", "Rows", "split", "Pearson", "Pearson (log)", "Spearman", "MAPE",
                  "seed correlation (test)"]
        rows, csv_rows = [], []
        for pred in params.predictors:
            if pred not in series:
                why = hybrid_unavailable() if pred == "hybrid" else "not run yet"
                rows.append([pred, 0, "-", "-", "-", "-", "-",
                             fmt(params.seed_correlation.get(pred))])
                csv_rows.append([pred, 0, "", None, None, None, None,
                                 params.seed_correlation.get(pred), f"not available: {why}"])
                continue
            idx, p, m = series[pred]
            held = held_out({"data": params.data, "limit": params.limit, **_split_of(params)},
                            idx)
            for split, mask in (("held-out", held), ("all", np.ones_like(held))):
                if mask.sum() < 2:
                    continue
                f = metrics(p[mask], m[mask])
                rows.append([pred, f["rows"], split, f"{f['pearson']:.3f}",
                             f"{f['pearson_log']:.3f}", f"{f['spearman']:.3f}",
                             f"{100 * f['mape']:.1f}%",
                             fmt(params.seed_correlation.get(pred)) if split == "held-out"
                             else ""])
                csv_rows.append([pred, f["rows"], split, f["pearson"], f["pearson_log"],
                                 f["spearman"], f["mape"], params.seed_correlation.get(pred),
                                 ""])
        split = (f"every {params.held_out_every}th row (by index)" if params.split == "rows"
                 else f"all rows of {params.held_out_fraction:.0%} of the distinct layers "
                      f"(seed {params.split_seed}; no row of a held-out layer in training)")
        notes = [(f"Data: {params.data} ({'first ' + str(params.limit) if params.limit else 'all'}"
                 f" rows); held-out split: {split}, the hybrid trains on the rest."),
                 ("analytic: the exact analytical model on each row's architecture columns "
                 "(the Timeloop model that drew the mapping); sim: the lowered trace on the "
                 "RTL chip model, each row on the array it ran on "
                 "(`accel.sim.rtl.simulate_rows`); hybrid: analytic x exp(ATFormer residual) "
                 "x a MAPE calibration factor fitted on the training rows' own validation "
                 "layers (`perfmodels.atformer`).")]
        if "hybrid" in params.predictors and hybrid_unavailable():
            notes.append(f"hybrid not available: {hybrid_unavailable()}")
        notes += missing_note(n_cases, len(results))
        text = write_outputs(out, "Fig. 6.12: predicted against measured cycles (Gemmini RTL)",
                             notes, header, rows,
                              ["predictor", "rows", "split", "pearson", "pearson_log",
                               "spearman", "mape", "seed_correlation", "status"], csv_rows)
        if series:
            any_idx = next(iter(series.values()))[0]
            same = all(np.array_equal(s[0], any_idx) for s in series.values())
            mask = held_out({"data": params.data, "limit": params.limit, **_split_of(params)},
                            any_idx)
            save_plot(predicted_vs_measured(
                {k: (v[1], v[2]) for k, v in series.items()},
                highlight=mask if same else None,
                title="Fig. 6.12: predicted vs measured (held-out filled)"),
                out / "predicted_vs_measured.png")
        return text
