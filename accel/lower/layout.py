"""Where a lowered layer's tensors live in DRAM, and the numpy reference they must reproduce.

A `DramLayout` places each tensor at a byte offset as a C-ordered little-endian array, so the
simulator and the tests can build a DRAM image from numpy arrays (`DramLayout.pack`) and read
the result back (`DramLayout.read`). The shapes follow Gemmini's software (`gemmini.h`):

==========  ============================  =======  =========================================
tensor      shape                         dtype    notes
==========  ============================  =======  =========================================
zeros       (zero_bytes,)                 int8     at offset 0; padding rows are mvins from it
input       (N, H_in, W_in, groups*C)     int8     NHWC; H_in, W_in as `input_hw`
weight      (groups, R, S, C, K)          int8     a GEMM's B is ``weight[g, 0, 0]`` (C x K)
bias        (groups*K,)                   int32    with the "bias" epilogue
residual    (N, P, Q, groups*K)           int8     with the "add" epilogue
output      (N, P, Q, groups*K)           int8     int32 with ``full_output``
partial     (N, P, Q, groups*K)           int32    only if partial sums leave the accumulator
==========  ============================  =======  =========================================

A GEMM ``(M x K_red) @ (K_red x N_out)`` is the layer with P=M, C=K_red, K=N_out, so its A
matrix is ``input[n, :, 0, :]`` and its C matrix ``output[n, :, 0, :]``.

The zero region sits at DRAM address 0 because Gemmini's DMA also reads a NULL (0) source as
zeros (``sp_tiled_conv`` passes ``in = NULL`` for padding pixels): a trace mvins padding rows
from address 0 and is right under either reading.

>>> from workloads.layer import Layer
>>> layer = Layer.conv2d(R=3, S=3, P=4, Q=4, C=2, K=3, pads=(1, 1, 1, 1))
>>> input_hw(layer)
(4, 4)
>>> DramLayout.for_layer(layer, dim=4)["input"].shape
(1, 4, 4, 2)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from workloads.errors import ConfigError
from workloads.layer import Layer

ALIGN_BYTES = 64
"""Tensor offsets are multiples of this (Gemmini's DMA beat)."""

TENSOR_NAMES = ("zeros", "input", "weight", "bias", "residual", "output", "partial")
_DTYPES = {"int8": np.dtype("<i1"), "int32": np.dtype("<i4")}


# --------------------------------------------------------------------------- geometry
def input_hw(layer: Layer) -> tuple[int, int]:
    """Height and width of the DRAM input: unpadded and, for a transposed conv, not zero-inserted.

    The sliding window reads `Layer.input_height` rows of the padded (zero-inserted) input; the
    rows of the real input it can reach are those inside the pads. When the pads exceed the
    window (a floor in the output-size formula), at least one row is kept.
    """
    out = []
    for extent, before, after, up in ((layer.input_height, layer.pads[0], layer.pads[2],
                                       layer.upsample[0]),
                                      (layer.input_width, layer.pads[1], layer.pads[3],
                                       layer.upsample[1])):
        inserted = max(1, extent - before - after)
        out.append((inserted - 1) // up + 1)
    return out[0], out[1]


def output_shape(layer: Layer) -> tuple[int, int, int, int]:
    return (layer.N, layer.P, layer.Q, layer.groups * layer.K)


# --------------------------------------------------------------------------- layout types
@dataclasses.dataclass(frozen=True)
class TensorLayout:
    """One tensor in DRAM: its byte offset, shape and dtype (C order)."""

    name: str
    offset_bytes: int
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"tensor {self.name!r}: dtype must be one of {list(_DTYPES)}, "
                              f"got {self.dtype!r}")
        if self.offset_bytes < 0:
            raise ConfigError(f"tensor {self.name!r}: negative offset {self.offset_bytes}")
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def itemsize(self) -> int:
        return _DTYPES[self.dtype].itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def strides_bytes(self) -> tuple[int, ...]:
        """Bytes between consecutive indices of each axis."""
        out, step = [], self.itemsize
        for extent in reversed(self.shape):
            out.append(step)
            step *= extent
        return tuple(reversed(out))

    def address(self, *index: int) -> int:
        """Byte address of one element (or of the start of a trailing sub-array)."""
        return self.offset_bytes + sum(i * s for i, s in zip(index, self.strides_bytes))


@dataclasses.dataclass(frozen=True)
class DramLayout:
    """The tensors of one lowered layer in one flat DRAM image of ``size_bytes`` bytes."""

    tensors: tuple[TensorLayout, ...]
    size_bytes: int

    def __post_init__(self) -> None:
        spans = sorted((t.offset_bytes, t.offset_bytes + t.nbytes, t.name) for t in self.tensors)
        for (_, stop, a), (start, _, b) in itertools.pairwise(spans):
            if start < stop:
                raise ConfigError(f"DRAM layout: tensors {a!r} and {b!r} overlap")
        if spans and spans[-1][1] > self.size_bytes:
            raise ConfigError(f"DRAM layout: tensor {spans[-1][2]!r} ends at byte "
                              f"{spans[-1][1]}, past the image size {self.size_bytes}")

    def __contains__(self, name: object) -> bool:
        return any(t.name == name for t in self.tensors)

    def get(self, name: str, default: TensorLayout | None = None) -> TensorLayout | None:
        return next((t for t in self.tensors if t.name == name), default)

    def __getitem__(self, name: str) -> TensorLayout:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"DRAM layout has no tensor {name!r}; it has "
                       f"{[t.name for t in self.tensors]}")

    @classmethod
    def for_layer(cls, layer: Layer, *, dim: int, bias: bool | None = None,
                  residual: bool | None = None, partial: bool = False,
                  full_output: bool = False) -> DramLayout:
        """The default layout of `layer`'s tensors, packed from address 0 (the zero region).

        ``bias`` and ``residual`` default to the layer's epilogue ("bias", "add"); ``dim`` sizes
        the zero region (a padding mvin reads up to ``dim`` input rows).
        """
        epi = set(layer.epilogue)
        bias = "bias" in epi if bias is None else bias
        residual = "add" in epi if residual is None else residual
        h, w = input_hw(layer)
        gc, gk = layer.groups * layer.C, layer.groups * layer.K
        specs: list[tuple[str, tuple[int, ...], str]] = [
            ("zeros", (dim * gc + ALIGN_BYTES,), "int8"),
            ("input", (layer.N, h, w, gc), "int8"),
            ("weight", (layer.groups, layer.R, layer.S, layer.C, layer.K), "int8"),
        ]
        if bias:
            specs.append(("bias", (gk,), "int32"))
        if residual:
            specs.append(("residual", output_shape(layer), "int8"))
        specs.append(("output", output_shape(layer), "int32" if full_output else "int8"))
        if partial:
            specs.append(("partial", output_shape(layer), "int32"))
        tensors, offset = [], 0
        for name, shape, dtype in specs:
            t = TensorLayout(name, offset, shape, dtype)
            tensors.append(t)
            offset += -(-t.nbytes // ALIGN_BYTES) * ALIGN_BYTES
        return cls(tuple(tensors), offset)

    # ------------------------------------------------------------------ images
    def pack(self, arrays: Mapping[str, Any] | None = None, **named: Any) -> np.ndarray:
        """A zeroed DRAM image (uint8, ``[size_bytes]``) with the given tensors written in.

        >>> from workloads.layer import Layer
        >>> lay = DramLayout.for_layer(Layer.gemm(M=2, K_red=3, N_out=4), dim=4)
        >>> img = lay.pack(input=np.ones((1, 2, 1, 3), np.int8))
        >>> int(img[lay["input"].offset_bytes])
        1
        """
        given = dict(arrays or {}, **named)
        image = np.zeros(self.size_bytes, np.uint8)
        for name, value in given.items():
            t = self[name]
            arr = np.asarray(value)
            if name == "zeros":
                raise ConfigError("the zero region is not an input")
            if arr.shape != t.shape:
                raise ConfigError(f"tensor {name!r}: expected shape {t.shape}, got {arr.shape}")
            if arr.dtype.kind not in "iu":
                raise ConfigError(f"tensor {name!r}: expected integers, got dtype {arr.dtype}")
            info = np.iinfo(_DTYPES[t.dtype])
            if arr.size and (arr.min() < info.min or arr.max() > info.max):
                raise ConfigError(f"tensor {name!r}: values outside {t.dtype} range")
            raw = np.ascontiguousarray(arr.astype(_DTYPES[t.dtype])).view(np.uint8).ravel()
            image[t.offset_bytes:t.offset_bytes + t.nbytes] = raw
        return image

    def read(self, image: Any, name: str = "output") -> np.ndarray:
        """Tensor `name` from a DRAM image (bytes, uint8 or any array viewable as bytes)."""
        t = self[name]
        data = np.asarray(image)
        if data.dtype != np.uint8:
            data = np.ascontiguousarray(data).view(np.uint8)
        data = data.ravel()
        if data.size < t.offset_bytes + t.nbytes:
            raise ConfigError(f"DRAM image has {data.size} bytes; tensor {name!r} needs "
                              f"{t.offset_bytes + t.nbytes}")
        raw = data[t.offset_bytes:t.offset_bytes + t.nbytes]
        return raw.view(_DTYPES[t.dtype]).reshape(t.shape).copy()


# --------------------------------------------------------------------------- reference
def padded_input(layer: Layer, x: np.ndarray) -> np.ndarray:
    """The input the sliding window reads: zero-inserted, zero-padded and cropped.

    ``x`` is ``(N, H_in, W_in, groups*C)``; returns ``(N, input_height, input_width,
    groups*C)`` as int64.
    """
    n, h, w, ch = x.shape
    uh, uw = layer.upsample
    z = np.zeros((n, (h - 1) * uh + 1, (w - 1) * uw + 1, ch), np.int64)
    z[:, ::uh, ::uw, :] = x
    top, left, bottom, right = layer.pads
    z = np.pad(z, ((0, 0), (top, bottom), (left, right), (0, 0)))
    full = np.zeros((n, layer.input_height, layer.input_width, ch), np.int64)
    hh, ww = min(z.shape[1], layer.input_height), min(z.shape[2], layer.input_width)
    full[:, :hh, :ww] = z[:, :hh, :ww]
    return full


def accumulate(layer: Layer, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The int32 accumulator values (no epilogue): ``(N, P, Q, groups*K)`` as int64."""
    g, c, k = layer.groups, layer.C, layer.K
    xin = padded_input(layer, np.asarray(x)).reshape(
        layer.N, layer.input_height, layer.input_width, g, c)
    w = np.asarray(weight, np.int64)
    acc = np.zeros((layer.N, layer.P, layer.Q, g, k), np.int64)
    hs, ws, hd, wd = layer.Hstride, layer.Wstride, layer.Hdilation, layer.Wdilation
    for r in range(layer.R):
        for s in range(layer.S):
            win = xin[:, r * hd: r * hd + (layer.P - 1) * hs + 1: hs,
                      s * wd: s * wd + (layer.Q - 1) * ws + 1: ws]
            acc += np.einsum("npqgc,gck->npqgk", win, w[:, r, s])
    return acc.reshape(layer.N, layer.P, layer.Q, g * k)


def scale_saturate(acc: np.ndarray, acc_scale: float = 1.0, relu: bool = False) -> np.ndarray:
    """Gemmini's ACC_SCALE at mvout: float32 multiply, round half to even, relu, clip to int8."""
    scaled = np.rint(np.asarray(acc).astype(np.float32) * np.float32(acc_scale))
    if relu:
        scaled = np.maximum(scaled, 0)
    return np.clip(scaled, -128, 127).astype(np.int8)


def reference(layer: Layer, input: np.ndarray, weight: np.ndarray,
              bias: np.ndarray | None = None, residual: np.ndarray | None = None, *,
              acc_scale: float = 1.0, relu: bool = False, full_output: bool = False,
              gelu: tuple[int, int] | None = None) -> np.ndarray:
    """What the lowered trace must leave in the ``output`` tensor, computed with numpy.

    int8 inputs and weights accumulate exactly (int64 here; the tests keep values within
    int32), then bias and residual are added in the accumulator, and the sum goes through
    I-GELU (``gelu``: its constants), is scaled and saturated to int8 (with relu) -- or
    returned as int32 with ``full_output``.
    """
    acc = accumulate(layer, input, weight)
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64)
    if residual is not None:
        acc = acc + np.asarray(residual, np.int64)
    if full_output:
        return acc.astype(np.int32)
    if gelu is not None:
        from accel.sim import igelu
        acc = igelu(acc.astype(np.int32), *gelu)
    return scale_saturate(acc, acc_scale, relu)


# --------------------------------------------------------------------------- im2col
def im2col_input(layer: Layer, x: np.ndarray) -> np.ndarray:
    """The explicit im2col matrix of a conv input, as `Layer.to_gemm`'s input tensor.

    Row m = (n*P + p)*Q + q, column g*C*R*S + (c*R + r)*S + s: the seed's ``c*9 + r*3 + s``
    ordering (seed 001 §4.6). Shape ``(1, N*P*Q, 1, groups*C*R*S)``.
    """
    g, c = layer.groups, layer.C
    xin = padded_input(layer, np.asarray(x)).reshape(
        layer.N, layer.input_height, layer.input_width, g, c)
    cols = np.zeros((layer.N, layer.P, layer.Q, g, c, layer.R, layer.S), np.int64)
    for r in range(layer.R):
        for s in range(layer.S):
            cols[..., r, s] = xin[:, r * layer.Hdilation:
                                  r * layer.Hdilation + (layer.P - 1) * layer.Hstride + 1:
                                  layer.Hstride,
                                  s * layer.Wdilation:
                                  s * layer.Wdilation + (layer.Q - 1) * layer.Wstride + 1:
                                  layer.Wstride]
    m = layer.N * layer.P * layer.Q
    return cols.reshape(1, m, 1, g * c * layer.R * layer.S).astype(np.int8)


def im2col_weight(layer: Layer, weight: np.ndarray) -> np.ndarray:
    """A conv weight ``(G, R, S, C, K)`` as `Layer.to_gemm`'s weight ``(G, 1, 1, C*R*S, K)``."""
    w = np.asarray(weight)
    g, r, s, c, k = w.shape
    return w.transpose(0, 3, 1, 2, 4).reshape(g, 1, 1, c * r * s, k)


__all__ = [
    "ALIGN_BYTES",
    "TENSOR_NAMES",
    "DramLayout",
    "TensorLayout",
    "accumulate",
    "im2col_input",
    "im2col_weight",
    "input_hw",
    "output_shape",
    "padded_input",
    "reference",
    "scale_saturate",
]
