"""Baseline searches, each returning a `baco.result.CodesignResult` with the same sample
accounting (one sample = one whole-network point, hardware + one mapping per unique layer,
scored by the exact model).

Every baseline is called the same way, ``BASELINES[name](network, budget_samples=..., seed=...,
**options)``:

* ``random``: random Gemmini hardware and random valid mappings (DOSA's protocol);
* ``bo``: nested Gaussian-process LCB search over hardware and mappings (DOSA's bo.py);
* ``gemmini_default``: Gemmini's library tiler (``tiled_matmul_auto``, ``tiled_conv_auto``) on
  ``gemmini_default``, one sample;
* ``random_pruned``: a Timeloop-like random-pruned mapper on fixed hardware (``hardware=``
  ``"eyeriss"``, ``"nvdla_small"``, ``"nvdla_large"`` or a Gemmini preset);
* ``dosa``: DOSA-style gradient descent (`baco.search.dosa`).

What every gradient search shares lives here too: start points (`baco.search.starts`) and
the descent step (`baco.search.descent`).

>>> sorted(BASELINES)
['bo', 'dosa', 'gemmini_default', 'random', 'random_pruned']
"""

from collections.abc import Callable

from baco.result import CodesignResult
from baco.search._space import MappingSampler
from baco.search.bayes_opt import bayes_opt
from baco.search.descent import decode_many, make_optimizer, run_round
from baco.search.dosa import dosa
from baco.search.gemmini_tiler import (
    gemmini_default,
    gemmini_mapping,
    tiled_conv_auto,
    tiled_matmul_auto,
)
from baco.search.random_pruned import random_pruned
from baco.search.random_search import random_search
from baco.search.starts import (
    base_hardware,
    outermost_mapping,
    random_hardware_within,
    resolve_network,
    start_mappings,
)

BASELINES: dict[str, Callable[..., CodesignResult]] = {
    "random": random_search,
    "bo": bayes_opt,
    "gemmini_default": gemmini_default,
    "random_pruned": random_pruned,
    "dosa": dosa,
}

__all__ = [
    "BASELINES",
    "MappingSampler",
    "base_hardware",
    "bayes_opt",
    "decode_many",
    "dosa",
    "gemmini_default",
    "gemmini_mapping",
    "make_optimizer",
    "outermost_mapping",
    "random_hardware_within",
    "random_pruned",
    "random_search",
    "resolve_network",
    "run_round",
    "start_mappings",
    "tiled_conv_auto",
    "tiled_matmul_auto",
]
