"""Fidelity metrics of a cycle predictor against measurements.

Correlation (Pearson on cycles and on log cycles, Spearman), MAPE, and two search-oriented
figures: *pairwise accuracy* (the fraction of pairs the predictor orders as measured) and
*top-k recall* (of the k fastest measured points, the fraction the predictor also puts in its
top k). A search ranks mappings of one layer, so with ``groups`` (a layer id per row) both are
computed within each group and averaged over pairs / groups; without, over all rows.

>>> import numpy as np
>>> m = np.array([1.0, 2.0, 3.0, 4.0])
>>> r = fidelity(m * 1.1, m, k=2)
>>> round(r["mape"], 3), r["pairwise_accuracy"], r["top_k_recall"]
(0.1, 1.0, 1.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats as _stats

from workloads.errors import ConfigError

__all__ = ["fidelity", "pairwise_accuracy", "top_k_recall"]


def pairwise_accuracy(predicted: Any, measured: Any, groups: Any = None) -> float:
    """Fraction of pairs with different measurements that the prediction orders the same way
    (within groups if given)."""
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    g = np.zeros(len(p), np.int64) if groups is None else np.asarray(groups)
    right = total = 0
    for key in np.unique(g):
        idx = np.flatnonzero(g == key)
        dm = np.sign(m[idx, None] - m[None, idx])
        dp = np.sign(p[idx, None] - p[None, idx])
        valid = np.triu(dm != 0, 1)
        right += int((dm == dp)[valid].sum())
        total += int(valid.sum())
    return float(right / total) if total else float("nan")


def top_k_recall(predicted: Any, measured: Any, k: int = 5, groups: Any = None) -> float:
    """Mean over groups (with more than k rows) of |predicted top k ∩ measured top k| / k,
    top k = the k fewest cycles."""
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    g = np.zeros(len(p), np.int64) if groups is None else np.asarray(groups)
    recalls = []
    for key in np.unique(g):
        idx = np.flatnonzero(g == key)
        if len(idx) <= k:
            continue
        best_m = set(idx[np.argsort(m[idx], kind="stable")[:k]])
        best_p = set(idx[np.argsort(p[idx], kind="stable")[:k]])
        recalls.append(len(best_m & best_p) / k)
    return float(np.mean(recalls)) if recalls else float("nan")


def fidelity(predicted: Any, measured: Any, groups: Any = None, k: int = 5) -> dict[str, Any]:
    """``{"rows", "pearson", "pearson_log", "spearman", "mape", "pairwise_accuracy",
    "top_k_recall", "k"}`` (MAPE as a fraction)."""
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if p.shape != m.shape or len(p) < 2:
        raise ConfigError(f"metrics need two equal-length arrays of at least two rows, got "
                          f"{p.shape} and {m.shape}")
    if not (np.all(p > 0) and np.all(m > 0)):
        raise ConfigError("metrics need positive cycles")
    return {
        "rows": len(p),
        "pearson": float(np.corrcoef(p, m)[0, 1]),
        "pearson_log": float(np.corrcoef(np.log(p), np.log(m))[0, 1]),
        "spearman": float(_stats.spearmanr(p, m).statistic),
        "mape": float(np.mean(np.abs(p - m) / m)),
        "pairwise_accuracy": pairwise_accuracy(p, m, groups),
        "top_k_recall": top_k_recall(p, m, k, groups),
        "k": int(k),
    }
