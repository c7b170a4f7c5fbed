"""Writing files so that a reader never sees half of one: every output of the project (results,
checkpoints, traces, datasets, tables) goes through `write_atomic`."""

from __future__ import annotations

import os
import pathlib


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` to a temporary file beside `path` (parents created), fsync it, and rename
    it into place; on failure the temporary file is removed and `path` is untouched."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["write_atomic"]
