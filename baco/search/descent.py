"""The descent step every gradient search shares: Adam between per-layer masks, many starts
side by side (vmapped) in one `lax.scan`, a start whose loss turns non-finite sent back to
its last good point."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from baco.objective import Settings
from perfmodels import relax
from perfmodels.analytic import fast_jit

__all__ = ["decode_many", "make_optimizer", "mask_layers", "run_round"]


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


def make_optimizer(settings: Settings) -> optax.GradientTransformationExtraArgs:
    """Adam with a cosine decay over a start's steps, between the layer masks."""
    schedule = optax.cosine_decay_schedule(settings.learning_rate, settings.decay_steps,
                                           alpha=settings.lr_final_fraction)
    return optax.chain(mask_layers(scaled=False), optax.scale_by_adam(),
                       optax.scale_by_learning_rate(schedule), mask_layers(scaled=True))


def _where_tree(cond: Any, new: Any, old: Any) -> Any:
    return jax.tree_util.tree_map(lambda a, b: jnp.where(cond, a, b), new, old)


def _all_finite(tree: Any) -> Any:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]
    return jnp.stack(leaves).all()


@functools.partial(fast_jit, static_argnames=("settings",))
def run_round(thetas: relax.RelaxedPoint, opt_states: Any, masks: Any, scales: Any,
              n_steps: Any, space: relax.RelaxSpace, settings: Settings
              ) -> tuple[Any, Any, Any, Any]:
    """``settings.round_steps`` Adam steps of every start (vmapped), as one `lax.scan`.

    Start s takes its first ``n_steps[s]`` steps (the rest are no-ops, so the last round of a
    budget compiles once). When a start's loss or gradient turns non-finite, it goes back to
    its last good point -- the last parameters (and optimizer state) whose loss was finite --
    and stops for the round. Returns ``(thetas, opt_states, last finite loss [S], finite
    [S])``.
    """
    opt = make_optimizer(settings)
    grad_fn = jax.value_and_grad(
        lambda th: settings.objective(th, space, settings), has_aux=True)

    def one(theta: Any, state: Any, good: Any, mask: Any, scale: Any, active: Any
            ) -> tuple[Any, ...]:
        (loss, _), grads = grad_fn(theta)
        updates, new_state = opt.update(grads, state, theta, layer_mask=mask, update_scale=scale)
        new_theta = optax.apply_updates(theta, updates)
        ok = jnp.isfinite(loss) & _all_finite(grads) & _all_finite(new_theta)
        step = active & ok
        restore = active & ~ok
        theta_out = _where_tree(step, new_theta, _where_tree(restore, good[0], theta))
        state_out = _where_tree(step, new_state, _where_tree(restore, good[1], state))
        good = _where_tree(step, (theta, state), good)     # theta's loss was finite
        return theta_out, state_out, good, jnp.where(step, loss, jnp.nan), ok | ~active

    def body(carry: Any, i: Any) -> tuple[Any, None]:
        theta, state, good, last, finite = carry
        active = (i < n_steps) & finite
        theta, state, good, loss, ok = jax.vmap(one)(theta, state, good, masks, scales, active)
        last = jnp.where(active & ok, loss, last)
        return (theta, state, good, last, finite & ok), None

    init = (thetas, opt_states, (thetas, opt_states),
            jnp.full(n_steps.shape, jnp.nan, jnp.float32), jnp.ones(n_steps.shape, bool))
    (thetas, opt_states, _, last, finite), _ = jax.lax.scan(
        body, init, jnp.arange(settings.round_steps))
    return thetas, opt_states, last, finite


@fast_jit
def decode_many(thetas: relax.RelaxedPoint, space: relax.RelaxSpace) -> Any:
    """Every start's mappings and DRAM words/cycle (the base hardware's unless free)."""
    maps, hwp = jax.vmap(relax.decode, in_axes=(0, None))(thetas, space)
    return maps, jnp.broadcast_to(hwp.dram_bw_words, maps.stages.shape[:1])
