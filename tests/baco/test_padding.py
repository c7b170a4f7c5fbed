"""Awkward dims are searched padded to a smooth size, and the padded designs run the real layer."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import workloads
from baco.codesign_loop import codesign
from baco.config import CodesignConfig, ExperimentConfig
from baco.padding import _is_smooth, _rough_part, search_layer, smooth_size
from baco.simulate import simulate_result
from workloads.errors import ConfigError
from workloads.layer import Layer

TINY = ExperimentConfig.load(Path(__file__).parent / "data" / "tiny.yaml")
NET = workloads.load(TINY.network)
CFG = TINY.codesign


@pytest.mark.parametrize("n", [1, 2, 13, 97, 131, 568, 570, 768, 1000, 1171, 2729, 6074,
                               11008, 18734])
@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.0625, 0.25])
def test_smooth_size_is_the_nearest_smooth_size_within_the_fraction(n, fraction):
    size = smooth_size(n, fraction)
    awkward = _rough_part(n) ** 2 > n
    if size == n:       # not awkward, or nothing smooth in reach
        reach = range(n, int(n * (1 + fraction)) + 1)
        assert not awkward or not any(_is_smooth(m) for m in reach)
    else:
        assert awkward
        assert n < size <= n * (1 + fraction) and _is_smooth(size)
        assert not any(_is_smooth(m) for m in range(n, size))


def test_search_layer_pads_the_awkward_dims_only():
    conv = Layer.conv2d(R=3, S=3, P=568, Q=570, C=131, K=11008, N=1)
    padded = search_layer(conv, 0.0625)
    assert (padded.R, padded.S, padded.P, padded.Q, padded.C, padded.K) == (3, 3, 576, 570, 135,
                                                                             11008)
    assert search_layer(conv, 0.0) is conv
    grouped = Layer.conv2d(R=3, S=3, P=55, Q=55, C=1, K=1, N=1, groups=131)
    assert search_layer(grouped, 0.0625) is grouped
    gemv = Layer.gemm(M=1, K_red=1171, N_out=64)
    assert (search_layer(gemv, 0.0625).kind, search_layer(gemv, 0.0625).C) == ("gemv", 1176)


def test_codesign_pads_a_prime_dim_and_its_programs_compute_the_real_layer():
    """The tiny BERT with its FFN width a prime, 3067 (the config and shapes of test_codesign:
    one compilation)."""
    layers = list(NET.layers)
    layers[3] = dataclasses.replace(layers[3], K=3067)
    layers[4] = dataclasses.replace(layers[4], C=3067)
    net = dataclasses.replace(NET, name="bert_prime", layers=tuple(layers), epilogues=None,
                              chains=())
    padded = codesign(net, config=CFG)
    exact = codesign(net, config=CFG.replace(pad_fraction=0.0))
    assert [r.layer for r in padded.layers] == layers         # the network's own layers
    ffn = padded.layers[3].mapping
    assert (ffn.temporal * ffn.spatial).prod(axis=0)[5] == 3072    # K searched as 3072
    assert exact.layers[3].mapping.spatial[:, 5].prod() == 1       # exact: K on one column
    assert ffn.spatial[:, 5].prod() > 1
    assert padded.edp < exact.edp
    (record,) = simulate_result(padded, check=True, layers=[3])
    assert record.checked and record.ok


def test_pad_fraction_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="pad_fraction"):
        CodesignConfig(pad_fraction=1.5)
    with pytest.raises(ConfigError, match="pad_fraction"):
        CodesignConfig(pad_fraction=-0.1)
    assert np.isclose(CodesignConfig().pad_fraction, 0.0625)
