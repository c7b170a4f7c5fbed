"""The case store: one small JSON file per finished case, written atomically.

``OUT/cases/ID.json`` holds ``{"id", "params", "result", "seconds", "ran_with"}`` (``ran_with``:
the backend and ``--workers`` of the run that ran it, so wall-clock figures can say whether
cases shared the machine; older files lack it). A case counts as finished
when its file exists *and* was made from the same parameters (change a budget in the experiment
file and the affected cases run again; the others are reused). A file that cannot be read (a
crash cannot leave one: writes go to a temporary file renamed into place) is reported, not
silently skipped.

>>> import tempfile
>>> store = CaseStore(tempfile.mkdtemp())
>>> case = Case("gemm-001__baco__s0", {"budget": 10})
>>> store.finished(case)
False
>>> store.save(case, {"edp": 1.5}, seconds=0.1)
>>> store.finished(case), store.load(case)["edp"]
(True, 1.5)
>>> store.finished(Case("gemm-001__baco__s0", {"budget": 20}))
False
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from typing import Any

from workloads.errors import ConfigError
from workloads.files import write_atomic

_SAFE = re.compile(r"[^A-Za-z0-9_.=+-]+")


@dataclasses.dataclass(frozen=True)
class Case:
    """One independent job: an id unique within its experiment and JSON-able parameters."""

    id: str
    params: dict[str, Any]


def safe_id(*parts: Any) -> str:
    """A file-name-safe case id from its parts: ``safe_id("gemm/001", "Gemmini-BACO", "s0")``
    is ``"gemm-001__Gemmini-BACO__s0"``."""
    return "__".join(_SAFE.sub("-", str(p)).strip("-") for p in parts)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class CaseStore:
    """Finished cases of one experiment run, under ``ROOT/cases/``."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = pathlib.Path(root)
        self.dir = self.root / "cases"

    def path(self, case: Case) -> pathlib.Path:
        return self.dir / f"{case.id}.json"

    def _read(self, case: Case) -> dict[str, Any] | None:
        return self._read_path(self.path(case))

    def _read_path(self, path: pathlib.Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"case file {path}: unreadable ({exc}); delete it to rerun the "
                              "case") from None
        if not isinstance(record, dict) or "result" not in record:
            raise ConfigError(f"case file {path}: not a case record; delete it to rerun the case")
        return record

    def finished(self, case: Case) -> bool:
        record = self._read(case)
        return record is not None and _canonical(record.get("params")) == _canonical(case.params)

    def load(self, case: Case) -> dict[str, Any]:
        record = self._read(case)
        if record is None:
            raise ConfigError(f"case {case.id} has not run (no {self.path(case)})")
        return record["result"]

    def seconds(self, case: Case) -> float:
        record = self._read(case)
        return float(record.get("seconds", 0.0)) if record else 0.0

    def ran_with(self, case_id: str) -> dict[str, Any] | None:
        """``{"backend", "workers"}`` of the run that ran case `case_id` (None: not recorded)."""
        record = self._read_path(self.dir / f"{case_id}.json")
        got = record.get("ran_with") if record else None
        return got if isinstance(got, dict) else None

    def save(self, case: Case, result: dict[str, Any], seconds: float,
             ran_with: dict[str, Any] | None = None) -> None:
        record = {"id": case.id, "params": case.params, "seconds": round(seconds, 3),
                  **({"ran_with": ran_with} if ran_with else {}), "result": result}
        write_atomic(self.path(case), json.dumps(record, indent=1, default=float) + "\n")


__all__ = ["Case", "CaseStore", "safe_id", "write_atomic"]
