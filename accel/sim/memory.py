"""`DramImage`: named numpy tensors laid out in the flat DRAM byte array the simulator runs on.

Tensors are stored row-major (C order), little endian, each at an aligned offset. Tensors added
with `DramImage.add` are initialized; those made with `DramImage.reserve` (outputs) are not, so
an mvin that reads them before anything was stored there is reported as a read of never-written
memory.

>>> import numpy as np
>>> image = DramImage(base=0x1000)
>>> image.add("A", np.arange(6, dtype=np.int8).reshape(2, 3))
4096
>>> image.reserve("C", (2, 2), np.int32)
4160
>>> data, ok = image.to_arrays()
>>> image.read("A", data).tolist(), bool(ok[64])
([[0, 1, 2], [3, 4, 5]], False)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from workloads.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Tensor:
    """Where one named tensor lives: byte ``offset`` from the image start, shape, dtype."""

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype
    initialized: bool

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class DramImage:
    """A DRAM image under construction: named tensors at aligned offsets from ``base``.

    ``base`` is the DRAM address of byte 0 (traces carry absolute addresses); ``align`` the
    byte alignment of each tensor (64 = one DMA request).
    """

    def __init__(self, base: int = 0, align: int = 64) -> None:
        if base < 0 or align < 1:
            raise ConfigError("DramImage: base must be >= 0 and align >= 1")
        self.base = int(base)
        self.align = int(align)
        self._tensors: dict[str, Tensor] = {}
        self._data: dict[str, np.ndarray] = {}
        self._end = 0

    def _place(self, name: str, shape: tuple[int, ...], dtype: np.dtype, initialized: bool,
               offset: int | None) -> Tensor:
        if name in self._tensors:
            raise ConfigError(f"DramImage: tensor {name!r} is already laid out")
        if offset is None:
            offset = -(-self._end // self.align) * self.align
        tensor = Tensor(name, int(offset), tuple(int(s) for s in shape), np.dtype(dtype),
                        initialized)
        for other in self._tensors.values():
            if offset < other.offset + other.nbytes and other.offset < offset + tensor.nbytes:
                raise ConfigError(f"DramImage: {name!r} at {offset} overlaps {other.name!r}")
        self._tensors[name] = tensor
        self._end = max(self._end, offset + tensor.nbytes)
        return tensor

    def add(self, name: str, array: np.ndarray, offset: int | None = None) -> int:
        """Lay out an initialized tensor; returns its DRAM address."""
        array = np.ascontiguousarray(array)
        tensor = self._place(name, array.shape, array.dtype.newbyteorder("<"), True, offset)
        self._data[name] = array.astype(tensor.dtype, copy=False)
        return self.base + tensor.offset

    def reserve(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type,
                offset: int | None = None) -> int:
        """Lay out space for an output tensor (not initialized); returns its DRAM address."""
        tensor = self._place(name, tuple(shape), np.dtype(dtype).newbyteorder("<"), False,
                             offset)
        return self.base + tensor.offset

    def address(self, name: str) -> int:
        return self.base + self.tensor(name).offset

    def tensor(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise ConfigError(f"DramImage: no tensor {name!r}; have {sorted(self._tensors)}") \
                from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tensors)

    @property
    def size_bytes(self) -> int:
        return -(-self._end // self.align) * self.align

    def to_arrays(self, size_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(bytes, initialized)``: the uint8 image and the mask of initialized bytes."""
        size = self.size_bytes if size_bytes is None else int(size_bytes)
        if size < self._end:
            raise ConfigError(f"DramImage: {size} bytes cannot hold tensors ending at {self._end}")
        data = np.zeros(size, np.uint8)
        ok = np.zeros(size, bool)
        for name, tensor in self._tensors.items():
            if tensor.initialized:
                raw = self._data[name].reshape(-1).view(np.uint8)
                data[tensor.offset:tensor.offset + tensor.nbytes] = raw
                ok[tensor.offset:tensor.offset + tensor.nbytes] = True
        return data, ok

    def read(self, name: str, dram: np.ndarray) -> np.ndarray:
        """Tensor ``name`` as it stands in a DRAM byte array (e.g. `SimResult.dram`)."""
        tensor = self.tensor(name)
        raw = np.asarray(dram, np.uint8)[tensor.offset:tensor.offset + tensor.nbytes]
        if raw.size != tensor.nbytes:
            raise ConfigError(f"DramImage: the DRAM array is too short for {name!r}")
        return raw.view(tensor.dtype).reshape(tensor.shape).copy()


__all__ = ["DramImage", "Tensor"]
