"""The memo of simulated layers, its copy in a run's folder so a resumed run does not simulate
again what it simulated before the interruption, and the store of every layer this machine has
simulated, so a later run (another config, the same baselines) reuses them.

The store (`SimStore`) is a folder of one file per simulated layer, named by a digest of the
layer's key (what `SimCache` compares: the loop nest, the fused ops, the mapping, the hardware
and the timing table) under a fingerprint of the code that simulates (`code_fingerprint`:
`accel`, `workloads` and the accounting in `baco.yardsticks`), so code that could simulate
differently never reads an older entry. ``baco run``, ``baco simulate`` and ``baco reproduce``
turn it on (`enable_store`), in ``$BACO_SIM_CACHE`` if that names a folder, else
``$XDG_CACHE_HOME/baco/sim`` or ``~/.cache/baco/sim``; ``BACO_SIM_CACHE=0`` (or ``off``) turns
it off. Entries are pickles: keep the folder one only you can write, as JAX's compilation
cache. What a run samples does not depend on what the store holds, only its time.

>>> store_folder({"BACO_SIM_CACHE": "off"}) is None
True
>>> store_folder({"XDG_CACHE_HOME": "/x"}).as_posix()
'/x/baco/sim'
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import os
import pathlib
import pickle
import sys
import threading
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from accel.mapping import Mapping as LoopMapping
from baco.compile_cache import user_cache_folder

FORMAT = "baco-sim-cache-1"
"""The on-disk format's name; a file of another format is ignored, not misread."""


class SimCache:
    """In-process memo of simulated layers: key -> `baco.yardsticks.TraceCounts`, least
    recently used out, backed by the process's `SimStore` when one is enabled.

    ``hits``/``misses`` count lookups (a miss is one lowering and one simulation; a hit in
    the store is a hit). ``maxsize=0`` caches nothing.
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
            if value is not None:
                self._data.move_to_end(key)
                self.hits += 1
                return value
        value = None if _STORE is None else _STORE.get(key)
        with self._lock:
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
        self._remember(key, value)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if _STORE is not None:
            _STORE.put(key, value)
        self._remember(key, value)

    def _remember(self, key: Hashable, value: Any) -> None:
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
            self._remember(key, value)
        return len(items)


# --------------------------------------------------------------------------- the store
STORE_FORMAT = "baco-sim-store-1"
_FINGERPRINTED = (("accel", "*.py"), ("accel", "*.yaml"), ("workloads", "*.py"),
                  ("baco", "yardsticks.py"))
"""The code whose change could change what a layer simulates to: the lowering, simulator,
ISA, templates and hardware (`accel`), the layers (`workloads`), the accounting. The store's
own layout is versioned by `STORE_FORMAT`, so its code (this module) is not part of it."""


def store_folder(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """The store's folder `env` asks for, None when it turns the store off."""
    return user_cache_folder(env, "BACO_SIM_CACHE", "sim")


@functools.cache
def code_fingerprint() -> str:
    """A digest of the source of everything `_FINGERPRINTED` names (paths and bytes)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(STORE_FORMAT.encode())
    for folder, pattern in _FINGERPRINTED:
        for path in sorted((root / folder).rglob(pattern)):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _canonical(value: Any) -> Any:
    """`value` as nested tuples of plain numbers and strings that are equal exactly when
    `SimCache`'s keys compare equal (dataclass fields that take part in equality; a
    `accel.mapping.Mapping` by what its own equality compares), so its repr can be hashed."""
    if isinstance(value, LoopMapping):
        return ("Mapping", value.tags, value.temporal.tolist(), value.spatial.tolist(),
                value._effective_order().tolist(), value.stages.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(
            (f.name, _canonical(getattr(value, f.name)))
            for f in dataclasses.fields(value) if f.compare)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((repr(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, (tuple, list)):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


class SimStore:
    """Simulated layers on disk, one file per key under the code's fingerprint (module doc).
    A missing, unreadable or foreign file is a miss; writes go to a temporary file renamed
    into place, so a reader never sees half an entry."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = pathlib.Path(folder) / code_fingerprint()

    def _path(self, key: Hashable) -> pathlib.Path:
        digest = hashlib.sha256(repr(_canonical(key)).encode()).hexdigest()
        return self.folder / digest[:2] / f"{digest}.pkl"

    def get(self, key: Hashable) -> Any:
        try:
            with open(self._path(key), "rb") as fh:
                tag, value = pickle.load(fh)
        except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError,
                pickle.UnpicklingError):
            return None
        return value if tag == STORE_FORMAT else None

    def put(self, key: Hashable, value: Any) -> None:
        path = self._path(key)
        if path.exists():
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(pickle.dumps((STORE_FORMAT, value),
                                         protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, path)
        except OSError:            # a full or read-only disk costs a later run time, no more
            tmp.unlink(missing_ok=True)


_STORE: SimStore | None = None


def enable_store(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """Back every `SimCache` of this process with the `SimStore` in `store_folder`; the
    folder in use, or None (off). A folder that cannot be written leaves the store off with
    one warning line on stderr, never an error."""
    global _STORE
    where = store_folder(env)
    if where is None:
        _STORE = None
        return None
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = where / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        print(f"baco: simulation cache off: cannot write {where} ({exc.strerror or exc})",
              file=sys.stderr)
        _STORE = None
        return None
    _STORE = SimStore(where)
    return where


def disable_store() -> None:
    """Back no `SimCache` with a store (the default of a process that did not enable it)."""
    global _STORE
    _STORE = None


DEFAULT_CACHE = SimCache()
"""The process-wide cache `baco.yardsticks.yardsticks` and `simulate_design` use unless
given one."""

__all__ = ["DEFAULT_CACHE", "FORMAT", "STORE_FORMAT", "SimCache", "SimStore", "code_fingerprint",
           "disable_store", "enable_store", "store_folder"]
