"""A contest's verdict on the simulated yardstick, taken apart.

One EDP ratio hides what decides it. For each contestant this gives its simulated latency and
energy apart and each layer's share of them; for each pair (a baseline against BACO) the
latency, energy and EDP ratios, the EDP ratio under each padded-MAC assumption
(`PADDED_MAC_ASSUMPTIONS`: the MACs the array spends on padded operands re-priced, cycles
unchanged), and the EDP ratio with one layer left out of both networks: the largest (most
MACs x count) and the one whose absence favours the baseline most.

A layer is named as the simulated rows name it; a fused chain's row (``a -> b``) goes with
either of its layers. Ratios are the baseline's figure over BACO's (> 1: BACO ahead).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from accel.arch import level_arrays
from baco.yardsticks import SimulatedLayer, Yardsticks

PADDED_MAC_ASSUMPTIONS = ("zero", "table", "full")
"""What a MAC on a padded operand costs: nothing, the template's padded-MAC energy (what the
simulated yardstick charges), or a useful MAC's energy."""


def padded_mac_pj(judged: Yardsticks, assumption: str) -> float:
    """The energy of one padded MAC under `assumption`, on the simulated hardware."""
    hw = judged.simulated.hardware
    lv = level_arrays(hw.template_spec, hw.to_params(), np)
    table = {"zero": 0.0, "table": float(lv.mac_padded_energy_pj),
             "full": float(lv.mac_energy_pj)}
    if assumption not in table:
        raise ValueError(f"padded-MAC assumption must be one of {PADDED_MAC_ASSUMPTIONS}, "
                         f"got {assumption!r}")
    return table[assumption]


def _layer_names(row: SimulatedLayer) -> set[str]:
    return set(row.name.split(" -> "))


def _totals(judged: Yardsticks, assumption: str = "table", leave_out: str | None = None
            ) -> tuple[float, float]:
    """Simulated latency and energy of the network, padded MACs at `assumption`, without
    the rows of layer `leave_out`."""
    # the simulated energy already prices padded MACs at the table's figure
    extra = (0.0 if assumption == "table"
             else padded_mac_pj(judged, assumption) - padded_mac_pj(judged, "table"))
    rows = [x for x in judged.layers if leave_out is None or leave_out not in _layer_names(x)]
    latency = math.fsum(x.count * x.cycles for x in rows)
    energy = math.fsum(x.count * (x.energy_pj + (x.array_macs - x.macs) * extra)
                       for x in rows)
    return latency, energy


def _edp_ratio(theirs: Yardsticks, mine: Yardsticks, assumption: str = "table",
               leave_out: str | None = None) -> float | None:
    t_lat, t_en = _totals(theirs, assumption, leave_out)
    m_lat, m_en = _totals(mine, assumption, leave_out)
    if m_lat * m_en <= 0:
        return None
    return t_lat * t_en / (m_lat * m_en)


def largest_layer(judged: Yardsticks) -> str | None:
    """The layer with the most MACs x count (the network's, whatever the design)."""
    rows = [x for x in judged.layers if " -> " not in x.name and x.count > 0]
    return max(rows, key=lambda x: x.count * x.macs).name if rows else None


def contestant(judged: Yardsticks) -> dict[str, Any] | None:
    """``{"latency_cycles", "energy_pj", "edp", "edp_by_padded_mac": {assumption: EDP},
    "layers": [{"name", "count", "latency_share", "energy_share"}]}`` on the simulated
    yardstick (None without one)."""
    if judged.simulated is None:
        return None
    latency, energy = _totals(judged)
    by_mac = {}
    for assumption in PADDED_MAC_ASSUMPTIONS:
        lat, en = _totals(judged, assumption)
        by_mac[assumption] = lat * en
    shares = [{"name": x.name, "count": x.count,
               "latency_share": x.count * x.cycles / latency if latency else 0.0,
               "energy_share": x.count * x.energy_pj / energy if energy else 0.0}
              for x in judged.layers if x.count > 0]
    return {"latency_cycles": latency, "energy_pj": energy, "edp": latency * energy,
            "edp_by_padded_mac": by_mac, "layers": shares}


def versus(theirs: Yardsticks, mine: Yardsticks) -> dict[str, Any] | None:
    """A baseline (`theirs`) against BACO (`mine`) on the simulated yardstick: ``latency_ratio``,
    ``energy_ratio``, ``edp_ratio``, ``edp_ratio_by_padded_mac`` ({assumption: ratio}),
    ``largest_layer_out`` and ``worst_layer_out`` ({"layer", "edp_ratio"}: the largest layer
    left out; the layer whose absence gives the lowest ratio). None without both."""
    if theirs.simulated is None or mine.simulated is None:
        return None
    t_lat, t_en = _totals(theirs)
    m_lat, m_en = _totals(mine)
    out: dict[str, Any] = {
        "latency_ratio": t_lat / m_lat if m_lat else None,
        "energy_ratio": t_en / m_en if m_en else None,
        "edp_ratio": _edp_ratio(theirs, mine),
        "edp_ratio_by_padded_mac": {a: _edp_ratio(theirs, mine, a)
                                    for a in PADDED_MAC_ASSUMPTIONS},
    }
    largest = largest_layer(mine)
    out["largest_layer_out"] = (None if largest is None else
                                {"layer": largest,
                                 "edp_ratio": _edp_ratio(theirs, mine, leave_out=largest)})
    worst = _worst_layer_out(theirs, mine, _names(mine.layers) | _names(theirs.layers))
    out["worst_layer_out"] = worst
    return out


def _names(rows: Sequence[SimulatedLayer]) -> set[str]:
    return set().union(*(_layer_names(x) for x in rows)) if rows else set()


def _worst_layer_out(theirs: Yardsticks, mine: Yardsticks, names: set[str]
                     ) -> dict[str, Any] | None:
    ratios = [(r, name) for name in sorted(names)
              if (r := _edp_ratio(theirs, mine, leave_out=name)) is not None]
    if not ratios:
        return None
    ratio, name = min(ratios)
    return {"layer": name, "edp_ratio": ratio}


def verdict_lines(taken_apart: dict[str, Any] | None) -> list[str]:
    """The simulated verdict against one baseline, taken apart (`baco.verdict.versus`)."""
    if not taken_apart:
        return []

    def x(ratio: float | None) -> str:
        return "-" if ratio is None else f"{ratio:.2f}x"

    by_mac = taken_apart["edp_ratio_by_padded_mac"]
    out = [f"      simulated: latency {x(taken_apart['latency_ratio'])}, energy "
           f"{x(taken_apart['energy_ratio'])}; EDP with padded MACs free / as the table / "
           f"full: {x(by_mac['zero'])} / {x(by_mac['table'])} / {x(by_mac['full'])}"]
    parts = []
    for key, title in (("largest_layer_out", "the largest layer"),
                       ("worst_layer_out", "the most decisive layer")):
        left = taken_apart.get(key)
        if left:
            parts.append(f"without {title} ({left['layer']}) {x(left['edp_ratio'])}")
    if parts:
        out.append("      " + "; ".join(parts))
    return out


__all__ = ["PADDED_MAC_ASSUMPTIONS", "contestant", "largest_layer", "padded_mac_pj",
           "verdict_lines", "versus"]
