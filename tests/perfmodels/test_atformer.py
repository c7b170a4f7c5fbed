"""ATFormer surrogate: features, the Flax model, training, checkpoints, metrics, the hybrid."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from perfmodels import relax
from perfmodels.analytic import exact_batch, fast_jit, pack_layer, pack_mapping
from perfmodels.atformer import features as F
from perfmodels.atformer import train as T
from perfmodels.atformer.hybrid import Hybrid, load_hybrid
from perfmodels.atformer.metrics import fidelity, pairwise_accuracy, top_k_recall
from perfmodels.atformer.model import ATFormer, ModelConfig
from workloads.errors import ConfigError
from workloads.layer import Layer

ROOT = pathlib.Path(__file__).resolve().parents[2]
RTL = ROOT / "data" / "gemmini_rtl_train.csv"
HW = HardwareConfig.preset("gemmini_default")
TEMPLATE = HW.template_spec
LAYERS = [Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=128),
          Layer.gemm(M=128, K_red=256, N_out=64),
          Layer.conv2d(R=1, S=1, P=28, Q=28, C=64, K=64, Hstride=2, Wstride=2)]
MAPPINGS = [
    Mapping.from_timeloop("L3[WIO] K8 C4 Q14 P14 S3 R3 - L2[WI] N1 K16X - L1[O] N1 C16X - "
                          "L0[W] N1"),
    Mapping.from_timeloop("L3[WIO] P8 K4 - L2[WI] C16 P16 K16X - L1[O] N1 C16X - L0[W] N1"),
    Mapping.from_timeloop("L3[WIO] P28 K4 - L2[WI] Q28 K16X - L1[O] C4 C16X - L0[W] N1"),
]
TINY = T.TrainConfig(model=ModelConfig(width=8, heads=2, layers=1, mlp_width=8), epochs=3,
                     batch_size=4, patience=3, val_fraction=0.0)


def _finite(tree) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(tree))


@pytest.fixture(scope="module")
def tok():
    return F.tokens_of(LAYERS, HW, MAPPINGS)


@pytest.fixture(scope="module")
def data(tok):
    """Twelve points over three layers, labelled 2-3x the analytic cycles (an easy residual)."""
    rng = np.random.default_rng(0)
    layers = LAYERS * 4
    mappings = MAPPINGS * 4
    cycles = np.exp(np.tile(tok.log_cycles, 4)) * rng.uniform(2.0, 3.0, 12)
    return T.dataset_from_points(layers, [HW] * 12, mappings, cycles)


@pytest.fixture(scope="module")
def surrogate(data):
    return T.train(data, TINY)


# --------------------------------------------------------------------------- features
def test_tokens_shapes_masks_and_analytic_base(tok):
    n = F.num_tokens(TEMPLATE)
    assert tok.x.shape == (3, n, F.NUM_FEATURES) and tok.weight.shape == (3, n)
    assert np.isfinite(tok.x).all()
    # the global token, plus one token per loop whose factor exceeds 1
    for b, m in enumerate(MAPPINGS):
        loops = int((m.temporal > 1).sum() + (m.spatial > 1).sum())
        assert tok.weight[b].sum() == pytest.approx(1 + loops)
        assert set(np.unique(tok.weight[b])) <= {0.0, 1.0}
    ana = exact_batch(LAYERS, HW, MAPPINGS, check=False)
    np.testing.assert_allclose(np.exp(tok.log_cycles), ana.cycles, rtol=1e-5)


def test_token_factor_feature_is_the_log2_factor(tok):
    level, dim, spatial = F.slots(TEMPLATE)
    col = F.MAX_LEVELS + F.NUM_DIMS + 1                   # log2 factor
    m = MAPPINGS[0]
    want = np.where(spatial > 0, np.log2(m.spatial[level, dim]),
                    np.log2(m.temporal[level, dim]))
    np.testing.assert_allclose(tok.x[0, 1:, col], want, atol=1e-5)


def test_loop_order_changes_the_tokens():
    a = MAPPINGS[0]
    b = Mapping.from_timeloop("L3[WIO] R3 S3 P14 Q14 C4 K8 - L2[WI] N1 K16X - L1[O] N1 C16X - "
                              "L0[W] N1")
    ta, tb = F.tokens_of([LAYERS[0]] * 2, HW, [a, b]).x
    assert not np.allclose(ta, tb)


@pytest.mark.slow
def test_relaxed_tokens_match_discrete_and_have_finite_gradients(tok):
    space = relax.RelaxSpace.create(HW, LAYERS, hw_mode="fixed")
    theta = relax.from_mappings(space, MAPPINGS)
    maps, hwp = fast_jit(relax.decode)(theta, space)
    relaxed = jax.vmap(lambda l, m: F.tokens(TEMPLATE, l, hwp, m)[0])(space.layers, maps)
    np.testing.assert_allclose(relaxed.weight, tok.weight, atol=1e-3)
    np.testing.assert_allclose(relaxed.x, tok.x, atol=2e-2)

    def total(th):
        m, h = relax.decode(th, space)
        t = jax.vmap(lambda l, mm: F.tokens(TEMPLATE, l, h, mm)[0])(space.layers, m)
        return (t.x * t.weight[..., None]).sum()

    grads = jax.jit(jax.grad(total))(relax.init_random(jax.random.PRNGKey(1), space))
    assert _finite(grads)


# --------------------------------------------------------------------------- model
def test_model_ignores_masked_tokens():
    cfg = ModelConfig(width=8, heads=2, layers=2, mlp_width=8)
    net = ATFormer(cfg)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 6))
    w = jnp.array([[1, 1, 0, 1, 0], [1, 0, 0, 0, 1]], jnp.float32)
    params = net.init(jax.random.PRNGKey(1), x, w)
    noisy = jnp.where(w[..., None] > 0, x, 100.0)
    np.testing.assert_allclose(net.apply(params, x, w), net.apply(params, noisy, w), atol=1e-4)
    assert net.apply(params, x, w).shape == (2,)


def test_compact_prediction_drops_only_masked_tokens(data, surrogate):
    k = T.active_tokens(data.tokens.weight)
    assert k < data.tokens.weight.shape[1]
    full = T.predict_log(surrogate.config.model, surrogate.params, surrogate.stats,
                         data.tokens)
    compact = T.predict_compact(surrogate.config.model, k, surrogate.params, surrogate.stats,
                                data.tokens)
    np.testing.assert_allclose(compact, full, atol=1e-5)


def test_default_model_is_the_seeds():
    cfg = ModelConfig()
    assert (cfg.width, cfg.heads, cfg.layers) == (512, 4, 2)
    params = T.init_params(cfg, jax.random.PRNGKey(0), 1, 4)
    shapes = jax.tree_util.tree_map(lambda a: a.shape, params)["params"]
    assert shapes["embed_0"]["kernel"] == (1, F.NUM_FEATURES, 512)
    assert shapes["embed_1"]["kernel"] == (1, 512, 512)
    assert shapes["encoder_1"]["SelfAttention_0"]["qkv"]["kernel"] == (1, 512, 3, 4, 128)
    assert shapes["head"]["kernel"] == (1, 512, 1)


# --------------------------------------------------------------------------- training
def test_split_by_group_is_seeded_and_disjoint():
    group = np.repeat(np.arange(10), 3)
    a = T.split_by_group(group, 0.2, seed=3)
    assert np.array_equal(a, T.split_by_group(group, 0.2, seed=3))
    assert len(np.unique(group[a])) == 2
    assert not set(group[a]) & set(group[~a])
    with pytest.raises(ConfigError, match="two layers"):
        T.split_by_group(np.zeros(4), 0.2, 0)


def test_training_reduces_the_loss_and_is_seeded(data, surrogate):
    hist = surrogate.info["history"]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"] + 1e-6
    again = T.train(data, TINY)
    np.testing.assert_allclose(surrogate.predict_tokens(data.tokens),
                               again.predict_tokens(data.tokens), rtol=1e-5)
    # the offset alone already captures the 2-3x residual
    pred = surrogate.predict_tokens(data.tokens)
    assert fidelity(pred, np.exp(data.log_measured))["mape"] < 0.5


@pytest.mark.slow
def test_ensemble_members_train_side_by_side(data):
    s = T.train(data, T.TrainConfig(model=TINY.model, epochs=1, batch_size=4, ensemble=2,
                                    val_fraction=0.0))
    leaves = jax.tree_util.tree_leaves(s.params)
    assert all(x.shape[0] == 2 for x in leaves)
    assert not np.allclose(leaves[0][0], leaves[0][1])


def test_fine_tuning_starts_from_the_given_model(data, surrogate):
    tuned = T.train(data, T.TrainConfig(epochs=1, batch_size=4, val_fraction=0.0),
                    init=surrogate)
    assert tuned.config.model == surrogate.config.model
    np.testing.assert_allclose(tuned.stats.mean, surrogate.stats.mean)


def test_checkpoint_round_trip_and_corruption(tmp_path, data, surrogate):
    path = T.save(surrogate, tmp_path / "model")
    loaded = T.load(path)
    np.testing.assert_allclose(loaded.predict_tokens(data.tokens),
                               surrogate.predict_tokens(data.tokens), rtol=1e-6)
    assert loaded.config == surrogate.config
    (path / "params.msgpack").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="does not match"):
        T.load(path)
    with pytest.raises(ConfigError, match="not a surrogate checkpoint"):
        T.load(tmp_path / "nothing")
    meta = json.loads((path / "surrogate.json").read_text())
    assert meta["format"] == T.FORMAT_VERSION and not list(path.glob("*.tmp"))


def test_bad_training_input_is_a_config_error(data):
    with pytest.raises(ConfigError, match="epochs"):
        T.TrainConfig(epochs=0)
    with pytest.raises(ConfigError, match="positive"):
        T.dataset_from_points(LAYERS, [HW] * 3, MAPPINGS, [1.0, -1.0, 2.0])


# --------------------------------------------------------------------------- hybrid
@pytest.mark.slow
def test_hybrid_is_analytic_times_exp_residual_and_differentiable(tmp_path, data, surrogate):
    hybrid = load_hybrid(T.save(surrogate, tmp_path / "m"))
    direct = hybrid.predict(LAYERS, HW, MAPPINGS)
    np.testing.assert_allclose(direct, surrogate.predict(LAYERS, HW, MAPPINGS), rtol=1e-6)
    one = jax.jit(lambda l, m: hybrid.evaluate(TEMPLATE, l, HW.to_params(), m).cycles)
    cycles = [float(one(pack_layer(l), pack_mapping(m))) for l, m in zip(LAYERS, MAPPINGS)]
    np.testing.assert_allclose(cycles, direct, rtol=1e-4)

    space = relax.RelaxSpace.create(HW, LAYERS, hw_mode="min_hw")

    def loss(theta):
        maps, hwp = relax.decode(theta, space)
        out = jax.vmap(lambda l, m: hybrid.evaluate(TEMPLATE, l, hwp, m))(space.layers, maps)
        return jnp.log(out.cycles.sum()) + jnp.log(out.energy_pj.sum())

    theta = relax.init_random(jax.random.PRNGKey(0), space)
    value, grads = fast_jit(jax.value_and_grad(loss))(theta)
    assert np.isfinite(value) and _finite(grads)
    assert float(jnp.abs(grads.mappings.temporal_logits).sum()) > 0


def test_hybrid_refuses_another_template(surrogate):
    other = HardwareConfig.preset("gemmini_default").template_spec
    bad = Hybrid(T.Surrogate(surrogate.config, surrogate.params, surrogate.stats,
                             template="eyeriss"))
    with pytest.raises(ConfigError, match="template"):
        bad.check_template(other)


# --------------------------------------------------------------------------- metrics
def test_metrics_pairwise_and_top_k():
    m = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    groups = np.array([0, 0, 0, 1, 1, 1])
    assert pairwise_accuracy(m, m, groups) == 1.0
    assert pairwise_accuracy(m[::-1], m) == 0.0
    p = np.array([1.0, 3.0, 2.0, 4.0, 5.0, 6.0])              # one swap in group 0
    assert pairwise_accuracy(p, m, groups) == pytest.approx(5 / 6)
    assert top_k_recall(p, m, k=1, groups=groups) == 1.0
    assert top_k_recall(m[::-1], m, k=2) == 0.0
    report = fidelity(2 * m, m, groups, k=1)
    assert report["mape"] == pytest.approx(1.0) and report["spearman"] == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        fidelity(np.ones(3), np.ones(2))


def test_rtl_rows_become_tokens_with_layer_groups():
    rows, d = T.read_dataset(RTL, limit=40, array_dim=16)
    assert len(d) == 40 and rows[0].hw.pe_rows == 16
    assert d.tokens.x.shape == (40, F.num_tokens(TEMPLATE), F.NUM_FEATURES)
    assert len(np.unique(d.group)) >= 2
    np.testing.assert_allclose(np.exp(d.log_measured[0]), rows[0].cycles, rtol=1e-5)


def test_rtl_rows_on_the_builds_they_ran_on():
    from accel.dosa_csv import generator_pe_dim

    rows, d = T.read_dataset(RTL, limit=60, array_dim=T.BUILD)
    dims = [r.hw.pe_rows for r in rows]
    assert dims == [generator_pe_dim(r.mapping) for r in rows] == [r.hw.pe_cols for r in rows]
    assert len(set(dims)) > 1 and len(d) == 60
    plain, _ = T.read_dataset(RTL, limit=60)
    warning = T.hardware_warning(plain, None, rtl=True)
    assert warning is not None and "--array-dim (build" in warning
    assert T.hardware_warning(plain, T.BUILD, rtl=True) is None


# --------------------------------------------------------------------------- uncertainty
FAR_LAYERS = [Layer.gemm(M=8192, K_red=8192, N_out=8192),
              Layer.conv2d(R=7, S=7, P=224, Q=224, C=3, K=2048)]
FAR_MAPPINGS = [
    Mapping.from_timeloop("L3[WIO] P512 K512 C8192 - L2[WI] N1 K16X - L1[O] P16 C1X - L0[W] N1"),
    Mapping.from_timeloop("L3[WIO] K128 P224 Q224 R7 S7 - L2[WI] N1 K16X - L1[O] C3X - "
                          "L0[W] N1"),
]


@pytest.fixture(scope="module")
def ensemble():
    """Four tiny members trained on twelve points labelled 2-3x the analytic cycles."""
    tok = F.tokens_of(LAYERS, HW, MAPPINGS)
    rng = np.random.default_rng(0)
    cycles = np.exp(np.tile(tok.log_cycles, 4)) * rng.uniform(2.0, 3.0, 12)
    data = T.dataset_from_points(LAYERS * 4, [HW] * 12, MAPPINGS * 4, cycles)
    cfg = T.TrainConfig(model=ModelConfig(width=8, heads=2, layers=1, mlp_width=8), epochs=20,
                        batch_size=4, patience=100, val_fraction=0.0, ensemble=4)
    return T.train(data, cfg)


def _parts(surrogate, layers, hws, mappings):
    tok = F.tokens_of(layers, hws, mappings)
    raw, _ = T.residual_parts(surrogate.config.model, surrogate.params, surrogate.stats, tok)
    used = np.log(surrogate.predict_tokens(tok)) - np.asarray(tok.log_cycles, np.float64)
    return np.asarray(raw, np.float64), used, surrogate.shrink_tokens(tok)


def test_hybrid_keeps_its_residual_on_the_training_data(ensemble):
    assert np.isfinite(ensemble.stats.tau) and ensemble.stats.tau > 0
    # no validation layers (val_fraction=0): the default multiple of the 95% quantile
    assert ensemble.info["shrink"]["multiple"] == T.TAU_MULTIPLE
    raw, used, kept = _parts(ensemble, LAYERS, HW, MAPPINGS)
    assert np.all(kept > 0.85)
    assert np.all(raw > 0.5)                   # it learned the 2-3x residual (log ~0.9)
    np.testing.assert_allclose(used, raw * kept, rtol=1e-3, atol=1e-4)


def test_hybrid_falls_back_to_analytic_far_from_the_data(ensemble):
    big = HardwareConfig(pe_rows=128, pe_cols=128, sp_kb=8192, acc_kb=4096)
    for layers, hw, mappings in ((FAR_LAYERS, HW, FAR_MAPPINGS), (LAYERS, big, MAPPINGS)):
        raw, used, kept = _parts(ensemble, layers, hw, mappings)
        assert np.all(kept < 0.5)
        # closer to the analytic model than the raw residual would make it
        assert np.all(np.abs(used) < 0.5 * np.abs(raw))


def test_tau_survives_a_checkpoint_and_one_member_has_no_shrink(ensemble, tmp_path):
    loaded = T.load(T.save(ensemble, tmp_path / "m"))
    assert float(loaded.stats.tau) == pytest.approx(float(ensemble.stats.tau))
    one = T.Surrogate(ensemble.config, _first_member(ensemble.params), ensemble.stats)
    _, _, kept = _parts(one, FAR_LAYERS, HW, FAR_MAPPINGS)
    np.testing.assert_allclose(kept, 1.0)


def _first_member(params):
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[:1], params)


_COMPILES: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, _seconds, **_: _COMPILES.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)


def test_a_second_fit_on_more_rows_compiles_nothing(data):
    """sim_hybrid refits a growing dataset with another seed each round: padded rows and a
    traced schedule length make the second fit run the first one's programs."""
    cfg = T.TrainConfig(model=ModelConfig(width=8, heads=2, layers=1, mlp_width=12), epochs=3,
                        batch_size=8, patience=3, val_fraction=0.0, ensemble=2,
                        relative_weight=0.5)
    before = len(_COMPILES)
    first = T.train(data.take(np.arange(9)), cfg)
    compiled = len(_COMPILES) - before
    second = T.train(data, dataclasses.replace(cfg, seed=1, epochs=4), init=first)
    assert compiled > 0 and len(_COMPILES) - before == compiled
    assert second.info["train_rows"] == 12 and len(second.info["history"]) == 4
    assert not np.allclose(jax.tree_util.tree_leaves(first.params)[0],
                           jax.tree_util.tree_leaves(second.params)[0])


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 100, 1000, 1625])
def test_the_bucketed_shuffle_is_jax_permutation(n):
    key = jax.random.PRNGKey(n)
    np.testing.assert_array_equal(T.shuffled(key, n), jax.random.permutation(key, n))


def test_the_traced_schedule_length_gives_optax_cosine_decay_bit_for_bit():
    counts = jnp.arange(800, dtype=jnp.int32)
    for total in (1, 3, 7, 50, 450, 531, 700):
        expected = jax.jit(jax.vmap(optax.cosine_decay_schedule(2e-3, total, 2e-5 / 2e-3)))(counts)
        got = jax.jit(jax.vmap(lambda c, t: T.cosine_lr(2e-3, 2e-5, c, t),
                               in_axes=(0, None)))(counts, np.float32(total))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_padded_rows_count_in_no_loss_nor_gradient(data, surrogate):
    tok, y = data.tokens, np.asarray(data.log_measured)
    pad = T.Tokens(*(np.concatenate([a, a[:4]]) for a in tok))     # 4 rows, other labels
    y_pad = np.concatenate([y, y[:4] + 3.0])
    mask = (np.arange(16) < 12).astype(np.float32)
    params = jax.tree_util.tree_map(lambda a: a[0], surrogate.params)

    @jax.jit
    def loss(t, labels, m):
        return jax.value_and_grad(T.loss_fn)(params, TINY.model, surrogate.stats, t, labels,
                                             0.1, 0.5, m)

    plain, grad = loss(tok, y, None)
    padded, grad_pad = loss(pad, y_pad, mask)
    np.testing.assert_allclose(padded, plain, rtol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(grad), jax.tree_util.tree_leaves(grad_pad)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-8)
