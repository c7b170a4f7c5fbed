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


class Killed(Exception):
    """Raised by `killed_after_round` to stop a search mid-way."""


@pytest.fixture
def killed_after_round():
    """``run(*args, round=3, **kwargs)``: `baco.codesign` stopped by an exception after that
    round (its checkpoint, if any, left as a killed run leaves it)."""
    from baco.codesign_loop import codesign

    def run(*args, round: int = 3, **kwargs) -> None:
        def kill(info) -> None:
            if info.round == round:
                raise Killed

        with pytest.raises(Killed):
            codesign(*args, on_round=kill, **kwargs)
    return run
