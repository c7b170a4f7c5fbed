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
from accel.mapping import Mapping
from perfmodels.analytic import fast_jit
from perfmodels.atformer.features import NUM_FEATURES, Tokens, tokens_of
from perfmodels.atformer.model import ATFormer, ModelConfig
from perfmodels.validate import TimeloopRow, read_rows
from workloads.errors import ConfigError
from workloads.files import write_atomic
from workloads.layer import Layer

__all__ = ["Dataset", "Stats", "Surrogate", "TrainConfig", "active_tokens", "dataset_from_rows",
           "load", "predict_compact", "predict_log", "read_dataset", "save", "split_by_group",
           "train"]

FORMAT_VERSION = 1
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


def read_dataset(path: str | os.PathLike, limit: int | None = None,
                 array_dim: int | None = None) -> tuple[list[TimeloopRow], Dataset]:
    """Rows of a DOSA-format CSV (real RTL, or `baco dataset generate`'s simulator labels)
    labelled by ``target.gemmini_cycle`` if the file has it, else ``target.cycle``.

    `array_dim` replaces the rows' PE array by an ``array_dim`` square one: the hardware the
    cycles were measured on when it differs from the ``arch.*`` columns (DOSA's RTL rows ran
    on a 16x16 Gemmini; ``arch.pe`` is the 128x128 Timeloop model that drew the mappings).
    """
    path = pathlib.Path(path)
    try:
        header = path.open(newline="").readline()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    columns = [c.strip() for c in header.split(",")]
    key = next((k for k in CYCLES_KEYS if k in columns), CYCLES_KEYS[0])
    rows = read_rows(path, limit=limit, strict=False, cycles_key=key)
    if array_dim is not None:
        rows = [dataclasses.replace(r, hw=dataclasses.replace(r.hw, pe_rows=array_dim,
                                                              pe_cols=array_dim))
                for r in rows]
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
    """Feature normalisation and the residual's offset (part of a checkpoint)."""

    mean: Any      # [F]
    std: Any       # [F]
    offset: Any    # scalar: mean of log(measured / analytic) over the training rows

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


def predict_log(config: ModelConfig, params: Any, stats: Stats, tok: Tokens) -> Any:
    """Natural log of predicted cycles, ``[...]`` (pure). `params` has a leading ensemble axis;
    the members' residuals are averaged."""
    x = (tok.x - stats.mean) / stats.std
    lead = tok.weight.shape[:-1]
    x2 = x.reshape((-1,) + x.shape[-2:])
    w2 = tok.weight.reshape((-1, tok.weight.shape[-1]))
    net = ATFormer(config)
    residual = jax.vmap(lambda p: net.apply(p, x2, w2))(params).mean(0)
    return tok.log_cycles + stats.offset + residual.reshape(lead)


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
    stats = (init.stats._replace(offset=Stats.of(fit).offset) if init is not None
             else Stats.of(fit))
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
    info = {"epochs_run": epoch, "best_epoch": best_epoch.tolist(),
            "val_mse": best_loss.tolist(), "train_rows": len(fit),
            "val_rows": 0 if val is None else len(val),
            "seconds": time.perf_counter() - started, "history": history}
    return Surrogate(config=cfg, params=best, stats=stats, template=template, info=info)


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
                  "offset": float(surrogate.stats.offset)},
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
    if meta.get("format") != FORMAT_VERSION or meta.get("kind") != "atformer-residual":
        raise ConfigError(f"{path}/surrogate.json: unknown format {meta.get('format')!r}")
    if hashlib.sha256(blob).hexdigest() != meta.get("params_sha256"):
        raise ConfigError(f"{path}/params.msgpack does not match surrogate.json (a partial "
                          "write?); train it again")
    try:
        cfg = TrainConfig.from_dict(meta["config"])
        stats = Stats(np.asarray(meta["stats"]["mean"], np.float32),
                      np.asarray(meta["stats"]["std"], np.float32),
                      np.float32(meta["stats"]["offset"]))
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
