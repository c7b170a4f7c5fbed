"""Machinery the baseline searches share: vectorized random mappings, batched exact scoring,
the running-best history, and the result assembly.

Why here and not one `Mapping.random` call per mapping: the baselines draw and score
10^5-10^6 mappings, and a Python-level draw costs ~1.4 ms while the vmapped exact model costs
~2 us. `MappingSampler` draws whole batches with numpy using `Mapping.random`'s distribution
(each dim split into random divisors over the slots the template allows, slots visited in random
order, the smaller of two uniform divisor draws, a spatial factor within the fan-out its level
has left; random loop orders; 1-2 stages) and keeps those whose tiles fit, by the same footprint
formula `Mapping.footprint_kb` uses (`accel.mapping.footprint_kb`).

`score` runs `perfmodels.analytic.evaluate_batch`, the jitted, vmapped exact model that
`perfmodels.analytic.exact_batch` also calls, on arrays packed exactly as
`perfmodels.analytic.pack_mapping` packs one `Mapping`; batches are padded to a few fixed sizes
so that jit compiles once per template and size.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from accel.arch import MAX_STAGES, HardwareConfig, HwParams, level_arrays, tensor_bits
from accel.design import design_of
from accel.mapping import Mapping, footprint_kb, layer_geometry, tile_words
from baco.errors import ConfigError, InfeasibleError
from baco.networks import load_network
from baco.result import CodesignResult, HistoryPoint, LayerResult
from baco.topk import DEFAULT_TOP_K, Entry, design_key, offer, would_enter
from perfmodels.accesses import LayerArrays, MappingArrays, order_rank
from perfmodels.analytic import evaluate_batch, exact, pack_layer
from perfmodels.score import network_totals
from workloads.layer import DIMS, Layer
from workloads.network import Network

NUM_DIMS = len(DIMS)
_BUCKETS = (512, 4096)
"""Padded batch sizes for `score`: larger batches go in chunks of the largest."""


# --------------------------------------------------------------------------- batches
class MappingBatch(NamedTuple):
    """Many mappings of one layer as arrays (leading axis: mappings).

    ``temporal``, ``spatial``, ``order``: ``[n, level, dim]`` int64, laid out as in
    `accel.mapping.Mapping` (level 0 innermost; ``order`` lists dims outermost first);
    ``stages``: ``[n, level]``.
    """

    temporal: np.ndarray
    spatial: np.ndarray
    order: np.ndarray
    stages: np.ndarray

    @property
    def size(self) -> int:
        return int(self.temporal.shape[0])

    def take(self, index: np.ndarray | Sequence[int] | slice) -> MappingBatch:
        return MappingBatch(*(np.asarray(a)[index] for a in self))

    def mapping(self, i: int, tags: tuple[str, ...]) -> Mapping:
        return Mapping(temporal=self.temporal[i], spatial=self.spatial[i],
                       order=self.order[i], stages=self.stages[i], tags=tags)

    def keys(self) -> list[bytes]:
        """One hashable key per mapping (the arrays' bytes), for de-duplication."""
        parts = (self.temporal, self.spatial, self.order, self.stages)
        flat = np.concatenate([a.reshape(self.size, math.prod(a.shape[1:])) for a in parts],
                              axis=1).astype(np.int32)  # explicit widths: a batch may be empty
        return [row.tobytes() for row in flat]

    @staticmethod
    def concat(batches: Sequence[MappingBatch]) -> MappingBatch:
        return MappingBatch(*(np.concatenate(parts) for parts in zip(*batches)))


def _divisors(n: int) -> np.ndarray:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return np.array(sorted(set(small + [n // i for i in small])), dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class _DimTables:
    """Divisor lattice of one loop bound: ``divs`` sorted; ``divides[i, j]``: divs[j] | divs[i];
    ``quotient[i, j]``: index of divs[i] / divs[j] in ``divs`` (-1 if it does not divide)."""

    divs: np.ndarray
    divides: np.ndarray
    quotient: np.ndarray

    @classmethod
    def build(cls, bound: int) -> _DimTables:
        divs = _divisors(bound)
        divides = divs[:, None] % divs[None, :] == 0
        quot = np.where(divides, divs[:, None] // divs[None, :], 0)
        index = {int(v): i for i, v in enumerate(divs)}
        quotient = np.vectorize(lambda q: index.get(int(q), -1), otypes=[np.int64])(quot)
        return cls(divs=divs, divides=divides, quotient=quotient)

    def index_of(self, values: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.divs, values)


class MappingSampler:
    """Random mappings of one layer on one hardware configuration, drawn in batches.

    >>> from accel.arch import HardwareConfig
    >>> hw = HardwareConfig.preset("gemmini_default")
    >>> layer = Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64)
    >>> batch = MappingSampler(layer, hw).sample(8, np.random.default_rng(0))
    >>> batch.size, batch.mapping(0, hw.template_spec.tags).fits(layer, hw)
    (8, True)
    """

    def __init__(self, layer: Layer, hw: HardwareConfig) -> None:
        self.layer = layer
        self.hw = hw
        self.template = hw.template_spec
        self.tags = self.template.tags
        self.levels = self.template.num_levels
        arrays = level_arrays(self.template, hw.to_params(), np)
        self.fanout = np.asarray(arrays.fanout, np.float64)
        self.capacity_kb = np.asarray(arrays.capacity_kb, np.float64)
        self.bits = np.asarray(tensor_bits(hw.to_params(), np), np.float64)
        self.keeps = self.template.keeps_mask
        dims, stride, dilation = layer_geometry(layer)
        self.dims = dims.astype(np.int64)
        self.stride = stride.astype(np.float64)
        self.dilation = dilation.astype(np.float64)
        self.tables = [_DimTables.build(int(b)) for b in self.dims]
        top = self.levels - 1
        self.spatial_slots = [[l for l in range(self.levels) if self.template.spatial_mask[l, d]]
                              for d in range(NUM_DIMS)]
        self.temporal_slots = [[l for l in range(top) if self.template.temporal_mask[l, d]]
                               for d in range(NUM_DIMS)]

    # ------------------------------------------------------------------ drawing
    def draw(self, n: int, rng: np.random.Generator, stages: int | None = None,
             spatial_options: np.ndarray | None = None) -> MappingBatch:
        """`n` random mappings, fitting or not.

        With `spatial_options` (``[m, level, dim]``), each mapping takes one of those spatial
        assignments uniformly and only its temporal factors are random.
        """
        L = self.levels
        temporal = np.ones((n, L, NUM_DIMS), np.int64)
        if spatial_options is None:
            spatial = np.ones((n, L, NUM_DIMS), np.int64)
        else:
            spatial = np.asarray(spatial_options, np.int64)[
                rng.integers(len(spatial_options), size=n)].copy()
        for d in range(NUM_DIMS):
            tab = self.tables[d]
            left = tab.index_of(self.dims[d] // spatial[:, :, d].prod(1))
            slots = [(l, True) for l in self.spatial_slots[d]] if spatial_options is None else []
            slots += [(l, False) for l in self.temporal_slots[d]]
            if slots:
                visit = np.argsort(rng.random((n, len(slots))), axis=1)
                for pos in range(len(slots)):
                    for s, (l, is_spatial) in enumerate(slots):
                        sel = np.flatnonzero(visit[:, pos] == s)
                        if sel.size == 0:
                            continue
                        mask = tab.divides[left[sel]]
                        if is_spatial:
                            room = self.fanout[l] / spatial[sel, l].prod(-1)
                            mask = mask & (tab.divs[None, :] <= room[:, None] + 1e-9)
                        count = mask.sum(1)
                        draw = np.minimum(rng.integers(count), rng.integers(count))
                        j = np.argmax(np.cumsum(mask, axis=1) > draw[:, None], axis=1)
                        (spatial if is_spatial else temporal)[sel, l, d] = tab.divs[j]
                        left[sel] = tab.quotient[left[sel], j]
            temporal[:, L - 1, d] = tab.divs[left]
        order, st = self.orders_and_stages(n, rng, stages)
        return MappingBatch(temporal, spatial, order, st)

    def orders_and_stages(self, n: int, rng: np.random.Generator,
                          stages: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Random loop orders (``[n, level, dim]``) and stages (``[n, level]``: 1 or 2 below
        the outermost level unless `stages` fixes them)."""
        L = self.levels
        order = np.argsort(rng.random((n, L, NUM_DIMS)), axis=-1)
        if stages is None:
            st = rng.integers(1, 3, size=(n, L))
        else:
            if isinstance(stages, bool) or not 1 <= int(stages) <= MAX_STAGES:
                raise ConfigError(f"stages must be an integer in 1..{MAX_STAGES}, got {stages!r}")
            st = np.full((n, L), int(stages), np.int64)
        st[:, -1] = 1
        return order, st

    def footprint_kb(self, batch: MappingBatch) -> np.ndarray:
        """Per-instance KiB each level holds, stages included (``[n, level]``), as
        `Mapping.footprint_kb` computes it for one mapping."""
        log_ext = np.cumsum(np.log((batch.temporal * batch.spatial).astype(np.float64)), axis=1)
        words = tile_words(log_ext, self.stride, self.dilation)
        return footprint_kb(words, self.keeps, self.bits, batch.stages)

    def fits(self, batch: MappingBatch) -> np.ndarray:
        """Which mappings' tiles fit every buffer (the fan-out holds by construction)."""
        need = self.footprint_kb(batch)[:, :-1]
        cap = self.capacity_kb[:-1]
        return np.all(need <= cap * (1 + 1e-6) + 1e-9, axis=1)

    def sample(self, n: int, rng: np.random.Generator, stages: int | None = None,
               spatial_options: np.ndarray | None = None,
               max_draws: int = 2_000_000) -> MappingBatch:
        """`n` random mappings whose tiles fit (rejection sampling, in batches).

        Raises `InfeasibleError` if fewer than `n` fit among `max_draws` draws.
        """
        kept: list[MappingBatch] = []
        have = drawn = 0
        rate = 1.0
        while have < n:
            if drawn >= max_draws:
                raise InfeasibleError(
                    f"only {have} of {drawn} random mappings of layer {self.layer.config_str()} "
                    f"fit {self.hw.name or self.hw.template}; wanted {n}")
            want = int(min(max_draws - drawn, max(64, 1.25 * (n - have) / max(rate, 1e-4))))
            want = min(want, 200_000)
            batch = self.draw(want, rng, stages, spatial_options)
            ok = self.fits(batch)
            drawn += want
            kept.append(batch.take(np.flatnonzero(ok)))
            have += int(ok.sum())
            rate = max(have / drawn, 1.0 / drawn)
        return MappingBatch.concat(kept).take(slice(0, n))

    # ------------------------------------------------------------------ spatial pruning
    def fullest_spatial(self) -> np.ndarray:
        """Every spatial assignment that keeps the most PEs busy (``[m, level, dim]``).

        Enumerates the divisors of each dim over the levels where the template lets it fan
        out, within each level's fan-out, and keeps the assignments whose total fan-out (PEs
        in use) is the largest any assignment reaches for this layer.
        """
        slots = [(l, d) for d in range(NUM_DIMS) for l in self.spatial_slots[d]]
        best = [1.0]
        found: list[tuple[int, ...]] = []
        fan = [self.fanout[l] if np.isfinite(self.fanout[l]) else math.inf
               for l in range(self.levels)]

        def bound(k: int, used: dict[int, float]) -> float:
            """Most extra fan-out the slots from k on could add (by level capacity)."""
            levels = {l for l, _ in slots[k:]}
            return math.prod(fan[l] / used.get(l, 1.0) for l in levels) if levels else 1.0

        def visit(k: int, product: float, used: dict[int, float], left: list[int],
                  picks: tuple[int, ...]) -> None:
            if product * bound(k, used) < best[0] - 1e-9:
                return
            if k == len(slots):
                if product > best[0] + 1e-9:
                    best[0] = product
                    found.clear()
                if product >= best[0] - 1e-9:
                    found.append(picks)
                return
            l, d = slots[k]
            room = fan[l] / used.get(l, 1.0)
            for x in _divisors(left[d])[::-1]:
                if x > room + 1e-9:
                    continue
                left[d] //= int(x)
                used[l] = used.get(l, 1.0) * x
                visit(k + 1, product * x, used, left, picks + (int(x),))
                used[l] /= x
                left[d] *= int(x)

        visit(0, 1.0, {}, [int(v) for v in self.dims], ())
        out = np.ones((max(len(found), 1), self.levels, NUM_DIMS), np.int64)
        for i, picks in enumerate(found):
            for (l, d), x in zip(slots, picks):
                out[i, l, d] = x
        return out


def canonical_orders(batch: MappingBatch) -> MappingBatch:
    """Put the loops of factor 1 (which do not exist) outermost, in dim order, keeping the
    relative order of the real loops: mappings that differ only there become identical."""
    pos = np.argsort(batch.order, axis=-1)            # position of each dim, outermost first
    real = batch.temporal > 1
    key = np.where(real, NUM_DIMS + pos, np.arange(NUM_DIMS))
    return batch._replace(order=np.argsort(key, axis=-1, kind="stable"))


# --------------------------------------------------------------------------- scoring
def _pack(batch: MappingBatch) -> MappingArrays:
    """`perfmodels.analytic.pack_mapping`, vectorized over a batch."""
    n, L = batch.stages.shape
    innermost_first = batch.order[:, :, ::-1]
    return MappingArrays(
        log_temporal=np.log(batch.temporal).astype(np.float32),
        log_spatial=np.log(batch.spatial).astype(np.float32),
        rank=order_rank(innermost_first)[:, :, None, :],
        order_weights=np.ones((n, L, 1), np.float32),
        stages=batch.stages.astype(np.float32),
    )


def _pad_to(n: int) -> int:
    for size in _BUCKETS:
        if n <= size:
            return size
    return _BUCKETS[-1]


def _stacked(layers: Sequence[Layer], hws: Sequence[HardwareConfig]
             ) -> tuple[Any, LayerArrays, HwParams]:
    templates = {hw.template_spec for hw in hws}
    if len(templates) != 1:
        raise ConfigError("score: all hardware configs must share one template")
    packed_layers = [pack_layer(layer) for layer in layers]
    layer_arr = LayerArrays(*(np.stack(xs) for xs in zip(*packed_layers)))
    hw_params = [hw.to_params() for hw in hws]
    hw_arr = HwParams(*(np.stack(xs) for xs in zip(*hw_params)))
    return templates.pop(), layer_arr, hw_arr


def _score_chunks(template: Any, layer_arr: LayerArrays, hw_arr: HwParams, n: int,
                  rows_of: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, MappingBatch]]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Score `n` rows in padded chunks of at most ``_BUCKETS[-1]``; ``rows_of(rows)`` gives
    the layer index, hardware index and mappings of those (global) rows. Only one chunk is
    ever packed at a time, so the memory this takes does not grow with `n`."""
    cycles = np.empty(n, np.float64)
    energy = np.empty(n, np.float64)
    chunk = _BUCKETS[-1]
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        size = _pad_to(stop - start)
        rows = np.arange(start, start + size)
        rows = np.where(rows < stop, rows, start)       # pad with copies of the first row
        li, hi, maps = rows_of(rows)
        out = evaluate_batch(
            template,
            LayerArrays(*(a[li] for a in layer_arr)),
            HwParams(*(a[hi] for a in hw_arr)),
            _pack(maps))
        cycles[start:stop] = np.asarray(out.cycles, np.float64)[:stop - start]
        energy[start:stop] = np.asarray(out.energy_pj, np.float64)[:stop - start]
    return cycles, energy


def score(layers: Sequence[Layer], layer_index: np.ndarray, hws: Sequence[HardwareConfig],
          hw_index: np.ndarray, batch: MappingBatch) -> tuple[np.ndarray, np.ndarray]:
    """Exact cycles and energy (pJ) of ``batch`` (float64, ``[n]``).

    Row i is mapping i of ``layers[layer_index[i]]`` on ``hws[hw_index[i]]``; all hardware
    shares one template. Runs the vmapped exact model in padded chunks, packing one chunk at
    a time.
    """
    template, layer_arr, hw_arr = _stacked(layers, hws)
    layer_index, hw_index = np.asarray(layer_index), np.asarray(hw_index)
    return _score_chunks(template, layer_arr, hw_arr, batch.size,
                         lambda rows: (layer_index[rows], hw_index[rows], batch.take(rows)))


def score_layers(layers: Sequence[Layer], hw: HardwareConfig,
                 batches: Sequence[MappingBatch]) -> tuple[np.ndarray, np.ndarray]:
    """Exact cycles and energy of equally long per-layer batches on one hardware point:
    ``[layer, mapping]`` arrays.

    The rows are scored as if the batches were concatenated (same chunks, same results), but
    each chunk is gathered from the per-layer batches as it is scored: no copy of all layers'
    mappings, and no packed arrays beyond one chunk, are ever built.
    """
    m = batches[0].size
    if any(b.size != m for b in batches):
        raise ConfigError("score_layers: every layer needs the same number of mappings")
    template, layer_arr, hw_arr = _stacked(layers, [hw])

    def rows_of(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, MappingBatch]:
        li, j = np.divmod(rows, m)
        out = [np.empty((rows.size,) + a.shape[1:], a.dtype) for a in batches[0]]
        for l in np.unique(li):
            sel = li == l
            for dst, src in zip(out, batches[l]):
                dst[sel] = src[j[sel]]
        return li, np.zeros(rows.size, np.int64), MappingBatch(*out)

    cycles, energy = _score_chunks(template, layer_arr, hw_arr, len(layers) * m, rows_of)
    return cycles.reshape(len(layers), m), energy.reshape(len(layers), m)


# --------------------------------------------------------------------------- history
def cumulative_argmin(values: np.ndarray) -> np.ndarray:
    """Index of the running minimum along the last axis (first occurrence)."""
    prev = np.concatenate([np.full(values.shape[:-1] + (1,), np.inf),
                           np.minimum.accumulate(values, axis=-1)[..., :-1]], axis=-1)
    new = values < prev
    idx = np.where(new, np.arange(values.shape[-1]), 0)
    return np.maximum.accumulate(idx, axis=-1)


class Tracker:
    """Sample accounting and the running best of a search.

    A search hands over *blocks*: one hardware point and, for each unique layer, the mappings
    it scored there, in sample order. Sample j of a block is the whole-network point made of
    mapping j of every layer (one sample, `baco.result`). The best network point the search
    knows after sample j on that hardware takes, for each layer, the mapping of lowest EDP
    among the first j (DOSA's protocol: per-layer best-EDP mappings, repeat-weighted sums);
    it costs no further model evaluation.
    """

    def __init__(self, network: Network,
                 progress: Callable[[int, float], Any] | None = None,
                 top_k: int = DEFAULT_TOP_K) -> None:
        self.network = network
        self.top_k = top_k
        self.top: tuple[Entry, ...] = ()
        """The best `top_k` distinct network points (`baco.topk`), for the final pick."""
        self.progress = progress
        """Called with ``(samples, best_edp)`` after every block (a progress bar)."""
        self.counts = np.array([c for _, c in network], np.float64)
        self.start = time.perf_counter()
        self.samples = 0
        self.history: list[HistoryPoint] = []
        self.best_edp = math.inf
        self.best_hw: HardwareConfig | None = None
        self.best_mappings: list[Mapping] = []
        self.block_best: list[float] = []

    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def add_block(self, hw: HardwareConfig, batches: Sequence[MappingBatch],
                  cycles: np.ndarray, energy: np.ndarray, seconds: np.ndarray) -> float:
        """Record one hardware point's samples; returns the best network EDP on it."""
        pick = cumulative_argmin(cycles * energy)                      # [layer, m]
        net, _, _ = network_totals(np.take_along_axis(cycles, pick, 1),
                                   np.take_along_axis(energy, pick, 1), self.counts, axis=0)
        before = self.best_edp
        best_so_far = np.minimum(np.minimum.accumulate(net), before)
        prior = np.concatenate([[before], best_so_far[:-1]])
        for j in np.flatnonzero(net < prior):
            self.history.append(HistoryPoint(samples=self.samples + int(j) + 1,
                                             seconds=float(seconds[j]), best_edp=float(net[j])))
        j_best = int(np.argmin(net))
        if net[j_best] < before:
            self.best_edp = float(net[j_best])
            self.best_hw = hw
            tags = hw.template_spec.tags
            self.best_mappings = [b.mapping(int(pick[l, j_best]), tags)
                                  for l, b in enumerate(batches)]
        self._keep_top(hw, batches, pick, net)
        self.samples += net.size
        self.block_best.append(float(net[j_best]))
        if self.progress is not None:
            self.progress(self.samples, self.best_edp)
        return float(net[j_best])

    def _keep_top(self, hw: HardwareConfig, batches: Sequence[MappingBatch], pick: np.ndarray,
                  net: np.ndarray) -> None:
        """Offer the block's distinct network points (its columns of per-layer picks) to the
        top list, best first, until one cannot enter."""
        columns, first = np.unique(pick.T, axis=0, return_index=True)
        tags = hw.template_spec.tags
        for i in np.argsort(net[first], kind="stable"):
            score = float(net[first[i]])
            if not would_enter(self.top, score, self.top_k):
                break
            design = design_of(hw, [b.mapping(int(columns[i, l]), tags)
                                    for l, b in enumerate(batches)])
            self.top = offer(self.top, [(score, design_key(design), design)], self.top_k)


def interpolate_seconds(start: float, stop: float, n: int) -> np.ndarray:
    """Wall times of `n` samples scored together between `start` and `stop` (evenly spread)."""
    return start + (stop - start) * np.arange(1, n + 1) / max(n, 1)


def _scored(method: str, network: Network, hw: HardwareConfig, mappings: Sequence[Mapping],
            tracker: Tracker, seed: int, extra: dict | None) -> CodesignResult:
    rows = []
    for (layer, count), mapping in zip(network, mappings):
        out = exact(layer, hw, mapping)                                # validates first
        rows.append(LayerResult(layer=layer, count=int(count), mapping=mapping,
                                latency_cycles=float(out.cycles),
                                energy_pj=float(out.energy_pj)))
    return CodesignResult(method=method, network=network.name, hardware=hw,
                          layers=tuple(rows), samples=tracker.samples,
                          history=tuple(tracker.history), seed=int(seed), extra=extra or {})


def make_result(method: str, network: Network, tracker: Tracker, seed: int,
                extra: dict | None = None) -> CodesignResult:
    """Validate and score the best point with `perfmodels.analytic.exact`; wrap it, with the
    tracker's top points as its ``candidates`` (the best first) for `baco.final_pick`."""
    if tracker.best_hw is None:
        raise InfeasibleError(f"{method}: the search scored no feasible point")
    best = _scored(method, network, tracker.best_hw, tracker.best_mappings, tracker, seed,
                   extra)
    key = design_key(design_of(best.hardware, [r.mapping for r in best.layers]))
    others = [_scored(method, network, d.hw, d.mappings(), tracker, seed, extra)
              for _, k, d in tracker.top if k != key]
    return dataclasses.replace(best, candidates=(best, *others[:tracker.top_k - 1]))


def check_budget(budget_samples: int, method: str) -> int:
    if isinstance(budget_samples, bool) or not isinstance(budget_samples, (int, np.integer)) \
            or budget_samples < 1:
        raise ConfigError(f"{method}: budget_samples must be a positive integer, "
                          f"got {budget_samples!r}")
    return int(budget_samples)


def check_network(network: Network | str, method: str) -> Network:
    """A `Network`, or one loaded by `baco.networks.load_network` (a zoo name or ONNX path)."""
    if isinstance(network, str):
        network = load_network(network)
    if not isinstance(network, Network) or not network.layers:
        raise ConfigError(f"{method}: expected a workloads.Network with at least one layer "
                          f"(or a zoo name / ONNX path), got {type(network).__name__}")
    return network


class AreaBudgetWarning(UserWarning):
    """A fixed-hardware baseline's hardware is over the run's area budget (it still runs,
    and its result records it: ``extra["within_area_budget"]`` is False)."""


def budget_check(area_budget_mm2: float | None, method: str,
                 hw: HardwareConfig | None = None) -> float | None:
    """`area_budget_mm2` checked as `baco.config` checks ``codesign.area_budget_mm2``
    (positive, at least the template's smallest design; a one-line `ConfigError` naming the
    field and that area), as a float; None passes."""
    if area_budget_mm2 is None:
        return None
    from perfmodels.energy import check_area_budget
    try:
        check_area_budget(area_budget_mm2, hw or HardwareConfig())
    except ConfigError as exc:
        raise ConfigError(f"{method}: {exc}") from None
    return float(area_budget_mm2)


def fixed_hardware_budget(hw: HardwareConfig, area_budget_mm2: float | None, method: str
                          ) -> dict[str, Any]:
    """What a fixed-hardware baseline records about the area budget: its hardware's area
    (the template's model), the budget and whether it is within it. Its hardware is not
    searched, so a budget below it is not an error: the baseline still runs, as the
    reference it is, with an `AreaBudgetWarning` and ``within_area_budget: False``."""
    import warnings

    from perfmodels.energy import config_area_mm2
    if area_budget_mm2 is None:
        return {}
    budget = budget_check(area_budget_mm2, method, hw)
    area = config_area_mm2(hw)
    within = area <= budget * (1 + 1e-6)
    if not within:
        warnings.warn(f"{method}: the fixed hardware {hw.name or hw.template!r} has area "
                      f"{area:.4g} mm2, over area_budget_mm2 = {budget:g} mm2; its result is "
                      "reported as over the budget", AreaBudgetWarning, stacklevel=3)
    return {"area_budget_mm2": budget, "area_mm2": area, "within_area_budget": within}


def resolve_hardware(hardware: HardwareConfig | str, method: str) -> HardwareConfig:
    """A `HardwareConfig`, or a preset name (``eyeriss``...)."""
    if isinstance(hardware, HardwareConfig):
        return hardware
    if isinstance(hardware, str):
        return HardwareConfig.preset(hardware)
    raise ConfigError(f"{method}: hardware must be a HardwareConfig or a preset name "
                      f"({', '.join(HardwareConfig.preset_names())}), got {hardware!r}")


__all__ = ["AreaBudgetWarning", "MappingBatch", "MappingSampler", "Tracker", "budget_check",
           "canonical_orders", "check_budget", "fixed_hardware_budget",
           "check_network", "cumulative_argmin", "interpolate_seconds", "make_result",
           "resolve_hardware", "score", "score_layers"]

