"""A small ONNX graph builder for the zoo: one method per operator, static shapes tracked.

Every zoo network is written as an ONNX graph so that it reaches `from_onnx` by the same road
as a user's file. Weights are declared as static-shaped *graph inputs*, not initializers, so a
Llama-2-7B graph costs kilobytes, not gigabytes. Small index constants (reshape targets, clip
bounds, slice starts) are ``Constant`` nodes.

The builder computes each tensor's shape itself (it needs them to size the next weight), and
`GraphBuilder.build` checks the model with ``onnx.checker`` and ONNX's strict shape inference,
then compares every inferred shape with its own: a builder bug cannot slip through silently.
The graph under construction and that check are `workloads.zoo.graph`'s; this module holds the
operators.

>>> b = GraphBuilder("tiny")
>>> x = b.input("x", (1, 3, 8, 8))
>>> y = b.conv_bn(x, 4, 3, pad=1, name="conv1")
>>> b.output(b.flatten(b.gap(y)))
>>> model = b.build()
>>> [node.op_type for node in model.graph.node]
['Conv', 'BatchNormalization', 'Relu', 'GlobalAveragePool', 'Flatten']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from onnx import TensorProto

from workloads.errors import WorkloadError
from workloads.zoo.graph import OPSET, GraphRecord, Shape

__all__ = ["OPSET", "GraphBuilder", "Param", "Shape"]


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter a zoo model accepts: its default and its allowed values.

    Integers are bounded by ``low``/``high`` (inclusive); strings by ``choices``.
    """

    default: int | str
    help: str
    choices: tuple[str, ...] = ()
    low: int | None = None
    high: int | None = None

    def parse(self, model: str, key: str, raw: object) -> int | str:
        """Check and convert one user-given value; raise `WorkloadError` saying what is allowed."""
        where = f"zoo model {model!r}: parameter {key!r}"
        if self.choices:
            value = str(raw).strip()
            if value not in self.choices:
                raise WorkloadError(f"{where} must be one of {list(self.choices)}, got {raw!r}")
            return value
        if isinstance(raw, bool):
            raise WorkloadError(f"{where} must be an integer, got {raw!r}")
        try:
            value = int(str(raw).strip()) if not isinstance(raw, int) else raw
        except ValueError:
            raise WorkloadError(f"{where} must be an integer, got {raw!r}") from None
        if (self.low is not None and value < self.low) or (
                self.high is not None and value > self.high):
            raise WorkloadError(
                f"{where}={value} is out of range; allowed {self.low}..{self.high}")
        return value

    def describe(self) -> str:
        allowed = "|".join(self.choices) if self.choices else f"{self.low}..{self.high}"
        return f"{allowed} (default {self.default}): {self.help}"


def _pads4(pad: int | Sequence[int]) -> tuple[int, int, int, int]:
    """ONNX 2-D pads [top, left, bottom, right] from an int or a 2- or 4-sequence."""
    if isinstance(pad, int):
        return (pad, pad, pad, pad)
    pad = tuple(int(p) for p in pad)
    if len(pad) == 2:
        return (pad[0], pad[1], pad[0], pad[1])
    if len(pad) == 4:
        return pad  # type: ignore[return-value]
    raise ValueError(f"pad must be an int, 2 or 4 ints, got {pad}")


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


def _broadcast(a: Shape, b: Shape) -> Shape:
    """Numpy broadcasting of two shapes."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


class GraphBuilder(GraphRecord):
    """Builds one ONNX graph, operator by operator, with static shapes.

    Methods take tensor names and return the name of the new tensor. ``name`` arguments name
    the node (and prefix its weights), which is what `from_onnx` reports as the layer name.
    """

    # ------------------------------------------------------------------ convolutions
    def conv(self, x: str, out_channels: int, kernel: int | Sequence[int], *,
             stride: int | Sequence[int] = 1, pad: int | Sequence[int] = 0,
             dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
             name: str | None = None) -> str:
        """2-D convolution, NCHW; weight [K, C/groups, R, S]."""
        n, c, h, w = self.shape(x)
        (r, s), (sh, sw), (dh, dw) = _pair(kernel), _pair(stride), _pair(dilation)
        pads = _pads4(pad)
        if c % groups or out_channels % groups:
            raise ValueError(f"{name}: channels {c}->{out_channels} not divisible by {groups}")
        p = (h + pads[0] + pads[2] - dh * (r - 1) - 1) // sh + 1
        q = (w + pads[1] + pads[3] - dw * (s - 1) - 1) // sw + 1
        if p < 1 or q < 1:
            raise ValueError(f"{name}: empty output for input {h}x{w}")
        name = name or self._auto("conv")
        ins = [x, self.weight(f"{name}.weight", (out_channels, c // groups, r, s))]
        if bias:
            ins.append(self.weight(f"{name}.bias", (out_channels,)))
        return self._node("Conv", ins, (n, out_channels, p, q), name, kernel_shape=[r, s],
                          strides=[sh, sw], pads=list(pads), dilations=[dh, dw], group=groups)

    def conv_transpose(self, x: str, out_channels: int, kernel: int | Sequence[int], *,
                       stride: int | Sequence[int] = 1, pad: int | Sequence[int] = 0,
                       bias: bool = True, name: str | None = None) -> str:
        """2-D transposed convolution; weight [C, K, R, S] (ONNX layout)."""
        n, c, h, w = self.shape(x)
        (r, s), (sh, sw) = _pair(kernel), _pair(stride)
        pads = _pads4(pad)
        p = (h - 1) * sh + r - pads[0] - pads[2]
        q = (w - 1) * sw + s - pads[1] - pads[3]
        name = name or self._auto("convtranspose")
        ins = [x, self.weight(f"{name}.weight", (c, out_channels, r, s))]
        if bias:
            ins.append(self.weight(f"{name}.bias", (out_channels,)))
        return self._node("ConvTranspose", ins, (n, out_channels, p, q), name,
                          kernel_shape=[r, s], strides=[sh, sw], pads=list(pads))

    def batchnorm(self, x: str, name: str | None = None) -> str:
        c = self.shape(x)[1]
        name = name or self._auto("bn")
        ins = [x] + [self.weight(f"{name}.{p}", (c,))
                     for p in ("weight", "bias", "running_mean", "running_var")]
        return self._node("BatchNormalization", ins, self.shape(x), name, epsilon=1e-5)

    def conv_bn(self, x: str, out_channels: int, kernel: int | Sequence[int], *,
                stride: int | Sequence[int] = 1, pad: int | Sequence[int] = 0,
                groups: int = 1, act: str | None = "relu", name: str | None = None) -> str:
        """Conv (no bias) + BatchNorm + activation, the torchvision pattern."""
        name = name or self._auto("conv")
        y = self.conv(x, out_channels, kernel, stride=stride, pad=pad, groups=groups,
                      bias=False, name=name)
        y = self.batchnorm(y, name=f"{name}.bn")
        return self.activation(y, act, name=f"{name}.{act}" if act else None)

    # ------------------------------------------------------------------ activations
    def activation(self, x: str, act: str | None, name: str | None = None) -> str:
        if act is None:
            return x
        fn = {"relu": self.relu, "relu6": self.relu6, "gelu": self.gelu, "silu": self.silu,
              "sigmoid": self.sigmoid}.get(act)
        if fn is None:
            raise ValueError(f"unknown activation {act!r}")
        return fn(x, name=name)

    def relu(self, x: str, name: str | None = None) -> str:
        return self._node("Relu", [x], self.shape(x), name)

    def sigmoid(self, x: str, name: str | None = None) -> str:
        return self._node("Sigmoid", [x], self.shape(x), name)

    def relu6(self, x: str, name: str | None = None) -> str:
        """ReLU6 as torch exports it: Clip(x, 0, 6)."""
        return self._node("Clip", [x, self.scalar(0.0), self.scalar(6.0)], self.shape(x), name)

    def silu(self, x: str, name: str | None = None) -> str:
        """SiLU as torch exports it at opset 17: x * Sigmoid(x)."""
        return self.mul(x, self.sigmoid(x), name=name)

    def gelu(self, x: str, name: str | None = None) -> str:
        """Exact GELU as torch exports it at opset 17: 0.5 * x * (1 + erf(x / sqrt(2)))."""
        e = self._node("Erf", [self.div(x, self.scalar(math.sqrt(2.0)))], self.shape(x))
        return self.mul(self.mul(x, self.add(e, self.scalar(1.0))), self.scalar(0.5), name=name)

    # ------------------------------------------------------------------ elementwise
    def _binary(self, op: str, a: str, b: str, name: str | None) -> str:
        return self._node(op, [a, b], _broadcast(self.shape(a), self.shape(b)), name)

    def add(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("Add", a, b, name)

    def mul(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("Mul", a, b, name)

    def div(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("Div", a, b, name)

    # ------------------------------------------------------------------ pooling and shapes
    def maxpool(self, x: str, kernel: int, stride: int, pad: int = 0,
                name: str | None = None) -> str:
        n, c, h, w = self.shape(x)
        p = (h + 2 * pad - kernel) // stride + 1
        q = (w + 2 * pad - kernel) // stride + 1
        return self._node("MaxPool", [x], (n, c, p, q), name, kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=[pad] * 4)

    def gap(self, x: str, name: str | None = None) -> str:
        """Global average pooling to N x C x 1 x 1."""
        n, c = self.shape(x)[:2]
        return self._node("GlobalAveragePool", [x], (n, c, 1, 1), name)

    def flatten(self, x: str, name: str | None = None) -> str:
        shape = self.shape(x)
        return self._node("Flatten", [x], (shape[0], math.prod(shape[1:])), name, axis=1)

    def reshape(self, x: str, shape: Sequence[int], name: str | None = None) -> str:
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) != math.prod(self.shape(x)):
            raise ValueError(f"cannot reshape {self.shape(x)} to {shape}")
        return self._node("Reshape", [x, self.const(shape)], shape, name)

    def transpose(self, x: str, perm: Sequence[int], name: str | None = None) -> str:
        shape = self.shape(x)
        return self._node("Transpose", [x], tuple(shape[i] for i in perm), name, perm=list(perm))

    def concat(self, xs: Sequence[str], axis: int, name: str | None = None) -> str:
        shapes = [self.shape(x) for x in xs]
        axis = axis % len(shapes[0])
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return self._node("Concat", list(xs), tuple(out), name, axis=axis)

    def center_crop(self, x: str, height: int, width: int, name: str | None = None) -> str:
        """Crop the H, W centre (U-Net's skip connections) with a ``Slice``."""
        n, c, h, w = self.shape(x)
        top, left = (h - height) // 2, (w - width) // 2
        return self._node("Slice", [x, self.const([top, left]),
                                    self.const([top + height, left + width]),
                                    self.const([2, 3])], (n, c, height, width), name)

    def upsample(self, x: str, scale: int, name: str | None = None) -> str:
        """Nearest-neighbour upsampling by an integer factor (``Resize``, FPN's top-down path)."""
        n, c, h, w = self.shape(x)
        scales = self.const([1.0, 1.0, float(scale), float(scale)], TensorProto.FLOAT)
        return self._node("Resize", [x, "", scales], (n, c, h * scale, w * scale), name,
                          mode="nearest")

    # ------------------------------------------------------------------ matrix products
    def gemm(self, x: str, out_features: int, bias: bool = True, name: str | None = None) -> str:
        """A fully connected layer on a 2-D input, as torch exports it: Gemm(x, W^T, b)."""
        m, k = self.shape(x)
        name = name or self._auto("gemm")
        ins = [x, self.weight(f"{name}.weight", (out_features, k))]
        if bias:
            ins.append(self.weight(f"{name}.bias", (out_features,)))
        return self._node("Gemm", ins, (m, out_features), name, transB=1)

    def linear(self, x: str, out_features: int, bias: bool = True,
               name: str | None = None) -> str:
        """A fully connected layer on an N-D input: MatMul(x, W[in, out]) (+ Add bias)."""
        name = name or self._auto("linear")
        w = self.weight(f"{name}.weight", (self.shape(x)[-1], out_features))
        y = self.matmul(x, w, name=name)
        if bias:
            y = self.add(y, self.weight(f"{name}.bias", (out_features,)), name=f"{name}.bias_add")
        return y

    def matmul(self, a: str, b: str, name: str | None = None) -> str:
        """numpy.matmul semantics: leading (batch) dims broadcast."""
        sa, sb = self.shape(a), self.shape(b)
        if sa[-1] != sb[-2 if len(sb) > 1 else -1]:
            raise ValueError(f"{name}: matmul of {sa} and {sb}")
        batch = _broadcast(sa[:-2], sb[:-2])
        return self._node("MatMul", [a, b], (*batch, sa[-2], sb[-1]), name)

    # ------------------------------------------------------------------ normalization
    def softmax(self, x: str, axis: int = -1, name: str | None = None) -> str:
        return self._node("Softmax", [x], self.shape(x), name, axis=axis)

    def layernorm(self, x: str, name: str | None = None) -> str:
        """LayerNormalization over the last axis (an ONNX-17 op), scale and bias as inputs."""
        name = name or self._auto("layernorm")
        d = self.shape(x)[-1]
        ins = [x, self.weight(f"{name}.weight", (d,)), self.weight(f"{name}.bias", (d,))]
        return self._node("LayerNormalization", ins, self.shape(x), name, axis=-1,
                          epsilon=1e-12)

    def rmsnorm(self, x: str, name: str | None = None) -> str:
        """RMSNorm as torch exports it at opset 17 (no RMSNormalization op before opset 23):
        x * 1/sqrt(mean(x^2) + eps) * weight."""
        name = name or self._auto("rmsnorm")
        shape = self.shape(x)
        sq = self._node("Pow", [x, self.scalar(2.0)], shape, f"{name}.pow")
        mean = self._node("ReduceMean", [sq], (*shape[:-1], 1), f"{name}.mean", axes=[-1],
                          keepdims=1)
        rms = self._node("Sqrt", [self.add(mean, self.scalar(1e-5))], (*shape[:-1], 1),
                         f"{name}.sqrt")
        y = self.div(x, rms, name=f"{name}.div")
        return self.mul(y, self.weight(f"{name}.weight", (shape[-1],)), name=name)
