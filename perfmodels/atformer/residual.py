"""The residual's prediction, pure functions of the trained parameters and `Stats`:
``log(cycles) = log(analytic cycles) + (offset + the members' mean) x shrink + log_scale``
(`predict_log`), the shrink where the ensemble disagrees (`shrink`) and the MAPE calibration
(`mape_scale`). Training (`perfmodels.atformer.train`) fits them; its docstring says why each
part is there. Split from it so that the training step's module imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from perfmodels.atformer.features import Tokens
from perfmodels.atformer.model import ATFormer, ModelConfig

if TYPE_CHECKING:
    from perfmodels.atformer.train import Dataset

__all__ = ["TAU_MULTIPLE", "TAU_MULTIPLES", "TAU_QUANTILE", "Stats", "active_tokens",
           "mape_scale", "member_residuals", "predict_compact", "predict_log", "residual_parts",
           "shrink"]


class Stats(NamedTuple):
    """Feature normalisation, the residual's offset, the uncertainty scale and the MAPE
    calibration (part of a checkpoint)."""

    mean: Any      # [F]
    std: Any       # [F]
    offset: Any    # scalar: mean of log(measured / analytic) over the training rows
    tau: Any = float("inf")   # scalar: `shrink`'s variance scale (inf: no shrink)
    log_scale: Any = 0.0      # scalar: log of the calibration factor (`mape_scale`)

    @classmethod
    def of(cls, data: Dataset) -> Stats:
        x = np.asarray(data.tokens.x, np.float64)
        w = np.asarray(data.tokens.weight, np.float64)[..., None] > 0
        n = np.maximum(w.sum((0, 1)), 1.0)
        mean = (x * w).sum((0, 1)) / n
        var = (((x - mean) ** 2) * w).sum((0, 1)) / n
        std = np.where(np.sqrt(var) > 1e-3, np.sqrt(var), 1.0)
        offset = float(np.mean(np.asarray(data.log_measured) - data.tokens.log_cycles))
        return cls(mean.astype(np.float32), std.astype(np.float32), np.float32(offset))


def member_residuals(config: ModelConfig, params: Any, stats: Stats, tok: Tokens) -> Any:
    """Each ensemble member's network output, ``[member, ...]`` (pure; without the offset)."""
    x = (tok.x - stats.mean) / stats.std
    lead = tok.weight.shape[:-1]
    x2 = x.reshape((-1,) + x.shape[-2:])
    w2 = tok.weight.reshape((-1, tok.weight.shape[-1]))
    net = ATFormer(config)
    out = jax.vmap(lambda p: net.apply(p, x2, w2))(params)
    return out.reshape(out.shape[:1] + lead)


def shrink(variance: Any, tau: Any) -> Any:
    """How much of the learned residual to keep where the ensemble disagrees:
    ``exp(-variance / tau)`` (1 where the members agree, towards 0 far from the data).

    The rule of "knowing when it does not know". ``variance`` is the variance of the members'
    residuals (log-cycle units) at a point. ``tau`` is fitted when training ends (`fit_tau`): a
    multiple (`TAU_MULTIPLES`, the one with the least log error on the validation layers, else
    `TAU_MULTIPLE`) of the `TAU_QUANTILE` quantile of that variance over the training rows, so
    a point as certain as most training rows keeps at least ``exp(-1 / multiple)`` of its
    residual, and one where the members disagree far more than on the training rows falls
    back to the analytical model. One member (``ensemble=1``) has no disagreement, hence no
    shrink; nor has a checkpoint saved before ``tau`` existed.
    """
    return jnp.exp(-variance / tau)


TAU_QUANTILE = 0.95
TAU_MULTIPLE = 10.0
TAU_MULTIPLES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
"""The multiples `fit_tau` chooses among on the validation layers: never infinite, so a point
where the members disagree far more than on the training data always falls back."""


def residual_parts(config: ModelConfig, params: Any, stats: Stats, tok: Tokens
                   ) -> tuple[Any, Any]:
    """``(raw residual, variance)`` of each point, ``[...]`` each (pure): the raw residual is
    the offset plus the members' mean output, the variance is across the members."""
    out = member_residuals(config, params, stats, tok)
    variance = out.var(0) if out.shape[0] > 1 else jnp.zeros(out.shape[1:], out.dtype)
    return stats.offset + out.mean(0), variance


def predict_log(config: ModelConfig, params: Any, stats: Stats, tok: Tokens) -> Any:
    """Natural log of predicted cycles, ``[...]`` (pure): ``log(analytic) + residual x
    shrink(variance, tau) + log_scale``. `params` has a leading ensemble axis; the residual is
    the offset plus the members' mean, and it is shrunk towards 0 (the analytical model) where
    the members disagree (`shrink`); ``log_scale`` is the MAPE calibration (`mape_scale`)."""
    residual, variance = residual_parts(config, params, stats, tok)
    return tok.log_cycles + residual * shrink(variance, stats.tau) + stats.log_scale


def mape_scale(predicted: Any, measured: Any) -> float:
    """The factor ``s`` that minimises ``mean(|s * predicted - measured| / measured)``: exact,
    the weighted median of ``measured / predicted`` with weights ``predicted / measured``
    (each term is ``r |s - 1/r|`` with ``r = predicted / measured``). 1.0 without two finite,
    positive pairs.

    Why a factor and not the log residual's mean: under multiplicative noise the MAPE-optimal
    prediction lies below the geometric mean that a log-space loss fits.

    >>> mape_scale([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    0.5
    """
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    ok = np.isfinite(p) & np.isfinite(m) & (p > 0) & (m > 0)
    if ok.sum() < 2:
        return 1.0
    ratio = p[ok] / m[ok]
    order = np.argsort(1.0 / ratio, kind="stable")
    cum = np.cumsum(ratio[order])
    return float(1.0 / ratio[order][np.searchsorted(cum, 0.5 * cum[-1])])


def active_tokens(weight: Any) -> int:
    """A static token count that holds every unmasked token of a batch (8, 12, 16, ... or
    all): `predict_compact`'s ``k``."""
    weight = np.asarray(weight)
    need = int((weight > 0).sum(-1).max()) if weight.size else 1
    for k in range(8, weight.shape[-1], 4):
        if need <= k:
            return k
    return int(weight.shape[-1])


def predict_compact(config: ModelConfig, k: int, params: Any, stats: Stats, tok: Tokens) -> Any:
    """`predict_log` on the `k` heaviest tokens of each point only.

    Exact when every unmasked token is among them (`active_tokens`): a masked token adds
    nothing to the sum and gets an e^-30 share of attention, and the model has no positional
    encoding, so dropping masked tokens changes nothing but the cost (attention is quadratic
    in the length). Only for discrete points (weights 0 or 1): relaxed ones use `predict_log`.
    """
    order = jnp.argsort(-tok.weight, axis=-1, stable=True)[..., :k]
    x = jnp.take_along_axis(tok.x, order[..., None], axis=-2)
    w = jnp.take_along_axis(tok.weight, order, axis=-1)
    return predict_log(config, params, stats, Tokens(x, w, tok.log_cycles))
