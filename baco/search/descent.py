"""The descent every gradient search shares: many starts side by side (vmapped) in one
`lax.scan` (`scan_starts`, BACO's and the DOSA-style search's), and BACO's step: Adam between
per-layer masks, a start whose loss turns non-finite sent back to its last good point."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from baco.objective import Settings
from perfmodels import relax
from perfmodels.analytic import fast_jit
from perfmodels.schedule import cosine_decay

__all__ = ["all_finite", "cosine_schedule", "decode_many", "make_optimizer", "mask_layers",
           "run_round", "scan_starts", "where_tree"]


class _Empty(NamedTuple):
    pass


def mask_layers(scaled: bool) -> optax.GradientTransformationExtraArgs:
    """Zero the updates of the layers the scheduler did not choose (extra arg ``layer_mask``,
    ``[layer]``); with `scaled`, also multiply everything by ``update_scale`` (the start's
    learning-rate factor, halved after a non-finite step)."""

    def init_fn(params: Any) -> _Empty:
        del params
        return _Empty()

    def update_fn(updates: relax.RelaxedPoint, state: _Empty, params: Any = None, *,
                  layer_mask: Any, update_scale: Any = 1.0, **extra: Any) -> tuple[Any, _Empty]:
        del params, extra
        scale = update_scale if scaled else 1.0

        def per_layer(u: Any) -> Any:
            return u * layer_mask.reshape(layer_mask.shape + (1,) * (u.ndim - 1)) * scale

        maps = jax.tree_util.tree_map(per_layer, updates.mappings)
        hw = None if updates.hw is None else jax.tree_util.tree_map(lambda u: u * scale,
                                                                   updates.hw)
        return relax.RelaxedPoint(mappings=maps, hw=hw), state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def cosine_schedule(settings: Settings) -> Callable[[Any], Any]:
    """optax's ``cosine_decay_schedule(learning_rate, decay_steps, alpha=lr_final_fraction)``
    with the three traced (`Settings` leaves; `perfmodels.schedule.cosine_decay`), bit for
    bit."""
    def schedule(count: Any) -> Any:
        return cosine_decay(settings.learning_rate, settings.lr_final_fraction, count,
                            jnp.asarray(settings.decay_steps, jnp.float32))
    return schedule


def make_optimizer(settings: Settings) -> optax.GradientTransformationExtraArgs:
    """Adam with a cosine decay over a start's steps, between the layer masks."""
    schedule = cosine_schedule(settings)
    return optax.chain(mask_layers(scaled=False), optax.scale_by_adam(),
                       optax.scale_by_learning_rate(schedule), mask_layers(scaled=True))


def where_tree(cond: Any, new: Any, old: Any) -> Any:
    """`new` where `cond`, else `old`, leaf by leaf."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(cond, a, b), new, old)


def all_finite(tree: Any) -> Any:
    """Whether every leaf of `tree` is finite everywhere."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]
    return jnp.stack(leaves).all()


def scan_starts(step_one: Callable[[Any, Any, Any], tuple[Any, Any]], carry: Any, rows: Any,
                n_steps: Any, round_steps: int) -> tuple[Any, Any]:
    """`round_steps` steps of every start side by side (`step_one` vmapped over the leading
    axis of `carry` and `rows`), as one `lax.scan`.

    ``step_one(carry, row, active) -> (carry, ok)`` takes one start's step where `active`
    and owns what a non-finite step (``ok`` false) does to its carry. Start s is active for
    its first ``n_steps[s]`` steps (the rest are no-ops, so a budget's last round compiles
    once) while its steps stay finite. Returns ``(carry, finite [S])``.
    """
    def body(state: Any, i: Any) -> tuple[Any, None]:
        carry, finite = state
        active = (i < n_steps) & finite
        carry, ok = jax.vmap(step_one)(carry, rows, active)
        return (carry, finite & (ok | ~active)), None

    (carry, finite), _ = jax.lax.scan(body, (carry, jnp.ones(n_steps.shape, bool)),
                                      jnp.arange(round_steps))
    return carry, finite


@fast_jit
def run_round(thetas: relax.RelaxedPoint, opt_states: Any, masks: Any, scales: Any,
              n_steps: Any, space: relax.RelaxSpace, settings: Settings, predictor: Any = None
              ) -> tuple[Any, Any, Any, Any]:
    """``settings.round_steps`` Adam steps of every start (`scan_starts`) on
    ``settings.objective``, given `predictor` (a learned cycle model such as
    `perfmodels.atformer.Hybrid`) as its fourth argument when there is one. The predictor is
    traced: a refitted one of the same shape reuses the compiled round.

    When a start's loss or gradient turns non-finite, it goes back to its last good point --
    the last parameters (and optimizer state) whose loss was finite -- and stops for the
    round. Returns ``(thetas, opt_states, last finite loss [S], finite [S])``.
    """
    opt = make_optimizer(settings)
    model = () if predictor is None else (predictor,)
    grad_fn = jax.value_and_grad(
        lambda th: settings.objective(th, space, settings, *model), has_aux=True)

    def one(carry: Any, row: Any, active: Any) -> tuple[Any, Any]:
        theta, state, good, last = carry
        mask, scale = row
        (loss, _), grads = grad_fn(theta)
        updates, new_state = opt.update(grads, state, theta, layer_mask=mask, update_scale=scale)
        new_theta = optax.apply_updates(theta, updates)
        ok = jnp.isfinite(loss) & all_finite(grads) & all_finite(new_theta)
        step = active & ok
        restore = active & ~ok
        theta_out = where_tree(step, new_theta, where_tree(restore, good[0], theta))
        state_out = where_tree(step, new_state, where_tree(restore, good[1], state))
        good = where_tree(step, (theta, state), good)     # theta's loss was finite
        return (theta_out, state_out, good, jnp.where(step, loss, last)), ok

    init = (thetas, opt_states, (thetas, opt_states),
            jnp.full(n_steps.shape, jnp.nan, jnp.float32))
    (thetas, opt_states, _, last), finite = scan_starts(one, init, (masks, scales), n_steps,
                                                        settings.round_steps)
    return thetas, opt_states, last, finite


@fast_jit
def decode_many(thetas: relax.RelaxedPoint, space: relax.RelaxSpace) -> Any:
    """Every start's mappings and DRAM words/cycle (the base hardware's unless free)."""
    maps, hwp = jax.vmap(relax.decode, in_axes=(0, None))(thetas, space)
    return maps, jnp.broadcast_to(hwp.dram_bw_words, maps.stages.shape[:1])
