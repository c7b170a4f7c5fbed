"""Fusion in the co-design: which of a network's chains run fused, with which tiles, and what
that does to each design's score.

A network's chains (`workloads.fusion`, `Network.chains`) that the fused lowering runs
(`accel.lower.chain.lower_gemm_chain`: two ungrouped GEMMs, or 1x1 convolutions as the GEMMs
of their pixels (`gemm_view`); the first with a bias and a relu, GELU or softmax at most, the
second with a bias, a residual and a relu or GELU, and nothing between them but the first one's
epilogue)
are grouped by their unique layers (`ChainGroup`: twelve identical attention blocks are one
group of twelve instances). Chains the lowering cannot run, and chains that share a layer
with an earlier chain, are counted by reason, never fused.

`FusionPlan.fold` is the search's view: for each scored design and group, the chain fused on
the design's hardware (`plan_chain_tiles`: among the DIM-multiple tiles that fit its
scratchpad and accumulator, the least DRAM traffic; then `perfmodels.fusion.chain_cost`)
replaces the group's instances of the two layers when that lowers the network's EDP. The
per-layer metrics are rewritten so that ``Σ count x metric`` is the network with those
decisions (each layer takes its share of the fused chain by its unfused cycles and energy),
so every consumer of `baco.rounding.Rounder.score` (starts, rounding, refinement, the result)
sees fusion without knowing of it. The descent sees it too, relaxed
(`baco.objective.fused_totals`): a soft fuse-or-not per group over the chain's relaxed cost on
the relaxed hardware.

Fusing needs the template's on-chip path (its ``onchip_path``; ``mvout_spad``: accumulator
rows into the scratchpad), whose area (`path_area_mm2`) a design pays only if it fuses a
chain, and a chain with a softmax the normalizer too (``normalizer``): within an area budget,
a design fuses only if they fit beside its hardware. Unfused, a softmax runs on the host and
is not counted, so the comparison leans towards leaving attention apart.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig, level_arrays, unit_area_mm2
from accel.isa import IsaParams
from accel.lower import TILE_DIMS, chain_dims, chain_epilogues, choose_tiles, footprint
from perfmodels.energy import config_area_mm2, energy_by_event, event_names
from perfmodels.fusion import (
    ChainDims,
    ChainEpilogue,
    chain_cost,
    chain_data_volume,
    chain_energy,
)
from perfmodels.score import network_energy_by_event, network_totals
from workloads.errors import BacoError, ConfigError, UnsupportedOpError
from workloads.layer import Layer
from workloads.network import Network


def gemm_view(layer: Layer) -> Layer | None:
    """The GEMM a layer runs as in a fused chain: a GEMM as it is, a 1x1 convolution (stride
    1, no padding, dilation or groups) as the GEMM of its pixels (M = N x P x Q, K_red = C,
    N_out = K: the same NHWC rows); None for anything with a window (no fused lowering keeps
    a halo)."""
    if layer.kind in ("gemm", "gemv"):
        return layer
    one_by_one = (layer.kind in ("conv1d", "conv2d") and (layer.R, layer.S) == (1, 1)
                  and (layer.Hstride, layer.Wstride) == (1, 1) and not any(layer.pads)
                  and (layer.Hdilation, layer.Wdilation) == (1, 1) and layer.groups == 1
                  and layer.upsample == (1, 1))
    if not one_by_one:
        return None
    return Layer.gemm(M=layer.N * layer.P * layer.Q, K_red=layer.C, N_out=layer.K,
                      name=layer.name, epilogue=layer.epilogue)


def _has_softmax(first: Layer) -> bool:
    return tuple(first.epilogue[-1:]) == ("softmax",)


@dataclasses.dataclass(frozen=True)
class ChainGroup:
    """Chain instances over the same unique layers (indices into `Network.layers`; a chain of
    two instances of one layer has ``first == second``). ``layers`` are the two as GEMMs
    (`gemm_view`), with the epilogues of their positions in the chain."""

    first: int
    second: int
    instances: int
    layers: tuple[Layer, Layer]
    names: tuple[str, str]

    @property
    def dims(self) -> ChainDims:
        return ChainDims.from_layers(*self.layers)

    @property
    def softmax(self) -> bool:
        """Whether the first GEMM ends in a softmax (rows of C whole, the normalizer used)."""
        return _has_softmax(self.layers[0])

    @property
    def uses(self) -> dict[int, int]:
        """Instances of each unique layer one chain instance runs."""
        return dict(collections.Counter((self.first, self.second)))

    def to_dict(self) -> dict[str, Any]:
        return {"layers": [self.first, self.second], "names": list(self.names),
                "instances": self.instances,
                "epilogues": [list(x.epilogue) for x in self.layers]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], layers: Sequence[Layer]) -> ChainGroup:
        """From `to_dict` and the unique layers it indexes (a result's)."""
        i, j = (int(x) for x in data["layers"])
        pair = tuple(gemm_view(dataclasses.replace(layers[x], epilogue=tuple(e)))
                     for x, e in zip((i, j), data.get("epilogues", [[], []])))
        if None in pair:
            raise ConfigError(f"fused chain {data['names']}: a layer is not a GEMM or a 1x1 "
                              "convolution")
        return cls(first=i, second=j, instances=int(data["instances"]), layers=pair,
                   names=tuple(str(x) for x in data["names"]))


def fused_chains(extra: dict[str, Any], layers: Sequence[Layer]) -> list[ChainGroup]:
    """The groups a result fuses (its ``extra["fusion"]``, `FusionPlan.describe`)."""
    try:
        return [ChainGroup.from_dict(entry, layers)
                for entry in extra.get("fusion", {}).get("chains", []) if entry["fused"]]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(f"result extra.fusion: malformed chain record ({exc!r})") from None


_LAYOUT_OPS = ("reshape", "flatten", "squeeze", "unsqueeze")
# The graph nodes an epilogue op may stand for (`workloads.onnx_import`): a bias is an Add
# after a MatMul and no node at all as a Gemm's or Conv's input; GELU is one Gelu node or the
# five of its erf form; a softmax stands for its node and the scale before it, if any.
_EPILOGUE_NODES = {"bias": (("add",), ()),
                   "gelu": (("gelu",), ("div", "erf", "add", "mul", "mul")),
                   "softmax": (("div", "softmax"), ("mul", "softmax"), ("softmax",))}
_NO_UNIT = ("ops between or after the GEMMs other than bias, a residual, relu, GELU and the "
            "first one's softmax over its rows have no on-chip unit")


def _fusable(first: Layer | None, second: Layer | None, between: Sequence[str]
             ) -> tuple[Layer, Layer] | str:
    """The two layers as the fused lowering runs them (a relu between them applied by the
    first one's requantizing move, as mvout's), or why they stay apart."""
    if first is None or second is None:
        return ("a convolution with a window, stride or padding: the fused lowering runs "
                "GEMMs and 1x1 convolutions only")
    # `between` lists the nodes on the path, the first layer's epilogue nodes among them.
    ops = [op for op in between if op not in _LAYOUT_OPS]
    for op in first.epilogue:
        for nodes in _EPILOGUE_NODES.get(op, ((op,),)):
            if all(ops.count(x) >= nodes.count(x) for x in nodes):
                for x in nodes:
                    ops.remove(x)
                break
    if ops == ["relu"] and "relu" not in first.epilogue:
        first = dataclasses.replace(first, epilogue=(*first.epilogue, "relu"))
    elif ops:
        return _NO_UNIT
    try:
        chain_epilogues(first, second)
    except UnsupportedOpError:
        return _NO_UNIT
    try:
        chain_dims(first, second)
    except BacoError:
        return "the consumer does not read the producer's rows as they are"
    return first, second


def fusion_groups(net: Network) -> tuple[tuple[ChainGroup, ...], dict[str, int]]:
    """The network's fusable chain groups, and the chains left apart counted by reason."""
    skipped: collections.Counter[str] = collections.Counter()
    taken: set[int] = set()
    found: dict[tuple, list] = {}
    for chain in net.chains:
        p, q = chain.positions
        first, second = (gemm_view(dataclasses.replace(net.layers[net.order[x]],
                                                       epilogue=tuple(net.epilogues[x])))
                         for x in (p, q))
        pair = _fusable(first, second, chain.between)
        if not isinstance(pair, str) and (p in taken or q in taken):
            pair = "shares a layer with an earlier fused chain"
        if isinstance(pair, str):
            skipped[pair] += 1
            continue
        first, second = pair
        taken.update((p, q))
        key = (net.order[p], net.order[q], first.epilogue, second.epilogue)
        found.setdefault(key, [first, second, chain.names, 0])[3] += 1
    groups = tuple(ChainGroup(first=i, second=j, instances=count, layers=(a, b),
                              names=(str(names[0]), str(names[1])))
                   for (i, j, _, _), (a, b, names, count) in found.items())
    return groups, dict(skipped)


def _tile_sizes(size: int, dim: int) -> list[int]:
    """The smallest DIM-multiple tile of each trip count over `size`: traffic depends on a
    tile only through its trip count and the buffers grow with it, so no other tile can do
    better (about 2 sqrt(size / DIM) of them)."""
    blocks = -(-size // dim)
    return sorted({-(-blocks // q) * dim for q in range(1, blocks + 1)})


@functools.lru_cache(maxsize=64)
def _tile_table(dims: ChainDims, dim: int) -> dict[str, np.ndarray]:
    """The candidate (T_M, T_K, T_L) (`_tile_sizes`) with the n tile spanning N: rows each
    holds and its DRAM traffic (a `Layer` GEMM's batch shares the weights), least traffic
    first (ties: the largest tiles)."""
    _, m, k, l_, n = dims
    span = {d: -(-x // dim) * dim for d, x in zip(TILE_DIMS, (m, k, l_, n))}
    grid = np.array(list(itertools.product(*(_tile_sizes(x, dim) for x in (m, k, l_)))),
                    np.float64).reshape(-1, 3)
    tiles = {"m": grid[:, 0], "k": grid[:, 1], "l": grid[:, 2], "n": np.full(len(grid),
                                                                           span["n"])}
    sp, acc = footprint(tiles, n, "mlkn", dim)
    full = np.stack([tiles[d] for d in TILE_DIMS], -1)
    dv, _ = chain_data_volume(dims, full.astype(np.float32), "mlkn", shared_weights=True)
    dv = np.asarray(dv, np.float64)
    order = np.lexsort((-grid.prod(axis=1), dv))
    return {"tiles": full[order], "sp_rows": sum(sp.values())[order],
            "acc_rows": sum(acc.values())[order]}


def _planned(dims: ChainDims, params: IsaParams, whole_l: bool = False) -> np.ndarray | None:
    table = _tile_table(dims, params.dim)
    ok = (table["sp_rows"] <= params.sp_rows) & (table["acc_rows"] <= params.acc_rows)
    if whole_l:
        ok &= table["tiles"][:, 2] >= -(-dims.L // params.dim) * params.dim
    fits = np.flatnonzero(ok)
    return table["tiles"][fits[0]] if len(fits) else None


def plan_chain_tiles(first: Layer, second: Layer, hw: HardwareConfig) -> dict[str, int]:
    """Tiles for ``lower_gemm_chain(first, second, hw, tiles, "mlkn")`` with the least DRAM
    traffic by the model (`perfmodels.fusion.chain_data_volume`, equal to the bytes the trace
    moves) among those whose buffers fit (with a softmax, those holding whole rows of C); the
    lowering's own greedy choice when none with the n tile spanning N fits (its
    `InfeasibleError` if nothing does)."""
    params = IsaParams.from_hardware(hw)
    softmax = _has_softmax(first)
    tiles = _planned(ChainDims.from_layers(first, second), params, softmax)
    if tiles is None:
        return choose_tiles(first, second, params, whole_l=softmax)
    return {d: int(t) for d, t in zip(TILE_DIMS, tiles)}


def path_area_mm2(hw: HardwareConfig, softmax: bool = False) -> float | None:
    """Area of the template's on-chip path at `hw` (its ``onchip_path``), with its normalizer
    for a chain with a softmax; None without them."""
    units = ("onchip_path", "normalizer") if softmax else ("onchip_path",)
    areas = [unit_area_mm2(hw, unit) for unit in units]
    return None if None in areas else sum(areas)


@functools.lru_cache(maxsize=16384)
def _chain_cost(group: ChainGroup, hw: HardwareConfig, aware: bool) -> tuple[Any, Any]:
    """``(ChainCost, tiles)`` of one instance of the group fused on `hw`, or ``(None,
    None)`` (`chain_figures`)."""
    if (hw.template != "gemmini" or hw.pe_rows != hw.pe_cols
            or path_area_mm2(hw, group.softmax) is None):
        return None, None
    tiles = _planned(group.dims, IsaParams.from_hardware(hw), group.softmax)
    if tiles is None:
        return None, None
    # The per-layer models leave a layer's bias and residual moves uncounted; so does this,
    # so that fused and apart compare alike (`chain_cost(epilogue=...)` counts them). The
    # softmax's passes are counted: apart, it runs on the host, uncounted.
    cost = chain_cost(group.dims, tiles, hw, load_latency=aware,
                      epilogue=ChainEpilogue(softmax=group.softmax))
    return cost, tuple(int(t) for t in tiles)


def chain_figures(group: ChainGroup, hw: HardwareConfig, aware: bool = True
                  ) -> tuple[float, float, tuple[int, ...] | None]:
    """``(cycles, pJ, tiles)`` of one instance of the group fused on `hw` (inf if no tiling
    with the n tile spanning N fits, or the template has no on-chip path or no
    simulator-style array)."""
    cost, tiles = _chain_cost(group, hw, aware)
    if cost is None:
        return np.inf, np.inf, None
    return float(cost.cycles), float(cost.energy_pj), tiles


def chain_energy_by_event(group: ChainGroup, hw: HardwareConfig, aware: bool = True
                          ) -> dict[str, float]:
    """`chain_figures`' pJ of one instance by event class (`perfmodels.energy.energy_by_event`;
    the useful MACs are the two layers'), every class inf where the chain has no figures."""
    template = hw.template_spec
    cost, tiles = _chain_cost(group, hw, aware)
    if cost is None:
        return dict.fromkeys(event_names(template), np.inf)
    en = chain_energy(group.dims, tiles, hw, load_latency=aware,
                      epilogue=ChainEpilogue(softmax=group.softmax))
    return energy_by_event(template, en, level_arrays(template, hw.to_params(), np),
                           sum(x.macs for x in group.layers), cost.cycles if aware else None)


@dataclasses.dataclass(frozen=True)
class FusionPlan:
    """The groups a search may fuse, over its unique layers and their counts."""

    groups: tuple[ChainGroup, ...]
    counts: tuple[int, ...]
    aware: bool = True
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    forced: bool = False    # every group fused (a design judged as it was decided)
    area_budget_mm2: float | None = None   # the path must fit beside the hardware

    @classmethod
    def of(cls, net: Network, aware: bool = True, area_budget_mm2: float | None = None
           ) -> FusionPlan:
        groups, skipped = fusion_groups(net)
        return cls(groups, tuple(int(c) for c in net.counts), aware, skipped,
                   area_budget_mm2=area_budget_mm2)

    def _path_fits(self, hw: HardwareConfig, softmax: bool = False) -> bool:
        if self.area_budget_mm2 is None:
            return True
        area = config_area_mm2(hw) + (path_area_mm2(hw, softmax) or 0.0)
        return area <= self.area_budget_mm2 * (1 + 1e-6)

    def decide(self, cycles: np.ndarray, energy_pj: np.ndarray,
               hws: Sequence[HardwareConfig]) -> np.ndarray:
        """Which groups each design fuses ``[design, group]``: in order, a group is fused when
        that lowers the network's EDP given the decisions before it (and, with an area
        budget, when the on-chip path fits beside the design's hardware)."""
        _, total_l, total_e = network_totals(cycles, energy_pj, self.counts)
        fused = np.zeros((len(hws), len(self.groups)), bool)
        room = {softmax: np.array([self._path_fits(hw, softmax) for hw in hws])
                for softmax in {g.softmax for g in self.groups}}
        for g, group in enumerate(self.groups):
            figures = np.array([chain_figures(group, hw, self.aware)[:2] for hw in hws])
            figures[~room[group.softmax]] = np.inf
            new_l = total_l - group.instances * (_apart(group, cycles) - figures[:, 0])
            new_e = total_e - group.instances * (_apart(group, energy_pj) - figures[:, 1])
            better = np.isfinite(new_l) & (new_l * new_e < total_l * total_e)
            fused[:, g] = better
            total_l = np.where(better, new_l, total_l)
            total_e = np.where(better, new_e, total_e)
        return fused

    def fold(self, metrics: Any, hws: Sequence[HardwareConfig],
             fused: np.ndarray | None = None) -> Any:
        """`metrics` ``[design, layer]`` with each design's fused groups (``fused [design,
        group]``, else `decide`) folded in (module docstring): ``Σ count x cycles`` and
        ``Σ count x energy`` are the fused network's."""
        if not self.groups:
            return metrics
        cycles = np.asarray(metrics.cycles, np.float64).copy()
        energy_pj = np.asarray(metrics.energy_pj, np.float64).copy()
        if fused is None:
            fused = (np.ones((len(hws), len(self.groups)), bool) if self.forced
                     else self.decide(cycles, energy_pj, hws))
        counts = np.asarray(self.counts, np.float64)
        for g, group in enumerate(self.groups):
            rows = np.flatnonzero(fused[:, g])
            if not len(rows):
                continue
            figures = np.array([chain_figures(group, hws[r], self.aware)[:2] for r in rows])
            index, per_chain = (np.array(x) for x in zip(*group.uses.items()))
            removed = group.instances * per_chain / counts[index]   # of each layer's count
            for values, total in ((cycles, figures[:, 0]), (energy_pj, figures[:, 1])):
                alone = values[rows][:, index]
                apart = per_chain * alone
                part = apart / np.maximum(apart.sum(-1, keepdims=True), 1e-30)
                values[rows[:, None], index] = alone + removed * (
                    part * total[:, None] / per_chain - alone)
        return metrics._replace(cycles=cycles.astype(np.float32),
                                energy_pj=energy_pj.astype(np.float32),
                                edp=(cycles * energy_pj).astype(np.float32))

    def energy_by_event(self, events: Sequence[dict[str, float]], hw: HardwareConfig,
                        unfused: Any = None) -> dict[str, float]:
        """The network's energy by event class with the fused groups run as chains, as `fold`
        sums ``energy_pj``: each layer's ``{event: pJ}`` (`events`, unfused) weighted by its
        count less the instances its fused groups take, plus each fused group's chain
        (`chain_energy_by_event`) times its instances. A `forced` plan fuses every group,
        else `decide` does from the layers' `unfused` metrics (``cycles``, ``energy_pj``)."""
        weights = [float(c) for c in self.counts]
        fused = (np.ones(len(self.groups), bool) if self.forced else self.decide(
            np.asarray(unfused.cycles, np.float64)[None],
            np.asarray(unfused.energy_pj, np.float64)[None], [hw])[0])
        rows = list(events)
        for group, yes in zip(self.groups, fused):
            if yes:
                for index, per_chain in group.uses.items():
                    weights[index] -= group.instances * per_chain
                rows.append(chain_energy_by_event(group, hw, self.aware))
                weights.append(float(group.instances))
        return network_energy_by_event(rows, weights)

    def describe(self, cycles: np.ndarray, energy_pj: np.ndarray, hw: HardwareConfig
                 ) -> list[dict[str, Any]]:
        """Per group, for one design's unfused per-layer figures: fused or not, with the
        tiles and the fused chain's cycles and pJ (per instance)."""
        fused = self.decide(cycles[None], energy_pj[None], [hw])[0]
        out = []
        for group, yes in zip(self.groups, fused):
            c, e, tiles = chain_figures(group, hw, self.aware)
            out.append({**group.to_dict(), "fused": bool(yes),
                        "tiles": dict(zip(TILE_DIMS, tiles)) if tiles else None,
                        "fused_cycles": c, "fused_energy_pj": e,
                        "apart_cycles": float(_apart(group, cycles)),
                        "apart_energy_pj": float(_apart(group, energy_pj))})
        return out

    def summary(self, chains: list[dict[str, Any]], hw: HardwareConfig
                ) -> tuple[dict[int, list[str]], dict[str, Any]]:
        """What a result says of fusion, from `describe`'s ``chains``: per layer, the layers
        it is fused with; and the chains, the layers left apart and the on-chip path's
        area."""
        fused_with: dict[int, list[str]] = {}
        for entry in chains:
            if entry["fused"]:
                (first, second), names = entry["layers"], entry["names"]
                fused_with.setdefault(first, []).append(names[1])
                fused_with.setdefault(second, []).append(names[0])
        fused = [g for g, entry in zip(self.groups, chains) if entry["fused"]]
        return fused_with, {"chains": chains, "left_apart": self.skipped,
                            "path_area_mm2": (path_area_mm2(hw, any(
                                g.softmax for g in fused)) or 0.0) if fused else 0.0}


def _apart(group: ChainGroup, values: np.ndarray) -> np.ndarray:
    """One chain instance's figure with its layers run apart, from per-layer ``[..., layer]``."""
    return sum(k * values[..., i] for i, k in group.uses.items())


__all__ = ["ChainGroup", "FusionPlan", "chain_energy_by_event", "chain_figures", "fused_chains",
           "fusion_groups", "gemm_view", "path_area_mm2", "plan_chain_tiles"]
