"""What every runner reads (suites, networks, method specs) and writes (the table, its notes,
the plots), shared by the kinds of `baco.reproduce.runners`."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from baco.reproduce.methods import MethodSpec
from baco.reproduce.store import write_atomic
from baco.reproduce.tables import csv_text, markdown


@functools.cache
def cached_suite(name: str, seed: int) -> tuple:
    import workloads
    return tuple(workloads.suite(name, seed))


@functools.cache
def cached_network(name: str) -> Any:
    from baco.networks import load_network
    return load_network(name)


def spread(n_total: int, n: int | None) -> list[int]:
    """`n` indices spread evenly over ``range(n_total)`` (all of them if `n` is None).

    >>> spread(10, 3)
    [0, 4, 9]
    """
    if n is None or n >= n_total:
        return list(range(n_total))
    return sorted({round(float(x)) for x in np.linspace(0, n_total - 1, n)})


def method_of(data: dict[str, Any]) -> MethodSpec:
    return MethodSpec(**data)


def write_outputs(out: pathlib.Path, title: str, notes: list[str], header: list[str],
                  rows: list[list[Any]], csv_header: list[str] | None = None,
                  csv_rows: list[list[Any]] | None = None, more: str = "") -> str:
    text = f"# {title}\n\n" + markdown(header, rows) + "\n"
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    text += more
    write_atomic(out / "table.md", text)
    write_atomic(out / "table.csv", csv_text(csv_header or header, csv_rows or rows))
    return text


def save_plot(fig: Any, path: pathlib.Path) -> None:
    from baco.plots import save
    save(fig, path)


def infeasible_of(results: dict[str, dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for cid, res in sorted(results.items()):
        if "infeasible" in res:
            out.setdefault(cid.split("__")[1], []).append(res["infeasible"])
    return out


def infeasible_notes(infeasible: dict[str, list[str]]) -> list[str]:
    return [f"{label}: {len(msgs)} case(s) it cannot run, left out (first: {msgs[0]})"
            for label, msgs in sorted(infeasible.items())]


def missing_note(expected: int, have: int, what: str = "cases") -> list[str]:
    if have < expected:
        return [(f"PARTIAL: {have} of {expected} {what} finished; rerun the same command to "
                "finish the rest.")]
    return []


def budgets_note(methods: Sequence[MethodSpec], prefix: str = "Budgets: ") -> str:
    return prefix + ", ".join(f"{m.label} {m.search} {m.budget}" for m in methods) + "."
