"""Tables: geometric means, markdown and CSV text.

>>> round(geomean([2.0, 8.0]), 6)
4.0
>>> print(markdown(["a", "b"], [[1, 2.5], ["x", None]]))
| a | b |
|---|---|
| 1 | 2.5 |
| x | - |
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from typing import Any


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values (nan if there are none)."""
    logs = [math.log(v) for v in values]
    return math.exp(math.fsum(logs) / len(logs)) if logs else math.nan


def fmt(value: Any, digits: int = 4) -> str:
    """A cell: numbers with `digits` significant digits, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "✓" if value else ""
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.{digits}g}"
    return str(value)


def ratio(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}×"


def pareto_front(areas: Sequence[float], edps: Sequence[float]) -> list[bool]:
    """Which points are on the EDP-area Pareto front (both minimized): no other point has an
    area and an EDP at most its own with one of them strictly smaller. Non-finite points are
    never on it; of identical points, the first is.

    >>> pareto_front([1.0, 2.0, 3.0, 2.0, 1.5], [9.0, 4.0, 5.0, 4.0, 9.5])
    [True, True, False, False, False]
    """
    pts = [(float(a), float(e)) for a, e in zip(areas, edps)]
    out = []
    for i, (a, e) in enumerate(pts):
        ok = math.isfinite(a) and math.isfinite(e)
        for j, (a2, e2) in enumerate(pts):
            if not ok:
                break
            if j == i or not (math.isfinite(a2) and math.isfinite(e2)):
                continue
            if a2 <= a and e2 <= e and (a2 < a or e2 < e or j < i):
                ok = False
        out.append(ok)
    return out


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in row) + " |"
              for row in rows]
    return "\n".join(lines)


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v)
                         for v in row])
    return buffer.getvalue()


__all__ = ["csv_text", "fmt", "geomean", "markdown", "pareto_front", "ratio"]
