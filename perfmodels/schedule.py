"""Learning-rate schedules whose settings are traced, so a fit or a descent with another rate
or length runs the program compiled for the last one."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

__all__ = ["cosine_decay"]


def cosine_decay(init_value: Any, alpha: Any, count: Any, steps: Any) -> Any:
    """The rate at step `count` of a cosine decay from `init_value` to ``alpha * init_value``
    over `steps`, any of them traced: optax's ``cosine_decay_schedule(init_value, steps,
    alpha)``, the same formula and operations (optax/schedules/_schedule.py), bit for bit. Its
    step count is a constant there, and XLA divides by a constant as a multiplication by its
    float32 reciprocal; so does this."""
    count = jnp.minimum(count, steps)
    cosine = 0.5 * (1 + jnp.cos(jnp.pi * count * (1 / steps)))
    return init_value * ((1 - alpha) * cosine ** 1.0 + alpha)
