"""Training the ATFormer residual: data, losses, the loop, checkpoints.

The surrogate predicts ``log(cycles) = log(analytic cycles) + offset + ATFormer(tokens)``: the
learned part is a *residual* over the analytical model (`perfmodels.atformer.hybrid` uses the
same formula on relaxed points). The loss is the mean squared error of log cycles plus
``rank_weight`` times a pairwise rank loss (RankNet's logistic loss over every ordered pair of
the batch, seed 001's "pairwise RankLoss"). Adam with a cosine decay from ``lr`` to
``lr_final`` (the seed: 7e-4 to 1e-6), shuffled minibatches from an explicit PRNG key, early
stopping on a validation split *by layer* (the best epoch's parameters are kept). An ensemble of
``ensemble`` members with different initialisations trains in one vmapped step; the
prediction is their mean.

Knowing when it does not know (`shrink`): the residual (offset + the members' mean) is
multiplied by ``exp(-variance / tau)``, the variance being the members' disagreement at the
point and ``tau`` a multiple of the `TAU_QUANTILE` quantile of that variance over the training
rows, the multiple chosen on the validation layers (`fit_tau`, when training ends; saved with
the checkpoint). Where the members agree as they do on the training data the residual is kept;
far from the data they disagree and the prediction falls back to the analytical model.
`predict_log` applies it, so the hybrid (`perfmodels.atformer.hybrid`),
`Surrogate.predict_tokens` and `baco validate rtl --predictor hybrid` all use it.

Calibrated for relative error (`mape_scale`): the log-space loss aims the prediction at the
geometric mean of the measured cycles, but under multiplicative noise the mean absolute
percentage error is least for a prediction *below* it (an over-prediction can cost more than
100%, an under-prediction never does). So when training ends one factor, the one with the
least MAPE on the validation layers (never on rows the network was fitted to, nor on a test
split), multiplies every prediction (``Stats.log_scale``, saved with the checkpoint). A
constant factor leaves every correlation and every ranking as it was.

A trained `Surrogate` is saved as a folder: ``params.msgpack`` (`flax.serialization.to_bytes`)
and ``surrogate.json`` (model and training config, the feature normalisation, the template,
training metrics and the parameters' SHA-256), each written atomically.

>>> import numpy as np
>>> int(split_by_group(np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4]), 0.2, seed=0).sum())
2
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import serialization

from accel.arch import HardwareConfig
from accel.dosa_csv import BUILD, with_array
from accel.mapping import Mapping
from perfmodels.analytic import fast_jit
from perfmodels.atformer.features import NUM_FEATURES, Tokens, tokens_of
from perfmodels.atformer.model import ATFormer, ModelConfig
from perfmodels.validate import TimeloopRow, read_rows
from workloads.errors import ConfigError
from workloads.files import write_atomic
from workloads.layer import Layer

__all__ = ["BUILD", "FORMAT_VERSION", "TAU_MULTIPLE", "TAU_MULTIPLES", "TAU_QUANTILE", "Dataset",
           "Stats", "Surrogate", "TrainConfig", "active_tokens", "dataset_from_rows", "fit_tau",
           "hardware_warning", "load", "mape_scale", "member_residuals", "member_variance",
           "predict_compact", "predict_log",
           "read_dataset", "residual_parts", "save", "shrink", "split_by_group", "train"]

FORMAT_VERSION = 2
"""2 added ``stats.log_scale`` (`mape_scale`); `load` reads format 1 as ``log_scale`` 0."""
CYCLES_KEYS = ("target.gemmini_cycle", "target.cycle")


# --------------------------------------------------------------------------- data
class Dataset(NamedTuple):
    """Labelled points as arrays: ``tokens`` (`Tokens`, leading axis N), ``log_measured``
    ``[N]`` (natural log of measured cycles), ``group`` ``[N]`` (a layer id: rows with the
    same layer shape share it)."""

    tokens: Tokens
    log_measured: Any
    group: Any

    def __len__(self) -> int:
        return int(self.log_measured.shape[0])

    def take(self, idx: Any) -> Dataset:
        idx = np.asarray(idx)
        return Dataset(Tokens(*(np.asarray(a)[idx] for a in self.tokens)),
                       np.asarray(self.log_measured)[idx], np.asarray(self.group)[idx])


def layer_key(layer: Layer) -> tuple:
    """What makes two rows "the same layer": dims, strides, dilations, groups."""
    return (tuple(getattr(layer, d) for d in "RSPQCKN"), layer.Hstride, layer.Wstride,
            layer.Hdilation, layer.Wdilation, layer.groups)


def dataset_from_points(layers: Sequence[Layer], hws: Sequence[HardwareConfig],
                        mappings: Sequence[Mapping], cycles: Sequence[float]) -> Dataset:
    """Tokens and labels of discrete points; groups number the distinct layers."""
    measured = np.asarray(cycles, np.float64)
    if not np.all(np.isfinite(measured) & (measured > 0)):
        raise ConfigError("atformer: measured cycles must be positive and finite")
    keys: dict[tuple, int] = {}
    group = np.array([keys.setdefault(layer_key(x), len(keys)) for x in layers], np.int64)
    return Dataset(tokens_of(layers, list(hws), mappings), np.log(measured).astype(np.float32),
                   group)


def dataset_from_rows(rows: Sequence[TimeloopRow]) -> Dataset:
    return dataset_from_points([r.layer for r in rows], [r.hw for r in rows],
                               [r.mapping for r in rows], [r.cycles for r in rows])


def hardware_warning(rows: Sequence[TimeloopRow], array_dim: int | str | None, rtl: bool
                     ) -> str | None:
    """One line when the rows' ``arch.*`` array is not the hardware the cycles were measured
    on, else None: with `array_dim`, rows whose ``arch.pe`` implies another array (they are
    trained as measured on ``array_dim`` x ``array_dim``); without, RTL rows (`rtl`: the file
    has ``target.gemmini_cycle``) whose arrays are taken from their ``arch.*`` columns,
    which in DOSA's data describe the Timeloop model that drew the mapping, not the chip."""
    if not rows:
        return None
    arrays: dict[tuple[int, int], int] = {}
    for r in rows:
        key = (int(r.hw.pe_rows), int(r.hw.pe_cols))
        arrays[key] = arrays.get(key, 0) + 1
    seen = ", ".join(f"{a}x{b} in {n}" for (a, b), n in
                     sorted(arrays.items(), key=lambda kv: -kv[1]))
    if array_dim == BUILD:
        return None
    if array_dim is not None:
        other = sum(n for (a, b), n in arrays.items() if (a, b) != (array_dim, array_dim))
        if not other:
            return None
        return (f"{other} of {len(rows)} rows have arch.pe implying another array than "
                f"--array-dim {array_dim} (arrays: {seen}); their arch columns describe other "
                f"hardware than the measured {array_dim}x{array_dim}, and they are trained "
                f"as measured on {array_dim}x{array_dim}")
    if rtl:
        return (f"RTL rows (target.gemmini_cycle) are trained on the arrays of their arch "
                f"columns (arrays: {seen}); if the chip that ran them had another array "
                f"(DOSA's RTL rows: the build their fan-out picked), pass --array-dim "
                f"({BUILD} for DOSA's)")
    return None


def read_dataset(path: str | os.PathLike, limit: int | None = None,
                 array_dim: int | str | None = None, warnings: list[str] | None = None
                 ) -> tuple[list[TimeloopRow], Dataset]:
    """Rows of a DOSA-format CSV (real RTL, or `baco dataset generate`'s simulator labels)
    labelled by ``target.gemmini_cycle`` if the file has it, else ``target.cycle``.

    `array_dim` replaces the rows' PE array by an ``array_dim`` square one, or with
    ``"build"`` by the one each row ran on (`accel.dosa_csv.with_array`): the hardware the
    cycles were measured on when it differs from the ``arch.*`` columns (DOSA's RTL rows ran on
    builds of 4x4 to 64x64; ``arch.pe`` is the 128x128 Timeloop model that drew the mappings).
    With `warnings` (a list), `hardware_warning`'s line is appended to it when there is one.
    """
    path = pathlib.Path(path)
    try:
        header = path.open(newline="").readline()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    columns = [c.strip() for c in header.split(",")]
    key = next((k for k in CYCLES_KEYS if k in columns), CYCLES_KEYS[0])
    rows = read_rows(path, limit=limit, strict=False, cycles_key=key)
    if warnings is not None:
        line = hardware_warning(rows, array_dim, rtl=key == "target.gemmini_cycle")
        if line:
            warnings.append(line)
    if array_dim is not None:
        rows = [dataclasses.replace(r, hw=with_array(r.hw, r.mapping, array_dim)) for r in rows]
    return rows, dataset_from_rows(rows)


def split_by_group(group: Any, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of rows whose group falls in a seeded ``fraction`` of the groups (at least
    one group, and never all of them)."""
    group = np.asarray(group)
    unique = np.unique(group)
    if len(unique) < 2:
        raise ConfigError(f"atformer: a split by layer needs at least two layers, got "
                          f"{len(unique)}")
    rng = np.random.default_rng(seed)
    count = min(len(unique) - 1, max(1, round(fraction * len(unique))))
    picked = rng.choice(unique, size=count, replace=False)
    return np.isin(group, picked)


# --------------------------------------------------------------------------- model
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


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Training hyperparameters. ``epochs`` is the most; early stopping ends sooner when the
    validation loss has not improved for ``patience`` epochs."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    epochs: int = 200
    batch_size: int = 64
    lr: float = 7e-4
    lr_final: float = 1e-6
    weight_decay: float = 0.0
    rank_weight: float = 0.1
    relative_weight: float = 0.0
    patience: int = 30
    val_fraction: float = 0.15
    ensemble: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "patience", "ensemble"):
            if getattr(self, name) < 1:
                raise ConfigError(f"atformer: {name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.lr_final <= self.lr:
            raise ConfigError(f"atformer: need 0 < lr_final <= lr, got {self.lr_final}, "
                              f"{self.lr}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"atformer: val_fraction must be in [0, 1), got "
                              f"{self.val_fraction}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model"] = self.model.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        d["model"] = ModelConfig(**d.get("model", {}))
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class Surrogate:
    """A trained residual model: everything `predict_log` needs, plus how it was trained."""

    config: TrainConfig
    params: Any                 # pytree with a leading ensemble axis
    stats: Stats
    template: str = "gemmini"
    info: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    def predict_tokens(self, tok: Tokens, batch: int = 8192) -> np.ndarray:
        """Predicted cycles of token batches (float64 numpy)."""
        out = []
        for start in range(0, tok.x.shape[0], batch):
            part = Tokens(*(a[start:start + batch] for a in tok))
            n = part.x.shape[0]
            size = max(8, 1 << (n - 1).bit_length())
            padded = Tokens(*(np.concatenate([a, np.repeat(a[-1:], size - n, 0)])
                              for a in part))
            k = active_tokens(part.weight)
            out.append(np.asarray(_predict_jit(self.config.model, k, self.params, self.stats,
                                               padded))[:n])
        return np.exp(np.concatenate(out).astype(np.float64))

    def predict(self, layers: Sequence[Layer], hws: HardwareConfig | Sequence[HardwareConfig],
                mappings: Sequence[Mapping]) -> np.ndarray:
        """Predicted cycles of discrete points."""
        return self.predict_tokens(tokens_of(layers, hws, mappings))

    @property
    def scale(self) -> float:
        """The MAPE calibration factor every prediction is multiplied by (`mape_scale`)."""
        return float(np.exp(np.float64(self.stats.log_scale)))

    def shrink_tokens(self, tok: Tokens) -> np.ndarray:
        """The fraction of the learned residual kept at each point (`shrink`, numpy ``[N]``):
        1 where the ensemble agrees as on its training data, towards 0 outside it."""
        variance = member_variance(self.config.model, self.params, self.stats, tok)
        return np.asarray(shrink(variance, np.float64(self.stats.tau)), np.float64)


_predict_jit = fast_jit(predict_compact, static_argnums=(0, 1))


# --------------------------------------------------------------------------- training
def loss_fn(params: Any, config: ModelConfig, stats: Stats, tok: Tokens, y: Any,
            rank_weight: float, relative_weight: float = 0.0) -> Any:
    """MSE of log cycles, plus `rank_weight` x the mean RankNet loss over ordered pairs, plus
    `relative_weight` x the mean absolute relative error (MAPE, which log-MSE alone does not
    minimise: it penalises over-predictions more than under-predictions)."""
    pred = predict_log(config, jax.tree_util.tree_map(lambda a: a[None], params), stats, tok)
    mse = jnp.mean((pred - y) ** 2)
    relative = jnp.mean(jnp.abs(jnp.expm1(jnp.clip(pred - y, -5.0, 5.0))))
    diff_y = y[:, None] - y[None, :]
    diff_p = pred[:, None] - pred[None, :]
    pairs = (diff_y > 1e-3).astype(jnp.float32)           # i slower than j (measured)
    rank = (jax.nn.softplus(-diff_p) * pairs).sum() / jnp.maximum(pairs.sum(), 1.0)
    return mse + rank_weight * rank + relative_weight * relative


def _make_optimizer(cfg: TrainConfig, total_steps: int) -> optax.GradientTransformation:
    schedule = optax.cosine_decay_schedule(cfg.lr, max(total_steps, 1), alpha=cfg.lr_final / cfg.lr)
    return optax.adamw(schedule, weight_decay=cfg.weight_decay)


# `fast_jit`: XLA's CPU "YNN" fusions run these small matmuls about 2x slower (measured).
@functools.partial(fast_jit, static_argnums=(0, 1), donate_argnums=(2, 3))
def _train_step(cfg: TrainConfig, opt: optax.GradientTransformation, params: Any,
                opt_state: Any, stats: Stats, tok: Tokens, y: Any) -> tuple[Any, Any, Any]:
    """One Adam step of every ensemble member on the same batch (vmapped)."""
    def one(p: Any, s: Any) -> tuple[Any, Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(p, cfg.model, stats, tok, y, cfg.rank_weight,
                                                  cfg.relative_weight)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    return jax.vmap(one)(params, opt_state)


@functools.partial(fast_jit, static_argnums=0)
def _member_losses(config: ModelConfig, params: Any, stats: Stats, tok: Tokens, y: Any) -> Any:
    """Per ensemble member: mean squared error of log cycles."""
    def one(p: Any) -> Any:
        pred = predict_log(config, jax.tree_util.tree_map(lambda a: a[None], p), stats, tok)
        return jnp.mean((pred - y) ** 2)
    return jax.vmap(one)(params)


def init_params(config: ModelConfig, key: Any, members: int, num_tokens: int) -> Any:
    x = jnp.zeros((1, num_tokens, NUM_FEATURES))
    w = jnp.ones((1, num_tokens))
    net = ATFormer(config)
    return jax.vmap(lambda k: net.init(k, x, w))(jax.random.split(key, members))


def train(data: Dataset, config: TrainConfig | None = None, *, init: Surrogate | None = None,
          template: str = "gemmini", progress: Callable[[dict[str, Any]], None] | None = None
          ) -> Surrogate:
    """Train a surrogate on `data` (or fine-tune `init`: its parameters and feature
    normalisation are the starting point, the offset is re-estimated). Validation for early
    stopping is a ``val_fraction`` of the layers."""
    cfg = config or TrainConfig()
    if len(data) < 2:
        raise ConfigError(f"atformer: need at least two training rows, got {len(data)}")
    started = time.perf_counter()
    n_groups = len(np.unique(data.group))
    if cfg.val_fraction > 0 and n_groups >= 2:
        val_mask = split_by_group(data.group, cfg.val_fraction, cfg.seed + 1)
        fit, val = data.take(np.flatnonzero(~val_mask)), data.take(np.flatnonzero(val_mask))
    else:
        fit, val = data, None
    # Fine-tuning keeps the pre-trained feature normalisation (its weights expect it) and
    # re-estimates the residual's offset on the new data (a new target, e.g. RTL vs simulator).
    # The calibration is refitted at the end (`mape_scale`), so training starts without one.
    stats = (init.stats._replace(offset=Stats.of(fit).offset, log_scale=np.float32(0.0))
             if init is not None else Stats.of(fit))
    key = jax.random.PRNGKey(cfg.seed)
    key, init_key = jax.random.split(key)
    if init is not None:
        params = jax.tree_util.tree_map(jnp.asarray, init.params)
        members = jax.tree_util.tree_leaves(params)[0].shape[0]
        cfg = dataclasses.replace(cfg, model=init.config.model, ensemble=members)
    else:
        params = init_params(cfg.model, init_key, cfg.ensemble, fit.tokens.x.shape[1])
    batch = min(cfg.batch_size, len(fit))
    steps_per_epoch = max(1, len(fit) // batch)
    opt = _make_optimizer(cfg, cfg.epochs * steps_per_epoch)
    opt_state = jax.vmap(opt.init)(params)
    fit_tok = Tokens(*(jnp.asarray(a) for a in fit.tokens))
    fit_y = jnp.asarray(fit.log_measured)
    monitor = val if val is not None else fit
    mon_tok = Tokens(*(jnp.asarray(a) for a in monitor.tokens))
    mon_y = jnp.asarray(monitor.log_measured)
    best = jax.tree_util.tree_map(np.asarray, params)
    best_loss = np.asarray(_member_losses(cfg.model, params, stats, mon_tok, mon_y))
    best_epoch = np.zeros(cfg.ensemble, np.int64)
    history = []
    epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        key, perm_key = jax.random.split(key)
        order = np.asarray(jax.random.permutation(perm_key, len(fit)))
        losses = []
        for s in range(steps_per_epoch):
            idx = order[s * batch:(s + 1) * batch]
            params, opt_state, loss = _train_step(
                cfg, opt, params, opt_state, stats, Tokens(*(a[idx] for a in fit_tok)),
                fit_y[idx])
            losses.append(np.asarray(loss))
        val_loss = np.asarray(_member_losses(cfg.model, params, stats, mon_tok, mon_y))
        better = val_loss < best_loss
        if better.any():
            host = jax.tree_util.tree_map(np.asarray, params)
            best = jax.tree_util.tree_map(
                lambda b, p, keep=better: np.where(keep.reshape((-1,) + (1,) * (p.ndim - 1)),
                                                   p, b), best, host)
            best_loss = np.where(better, val_loss, best_loss)
            best_epoch = np.where(better, epoch, best_epoch)
        record = {"epoch": epoch, "train_loss": float(np.mean(losses)),
                  "val_mse": float(np.mean(val_loss)), "seconds": time.perf_counter() - started}
        history.append(record)
        if progress is not None:
            progress(record)
        if np.all(epoch - best_epoch >= cfg.patience):
            break
    tau, multiple = fit_tau(cfg.model, best, stats, fit.tokens, val)
    stats = stats._replace(tau=np.float32(tau))
    stats, calibration = _calibrate(Surrogate(cfg, best, stats, template), val)
    info = {"epochs_run": epoch, "best_epoch": best_epoch.tolist(),
            "shrink": {"tau": tau if np.isfinite(tau) else None, "multiple": multiple,
                       "quantile": TAU_QUANTILE},
            "calibration": calibration,
            "val_mse": best_loss.tolist(), "train_rows": len(fit),
            "val_rows": 0 if val is None else len(val),
            "seconds": time.perf_counter() - started, "history": history}
    return Surrogate(config=cfg, params=best, stats=stats, template=template, info=info)


def _calibrate(surrogate: Surrogate, val: Dataset | None) -> tuple[Stats, dict[str, Any]]:
    """`surrogate`'s stats with the `mape_scale` of its predictions on the validation layers
    `val` (layers the network was not fitted to; factor 1 without two of their rows), and a
    record of it for the checkpoint's info."""
    stats = surrogate.stats._replace(log_scale=np.float32(0.0))
    if val is None or len(val) < 2:
        return stats, {"scale": 1.0, "rows": 0}
    measured = np.exp(np.asarray(val.log_measured, np.float64))
    predicted = dataclasses.replace(surrogate, stats=stats).predict_tokens(val.tokens)
    scale = mape_scale(predicted, measured)

    def mape(factor: float) -> float:
        return float(np.mean(np.abs(factor * predicted - measured) / measured))

    return (stats._replace(log_scale=np.float32(np.log(scale))),
            {"scale": scale, "rows": len(val), "val_mape": mape(1.0),
             "val_mape_calibrated": mape(scale)})


@functools.partial(fast_jit, static_argnums=0)
def _variance(config: ModelConfig, params: Any, stats: Stats, tok: Tokens) -> Any:
    return residual_parts(config, params, stats, tok)[1]


def member_variance(config: ModelConfig, params: Any, stats: Stats, tok: Tokens,
                    chunk: int = 256) -> np.ndarray:
    """The members' residual variance at each point (numpy ``[N]``), in chunks."""
    n = tok.x.shape[0]
    out = []
    for start in range(0, n, chunk):
        part = Tokens(*(np.asarray(a)[start:start + chunk] for a in tok))
        m = part.x.shape[0]
        if m < chunk and n > chunk:  # pad the last chunk to share the compiled code
            part = Tokens(*(np.concatenate([a, np.repeat(a[-1:], chunk - m, 0)])
                            for a in part))
        out.append(np.asarray(_variance(config, params, stats, part))[:m])
    return np.concatenate(out).astype(np.float64)


def fit_tau(config: ModelConfig, params: Any, stats: Stats, tok: Tokens,
            val: Dataset | None = None) -> tuple[float, float | None]:
    """`shrink`'s ``(tau, multiple)`` for a trained ensemble: ``multiple`` x the
    `TAU_QUANTILE` quantile of the members' residual variance over the training points `tok`.
    The multiple is the one of `TAU_MULTIPLES` whose shrunk predictions have the least squared
    log error on `val` (the validation layers, unseen by the fit), or `TAU_MULTIPLE` without
    one. ``(inf, None)``, no shrink, with one member or when the members agree everywhere."""
    members = jax.tree_util.tree_leaves(params)[0].shape[0]
    if members < 2:
        return float("inf"), None
    q = float(np.quantile(member_variance(config, params, stats, tok), TAU_QUANTILE))
    if not (q > 0 and np.isfinite(q)):
        return float("inf"), None
    multiple = TAU_MULTIPLE
    if val is not None and len(val) >= 2:
        variance = member_variance(config, params, stats, val.tokens)
        raw = np.concatenate([np.asarray(_raw_residual(config, params, stats, Tokens(
            *(np.asarray(a)[i:i + 256] for a in val.tokens))), np.float64)
            for i in range(0, len(val), 256)])
        base = np.asarray(val.tokens.log_cycles, np.float64)
        y = np.asarray(val.log_measured, np.float64)
        errors = [np.mean((base + raw * np.exp(-variance / (m * q)) - y) ** 2)
                  for m in TAU_MULTIPLES]
        multiple = TAU_MULTIPLES[int(np.argmin(errors))]
    return multiple * q, multiple


@functools.partial(fast_jit, static_argnums=0)
def _raw_residual(config: ModelConfig, params: Any, stats: Stats, tok: Tokens) -> Any:
    return residual_parts(config, params, stats, tok)[0]


# --------------------------------------------------------------------------- checkpoints
def save(surrogate: Surrogate, path: str | os.PathLike) -> pathlib.Path:
    """Write the surrogate to folder `path` (created): params, then the JSON that names them."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    blob = serialization.to_bytes(jax.tree_util.tree_map(np.asarray, surrogate.params))
    write_atomic(path / "params.msgpack", blob)
    meta = {
        "format": FORMAT_VERSION, "kind": "atformer-residual", "template": surrogate.template,
        "config": surrogate.config.to_dict(),
        "stats": {"mean": np.asarray(surrogate.stats.mean).tolist(),
                  "std": np.asarray(surrogate.stats.std).tolist(),
                  "offset": float(surrogate.stats.offset),
                  # null: no shrink (`shrink`; JSON has no infinity)
                  "tau": (float(surrogate.stats.tau) if np.isfinite(surrogate.stats.tau)
                          else None),
                  "log_scale": float(surrogate.stats.log_scale)},
        "params_sha256": hashlib.sha256(blob).hexdigest(),
        "info": {k: v for k, v in surrogate.info.items() if k != "history"},
    }
    write_atomic(path / "surrogate.json", json.dumps(meta, indent=1).encode())
    return path


def load(path: str | os.PathLike) -> Surrogate:
    """Read a surrogate saved by `save`; a clear `ConfigError` if the folder is not one."""
    path = pathlib.Path(path)
    try:
        meta = json.loads((path / "surrogate.json").read_text())
        blob = (path / "params.msgpack").read_bytes()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a surrogate checkpoint (expected surrogate.json and "
                          f"params.msgpack from `baco surrogate train`): {exc}") from None
    # Format 1 predates the calibration: read as factor 1 (log_scale 0), as it was trained.
    if meta.get("format") not in (1, FORMAT_VERSION) or meta.get("kind") != "atformer-residual":
        raise ConfigError(f"{path}/surrogate.json: unknown format {meta.get('format')!r} "
                          f"(this version reads 1 to {FORMAT_VERSION}); train it again")
    if hashlib.sha256(blob).hexdigest() != meta.get("params_sha256"):
        raise ConfigError(f"{path}/params.msgpack does not match surrogate.json (a partial "
                          "write?); train it again")
    try:
        cfg = TrainConfig.from_dict(meta["config"])
        tau = meta["stats"].get("tau")
        stats = Stats(np.asarray(meta["stats"]["mean"], np.float32),
                      np.asarray(meta["stats"]["std"], np.float32),
                      np.float32(meta["stats"]["offset"]),
                      np.float32(np.inf if tau is None else tau),
                      np.float32(meta["stats"].get("log_scale", 0.0)))
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}/surrogate.json: malformed ({exc})") from None
    if stats.mean.shape != (NUM_FEATURES,):
        raise ConfigError(f"{path}: trained on {stats.mean.shape[0]} features, this version has "
                          f"{NUM_FEATURES}; train it again")
    target = jax.tree_util.tree_map(np.asarray, init_params(cfg.model, jax.random.PRNGKey(0),
                                                            cfg.ensemble, 2))
    params = serialization.from_bytes(target, blob)
    return Surrogate(config=cfg, params=params, stats=stats, template=meta.get("template",
                                                                               "gemmini"),
                     info=meta.get("info", {}))
