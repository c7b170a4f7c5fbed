"""`Network`: the unique layers a co-design run optimizes, with their repeat counts and order."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from workloads.errors import WorkloadError
from workloads.fusion import Chain
from workloads.layer import Layer


@dataclasses.dataclass(frozen=True)
class ImportSummary:
    """What the ONNX importer did with each operator, for the user to check.

    ``ops`` counts every node by op type as it appeared in the file; ``layers`` counts the nodes
    that became Layers; ``epilogues`` the nodes attached to a preceding layer; ``skipped`` the
    nodes that carry no MACs worth mapping (reshapes, pooling, normalization...); ``folded`` the
    BatchNormalization nodes folded into their conv; ``passes`` how many nodes each graph pass
    removed.
    """

    ops: Mapping[str, int] = dataclasses.field(default_factory=dict)
    layers: Mapping[str, int] = dataclasses.field(default_factory=dict)
    epilogues: Mapping[str, int] = dataclasses.field(default_factory=dict)
    skipped: Mapping[str, int] = dataclasses.field(default_factory=dict)
    folded: Mapping[str, int] = dataclasses.field(default_factory=dict)
    passes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {f.name: dict(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class Network:
    """Unique layers with repeat counts, plus the original layer order.

    ``order[i]`` is the index into ``layers`` of the i-th layer of the original graph,
    ``names[i]`` its node name and ``epilogues[i]`` its own epilogue (occurrences of one loop
    nest may differ there: a bottleneck's last conv takes the residual add, its projection
    shortcut does not), so ``counts[j] == order.count(j)``. ``chains`` lists the fusable
    producer-consumer pairs (`workloads.fusion`) by their positions in ``order``.

    >>> net = Network.from_layers("toy", [Layer.gemm(M=4, K_red=8, N_out=8)] * 3)
    >>> net.counts, net.total_layers
    ((3,), 3)
    """

    name: str
    layers: tuple[Layer, ...]
    counts: tuple[int, ...]
    order: tuple[int, ...]
    names: tuple[str, ...]
    epilogues: tuple[tuple[str, ...], ...] | None = None
    summary: ImportSummary = dataclasses.field(default_factory=ImportSummary, compare=False)
    chains: tuple[Chain, ...] = ()

    def __post_init__(self) -> None:
        if len(self.layers) != len(self.counts):
            raise WorkloadError(f"network {self.name!r}: layers and counts differ in length")
        if len(self.order) != len(self.names):
            raise WorkloadError(f"network {self.name!r}: order and names differ in length")
        if self.epilogues is None:
            object.__setattr__(self, "epilogues",
                               tuple(self.layers[j].epilogue for j in self.order))
        object.__setattr__(self, "epilogues", tuple(tuple(e) for e in self.epilogues))
        if len(self.epilogues) != len(self.order):
            raise WorkloadError(f"network {self.name!r}: order and epilogues differ in length")
        if Counter(self.order) != Counter(dict(enumerate(self.counts))):
            raise WorkloadError(f"network {self.name!r}: counts do not match the layer order")
        object.__setattr__(self, "chains", tuple(self.chains))
        for i, chain in enumerate(self.chains):
            self._check_chain(i, chain)

    def _check_chain(self, i: int, chain: Chain) -> None:
        where = f"network {self.name!r}: chain {i}"
        if not isinstance(chain, Chain):
            raise WorkloadError(f"{where} is a {type(chain).__name__}, not a workloads Chain")
        if not all(0 <= p < len(self.order) for p in chain.positions):
            raise WorkloadError(f"{where} has positions {chain.positions}, out of range for "
                                f"{len(self.order)} layers")
        if list(chain.positions) != sorted(set(chain.positions)):
            raise WorkloadError(f"{where} has positions {chain.positions}: the producer must "
                                f"come before the consumer in the layer order")
        names = tuple(self.names[p] for p in chain.positions)
        if chain.names != names:
            raise WorkloadError(f"{where} names {chain.names}, but the layers at positions "
                                f"{chain.positions} are {names}")

    @classmethod
    def from_layers(cls, name: str, layers: Iterable[Layer],
                    summary: ImportSummary | None = None,
                    chains: Iterable[Chain] = ()) -> Network:
        """Deduplicate layers (by `Layer.key`), keeping the first occurrence of each; chain
        positions index the given layers."""
        index: dict[tuple, int] = {}
        unique: list[Layer] = []
        order: list[int] = []
        names: list[str] = []
        epilogues: list[tuple[str, ...]] = []
        for layer in layers:
            j = index.setdefault(layer.key(), len(unique))
            if j == len(unique):
                unique.append(layer)
            order.append(j)
            names.append(layer.name)
            epilogues.append(layer.epilogue)
        counts = Counter(order)
        return cls(name=name, layers=tuple(unique),
                   counts=tuple(counts[j] for j in range(len(unique))),
                   order=tuple(order), names=tuple(names), epilogues=tuple(epilogues),
                   summary=summary or ImportSummary(), chains=tuple(chains))

    @property
    def unique_layers(self) -> int:
        return len(self.layers)

    @property
    def total_layers(self) -> int:
        return len(self.order)

    @property
    def total_macs(self) -> int:
        return sum(c * layer.macs for layer, c in zip(self.layers, self.counts))

    def __iter__(self):
        """Yields (layer, count) pairs, one per unique layer."""
        return iter(zip(self.layers, self.counts))

    def __len__(self) -> int:
        return len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by `baco workloads show --json`."""
        return {
            "name": self.name,
            "unique_layers": self.unique_layers,
            "total_layers": self.total_layers,
            "total_macs": self.total_macs,
            "layers": [{**layer.to_dict(), "count": c} for layer, c in self],
            "order": list(self.order),
            "names": list(self.names),
            "epilogues": [list(e) for e in self.epilogues],
            "summary": self.summary.to_dict(),
            "chains": [chain.to_dict() for chain in self.chains],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Network:
        try:
            layers = tuple(Layer.from_dict(d) for d in data["layers"])
            counts = tuple(int(d["count"]) for d in data["layers"])
            order = tuple(data.get("order") or [j for j, c in enumerate(counts) for _ in range(c)])
            names = tuple(data.get("names") or [layers[j].name for j in order])
            epilogues = data.get("epilogues")
            summary = ImportSummary(**data.get("summary", {}))
            chains = tuple(Chain.from_dict(c) for c in data.get("chains", ()))
            return cls(name=data["name"], layers=layers, counts=counts, order=order,
                       names=names, epilogues=epilogues, summary=summary, chains=chains)
        except (KeyError, TypeError) as exc:
            raise WorkloadError(f"malformed network record: {exc}") from exc


_MAC_UNITS = (("TMAC", 1e12), ("GMAC", 1e9), ("MMAC", 1e6), ("kMAC", 1e3))


def format_macs(macs: float) -> str:
    """A MAC count for people, three significant digits in the unit that fits (``200 kMAC``,
    ``4.09 GMAC``): a small layer reads as what it is, not as ``0.000 GMAC``."""
    for unit, scale in _MAC_UNITS:
        if abs(macs) >= scale * 0.9995:          # what rounds to 1 at three digits moves up
            return f"{macs / scale:.3g} {unit}"
    return f"{macs:.3g} MAC"
