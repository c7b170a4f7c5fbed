"""Data movement of a fused GEMM chain at one on-chip level (Chimera, seed 000 §1.2).

A chain ``C = A x B`` (M x K by K x L), ``E = C x D`` (M x L by L x N), per batch, runs as one
loop nest over Chimera's loops m, k, l, n (outermost first in an order string such as
``"mlkn"``) with tiles (T_M, T_K, T_L, T_N). The intermediate C never leaves the chip; A, B, D
are read from DRAM and E written. `chain_data_volume` is Algorithm 1: for each moved tensor,

    DV_T = |T| * prod over the op's loops j that do not index T, of  ceil(X_j / T_j)
                 if an indexing loop of T lies inside j (and, see below, has > 1 trip) else 1

summed over A, B, D, E and times the batch, and MU is the largest op's tile footprint
(Eq. 3.16). Each op sees only its own loops, which is Algorithm 1's erasing of the producer's
private loop k before the consumer: m, l are shared, k is private to GEMM1 and n to GEMM2.
Counting ``|T|`` (edge tiles at their true size) instead of the footprint times every trip
count is Eq. 3.15's form: both agree when tiles divide the dims.

Valid orders (errata item 3): the shared loops m, l must lie outside the private loops k, n,
so only ``mlkn``, ``lmkn``, ``mlnk``, ``lmnk`` are allowed (k and n then run side by side inside
each (m, l) block; all four give the same DV). Algorithm 1 drops the loops an op does not own,
so with n outside k it would charge nothing for recomputing GEMM1 once per n block, nor keep
C's tile across loops, and orders such as ``mnkl`` would reach the compulsory traffic with tiny
tiles. Other orders get DV = inf.

``full_tile_reuse`` (default True): a tile whose indexing loops inside j all have one trip
(T_K = K for A) does not change across j and stays on chip, as on the hardware and in a
tile-by-tile simulation; such a tile must then also fit while the other op runs, so its
footprint joins the other op's MU. With False the formula is Algorithm 1 as printed (the
re-fetch is charged even then), which is the model Eq. 3.18's closed form optimises. Both
modes equal Table 3.4 whenever every tile is smaller than its dim.

The ``trips`` argument makes the formula exact (`ceil_trips`) or relaxed (`relaxed_trips`,
X / T, differentiable in continuous tiles); "has > 1 trip" is ``clip(trips - 1, 0, 1)``, which is
0 or 1 at integer trips and piecewise linear in between, so both modes share one code path.
Values are float32 (exact below 2**24 words).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from accel import gemmini_timing
from accel.lower import chain_dims, chain_epilogues
from perfmodels.analytic import fast_jit
from perfmodels.energy import Energy
from workloads.errors import ConfigError, InfeasibleError, WorkloadError
from workloads.layer import Layer
from workloads.network import Network

__all__ = ["NORM_MOVE_CYCLES", "VALID_ORDERS", "ChainCost", "ChainDims", "ChainEpilogue",
           "ClosedForm", "Tiling", "Unfused", "ceil_trips", "chain_cost", "chain_data_volume",
           "chain_energy", "chain_metrics", "chain_parts", "chain_words", "closed_form_optimum",
           "order_array", "relaxed_chain_tiles", "relaxed_trips", "search_chain_tiles",
           "tile_candidates", "unfused_data_volume"]

LOOPS = "mkln"  # loop ids index (M, K, L, N), Chimera's names
WEIGHTS = ("B", "D")  # the operands a `Layer` GEMM's batch shares
VALID_ORDERS = ("mlkn", "lmkn", "mlnk", "lmnk")


class _Op(NamedTuple):
    loops: str
    tensors: tuple[tuple[str, str, bool], ...]  # (name, indexing loops, moved to/from DRAM)


_GEMM1 = _Op("mkl", (("A", "mk", True), ("B", "kl", True), ("C", "ml", False)))
_GEMM2 = _Op("mln", (("C", "ml", False), ("D", "ln", True), ("E", "mn", True)))
_CHAIN = (_GEMM1, _GEMM2)
# Unfused, C goes to DRAM: written by GEMM1, read back by GEMM2.
_ALONE = ((_GEMM1._replace(tensors=_GEMM1.tensors[:2] + (("C", "ml", True),)),),
          (_GEMM2._replace(tensors=(("C", "ml", True),) + _GEMM2.tensors[1:]),))


class ChainDims(NamedTuple):
    """A GEMM chain's sizes: GEMM1 is (batch, M, K) x (batch, K, L), GEMM2 (batch, M, L) x
    (batch, L, N)."""

    batch: int
    M: int
    K: int
    L: int
    N: int

    @classmethod
    def from_layers(cls, producer: Layer, consumer: Layer) -> ChainDims:
        """Dims from two `Layer.gemm` layers, as the fused lowering reads them
        (`accel.lower.chain.chain_dims`; `ConfigError` if they do not chain)."""
        return cls(*chain_dims(producer, consumer))

    @classmethod
    def from_network(cls, net: Network, chain: int = 0) -> ChainDims:
        """Dims of ``net.chains[chain]``."""
        if not 0 <= chain < len(net.chains):
            raise WorkloadError(f"network {net.name!r} has {len(net.chains)} chains; "
                                f"index {chain} is out of range")
        first, second = (net.layers[net.order[p]] for p in net.chains[chain].positions)
        return cls.from_layers(first, second)

    @property
    def compulsory_words(self) -> int:
        """Each of A, B, D read and E written once: the least DV any tiling can reach."""
        b, m, k, l_, n = self
        return b * (m * k + k * l_ + l_ * n + m * n)


class ChainEpilogue(NamedTuple):
    """The epilogue operands a fused chain moves (`accel.lower.chain`): the first GEMM's bias
    (into C's accumulator rows), the second's bias and residual (into E's); and whether the
    first GEMM's softmax passes C's rows through the normalizer (three reads of each)."""

    bias_c: bool = False
    bias_e: bool = False
    residual: bool = False
    softmax: bool = False

    @classmethod
    def from_layers(cls, producer: Layer, consumer: Layer) -> ChainEpilogue:
        """`UnsupportedOpError` for an epilogue the fused lowering cannot apply."""
        first, second = chain_epilogues(producer, consumer)
        return cls(first.bias, second.bias, second.residual, first.softmax is not None)

    def elements(self, dims: Any) -> dict[str, tuple[Any, int]]:
        """``{operand: (elements moved, bytes each)}``, as the trace moves them in order mlkn:
        a bias row (int32) per accumulator row of each C or E tile, so one element per element
        of C or E; the residual (int8) once. None depends on the tiles (DIM multiples)."""
        b, m, _, l_, n = dims
        out = {}
        if self.bias_c:
            out["bias_C"] = (b * m * l_, 4)
        if self.bias_e:
            out["bias_E"] = (b * m * n, 4)
        if self.residual:
            out["residual"] = (b * m * n, 1)
        return out


def ceil_trips(size: Any, tile: Any) -> Any:
    """Exact trip counts ceil(X / T)."""
    return jnp.ceil(size / tile)


def relaxed_trips(size: Any, tile: Any) -> Any:
    """Relaxed trip counts X / T: continuous in the tiles, equal to the exact at divisors."""
    return size / tile


def order_array(order: str) -> np.ndarray:
    """Loop ids (indices into M, K, L, N) of a valid order string, outermost first."""
    if order not in VALID_ORDERS:
        raise ConfigError(f"fused GEMM-chain order {order!r}: must be one of {VALID_ORDERS} "
                          f"(shared loops m, l outside the private loops k, n)")
    return np.array([LOOPS.index(c) for c in order], np.int32)


def chain_data_volume(dims: Any, tiles: Any, order: Any,
                      trips: Callable[[Any, Any], Any] = ceil_trips,
                      full_tile_reuse: bool = True,
                      shared_weights: bool = False) -> tuple[Any, Any]:
    """Fused chain's (DV, MU) in words: Algorithm 1 for ``order`` (module docstring).

    Args:
      dims: (batch, M, K, L, N), e.g. a `ChainDims`.
      tiles: (..., 4) tiles (T_M, T_K, T_L, T_N), clamped to the dims.
      order: an order string of `VALID_ORDERS`, or (..., 4) loop ids outermost first (as
        `order_array`); an invalid order gives DV = inf.
      trips: `ceil_trips` (exact) or `relaxed_trips`.
      full_tile_reuse: keep a tile whose indices do not change on chip (see module docstring).
      shared_weights: every batch multiplies the same B and D (a `Layer` GEMM's batch, not a
        BMM's): a weight tile that is never re-fetched inside the batch stays on chip across
        it too, so it is read once, not once per batch.

    Broadcasts over leading axes of ``tiles`` and ``order``; jit-able and vmappable.
    """
    dv, mu, _ = chain_words(dims, tiles, order, trips, full_tile_reuse, shared_weights)
    return dv, mu


def chain_words(dims: Any, tiles: Any, order: Any,
                trips: Callable[[Any, Any], Any] = ceil_trips, full_tile_reuse: bool = True,
                shared_weights: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    """`chain_data_volume`'s (DV, MU) and the DRAM words of each moved tensor (A, B, D, E)."""
    if isinstance(order, str):
        order = order_array(order)
    return _volume(_CHAIN, dims, tiles, order, trips, full_tile_reuse, shared_weights)


def _volume(ops: tuple[_Op, ...], dims: Any, tiles: Any, order: Any,
            trips: Callable[[Any, Any], Any], reuse: bool, shared_weights: bool = False
            ) -> tuple[Any, Any, dict[str, Any]]:
    """Algorithm 1 over ``ops`` (one GEMM alone, or the fused chain) with the order rule."""
    dims = jnp.asarray(dims, jnp.float32)
    batch, sizes = dims[..., 0], dims[..., 1:]
    tile = jnp.minimum(jnp.asarray(tiles, jnp.float32), sizes)
    order = jnp.asarray(order)
    rank = jnp.argsort(order, axis=-1)  # rank[..., loop] = its depth, 0 outermost
    n_trips = trips(sizes, tile)
    several = jnp.clip(n_trips - 1.0, 0.0, 1.0)  # 1 where a loop has more than one trip
    owners = {c: sum(c in op.loops for op in ops) for c in LOOPS}
    dv: Any = 0.0
    per_tensor: dict[str, Any] = {}
    footprint: list[Any] = [0.0] * len(ops)
    for x, op in enumerate(ops):
        for name, index, moved in op.tensors:
            ids = [LOOPS.index(c) for c in index]
            tile_words = math.prod(tile[..., i] for i in ids)
            footprint[x] = footprint[x] + tile_words
            if not moved:
                continue
            words = math.prod(sizes[..., i] for i in ids)
            held: Any = 0.0
            for c in op.loops:
                if c in index:
                    continue
                j = LOOPS.index(c)
                inside = [jnp.where(rank[..., i] > rank[..., j],
                                    several[..., i] if reuse else 1.0, 0.0) for i in ids]
                refetch = functools.reduce(jnp.maximum, inside)
                words = words * (1.0 + refetch * (n_trips[..., j] - 1.0))
                if reuse and owners[c] > 1:  # kept across a shared loop: lives through both ops
                    held = jnp.maximum(held, (1.0 - refetch) * several[..., j])
            if shared_weights and name in WEIGHTS:
                # The batch loop is one more loop outside all others: the tile is re-fetched
                # per batch unless it is the whole tensor (every indexing loop one trip).
                again = (functools.reduce(jnp.maximum, [several[..., i] for i in ids])
                         if reuse else 1.0)
                words = words * (1.0 + again * (batch - 1.0)) / batch
            per_tensor[name] = batch * words
            dv = dv + words
            for y in range(len(ops)):
                if y != x:
                    footprint[y] = footprint[y] + held * tile_words
    mu = functools.reduce(jnp.maximum, footprint)
    shared = [LOOPS.index(c) for c in LOOPS if owners[c] > 1]
    private = [LOOPS.index(c) for c in LOOPS if owners[c] == 1]
    if shared and private:
        valid = (functools.reduce(jnp.maximum, [rank[..., i] for i in shared])
                 < functools.reduce(jnp.minimum, [rank[..., i] for i in private]))
        dv = jnp.where(valid, dv, jnp.inf)
    return batch * dv, mu, per_tensor


class ClosedForm(NamedTuple):
    """Eq. 3.18's real optimum, Chimera's rounding of it and the Eq. 3.19 bound."""

    tile_ml: float      # T_M* = T_L*
    tile_kn: float      # T_K* = T_N* = alpha
    dv_words: float     # DV* (times the batch)
    rounded: tuple[int, int, int, int]  # (T_M, T_K, T_L, T_N) = min(floor(T*), X)
    bound: float        # DV(rounded) / DV* <= bound


def closed_form_optimum(M: int, K: int, L: int, N: int, capacity_words: float,
                        alpha: float = 1, *, batch: int = 1) -> ClosedForm:
    """Eq. 3.18: T_M* = T_L* = -alpha + sqrt(alpha^2 + MC), T_N* = alpha, DV* = 2ML(K+N)/T_M*.

    It minimises Algorithm 1's relaxed DV (``full_tile_reuse=False``) under MU <= MC with
    T_K, T_N >= alpha, so it bounds that model's integer optimum from below. ``bound`` is Eq.
    3.19's max over X in {M, L} of 1 + T*/X + 1/T_X (T_X the rounded tile): ceil(X/T_X) <=
    X/T_X + 1 and T*/T_X <= 1 + 1/T_X.
    """
    tile = -alpha + math.sqrt(alpha * alpha + capacity_words)
    if tile < 1:
        raise InfeasibleError(f"closed form: capacity {capacity_words} words is below the "
                              f"smallest fused footprint (1 + 2 alpha = {1 + 2 * alpha})")
    rounded = (min(math.floor(tile), M), min(int(alpha), K), min(math.floor(tile), L),
               min(int(alpha), N))
    bound = max(1 + tile / x + 1 / t for x, t in ((M, rounded[0]), (L, rounded[2])))
    return ClosedForm(tile, float(alpha), batch * 2 * M * L * (K + N) / tile, rounded, bound)


def tile_candidates(size: int) -> np.ndarray:
    """The tiles ceil(X / q), q = 1..X: each is the smallest tile with its trip count.

    DV depends on a tile only through its trip count and MU grows with the tile, so a search
    over these is exact over all integer tiles 1..X (it dominates flooring T* and the nearby
    divisors, errata item 4); there are about 2 sqrt(X) of them.
    """
    return np.unique(-(-size // np.arange(1, size + 1))).astype(np.float32)


class Tiling(NamedTuple):
    """A searched tiling: ``order`` and ``tiles`` over the loops it names, in LOOPS order."""

    order: str
    tiles: tuple[int, ...]
    dv_words: float
    mu_words: float


class Unfused(NamedTuple):
    """The two GEMMs run apart, C through DRAM, each tiled for least DV on its own."""

    dv_words: float
    gemm1: Tiling
    gemm2: Tiling


def search_chain_tiles(dims: Any, capacity_words: float,
                       full_tile_reuse: bool = True) -> Tiling:
    """Least-DV fused tiling (ties: least MU) over `VALID_ORDERS` and all integer tiles with
    MU <= ``capacity_words``, scoring every candidate at once."""
    dims = ChainDims(*(int(d) for d in dims))
    return _search(_CHAIN, dims, VALID_ORDERS, capacity_words, full_tile_reuse)


def unfused_data_volume(dims: Any, capacity_words: float,
                        full_tile_reuse: bool = True) -> Unfused:
    """The baseline fusion is compared against: GEMM1 writes C to DRAM, GEMM2 reads it back,
    each searched exactly (all 6 orders of its loops, all integer tiles) under the capacity."""
    dims = ChainDims(*(int(d) for d in dims))
    gemm1, gemm2 = (_search(ops, dims, ["".join(p) for p in itertools.permutations(ops[0].loops)],
                            capacity_words, full_tile_reuse) for ops in _ALONE)
    return Unfused(gemm1.dv_words + gemm2.dv_words, gemm1, gemm2)


def _search(ops: tuple[_Op, ...], dims: ChainDims, orders: Any, capacity_words: float,
            reuse: bool) -> Tiling:
    loops = "".join(c for c in LOOPS if any(c in op.loops for op in ops))
    cands = [tile_candidates(size) if c in loops else np.ones(1, np.float32)
             for c, size in zip(LOOPS, dims[1:])]
    # Loops an op lacks go innermost; they index nothing it moves, so they change nothing.
    full = [o + "".join(c for c in LOOPS if c not in o) for o in orders]
    order_ids = np.array([[LOOPS.index(c) for c in o] for o in full], np.int32)
    dv, mu, first, rest = (np.asarray(v) for v in _best(
        ops, reuse, jnp.asarray(dims, jnp.float32), order_ids, cands,
        jnp.float32(capacity_words)))
    if not np.isfinite(dv):
        raise InfeasibleError(f"{'fused chain' if len(ops) > 1 else 'GEMM'} {tuple(dims)}: no "
                              f"tiling fits {capacity_words} words (all tiles 1 need 3 words)")
    per_order = math.prod(len(c) for c in cands[1:])
    o, r = divmod(int(rest), per_order)
    tiles = [cands[0][int(first)], *(c[i] for c, i in zip(
        cands[1:], np.unravel_index(r, [len(c) for c in cands[1:]])))]
    return Tiling(orders[o], tuple(int(t) for c, t in zip(LOOPS, tiles) if c in loops),
                  float(dv), float(mu))


def _lexmin(dv: Any, mu: Any) -> Any:
    """Index of the least DV, ties broken by the least MU."""
    return jnp.argmin(jnp.where(dv == jnp.min(dv), mu, jnp.inf))


@functools.partial(fast_jit, static_argnums=(0, 1))
def _best(ops: tuple[_Op, ...], reuse: bool, dims: Any, order_ids: Any, cands: list[Any],
          capacity: Any) -> tuple[Any, Any, Any, Any]:
    """Best candidate of the grid cands[0] x ... x cands[3] x orders; a scan over T_M keeps
    the working set to one T_M slice of the grid."""
    grid = jnp.stack(jnp.meshgrid(*cands[1:], indexing="ij"), -1).reshape(-1, 3)

    def one(t_m: Any) -> tuple[Any, Any, Any]:
        tiles = jnp.concatenate([jnp.full((grid.shape[0], 1), t_m), grid], axis=1)
        dv, mu, _ = _volume(ops, dims, tiles[None], order_ids[:, None], ceil_trips, reuse)
        mu = jnp.broadcast_to(mu, dv.shape).ravel()
        dv = jnp.where(mu <= capacity, dv.ravel(), jnp.inf)
        i = _lexmin(dv, mu)
        return dv[i], mu[i], i

    dvs, mus, idx = jax.lax.map(one, cands[0])
    j = _lexmin(dvs, mus)
    return dvs[j], mus[j], j, idx[j]


# --------------------------------------------------------------------------- latency, energy
CHAIN_STEP_CYCLES = (gemmini_timing.SPAD_READ_CYCLES + gemmini_timing.ACC_WRITE_CYCLES
                     + gemmini_timing.MVOUT_READ_CYCLES)
"""Per C tile, on top of the array's skew (``2 * DIM``): the cycles from a C tile's last input
row to GEMM2's first, which the chain runs in series (the simulator's figures,
`accel.gemmini_timing`: results land ``spad_read_cycles`` 4 + ``acc_write_cycles`` 2 after the
skewed array drains, then ``mvout_spad`` pays ``mvout_read_cycles`` 10 before its first row is
written): 16."""


_STAT_PASS_CYCLES = 1 + gemmini_timing.MVOUT_READ_CYCLES
NORM_MOVE_CYCLES = ((2 * _STAT_PASS_CYCLES + _STAT_PASS_CYCLES + gemmini_timing.SPAD_WRITE_CYCLES)
                    / 3 / gemmini_timing.RS_ENTRIES_STORE)
"""Cycles per one-row move of a softmax's passes over C (`accel.lower.chain`). Each holds one
of the store queue's 4 reservation-station entries (rs_entries_store) from its start to its
completion: a statistics pass reads its row (1) and is done mvout_read_cycles (10) later, the
written pass a spad write (1) after that; so the moves go through at 4 per 11, 11 and 12
cycles (the simulator's figures, `accel.gemmini_timing`)."""


class ChainCost(NamedTuple):
    """A fused chain's figures on a hardware, per tiling: cycles and pJ of the whole chain
    (every batch), the DRAM words it moves, and the scratchpad / accumulator rows it holds."""

    cycles: Any
    energy_pj: Any
    dram_words: Any
    sp_rows: Any
    acc_rows: Any


def chain_cost(dims: Any, tiles: Any, hw: Any, *, load_latency: bool = True,
               shared_weights: bool = True, epilogue: ChainEpilogue = ChainEpilogue()
               ) -> ChainCost:
    """The fused chain as `accel.lower.chain.lower_gemm_chain` runs it (order mlkn, E resident
    for all of N) on `hw`, for tiles ``(..., 4)`` in DIM multiples (T_N ignored: N whole):
    `chain_metrics` with exact trips, and the rows its buffers hold
    (`accel.lower.chain.footprint`)."""
    from accel.lower import footprint

    d = float(hw.pe_rows)
    tiles = np.asarray(tiles, np.float64)
    shape = tiles.shape[:-1]
    flat = tiles.reshape(-1, tiles.shape[-1])[:, :3]
    cycles, energy_pj, dram = _exact(
        hw.template_spec, hw.to_params(), tuple(int(x) for x in dims),
        jnp.asarray(flat, jnp.float32), load_latency, shared_weights, ChainEpilogue(*epilogue),
        False)
    tm, tk, tl = (np.minimum(tiles[..., i], -(-float(x) // d) * d)
                  for i, x in enumerate(dims[1:4]))
    n = int(dims[4])
    sp_rows, acc_rows = footprint({"m": tm, "k": tk, "l": tl, "n": np.full_like(tm, n)},
                                  n, "mlkn", int(d))
    out = (np.asarray(x, np.float64).reshape(shape) for x in (cycles, energy_pj, dram))
    return ChainCost(*out, sp_rows=sum(sp_rows.values()), acc_rows=sum(acc_rows.values()))


def chain_energy(dims: Any, tiles: Any, hw: Any, *, load_latency: bool = True,
                 shared_weights: bool = True, epilogue: ChainEpilogue = ChainEpilogue()
                 ) -> Energy:
    """The whole `perfmodels.energy.Energy` of `chain_cost`'s chain on one tiling (float64
    numpy), for its split by event class (`perfmodels.energy.energy_by_event`)."""
    flat = np.asarray(tiles, np.float64).reshape(1, -1)[:, :3]
    _, en, _ = _exact(hw.template_spec, hw.to_params(), tuple(int(x) for x in dims),
                      jnp.asarray(flat, jnp.float32), load_latency, shared_weights,
                      ChainEpilogue(*epilogue), True)
    return Energy(*(np.asarray(x[0], np.float64) for x in en))


@functools.partial(fast_jit, static_argnums=(0, 2, 4, 5, 6, 7))
def _exact(template: Any, hwp: Any, dims: tuple[int, ...], tiles: Any, load_latency: bool,
           shared_weights: bool, epilogue: ChainEpilogue, parts: bool
           ) -> tuple[Any, Any, Any]:
    """Every tiling's `chain_metrics` (with `parts`, `chain_parts`: the whole `Energy`, a
    program of its own, so that the pJ alone compiles as it always has)."""
    fn = chain_parts if parts else chain_metrics
    return jax.vmap(lambda t: fn(template, hwp, dims, t, ceil_trips, load_latency,
                                 shared_weights, epilogue))(tiles)


def chain_metrics(template: Any, hwp: Any, dims: Any, tiles: Any,
                  trips: Callable[[Any, Any], Any] = ceil_trips, load_latency: bool = True,
                  shared_weights: bool = True, epilogue: ChainEpilogue = ChainEpilogue()
                  ) -> tuple[Any, Any, Any]:
    """``(cycles, pJ, DRAM words)`` of the fused chain for one tiling ``(T_M, T_K, T_L)`` on
    hardware parameters `hwp`: one JAX formula, exact with `ceil_trips` (DIM blocks and tile
    trips rounded up) or relaxed with `relaxed_trips` (differentiable in the tiles and in
    `hwp`, as the descent needs). The same model as a layer's (`perfmodels.latency`,
    `perfmodels.energy`), over the trace's own counts:

    * the array feeds ``M`` rows per DIM x DIM block of B (``ceil(K/DIM) ceil(L/DIM)``) and
      of D (``ceil(L/DIM) ceil(N/DIM)``), a preload per block and m tile, whose DIM cycles
      the compute before it hides only up to its own rows (the simulator's rule: the last
      compute of an m tile, with fewer than DIM rows, leaves the rest exposed; relaxed
      trips expose none); each C tile then drains (``2 DIM + CHAIN_STEP_CYCLES``) and moves
      its ``T_M ceil(T_L/DIM)`` rows to the scratchpad one a cycle before GEMM2 reads it
      (with a softmax, each row of each block three times instead, one move each: its max,
      its sum of exponentials and the written pass, `NORM_MOVE_CYCLES` a move, in series
      with the rest: they fill the store queue, whose stall holds back every later command):
      all of that is the ``use`` side;
    * DRAM moves `chain_words` (A, B, D read, E written; int8, a word a byte) and, given an
      ``epilogue``, its operands (`ChainEpilogue.elements`; an int32 bias element is four
      bytes and, as a layer's O words, one word on chip) at the DRAM level's bandwidth, in
      ``T_M``-row tiles of A and B per k tile, of D per l tile, a bias load per C tile and an
      E initialisation per m tile; a tile that starts from its bias or residual accumulates
      from its first compute. The default, none, is what the search charges: the per-layer
      models leave a layer's bias and residual moves uncounted, so fused and apart compare
      alike;
    * the two meet in ALCOP's load-and-use loop (`perfmodels.latency.pipeline_cycles`, two
      stages), with the DRAM level's per-load latency when ``load_latency`` (off: Timeloop's
      roofline, ``max(use, transfer)``);
    * energy counts words per level as `accel.sim.trace_accesses` counts a trace's
      (whole DIM-wide rows on chip, padding included) and prices them with
      `perfmodels.energy.energy`: so the simulator's and the model's energy agree where the
      counts do (tests/perfmodels/test_fusion.py).
    """
    cycles, en, dram = chain_parts(template, hwp, dims, tiles, trips, load_latency,
                                   shared_weights, epilogue)
    return cycles, en.energy_pj, dram


def chain_parts(template: Any, hwp: Any, dims: Any, tiles: Any,
                trips: Callable[[Any, Any], Any] = ceil_trips, load_latency: bool = True,
                shared_weights: bool = True, epilogue: ChainEpilogue = ChainEpilogue()
                ) -> tuple[Any, Any, Any]:
    """`chain_metrics` with the whole `perfmodels.energy.Energy` in place of its pJ:
    ``(cycles, Energy, DRAM words)``."""
    from accel.arch import level_arrays
    from perfmodels.accesses import Accesses, I, O, W
    from perfmodels.energy import energy
    from perfmodels.latency import pipeline_cycles

    d = hwp.pe_rows
    b, m, k, l_, n = (jnp.float32(x) for x in dims)
    tiles = jnp.asarray(tiles, jnp.float32)
    tm, tk, tl = (jnp.minimum(tiles[i], trips(x, d) * d) for i, x in enumerate((m, k, l_)))
    trips_m, trips_k, trips_l = trips(m, tm), trips(k, tk), trips(l_, tl)
    kb, lb, nb = trips(k, d), trips(l_, d), trips(n, d)
    rows1, rows2 = b * m * kb * lb, b * m * lb * nb
    preloads = b * trips_m * (kb * lb + lb * nb)
    moved_rows = b * m * lb
    read_rows = moved_rows * (3.0 if epilogue.softmax else 1.0)   # C rows read from acc
    c_tiles = b * trips_m * trips_l
    _, _, words = chain_words((b, m, k, l_, n), jnp.stack([tm, tk, tl, n]), "mlkn", trips,
                              shared_weights=shared_weights)
    epi = epilogue.elements((b, m, k, l_, n))
    epi_words = sum(x for x, _ in epi.values())
    dram = sum(words.values()) + sum(x * size for x, size in epi.values())
    init_e = epilogue.bias_e or epilogue.residual
    loads = c_tiles * (trips_k + 1.0 + epilogue.bias_c) + b * trips_m * init_e
    lv = level_arrays(template, hwp)
    top = template.num_levels - 1
    use = rows1 + rows2
    if load_latency:
        # A preload takes DIM cycles, of which the compute before it hides its own rows: the
        # last compute of an m tile (its rows mod DIM) leaves the rest of the next one exposed.
        def exposed(rows: Any) -> Any:
            return d - (rows - d * (trips(rows, d) - 1.0))

        m_rows = jnp.minimum(tm, m)
        edge = m - (trips_m - 1.0) * m_rows
        waits = b * ((trips_m - 1.0) * exposed(m_rows) + exposed(edge)) * (kb * lb + lb * nb)
        use = use + waits + c_tiles * (2 * d + CHAIN_STEP_CYCLES)
        if not epilogue.softmax:
            use = use + moved_rows
    cycles = pipeline_cycles(use, dram / lv.bandwidth_words[top], lv.latency_cycles[top],
                             loads, 2.0, load_latency)
    if load_latency and epilogue.softmax:
        # The passes' one-row moves fill the store queue, which stalls the issue of every
        # later command (the next tiles' loads too): they run in series with the rest.
        cycles = cycles + read_rows * NORM_MOVE_CYCLES
    # Words per level [level, tensor] (registers, accumulator, scratchpad, DRAM).
    reg, acc, sp = 0, 1, 2
    zeros = jnp.zeros((template.num_levels, 3))
    array_macs = (rows1 + rows2) * d * d
    # Epilogue rows land in the accumulator (a residual on a bias reads the rows first).
    epi_rows = b * m * (lb * epilogue.bias_c + nb * (epilogue.bias_e + epilogue.residual))
    accumulating = (rows1 * (1.0 if epilogue.bias_c else (kb - 1) / kb)
                    + rows2 * (1.0 if init_e else (lb - 1) / lb))
    reads = (zeros.at[top, W].set(words["B"] + words["D"]).at[top, I].set(words["A"])
             .at[top, O].set(epi_words)
             .at[sp, I].set((rows1 + rows2) * d).at[sp, W].set(preloads * d * d)
             .at[acc, O].set((accumulating + read_rows + b * m * nb
                              + b * m * nb * (epilogue.bias_e and epilogue.residual)) * d)
             .at[reg, W].set(array_macs))
    updates = zeros.at[top, O].set(words["E"]).at[acc, O].set((rows1 + rows2) * d)
    fills = (zeros.at[sp, W].set(words["B"] * lb * d / l_ + words["D"] * nb * d / n)
             .at[sp, I].set(words["A"] * kb * d / k + moved_rows * d)
             .at[acc, O].set(epi_rows * d)
             .at[reg, W].set(preloads * d * d))
    out = energy(template, Accesses(macs=array_macs, tile_words=zeros, fills=fills,
                                    reads=reads, updates=updates,
                                    log_refills=jnp.zeros(template.num_levels)), lv,
                 cycles if load_latency else None, useful_macs=b * m * l_ * (k + n),
                 array_pes=d * d)
    return cycles, out, dram


def relaxed_chain_tiles(hwp: Any, dims: Any) -> tuple[Any, Any]:
    """A differentiable stand-in for the fused tile choice on relaxed hardware: ``(tiles,
    fits)``. K and L whole (the choice the exact planner makes whenever B and D fit), and the
    largest m tile the buffers then hold: the accumulator keeps ``T_M (L + N) / DIM`` rows
    (C and E), the scratchpad ``T_M (K + L) / DIM + L (K + N) / DIM`` (A and C; B and D).
    ``fits`` (0..1) falls smoothly to 0 where not even a DIM-row m tile fits."""
    _, m, k, l_, n = (jnp.float32(x) for x in dims)
    d = hwp.pe_rows
    acc_rows = hwp.acc_kb * 1024.0 / (d * hwp.acc_bits / 8.0)
    sp_rows = hwp.sp_kb * 1024.0 / (d * hwp.input_bits / 8.0)
    by_acc = acc_rows * d / (l_ + n)
    by_sp = (sp_rows - l_ * (k + n) / d) * d / (k + l_)
    room = jnp.minimum(by_acc, by_sp)
    fits = jax.nn.sigmoid((room - d) / (0.1 * d))
    tm = jnp.clip(room, d, m)
    return jnp.stack([tm, k, l_]), fits
