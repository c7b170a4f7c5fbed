"""A search's checkpoint: one ``.npz`` of named arrays, written atomically."""

from __future__ import annotations

import io
import os

import numpy as np

from workloads.errors import ConfigError
from workloads.files import write_atomic

__all__ = ["load_checkpoint", "save_checkpoint"]


def save_checkpoint(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to `path` (``.npz``) atomically: a temp file, then `os.replace`."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(path, buffer.getvalue())


def load_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"checkpoint {path}: cannot read ({exc}); delete it to start over"
                          ) from None
