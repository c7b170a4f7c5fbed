"""The memo of simulated layers, and its copy on disk so a resumed run does not simulate again
what it simulated before the interruption."""

from __future__ import annotations

import collections
import pickle
import threading
from collections.abc import Hashable
from typing import Any

FORMAT = "baco-sim-cache-1"
"""The on-disk format's name; a file of another format is ignored, not misread."""


class SimCache:
    """In-process memo of simulated layers: key -> `baco.yardsticks.TraceCounts`, least
    recently used out.

    ``hits``/``misses`` count lookups (a miss is one lowering and one simulation).
    ``maxsize=0`` caches nothing.
    """

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = int(maxsize)
        self._data: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: Any) -> None:
        if self.maxsize <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def save(self, path: Any) -> None:
        """Write every entry to `path` (atomically). Keys and values are the project's own
        frozen types, so pickle keeps their equality; the file is only ever read back by
        `load` from the run folder that wrote it."""
        from workloads.files import write_atomic

        with self._lock:
            items = list(self._data.items())
        write_atomic(path, pickle.dumps((FORMAT, items), protocol=pickle.HIGHEST_PROTOCOL))

    def load(self, path: Any) -> int:
        """Add the entries `save` wrote to `path`; how many. A missing, unreadable or foreign
        file adds none (the layers are simulated again)."""
        try:
            with open(path, "rb") as fh:
                tag, items = pickle.load(fh)
        except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError,
                pickle.UnpicklingError):
            return 0
        if tag != FORMAT:
            return 0
        for key, value in items:
            self.put(key, value)
        return len(items)


DEFAULT_CACHE = SimCache()
"""The process-wide cache `baco.yardsticks.yardsticks` and `simulate_design` use unless
given one."""

__all__ = ["DEFAULT_CACHE", "FORMAT", "SimCache"]
