"""`CodesignResult`: what every search (BACO and each baseline) returns, in one form.

All searches count samples the same way: **one sample is one whole-network point — a hardware
configuration and one mapping per unique layer — scored by the model** (exact, or relaxed for a
gradient step, which costs the same model evaluation). This is DOSA's accounting (each gradient
iteration is plotted as a sample) and the one the seed's Fig. 6.11 compares at. A search that
runs the simulator (``codesign.predictor: sim_hybrid``, `baco.sim_hybrid`) also pays **one
sample per unique layer it simulates for the first time** (a layer, mapping and hardware it has
not simulated before): a whole design of L unique layers costs up to L samples, so its budget
buys fewer model points, never free simulations.

Totals follow Eq. 6.9: ``latency_cycles = Σ count·l_i``, ``energy_pj = Σ count·e_i`` and
``edp = energy_pj × latency_cycles`` (pJ·cycles).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from accel.arch import HardwareConfig
from accel.mapping import Mapping
from workloads.errors import ConfigError
from workloads.layer import Layer


@dataclasses.dataclass(frozen=True)
class LayerResult:
    """One unique layer's program and its exact score on the result's hardware.

    ``fused_with``: the layers this one runs fused with (a fused GEMM chain, `baco.fusion`);
    its scores are then its share of the fused chain's.
    """

    layer: Layer
    count: int
    mapping: Mapping
    latency_cycles: float
    energy_pj: float
    fused_with: tuple[str, ...] = ()

    @property
    def edp(self) -> float:
        return self.latency_cycles * self.energy_pj

    def to_dict(self) -> dict[str, Any]:
        out = {"layer": self.layer.to_dict(), "count": self.count,
               "mapping": self.mapping.to_dict(),
               "latency_cycles": self.latency_cycles, "energy_pj": self.energy_pj,
               "edp": self.edp}
        if self.fused_with:
            out["fused_with"] = list(self.fused_with)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerResult:
        return cls(layer=Layer.from_dict(data["layer"]), count=int(data["count"]),
                   mapping=Mapping.from_dict(data["mapping"]),
                   latency_cycles=float(data["latency_cycles"]),
                   energy_pj=float(data["energy_pj"]),
                   fused_with=tuple(str(x) for x in data.get("fused_with", ())))


@dataclasses.dataclass(frozen=True)
class HistoryPoint:
    """The best EDP found after ``samples`` samples and ``seconds`` of wall time."""

    samples: int
    seconds: float
    best_edp: float


@dataclasses.dataclass(frozen=True)
class CodesignResult:
    """A searched design: hardware, per-layer programs, exact scores, and how it was found.

    ``method`` names the search (``baco``, ``dosa``, ``random``, ``bo``, ``gemmini_default``,
    ``random_pruned``...); ``seed`` the seed it ran with; ``extra`` holds method-specific facts
    (e.g. the settings of an ablation), JSON-serializable. ``candidates``: the search's best
    few distinct designs by its own score, each a result (its best first), that the final
    pick (`baco.final_pick`) simulates; not written to JSON (a picked result has none).
    """

    method: str
    network: str
    hardware: HardwareConfig
    layers: tuple[LayerResult, ...]
    samples: int
    history: tuple[HistoryPoint, ...] = ()
    seed: int = 0
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    candidates: tuple[CodesignResult, ...] = dataclasses.field(default=(), compare=False,
                                                               repr=False)

    @property
    def latency_cycles(self) -> float:
        return math.fsum(r.count * r.latency_cycles for r in self.layers)

    @property
    def energy_pj(self) -> float:
        return math.fsum(r.count * r.energy_pj for r in self.layers)

    @property
    def edp(self) -> float:
        return self.latency_cycles * self.energy_pj

    def best_edp_at(self, samples: int) -> float:
        """The best EDP the search had found within ``samples`` samples (inf if none yet)."""
        best = [h.best_edp for h in self.history if h.samples <= samples]
        return min(best) if best else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "network": self.network, "seed": self.seed,
            "edp": self.edp, "latency_cycles": self.latency_cycles,
            "energy_pj": self.energy_pj, "samples": self.samples,
            "hardware": self.hardware.to_dict(),
            "layers": [r.to_dict() for r in self.layers],
            "history": [dataclasses.asdict(h) for h in self.history],
            "extra": self.extra,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "result") -> CodesignResult:
        try:
            return cls(
                method=str(data["method"]), network=str(data["network"]),
                hardware=HardwareConfig.from_dict(data["hardware"], where=f"{where}: hardware"),
                layers=tuple(LayerResult.from_dict(r) for r in data["layers"]),
                samples=int(data["samples"]),
                history=tuple(HistoryPoint(int(h["samples"]), float(h.get("seconds", 0.0)),
                                           float(h["best_edp"])) for h in data.get("history", [])),
                seed=int(data.get("seed", 0)), extra=dict(data.get("extra", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: malformed result record ({exc!r})") from exc

    @classmethod
    def from_json(cls, text: str, where: str = "result") -> CodesignResult:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc})") from exc
        return cls.from_dict(data, where=where)


def history_from_evaluations(edps: Sequence[float], seconds: Sequence[float],
                             start_samples: int = 0) -> tuple[HistoryPoint, ...]:
    """Running-best history of a search that scored one point per sample, in order."""
    points, best = [], math.inf
    for i, (edp, t) in enumerate(zip(edps, seconds), start=start_samples + 1):
        if edp < best:
            best = float(edp)
            points.append(HistoryPoint(samples=i, seconds=float(t), best_edp=best))
    return tuple(points)
