"""Plots of co-design results (matplotlib, no display needed).

Every function returns a `matplotlib.figure.Figure` built without pyplot (so nothing changes
the process's backend and nothing needs a display; in a notebook the figure shows as the cell's
value), and `save` writes one to a PNG atomically.

* `convergence`: best EDP against samples, log-scaled (seed 001 Fig. 6.11);
* `energy_latency`: energy against latency of designs, iso-EDP lines, the chosen one marked;
* `layer_breakdown`: per-layer bars of one quantity, one bar per method;
* `predicted_vs_measured`: log-log scatter of predicted against measured cycles, y = x drawn
  (seed 001 Fig. 6.12);
* `grouped_bars`: one group per benchmark, one bar per method, optional reference markers
  (the seed's printed values) -- Table 6.6 and Fig. 6.10;
* `stacked_bars`: one horizontal bar per group split into its parts (energy by event);
* `edp_area`: EDP against area of designs found under area budgets, each method's Pareto
  front drawn through its non-dominated points (``baco sweep`` over ``area_budgets_mm2``).

>>> fig = convergence({"baco": [(1, 10.0), (50, 2.0)], "random": [(1, 12.0), (40, 8.0)]})
>>> [ax.get_yscale() for ax in fig.axes]
['log']
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

__all__ = ["convergence", "edp_area", "energy_latency", "grouped_bars", "layer_breakdown",
           "predicted_vs_measured", "save", "stacked_bars"]


def save(fig: Figure, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write `fig` as a PNG at `path`, atomically (a temporary file renamed into place)."""
    from workloads.files import write_atomic

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    write_atomic(path, buffer.getvalue())


def _axes(ax: Any, size: tuple[float, float]) -> tuple[Figure, Any]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size)
    return fig, fig.add_subplot()


def _label(ax: Any, xlabel: str, ylabel: str, title: str, legend: bool = True) -> None:
    """Axis labels, the title if any, a log-friendly grid and the legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend(fontsize=8)


def convergence(curves: Mapping[str, Sequence[tuple[float, float]]], *, ax: Any = None,
                title: str = "", log_x: bool = False, xlabel: str = "samples") -> Figure:
    """Best EDP against samples (or what `xlabel` names: wall seconds) for each method, as
    steps (a method's best so far).

    Args:
      curves: method -> ``[(x, best_edp), ...]``, ascending x.
      ax: draw into this Axes instead of a new figure.
      log_x: log-scale the x axis too.
    """
    fig, ax = _axes(ax, (6.0, 4.0))
    for label, points in curves.items():
        pts = [(float(s), float(e)) for s, e in points if math.isfinite(e) and e > 0]
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.step(xs, ys, where="post", label=label, linewidth=1.6)
        ax.plot(xs[-1:], ys[-1:], "o", color=ax.lines[-1].get_color(), markersize=4)
    ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    _label(ax, xlabel, "best EDP (cycles x pJ)", title, legend=bool(curves))
    return fig


def energy_latency(points: Sequence[tuple[str, float, float]], *, chosen: int | str | None = None,
                   ax: Any = None, title: str = "", iso_lines: int = 4) -> Figure:
    """Energy (pJ) against latency (cycles) of designs, log-log, with iso-EDP lines.

    Args:
      points: ``(label, latency_cycles, energy_pj)`` per design; points sharing a label share
        a colour.
      chosen: the index (or the label's first point) of the design to mark with a star.
    """
    fig, ax = _axes(ax, (6.0, 4.5))
    colours: dict[str, Any] = {}
    for label, cycles, energy in points:
        kwargs = {} if label in colours else {"label": label}
        dot = ax.scatter([cycles], [energy], s=22, alpha=0.75, color=colours.get(label), **kwargs)
        colours.setdefault(label, dot.get_facecolor()[0])
    ax.set_xscale("log")
    ax.set_yscale("log")
    if points and iso_lines:
        c = np.array([p[1] for p in points], float)
        e = np.array([p[2] for p in points], float)
        xs = np.geomspace(c.min() / 1.5, c.max() * 1.5, 50)
        for edp in np.geomspace((c * e).min(), (c * e).max(), iso_lines):
            ax.plot(xs, edp / xs, ":", color="grey", linewidth=0.8)
        ax.set_xlim(xs[0], xs[-1])
        ax.set_ylim(e.min() / 1.5, e.max() * 1.5)
    if chosen is not None and points:
        index = chosen if isinstance(chosen, int) else [p[0] for p in points].index(chosen)
        label, cycles, energy = points[index]
        ax.scatter([cycles], [energy], s=220, marker="*", color="crimson", edgecolor="black",
                   zorder=5, label=f"chosen: {label}")
    _label(ax, "latency (cycles)", "energy (pJ)", title)
    return fig


def layer_breakdown(per_method: Mapping[str, Sequence[tuple[str, float]]], *,
                    quantity: str = "latency (cycles)", ax: Any = None, title: str = "",
                    log: bool = True) -> Figure:
    """Per-layer bars: for each layer, one bar per method of `quantity` (e.g. count x cycles).

    Args:
      per_method: method -> ``[(layer name, value), ...]``; layers are matched by name, in
        the first method's order.
    """
    names: list[str] = []
    for rows in per_method.values():
        names += [n for n, _ in rows if n not in names]
    fig, ax = _axes(ax, (max(6.0, 0.35 * len(names) + 2), 4.5))
    width = 0.8 / max(1, len(per_method))
    x = np.arange(len(names))
    for i, (label, rows) in enumerate(per_method.items()):
        values = dict(rows)
        ax.bar(x + i * width - 0.4 + width / 2, [values.get(n, np.nan) for n in names], width,
               label=label)
    ax.set_xticks(x)
    ax.set_xticklabels([n if len(n) <= 18 else n[:17] + "…" for n in names], rotation=75,
                       fontsize=7)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(quantity)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def predicted_vs_measured(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
                          ax: Any = None, title: str = "",
                          highlight: Sequence[bool] | None = None) -> Figure:
    """Log-log scatter of predicted against measured cycles, one colour per predictor.

    Args:
      series: predictor -> ``(predicted, measured)`` arrays of one length.
      highlight: rows to draw filled (e.g. the held-out split); the rest are drawn faint.
    """
    fig, ax = _axes(ax, (5.5, 5.0))
    lo, hi = math.inf, 0.0
    for label, (pred, meas) in series.items():
        p, m = np.asarray(pred, float), np.asarray(meas, float)
        ok = (p > 0) & (m > 0) & np.isfinite(p) & np.isfinite(m)
        if not ok.any():
            continue
        r = float(np.corrcoef(np.log(p[ok]), np.log(m[ok]))[0, 1]) if ok.sum() > 1 else math.nan
        if highlight is not None:
            h = np.asarray(highlight, bool) & ok
            dots = ax.scatter(m[ok & ~h], p[ok & ~h], s=5, alpha=0.15)
            ax.scatter(m[h], p[h], s=9, alpha=0.8, color=dots.get_facecolor()[0],
                       label=f"{label} (log r={r:.2f})")
        else:
            ax.scatter(m[ok], p[ok], s=7, alpha=0.6, label=f"{label} (log r={r:.2f})")
        lo = min(lo, p[ok].min(), m[ok].min())
        hi = max(hi, p[ok].max(), m[ok].max())
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _label(ax, "measured cycles (Gemmini RTL)", "predicted cycles", title)
    return fig


def grouped_bars(groups: Sequence[str], series: Mapping[str, Sequence[float]], *,
                 reference: Mapping[str, Sequence[float]] | None = None, ax: Any = None,
                 ylabel: str = "EDP relative to Gemmini-BACO", title: str = "",
                 log: bool = True) -> Figure:
    """One group of bars per benchmark, one bar per method; `reference` values (same shape)
    are drawn as black markers on the bars (the seed's printed numbers)."""
    fig, ax = _axes(ax, (max(6.0, 1.4 * len(groups) + 2), 4.2))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    marked = False
    for i, (label, values) in enumerate(series.items()):
        pos = x + i * width - 0.4 + width / 2
        ax.bar(pos, [v if v is not None else np.nan for v in values], width, label=label)
        if reference and label in reference:
            ref = [v if v is not None else np.nan for v in reference[label]]
            ax.plot(pos, ref, "k_", markersize=11, markeredgewidth=2,
                    label=None if marked else "seed (printed)")
            marked = True
    ax.set_xticks(x)
    ax.set_xticklabels(groups)
    if log:
        ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return fig


def stacked_bars(groups: Sequence[str], parts: Mapping[str, Sequence[float]], *,
                 ax: Any = None, xlabel: str = "", title: str = "") -> Figure:
    """One horizontal bar per group, split into `parts` (name -> one value per group): what a
    total is made of (e.g. energy by event)."""
    fig, ax = _axes(ax, (7.0, 0.6 * len(groups) + 1.8))
    left = np.zeros(len(groups))
    for label, values in parts.items():
        width = np.asarray([0.0 if v is None else v for v in values], float)
        ax.barh(np.arange(len(groups)), width, left=left, label=label)
        left += width
    ax.set_yticks(np.arange(len(groups)))
    ax.set_yticklabels(groups)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def edp_area(series: Mapping[str, Sequence[tuple[float, float, bool]]], *,
             budgets: Sequence[float] = (), ax: Any = None, title: str = "",
             ylabel: str = "EDP (cycles x pJ)") -> Figure:
    """EDP against area (mm2), log EDP, one colour per method.

    Args:
      series: method -> ``[(area_mm2, edp, on_front), ...]``; every point is drawn, the front
        (``on_front``) with larger markers joined by a staircase line (sorted by area).
      budgets: area budgets, drawn as dotted vertical lines.
    """
    fig, ax = _axes(ax, (6.0, 4.5))
    for budget in budgets:
        ax.axvline(float(budget), linestyle=":", color="grey", linewidth=0.8)
    for label, points in series.items():
        pts = [(float(a), float(e), bool(f)) for a, e, f in points
               if math.isfinite(a) and math.isfinite(e) and e > 0]
        if not pts:
            continue
        dots = ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, alpha=0.5,
                          label=label)
        colour = dots.get_facecolor()[0]
        front = sorted((a, e) for a, e, f in pts if f)
        if front:
            xs, ys = zip(*front)
            ax.step(xs, ys, where="post", color=colour, linewidth=1.6)
            ax.scatter(xs, ys, s=60, color=colour, edgecolor="black", zorder=4)
    ax.set_yscale("log")
    _label(ax, "area (mm2)", ylabel, title, legend=bool(series))
    return fig
