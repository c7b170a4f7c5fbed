"""Shared helpers of the co-design tests."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The folder of one `baco run` of ``data/tiny.yaml`` (a 5-GEMM BERT, DOSA-style beside):
    shared, read-only, by every test that reads a finished run. Its progress went to a stderr
    that is not a terminal, kept beside the folder (`tiny_run_stderr`)."""
    import io
    import sys

    from baco.cli import main

    out = tmp_path_factory.mktemp("tiny_run") / "run"
    stream = io.StringIO()
    saved, sys.stderr = sys.stderr, stream
    try:
        assert main(["run", str(TINY), "--out", str(out)]) == 0
    finally:
        sys.stderr = saved
    (out.parent / "stderr.txt").write_text(stream.getvalue())
    return out


@pytest.fixture(scope="session")
def tiny_run_stderr(tiny_run) -> list[str]:
    """The lines `tiny_run`'s progress wrote."""
    return (tiny_run.parent / "stderr.txt").read_text().splitlines()


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
