"""`perfmodels.accesses.product`: jnp.prod's values and gradients, by a cheaper rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from perfmodels.accesses import product


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 8])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_product_matches_jnp_prod_and_its_gradient(n, axis):
    rng = np.random.default_rng(n)
    shape = [3, 4, 2]
    shape[axis] = n
    x = rng.uniform(-1.5, 1.5, shape).astype(np.float32)
    if x.size:
        x.flat[rng.integers(x.size)] = 0.0          # a zero: the others' product still flows
    weights = rng.normal(size=np.prod(np.delete(shape, axis))).reshape(
        np.delete(shape, axis)).astype(np.float32)

    def loss(f):
        return lambda v: (f(v) * weights).sum()

    ours = jax.jit(jax.value_and_grad(loss(lambda v: product(v, axis))))(x)
    jaxs = jax.jit(jax.value_and_grad(loss(lambda v: jnp.prod(v, axis=axis))))(x)
    np.testing.assert_allclose(ours[0], jaxs[0], rtol=1e-6)
    np.testing.assert_allclose(ours[1], jaxs[1], rtol=1e-6, atol=1e-7)
    assert ours[1].shape == x.shape
    np.testing.assert_array_equal(jax.jit(lambda v: product(v, axis))(x),
                                  jax.jit(lambda v: jnp.prod(v, axis=axis))(x))


def test_product_under_vmap_and_inside_a_scan():
    x = jnp.asarray(np.random.default_rng(0).uniform(0.1, 1.0, (5, 3, 7)), jnp.float32)

    def total(v):
        def body(c, row):
            return c + jax.vmap(lambda r: product(r, 1))(row).sum(), None
        return jax.lax.scan(body, 0.0, v)[0]

    def reference(v):
        return jnp.prod(v, axis=-1).sum()

    np.testing.assert_allclose(jax.grad(total)(x), jax.grad(reference)(x), rtol=1e-6)
