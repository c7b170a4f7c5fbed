"""Operator benchmark suites: the seed thesis's GEMM/GEMV/conv tables and fusion chains.

Each case is a small `Network` named like ``gemm/017`` (one layer) or ``G3`` (a two-layer
chain). Sampled suites are deterministic for a seed and differ between seeds; the default
returns the thesis's evaluated subset, ``full=True`` the whole table.

**gemm, gemv** - seed 001 (Yang Bai, PhD thesis, CUHK 2024), Table 6.4: six rows of (M, N, K)
ranges with 100, 88, 64, 98, 66, 128 cases (544), and the evaluated subsets "170 cases from the
GEMM benchmark, 174 cases from the GEMV benchmark" (L2172). The table does not say which rows
are GEMV. GEMV means M = 1, and only rows 1-2 (M in [1, 256]) admit it; 174 GEMV cases need at
least 174 such cases, and rows 1-2 hold 188. So: rows 1-2 are the GEMV suite (M = 1; N and K
from the row), rows 3-6 the GEMM suite (356 cases). Sizes are drawn log-uniformly over the
integers of each range. A GEMM (M x K) @ (K x N) is ``Layer.gemm(M=M, K_red=K, N_out=N)``.

**conv1d, conv2d** - Table 6.5: nine rows of (source network, feature-map range, filter size)
with 846 cases, and evaluated subsets of 68 Conv1D and 128 Conv2D cases. The thesis gives no
channels, strides or 1-D/2-D split; our choices:

* split: each row's cases are divided between the two suites in the evaluated ratio 68:128
  (largest remainder), 294 conv1d + 552 conv2d in all;
* feature map: the input size H (= W for conv2d; the length for conv1d), log-uniform in the
  row's range; padding "same" (k // 2), so the output is ceil(H / stride);
* channels C and K: drawn independently and uniformly from the powers of two in 16..2048 that
  occur as channel counts in the source network's DOSA layer list (ucb-bar/dosa
  ``dataset/workloads/{unet,resnet50,retinanet}``, reproduced by our zoo): U-Net 64..1024,
  ResNet-50 64..2048, RetinaNet 256..2048;
* stride: 2 with the probability that a layer of that kernel size is strided in that network's
  layer list (ResNet-50: 3 of 16 3x3 convs, 3 of 36 1x1 convs; RetinaNet: 2 of 22 3x3 convs,
  0 of 5 1x1; U-Net: none), else 1;
* conv1d runs along the H axis (Q = S = 1), as `workloads.layer` defines it; batch N = 1.

The evaluated subset is drawn from the full set of the same seed, stratified by row (each
row's share by largest remainder), and keeps the full set's case names, so ``gemm/017`` is the
same shape whether ``full`` is set or not.

**bmm_chain** G1-G12 and **conv_chain** C1-C8 - seed 000 (AI-chip compilation thesis), Tables
3.5 and 3.6, verbatim. A BMM chain is GEMM1 (batch, M, K) x (batch, K, L) then GEMM2
(batch, M, L) x (batch, L, N); the batch becomes the loop nest's N. A conv chain is conv1
(batch, IC, H, W) x (OC1, IC, k1, k1) with stride st1, then conv2 on (batch, OC1, floor(H/st1),
floor(W/st1)) x (OC2, OC1, k2, k2) with stride st2. The table's floor(H/st1) fixes conv1's
output size, which "same" padding (k // 2 on every side) matches for the even sizes; for C2
(H = 147, st1 = 2) and C5 (227, st1 = 4) PyTorch-style same padding would give ceil(H/st1),
and we keep the table's floor, so the window leaves the last input rows unread. The table has
no batch column: batch 1. Each chain network records its one `Chain` (positions 0 -> 1, no
op between: Chimera's tables are the bare products).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from workloads.errors import WorkloadError
from workloads.fusion import Chain, chain_kind
from workloads.layer import Layer
from workloads.network import Network

__all__ = ["BMM_CHAINS", "CONV_CHAINS", "CONV_ROWS", "GEMM_ROWS", "SUITE_SUMMARIES", "suite",
           "suite_names"]

# Table 6.4: ((M lo, hi), (N lo, hi), (K lo, hi), cases). Rows 0-1 are GEMV, 2-5 GEMM.
GEMM_ROWS = (
    ((1, 256), (1, 256), (1, 256), 100),
    ((1, 256), (1, 256), (257, 65536), 88),
    ((257, 1024), (1, 256), (1, 65536), 64),
    ((257, 1024), (257, 65536), (1, 65536), 98),
    ((1025, 8192), (1, 256), (1, 65536), 66),
    ((1025, 8192), (257, 8192), (1, 65536), 128),
)
GEMV_ROWS = (0, 1)
GEMM_ONLY_ROWS = (2, 3, 4, 5)

# Table 6.5: (source network, (fmap lo, hi), filter size, cases).
CONV_ROWS = (
    ("unet", (280, 568), 3, 80),
    ("unet", (56, 138), 3, 88),
    ("unet", (8, 52), 1, 64),
    ("resnet50", (56, 120), 1, 80),
    ("resnet50", (32, 80), 3, 120),
    ("resnet50", (4, 40), 1, 68),
    ("resnet50", (2, 30), 3, 140),
    ("retinanet", (2, 28), 1, 98),
    ("retinanet", (2, 28), 3, 108),
)
# Powers of two in 16..2048 that occur as C or K in each network's DOSA layer list.
CONV_CHANNELS = {
    "unet": (64, 128, 256, 512, 1024),
    "resnet50": (64, 128, 256, 512, 1024, 2048),
    "retinanet": (256, 512, 1024, 2048),
}
# (strided layers, layers) of each kernel size in each network's DOSA layer list.
CONV_STRIDED = {
    ("unet", 3): (0, 18), ("unet", 1): (0, 1),
    ("resnet50", 3): (3, 16), ("resnet50", 1): (3, 36),
    ("retinanet", 3): (2, 22), ("retinanet", 1): (0, 5),
}

# Evaluated subset sizes (seed 001, L2172) and the full counts they are drawn from.
EVALUATED = {"gemm": 170, "gemv": 174, "conv1d": 68, "conv2d": 128}

# Table 3.5: (id, batch, M, N, K, L, source).
BMM_CHAINS = (
    ("G1", 8, 512, 64, 64, 512, "Bert-Small"),
    ("G2", 12, 512, 64, 64, 512, "Bert-Base"),
    ("G3", 16, 512, 64, 64, 512, "Bert-Large"),
    ("G4", 12, 256, 64, 64, 256, "ViT-Base/14"),
    ("G5", 16, 256, 64, 64, 256, "ViT-Large/14"),
    ("G6", 16, 256, 80, 80, 256, "ViT-Huge/14"),
    ("G7", 12, 208, 64, 64, 208, "ViT-Base/16"),
    ("G8", 16, 208, 64, 64, 208, "ViT-Large/16"),
    ("G9", 16, 208, 80, 80, 208, "ViT-Huge/16"),
    ("G10", 1, 512, 64, 64, 256, "MLP-Mixer"),
    ("G11", 1, 768, 64, 64, 384, "MLP-Mixer"),
    ("G12", 1, 1024, 64, 64, 512, "MLP-Mixer"),
)

# Table 3.6: (id, IC, H, W, OC1, OC2, st1, st2, k1, k2).
CONV_CHAINS = (
    ("C1", 64, 112, 112, 192, 128, 2, 1, 3, 1),
    ("C2", 32, 147, 147, 64, 80, 2, 1, 3, 1),
    ("C3", 64, 56, 56, 128, 64, 1, 1, 3, 1),
    ("C4", 128, 28, 28, 256, 128, 1, 1, 3, 1),
    ("C5", 16, 227, 227, 64, 16, 4, 1, 3, 1),
    ("C6", 64, 56, 56, 64, 64, 1, 1, 1, 3),
    ("C7", 64, 56, 56, 64, 64, 1, 1, 1, 1),
    ("C8", 256, 56, 56, 256, 64, 1, 1, 1, 1),
)

# Independent random stream per suite: default_rng([seed, key]).
_STREAM = {"gemm": 1, "gemv": 2, "conv1d": 3, "conv2d": 4}


def _largest_remainder(total: int, weights: Sequence[int]) -> list[int]:
    """Integer shares of ``total`` proportional to ``weights`` (Hamilton's method)."""
    exact = [total * w / sum(weights) for w in weights]
    shares = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (shares[i] - exact[i], i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer in [lo, hi] with P(v) proportional to log((v + 1) / v)."""
    return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))


def _conv_row_counts(kind: str) -> list[int]:
    """Each Table 6.5 row's cases in the conv1d or conv2d suite (full set)."""
    counts = [row[3] for row in CONV_ROWS]
    total = sum(counts)
    n1d = _largest_remainder(total, [EVALUATED["conv1d"], EVALUATED["conv2d"]])[0]
    conv1d = _largest_remainder(n1d, counts)
    return conv1d if kind == "conv1d" else [c - d for c, d in zip(counts, conv1d)]


def _gemm_case(rng: np.random.Generator, row: int, gemv: bool, name: str) -> Layer:
    (m_lo, m_hi), (n_lo, n_hi), (k_lo, k_hi), _ = GEMM_ROWS[row]
    m = 1 if gemv else _log_uniform(rng, m_lo, m_hi)
    n = _log_uniform(rng, n_lo, n_hi)
    k = _log_uniform(rng, k_lo, k_hi)
    return Layer.gemm(M=m, K_red=k, N_out=n, name=name)


def _conv_case(rng: np.random.Generator, row: int, one_d: bool, name: str) -> Layer:
    net, (lo, hi), k, _ = CONV_ROWS[row]
    size = _log_uniform(rng, lo, hi)
    c, out = (int(rng.choice(CONV_CHANNELS[net])) for _ in range(2))
    strided, layers = CONV_STRIDED[(net, k)]
    stride = 2 if rng.random() < strided / layers else 1
    pad = k // 2
    p = (size + 2 * pad - k) // stride + 1
    if one_d:
        return Layer.conv1d(R=k, P=p, C=c, K=out, stride=stride, pads=(pad, 0, pad, 0),
                            name=name)
    return Layer.conv2d(R=k, S=k, P=p, Q=p, C=c, K=out, Hstride=stride, Wstride=stride,
                        pads=(pad,) * 4, name=name)


def _sampled(kind: str, seed: int, full: bool) -> tuple[Network, ...]:
    rng = np.random.default_rng([seed, _STREAM[kind]])
    if kind in ("gemm", "gemv"):
        rows = GEMV_ROWS if kind == "gemv" else GEMM_ONLY_ROWS
        counts = [GEMM_ROWS[r][3] for r in rows]
        make: Callable[[int, str], Layer] = (
            lambda r, name: _gemm_case(rng, r, kind == "gemv", name))
    else:
        rows = tuple(range(len(CONV_ROWS)))
        counts = _conv_row_counts(kind)
        make = lambda r, name: _conv_case(rng, r, kind == "conv1d", name)  # noqa: E731
    cases: list[list[Layer]] = []
    index = 0
    for row, count in zip(rows, counts):
        cases.append([])
        for _ in range(count):
            cases[-1].append(make(row, f"{kind}/{index:03d}"))
            index += 1
    if full:
        chosen = [layer for row in cases for layer in row]
    else:
        chosen = []
        for row, share in zip(cases, _largest_remainder(EVALUATED[kind], counts)):
            picks = sorted(rng.choice(len(row), size=share, replace=False))
            chosen += [row[i] for i in picks]
    return tuple(Network.from_layers(layer.name, [layer]) for layer in chosen)


def _bmm_chains() -> tuple[Network, ...]:
    nets = []
    for cid, batch, m, n, k, l_, _ in BMM_CHAINS:
        first = Layer.gemm(M=m, K_red=k, N_out=l_, batch=batch, name=f"{cid}/gemm1")
        second = Layer.gemm(M=m, K_red=l_, N_out=n, batch=batch, name=f"{cid}/gemm2")
        nets.append(_chain_network(cid, first, second))
    return tuple(nets)


def _conv_chains() -> tuple[Network, ...]:
    nets = []
    for cid, ic, h, w, oc1, oc2, st1, st2, k1, k2 in CONV_CHAINS:
        p1, q1 = h // st1, w // st1
        first = Layer.conv2d(R=k1, S=k1, P=p1, Q=q1, C=ic, K=oc1, Hstride=st1, Wstride=st1,
                             pads=(k1 // 2,) * 4, name=f"{cid}/conv1")
        second = Layer.conv2d(R=k2, S=k2, P=p1 // st2, Q=q1 // st2, C=oc1, K=oc2,
                              Hstride=st2, Wstride=st2, pads=(k2 // 2,) * 4,
                              name=f"{cid}/conv2")
        nets.append(_chain_network(cid, first, second))
    return tuple(nets)


def _chain_network(cid: str, first: Layer, second: Layer) -> Network:
    """The two layers of a Table 3.5/3.6 row, with the chain they form."""
    kind = chain_kind(first, second)
    if kind is None:
        raise WorkloadError(f"suite chain {cid}: {first.name} does not feed {second.name}")
    return Network.from_layers(cid, [first, second],
                               chains=[Chain(kind, (0, 1), (first.name, second.name))])


SUITE_SUMMARIES = {
    "gemm": "GEMMs with M > 256, sizes drawn from the seed thesis's Table 6.4 (rows 3-6)",
    "gemv": "GEMVs (M = 1), sizes drawn from Table 6.4 (rows 1-2)",
    "conv1d": "1-D convolutions over U-Net, ResNet-50 and RetinaNet feature maps (Table 6.5)",
    "conv2d": "2-D convolutions over U-Net, ResNet-50 and RetinaNet feature maps (Table 6.5)",
    "bmm_chain": "two batched GEMMs, the second on the first's output, for fusion (Table 3.5)",
    "conv_chain": "two convolutions, the second on the first's output, for fusion (Table 3.6)",
}
"""One line per suite, for listings (`baco workloads list`)."""

_SUITES = tuple(SUITE_SUMMARIES)


def suite_names() -> list[str]:
    """The names `suite` accepts."""
    return list(_SUITES)


def suite(name: str, seed: int = 0, full: bool = False) -> tuple[Network, ...]:
    """The cases of one benchmark suite, each a one- or two-layer `Network`.

    Args:
      name: one of `suite_names()`.
      seed: seeds the sampled suites (gemm, gemv, conv1d, conv2d); the chains are fixed.
      full: the whole Table 6.4/6.5 share instead of the evaluated subset (sampled suites).

    >>> [net.name for net in suite("bmm_chain")][:3]
    ['G1', 'G2', 'G3']
    >>> len(suite("gemv")), len(suite("gemv", full=True))
    (174, 188)
    """
    if name not in _SUITES:
        raise WorkloadError(f"unknown suite {name!r}; known suites: {', '.join(_SUITES)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise WorkloadError(f"suite {name!r}: seed must be a non-negative integer, got {seed!r}")
    if name == "bmm_chain":
        return _bmm_chains()
    if name == "conv_chain":
        return _conv_chains()
    return _sampled(name, int(seed), bool(full))
