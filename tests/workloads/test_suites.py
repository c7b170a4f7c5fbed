"""Benchmark suites: sizes, determinism, ranges, and the chains' shapes from the seed tables."""

from __future__ import annotations

import itertools
import math

import pytest

from workloads.errors import WorkloadError
from workloads.suites import suite, suite_names

SAMPLED = ("gemm", "gemv", "conv1d", "conv2d")

# Seed 001 Table 6.4, typed from the reference: (M range, N range, K range, cases).
TABLE_6_4 = [((1, 256), (1, 256), (1, 256), 100),
             ((1, 256), (1, 256), (257, 65536), 88),
             ((257, 1024), (1, 256), (1, 65536), 64),
             ((257, 1024), (257, 65536), (1, 65536), 98),
             ((1025, 8192), (1, 256), (1, 65536), 66),
             ((1025, 8192), (257, 8192), (1, 65536), 128)]
# Seed 001 Table 6.5: (network, fmap range, filter, cases).
TABLE_6_5 = [("unet", (280, 568), 3, 80), ("unet", (56, 138), 3, 88), ("unet", (8, 52), 1, 64),
             ("resnet50", (56, 120), 1, 80), ("resnet50", (32, 80), 3, 120),
             ("resnet50", (4, 40), 1, 68), ("resnet50", (2, 30), 3, 140),
             ("retinanet", (2, 28), 1, 98), ("retinanet", (2, 28), 3, 108)]
# Seed 000 Table 3.5: id -> (batch, M, N, K, L).
TABLE_3_5 = {"G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512),
             "G3": (16, 512, 64, 64, 512), "G4": (12, 256, 64, 64, 256),
             "G5": (16, 256, 64, 64, 256), "G6": (16, 256, 80, 80, 256),
             "G7": (12, 208, 64, 64, 208), "G8": (16, 208, 64, 64, 208),
             "G9": (16, 208, 80, 80, 208), "G10": (1, 512, 64, 64, 256),
             "G11": (1, 768, 64, 64, 384), "G12": (1, 1024, 64, 64, 512)}
# Seed 000 Table 3.6: id -> (IC, H, W, OC1, OC2, st1, st2, k1, k2).
TABLE_3_6 = {"C1": (64, 112, 112, 192, 128, 2, 1, 3, 1), "C2": (32, 147, 147, 64, 80, 2, 1, 3, 1),
             "C3": (64, 56, 56, 128, 64, 1, 1, 3, 1), "C4": (128, 28, 28, 256, 128, 1, 1, 3, 1),
             "C5": (16, 227, 227, 64, 16, 4, 1, 3, 1), "C6": (64, 56, 56, 64, 64, 1, 1, 1, 3),
             "C7": (64, 56, 56, 64, 64, 1, 1, 1, 1), "C8": (256, 56, 56, 256, 64, 1, 1, 1, 1)}


def _layer(net):
    assert net.total_layers == 1 and net.unique_layers == 1
    return net.layers[0]


def _index(net) -> int:
    return int(net.name.split("/")[1])


def test_names_and_unknown_suite():
    assert suite_names() == ["gemm", "gemv", "conv1d", "conv2d", "bmm_chain", "conv_chain"]
    with pytest.raises(WorkloadError, match="known suites: gemm, gemv"):
        suite("gemmm")


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_bad_seed(seed):
    with pytest.raises(WorkloadError, match="seed"):
        suite("gemm", seed=seed)


@pytest.mark.parametrize("name, evaluated, full", [
    ("gemm", 170, 356), ("gemv", 174, 188), ("conv1d", 68, 294), ("conv2d", 128, 552)])
def test_case_counts(name, evaluated, full):
    assert len(suite(name)) == evaluated
    assert len(suite(name, full=True)) == full


def test_full_sets_cover_the_tables():
    assert len(suite("gemm", full=True)) + len(suite("gemv", full=True)) == sum(
        row[3] for row in TABLE_6_4) == 544
    assert len(suite("conv1d", full=True)) + len(suite("conv2d", full=True)) == sum(
        row[3] for row in TABLE_6_5) == 846


@pytest.mark.parametrize("name", SAMPLED)
def test_deterministic_per_seed_and_different_across_seeds(name):
    def shapes(nets):
        return [(n.name, n.layers[0].key()) for n in nets]
    assert shapes(suite(name, seed=3)) == shapes(suite(name, seed=3))
    assert shapes(suite(name, seed=3)) != shapes(suite(name, seed=4))
    assert shapes(suite(name, seed=3, full=True)) != shapes(suite(name, seed=4, full=True))


@pytest.mark.parametrize("name", SAMPLED)
def test_evaluated_subset_is_drawn_from_the_full_set(name):
    full = {n.name: n.layers[0] for n in suite(name, seed=7, full=True)}
    subset = suite(name, seed=7)
    assert all(full[n.name] == n.layers[0] for n in subset)
    assert len({n.name for n in subset}) == len(subset)
    names = [n.name for n in subset]
    assert names == sorted(names)


def _rows(counts):
    """Full-set index -> row, given each row's case count."""
    return list(itertools.chain.from_iterable([r] * c for r, c in enumerate(counts)))


@pytest.mark.parametrize("seed", [0, 1])
def test_gemv_cases_use_rows_1_2_with_m_1(seed):
    nets = suite("gemv", seed=seed, full=True)
    row_of = _rows([100, 88])
    for net in nets:
        layer = _layer(net)
        (_, (n_lo, n_hi), (k_lo, k_hi), _) = TABLE_6_4[row_of[_index(net)]]
        assert layer.kind == "gemv" and layer.P == 1 and layer.N == 1
        assert n_lo <= layer.K <= n_hi and k_lo <= layer.C <= k_hi
    # Row 2's K range starts above row 1's: both rows are present.
    assert sum(_layer(n).C > 256 for n in nets) == 88


@pytest.mark.parametrize("seed", [0, 1])
def test_gemm_cases_respect_rows_3_to_6(seed):
    nets = suite("gemm", seed=seed, full=True)
    row_of = _rows([64, 98, 66, 128])
    per_row = [0, 0, 0, 0]
    for net in nets:
        layer = _layer(net)
        row = row_of[_index(net)]
        per_row[row] += 1
        (m_lo, m_hi), (n_lo, n_hi), (k_lo, k_hi), _ = TABLE_6_4[row + 2]
        assert layer.kind == "gemm" and (layer.R, layer.S, layer.Q, layer.N) == (1, 1, 1, 1)
        assert m_lo <= layer.P <= m_hi and n_lo <= layer.K <= n_hi and k_lo <= layer.C <= k_hi
    assert per_row == [64, 98, 66, 128]
    # Log-uniform over [1, 65536]: about half the K values fall below 2^8 (sqrt of the range).
    small = sum(_layer(n).C <= 256 for n in nets) / len(nets)
    assert 0.35 < small < 0.65


CHANNELS = {"unet": {64, 128, 256, 512, 1024},
            "resnet50": {64, 128, 256, 512, 1024, 2048},
            "retinanet": {256, 512, 1024, 2048}}


@pytest.mark.parametrize("name", ["conv1d", "conv2d"])
def test_conv_cases_respect_table_6_5(name):
    nets = suite(name, seed=0, full=True)
    seen_rows, strided = set(), {"unet": 0, "resnet50": 0, "retinanet": 0}
    # Row boundaries are not visible in a case; check each case against the row that its
    # kernel, channels and size admit, and that every row's kernel size occurs.
    for net in nets:
        layer = _layer(net)
        assert layer.kind == name and layer.N == 1
        if name == "conv1d":
            assert (layer.S, layer.Q) == (1, 1)
        else:
            assert layer.S == layer.R and layer.Q == layer.P and layer.Wstride == layer.Hstride
        stride = layer.Hstride
        assert stride in (1, 2) and layer.R in (1, 3)
        assert layer.pads[0] == layer.R // 2
        fits = [net_name for net_name, (lo, hi), k, _ in TABLE_6_5
                if k == layer.R and math.ceil(lo / stride) <= layer.P <= math.ceil(hi / stride)
                and {layer.C, layer.K} <= CHANNELS[net_name]]
        assert fits, f"{net.name} {layer.dims} fits no Table 6.5 row"
        seen_rows.update((f, layer.R) for f in fits)
        if stride == 2:
            assert set(fits) != {"unet"}, "U-Net has no strided convs"
            for f in fits:
                strided[f] += 1
    assert {(n, k) for n, _, k, _ in TABLE_6_5} <= seen_rows
    assert strided["resnet50"] > 0


def test_bmm_chains_are_table_3_5():
    nets = suite("bmm_chain")
    assert [n.name for n in nets] == [f"G{i}" for i in range(1, 13)]
    for net in nets:
        batch, m, n, k, l_ = TABLE_3_5[net.name]
        first, second = (net.layers[j] for j in net.order)
        assert net.total_layers == 2
        assert (first.N, first.P, first.C, first.K) == (batch, m, k, l_)
        assert (second.N, second.P, second.C, second.K) == (batch, m, l_, n)
        assert first.K == second.C  # GEMM2 consumes GEMM1's output
        assert first.macs == second.macs == batch * m * k * l_


def test_conv_chains_are_table_3_6():
    nets = suite("conv_chain")
    assert [n.name for n in nets] == [f"C{i}" for i in range(1, 9)]
    for net in nets:
        ic, h, w, oc1, oc2, st1, st2, k1, k2 = TABLE_3_6[net.name]
        first, second = (net.layers[j] for j in net.order)
        assert net.total_layers == 2
        assert (first.C, first.K, first.R, first.S, first.Hstride) == (ic, oc1, k1, k1, st1)
        assert (first.P, first.Q) == (h // st1, w // st1)
        assert (second.C, second.K, second.R, second.S, second.Hstride) == (oc1, oc2, k2, k2,
                                                                             st2)
        assert (second.P, second.Q) == (h // st1 // st2, w // st1 // st2)
        assert first.pads == (k1 // 2,) * 4 and second.pads == (k2 // 2,) * 4
        # The window never reads past the "same"-padded input.
        assert first.input_height <= h + 2 * (k1 // 2)
    c7 = nets[6]
    assert c7.unique_layers == 1 and c7.counts == (2,)  # two identical 1x1 convs


def test_chains_ignore_seed_and_full():
    assert suite("bmm_chain", seed=5, full=True) == suite("bmm_chain")
    assert suite("conv_chain", seed=5) == suite("conv_chain")
