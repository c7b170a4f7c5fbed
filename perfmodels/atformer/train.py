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
from perfmodels.atformer.residual import (
    TAU_MULTIPLE,
    TAU_MULTIPLES,
    TAU_QUANTILE,
    Stats,
    active_tokens,
    mape_scale,
    member_residuals,
    predict_compact,
    predict_log,
    residual_parts,
    shrink,
)
from perfmodels.schedule import cosine_decay
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
            padded = pad_rows(part, row_bucket(n))
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
def row_bucket(rows: int, least: int = 8) -> int:
    """The padded row count of `rows` rows: the next power of two, at least `least`. Arrays of
    a few sizes share compiled programs, so fits of a growing dataset compile nothing new."""
    return max(least, 1 << max(rows - 1, 0).bit_length())


def pad_rows(tok: Tokens, size: int) -> Tokens:
    """`tok` with its last row repeated up to `size` rows (real rows, so padded ones stay finite;
    callers drop their outputs or mask them)."""
    n = tok.x.shape[0]
    return Tokens(*(np.concatenate([np.asarray(a), np.repeat(np.asarray(a)[-1:], size - n, 0)])
                    for a in tok))


def _padded_rows(tok: Tokens, y: Any, size: int) -> tuple[Tokens, Any, Any]:
    """Rows padded to `size` (`pad_rows`), their labels, and the row mask (1 real, 0 padded)."""
    n = len(y)
    mask = (np.arange(size) < n).astype(np.float32)
    y = np.concatenate([np.asarray(y), np.repeat(np.asarray(y)[-1:], size - n)])
    return pad_rows(tok, size), y, mask


def loss_fn(params: Any, config: ModelConfig, stats: Stats, tok: Tokens, y: Any,
            rank_weight: float, relative_weight: float = 0.0, mask: Any = None) -> Any:
    """MSE of log cycles, plus `rank_weight` x the mean RankNet loss over ordered pairs, plus
    `relative_weight` x the mean absolute relative error (MAPE, which log-MSE alone does not
    minimise: it penalises over-predictions more than under-predictions). Rows where `mask`
    is 0 (padding) count in no mean and no pair."""
    pred = predict_log(config, jax.tree_util.tree_map(lambda a: a[None], params), stats, tok)
    w = jnp.ones_like(y) if mask is None else mask
    rows = w.sum()
    mse = (w * (pred - y) ** 2).sum() / rows
    relative = (w * jnp.abs(jnp.expm1(jnp.clip(pred - y, -5.0, 5.0)))).sum() / rows
    diff_y = y[:, None] - y[None, :]
    diff_p = pred[:, None] - pred[None, :]
    # i slower than j (measured), both real rows
    pairs = (diff_y > 1e-3).astype(jnp.float32) * w[:, None] * w[None, :]
    rank = (jax.nn.softplus(-diff_p) * pairs).sum() / jnp.maximum(pairs.sum(), 1.0)
    return mse + rank_weight * rank + relative_weight * relative


class _Step(NamedTuple):
    """What a training step reads of a `TrainConfig`: the step's static argument, so that a
    fit's seed, epochs or batch size compile nothing new."""

    model: ModelConfig
    lr: float
    lr_final: float
    weight_decay: float
    rank_weight: float
    relative_weight: float

    @classmethod
    def of(cls, cfg: TrainConfig) -> _Step:
        return cls(cfg.model, cfg.lr, cfg.lr_final, cfg.weight_decay, cfg.rank_weight,
                   cfg.relative_weight)


@functools.cache
def _optimizer(weight_decay: float) -> optax.GradientTransformation:
    """AdamW whose learning rate is a traced hyperparameter, set each step (`cosine_lr`): one
    optimizer for every schedule length, so every fit shares the compiled step."""
    static = ("b1", "b2", "eps", "eps_root", "mu_dtype", "weight_decay", "mask", "nesterov")
    return optax.inject_hyperparams(optax.adamw, static_args=static)(
        learning_rate=0.0, weight_decay=weight_decay)


@functools.partial(jax.jit, static_argnums=0)
def _optimizer_states(weight_decay: float, params: Any) -> Any:
    """Each ensemble member's initial `_optimizer` state (one program for all of it)."""
    return jax.vmap(_optimizer(weight_decay).init)(params)


def cosine_lr(lr: float, lr_final: float, count: Any, total_steps: Any) -> Any:
    """The learning rate at step `count` of a cosine decay from `lr` to `lr_final` over
    `total_steps` (traced): `perfmodels.schedule.cosine_decay`, optax's schedule bit for bit."""
    return cosine_decay(lr, lr_final / lr, count, total_steps)


# `fast_jit`: XLA's CPU "YNN" fusions run these small matmuls about 2x slower (measured).
@functools.partial(fast_jit, static_argnums=0, donate_argnums=(1, 2))
def _train_step(step: _Step, params: Any, opt_state: Any, stats: Stats, tok: Tokens, y: Any,
                mask: Any, total_steps: Any) -> tuple[Any, Any, Any]:
    """One AdamW step of every ensemble member on the same (masked) batch (vmapped), the
    learning rate from the optimizer's own step count and the fit's `total_steps`."""
    opt = _optimizer(step.weight_decay)

    def one(p: Any, s: Any) -> tuple[Any, Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(p, step.model, stats, tok, y,
                                                  step.rank_weight, step.relative_weight, mask)
        lr = cosine_lr(step.lr, step.lr_final, s.count, total_steps)
        s = s._replace(hyperparams={**s.hyperparams, "learning_rate": lr})
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    return jax.vmap(one)(params, opt_state)


@functools.partial(fast_jit, static_argnums=0)
def _member_losses(config: ModelConfig, params: Any, stats: Stats, tok: Tokens, y: Any,
                   mask: Any) -> Any:
    """Per ensemble member: mean squared error of log cycles over the rows where `mask` is 1."""
    def one(p: Any) -> Any:
        pred = predict_log(config, jax.tree_util.tree_map(lambda a: a[None], p), stats, tok)
        return (mask * (pred - y) ** 2).sum() / mask.sum()
    return jax.vmap(one)(params)


_SHUFFLE_ONE_ROUND = int(np.iinfo(np.uint32).max ** (1 / 3))
"""`jax.random.permutation` sorts by one round of random keys up to this many elements."""


@jax.jit
def _shuffle_bucket(key: Any, positions: Any, n: Any) -> Any:
    _, sub = jax.random.split(key)
    keys = jax.random.bits(sub, positions.shape, jnp.uint32)
    keys = jnp.where(positions < n, keys, np.uint32(np.iinfo(np.uint32).max))
    return jax.lax.sort_key_val(keys, positions, is_stable=True)[1]


def shuffled(key: Any, n: int) -> np.ndarray:
    """``jax.random.permutation(key, n)``, computed over `row_bucket` positions so that other
    sizes share the compiled sort: JAX's one round of sorting random 32-bit keys (its
    ``_shuffle``, jax/_src/random), the padded positions keyed last in a stable sort and
    dropped. Keys of a prefix are the prefix of the keys only with partitionable threefry;
    otherwise, and past one round, JAX's own."""
    if n > _SHUFFLE_ONE_ROUND or not jax.config.jax_threefry_partitionable:
        return np.asarray(jax.random.permutation(key, n))
    positions = np.arange(row_bucket(n), dtype=np.int32)
    return np.asarray(_shuffle_bucket(key, positions, np.int32(n)))[:n]


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def init_params(config: ModelConfig, key: Any, members: int, num_tokens: int) -> Any:
    """`members` initialisations (one program, not one per operation of Flax's init)."""
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
    # float32 arrays, never Python floats (weakly typed to JAX): one signature for every fit
    stats = Stats(*(np.asarray(v, np.float32) for v in stats))
    key = jax.random.PRNGKey(cfg.seed)
    key, init_key = jax.random.split(key)
    if init is not None:
        params = jax.device_put(init.params)
        members = jax.tree_util.tree_leaves(params)[0].shape[0]
        cfg = dataclasses.replace(cfg, model=init.config.model, ensemble=members)
    else:
        params = init_params(cfg.model, init_key, cfg.ensemble, fit.tokens.x.shape[1])
    batch = min(cfg.batch_size, len(fit))
    steps_per_epoch = max(1, len(fit) // batch)
    # Padded shapes (`row_bucket`, masked rows) and a traced schedule length: a fit on more
    # rows, another seed or epoch count runs the programs the last fit compiled.
    size = min(cfg.batch_size, row_bucket(batch))
    batch_mask = (np.arange(size) < batch).astype(np.float32)
    total_steps = np.float32(max(cfg.epochs * steps_per_epoch, 1))
    step_cfg = _Step.of(cfg)
    opt_state = _optimizer_states(cfg.weight_decay, params)
    fit_tok = Tokens(*(np.asarray(a) for a in fit.tokens))
    fit_y = np.asarray(fit.log_measured)
    monitor = val if val is not None else fit
    mon_tok, mon_y, mon_mask = (jax.device_put(part) for part in
                                _padded_rows(monitor.tokens, monitor.log_measured,
                                             row_bucket(len(monitor))))
    best = jax.tree_util.tree_map(np.asarray, params)
    best_loss = np.asarray(_member_losses(cfg.model, params, stats, mon_tok, mon_y, mon_mask))
    best_epoch = np.zeros(cfg.ensemble, np.int64)
    history = []
    epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        key, perm_key = jax.random.split(key)
        order = shuffled(perm_key, len(fit))
        losses = []
        for s in range(steps_per_epoch):
            idx = order[s * batch:(s + 1) * batch]
            idx = np.concatenate([idx, np.repeat(idx[-1:], size - batch)])
            params, opt_state, loss = _train_step(
                step_cfg, params, opt_state, stats, Tokens(*(a[idx] for a in fit_tok)),
                fit_y[idx], batch_mask, total_steps)
            losses.append(loss)     # read at the epoch's end: the steps run while Python goes on
        val_loss = np.asarray(_member_losses(cfg.model, params, stats, mon_tok, mon_y,
                                             mon_mask))
        better = val_loss < best_loss
        if better.any():
            host = jax.tree_util.tree_map(np.asarray, params)
            best = jax.tree_util.tree_map(
                lambda b, p, keep=better: np.where(keep.reshape((-1,) + (1,) * (p.ndim - 1)),
                                                   p, b), best, host)
            best_loss = np.where(better, val_loss, best_loss)
            best_epoch = np.where(better, epoch, best_epoch)
        record = {"epoch": epoch, "train_loss": float(np.mean([np.asarray(x) for x in losses])),
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


@functools.partial(fast_jit, static_argnums=0)
def _raw_residual(config: ModelConfig, params: Any, stats: Stats, tok: Tokens) -> Any:
    return residual_parts(config, params, stats, tok)[0]


def _in_chunks(fn: Callable[..., Any], config: ModelConfig, params: Any, stats: Stats,
               tok: Tokens, chunk: int = 256) -> np.ndarray:
    """`fn` (a jitted per-point function) over `tok` in chunks of `chunk` rows, each padded to
    `row_bucket` rows so that every dataset size shares a few compiled programs (float64)."""
    out = []
    for start in range(0, tok.x.shape[0], chunk):
        part = Tokens(*(np.asarray(a)[start:start + chunk] for a in tok))
        m = part.x.shape[0]
        padded = pad_rows(part, min(chunk, row_bucket(m)))
        out.append(np.asarray(fn(config, params, stats, padded))[:m])
    return np.concatenate(out).astype(np.float64)


def member_variance(config: ModelConfig, params: Any, stats: Stats, tok: Tokens,
                    chunk: int = 256) -> np.ndarray:
    """The members' residual variance at each point (numpy ``[N]``), in chunks."""
    return _in_chunks(_variance, config, params, stats, tok, chunk)


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
        raw = _in_chunks(_raw_residual, config, params, stats, val.tokens)
        base = np.asarray(val.tokens.log_cycles, np.float64)
        y = np.asarray(val.log_measured, np.float64)
        errors = [np.mean((base + raw * np.exp(-variance / (m * q)) - y) ** 2)
                  for m in TAU_MULTIPLES]
        multiple = TAU_MULTIPLES[int(np.argmin(errors))]
    return multiple * q, multiple


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
