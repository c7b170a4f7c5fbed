"""Shared helpers of the co-design tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def comparable():
    """A `CodesignResult` as a dict without wall-clock times: equal for equal searches."""
    def strip(result) -> dict:
        data = result.to_dict()
        data["history"] = [(h["samples"], h["best_edp"]) for h in data["history"]]
        return data
    return strip
