"""The ONNX ops that become `Layer`s: Conv, ConvTranspose, Gemm, MatMul and their int8 forms.

Each reads its node's static shapes and attributes, checks them against the ONNX spec's
arithmetic, and builds the loop nest by the conventions of `workloads.layer`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

from workloads.errors import WorkloadError
from workloads.layer import Layer
from workloads.onnx_load import show
from workloads.onnx_nodes import NodeReader, attributes
from workloads.onnx_ops import CONV_OPS, CONV_TRANSPOSE_OPS, GEMM_OPS, LAYER_OPERANDS


def convert_layer(nodes: NodeReader, node: onnx.NodeProto) -> Layer:
    """The `Layer` of a node whose op is in `LAYER_OPS`, its epilogue still empty."""
    op = node.op_type
    data, weight, _ = LAYER_OPERANDS[op]
    if op in CONV_OPS:
        return conv_layer(nodes, node, data, weight)
    if op in CONV_TRANSPOSE_OPS:
        return conv_transpose_layer(nodes, node, data, weight)
    if op in GEMM_OPS:
        return gemm_layer(nodes, node, data, weight)
    return matmul_layer(nodes, node, data, weight)


def conv_layer(nodes: NodeReader, node: onnx.NodeProto, x_at: int, w_at: int) -> Layer:
    x, w, y, attrs, kernel, strides, dilations, group = _conv_geometry(nodes, node, x_at, w_at)
    n_batch, c_in, sizes = x[0], x[1], x[2:]
    k_out, c_group = w[0], w[1]
    if c_in != c_group * group or k_out % group:
        raise nodes.error(node, f"input {show(x)} and weight {show(w)} do not fit "
                                f"group={group}")
    begins, ends = _conv_pads(attrs.get("auto_pad", "NOTSET"), sizes, kernel, strides,
                              dilations, attrs.get("pads"))
    out = [(size + b + e - d * (k - 1) - 1) // s + 1 for size, b, e, k, s, d
           in zip(sizes, begins, ends, kernel, strides, dilations)]
    _check_output(nodes, node, "output shape", y, (n_batch, k_out, *out),
                  f"input {show(x)}, kernel {kernel}, strides {tuple(strides)}, "
                  f"dilations {tuple(dilations)} and pads {tuple(begins + ends)}")
    common = {"C": c_group, "K": k_out // group, "N": n_batch, "groups": group}
    if len(sizes) == 1:
        return _make(nodes, node, kind="conv1d", R=kernel[0], P=out[0], Hstride=strides[0],
                     Hdilation=dilations[0], pads=(begins[0], 0, ends[0], 0), **common)
    return _make(nodes, node, kind="conv2d", R=kernel[0], S=kernel[1], P=out[0], Q=out[1],
                 Hstride=strides[0], Wstride=strides[1], Hdilation=dilations[0],
                 Wdilation=dilations[1], pads=(begins[0], begins[1], ends[0], ends[1]),
                 **common)


def conv_transpose_layer(nodes: NodeReader, node: onnx.NodeProto, x_at: int, w_at: int) -> Layer:
    x, w, y, attrs, kernel, strides, dilations, group = _conv_geometry(nodes, node, x_at, w_at)
    n_batch, c_in, sizes = x[0], x[1], x[2:]
    k_group = w[1]
    if w[0] != c_in or c_in % group:
        raise nodes.error(node, f"input {show(x)} and weight {show(w)} do not fit "
                                f"group={group}")
    out_pads = list(attrs.get("output_padding", [0] * len(sizes)))
    begins, ends = _conv_transpose_pads(
        attrs.get("auto_pad", "NOTSET"), sizes, kernel, strides, dilations, out_pads,
        attrs.get("pads"), attrs.get("output_shape"))
    out = [s * (size - 1) + op + (k - 1) * d + 1 - b - e for size, s, op, k, d, b, e
           in zip(sizes, strides, out_pads, kernel, dilations, begins, ends)]
    _check_output(nodes, node, "output shape", y, (n_batch, k_group * group, *out),
                  f"input {show(x)}, kernel {kernel}, strides {tuple(strides)}, "
                  f"dilations {tuple(dilations)}, output_padding {tuple(out_pads)} "
                  f"and pads {tuple(begins + ends)}")
    # The equivalent stride-1 conv reads the zero-inserted input padded by d*(k-1) minus
    # the cropping on each side (plus output_padding at the end). Where the cropping
    # exceeds that, the window never reads those rows, so the padding is 0.
    conv_begins = [max(0, d * (k - 1) - b) for k, d, b in zip(kernel, dilations, begins)]
    conv_ends = [max(0, d * (k - 1) - e + op)
                 for k, d, e, op in zip(kernel, dilations, ends, out_pads)]
    common = {"kind": "conv_transpose", "C": c_in // group, "K": k_group, "N": n_batch,
              "groups": group}
    if len(sizes) == 1:
        return _make(nodes, node, R=kernel[0], P=out[0], Hdilation=dilations[0],
                     pads=(conv_begins[0], 0, conv_ends[0], 0),
                     upsample=(strides[0], 1), **common)
    return _make(nodes, node, R=kernel[0], S=kernel[1], P=out[0], Q=out[1],
                 Hdilation=dilations[0], Wdilation=dilations[1],
                 pads=(conv_begins[0], conv_begins[1], conv_ends[0], conv_ends[1]),
                 upsample=(strides[0], strides[1]), **common)


def gemm_layer(nodes: NodeReader, node: onnx.NodeProto, a_at: int, b_at: int) -> Layer:
    a = nodes.static(node, node.input[a_at], "input A")
    b = nodes.static(node, node.input[b_at], "input B")
    y = nodes.static(node, node.output[0], "output")
    if len(a) != 2 or len(b) != 2:
        raise nodes.error(node, f"Gemm takes 2-D inputs, got A {show(a)} and B {show(b)}")
    attrs = attributes(node)
    m, k_a = (a[1], a[0]) if attrs.get("transA", 0) else a
    k_b, n_out = (b[1], b[0]) if attrs.get("transB", 0) else b
    if k_a != k_b:
        raise nodes.error(node, f"A {show(a)} and B {show(b)} do not multiply "
                                f"(transA={attrs.get('transA', 0)}, "
                                f"transB={attrs.get('transB', 0)})")
    _check_output(nodes, node, "output shape", y, (m, n_out), f"A {show(a)} and B {show(b)}")
    return _make_gemm(nodes, node, M=m, K_red=k_a, N_out=n_out)


def matmul_layer(nodes: NodeReader, node: onnx.NodeProto, a_at: int, b_at: int) -> Layer:
    a = nodes.static(node, node.input[a_at], "input A")
    b = nodes.static(node, node.input[b_at], "input B")
    y = nodes.static(node, node.output[0], "output")
    if not a or not b:
        raise nodes.error(node, f"MatMul takes operands of rank >= 1, got {show(a)} "
                                f"and {show(b)}")
    # numpy semantics: a 1-D A is a row (1, K), a 1-D B a column (K, 1).
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    try:
        if a2[-1] != b2[-2]:
            raise ValueError("the reduction dims differ")
        batch_dims = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError as exc:
        raise nodes.error(node, f"A {show(a)} and B {show(b)} do not multiply: "
                                f"{exc}") from exc
    if len(b2) == 2:  # shared weights: every leading dim of A is a row of one GEMM
        m, batch = math.prod(a2[:-1]), 1
    else:
        m, batch = a2[-2], math.prod(batch_dims)
    if math.prod(y) != batch * m * b2[-1]:
        raise nodes.error(node, f"the inferred output shape {show(y)} does not match "
                                f"A {show(a)} @ B {show(b)}; the recorded shapes are "
                                f"stale: re-export the model or strip its value_info")
    return _make_gemm(nodes, node, M=m, K_red=a2[-1], N_out=b2[-1], batch=batch)


def _conv_geometry(nodes: NodeReader, node: onnx.NodeProto, x_at: int, w_at: int):
    """A Conv's or ConvTranspose's shapes (x, w, y), attributes, kernel, strides, dilations
    and group, checked for a 1-D or 2-D convolution."""
    x = nodes.static(node, node.input[x_at], "input")
    w = nodes.static(node, node.input[w_at], "weight")
    y = nodes.static(node, node.output[0], "output")
    spatial = len(x) - 2
    if spatial not in (1, 2) or len(w) != len(x) or len(y) != len(x):
        raise nodes.unsupported(
            node, f"a {spatial}-D convolution (input {show(x)}, weight {show(w)}), and "
                  f"baco maps 1-D and 2-D convolutions only",
            "fold the extra spatial axis into the batch or channels at export (e.g. as "
            "2-D convolutions), or remove the op")
    attrs = attributes(node)
    kernel = tuple(w[2:])
    if tuple(attrs.get("kernel_shape", kernel)) != kernel:
        raise nodes.error(node, f"kernel_shape {attrs['kernel_shape']} disagrees with the "
                                f"weight shape {show(w)}")
    ones = [1] * spatial
    return (x, w, y, attrs, kernel, list(attrs.get("strides", ones)),
            list(attrs.get("dilations", ones)), int(attrs.get("group", 1)))


def _check_output(nodes: NodeReader, node: onnx.NodeProto, what: str, got: Sequence[int],
                  expected: Sequence[int], detail: str) -> None:
    if tuple(got) != tuple(expected):
        raise nodes.error(
            node, f"the inferred {what} {show(tuple(got))} disagrees with the "
                  f"{show(tuple(expected))} that {detail} give; the model's recorded "
                  f"shapes are stale: re-export it or strip its value_info")


def _make(nodes: NodeReader, node: onnx.NodeProto, **fields) -> Layer:
    try:
        return Layer(name=node.name, **fields)
    except WorkloadError as exc:
        raise nodes.error(node, f"{exc}; the graph's shapes make no valid loop nest") from exc


def _make_gemm(nodes: NodeReader, node: onnx.NodeProto, **dims: int) -> Layer:
    try:
        return Layer.gemm(name=node.name, **dims)
    except WorkloadError as exc:
        raise nodes.error(node, f"{exc}; the graph's shapes make no valid loop nest") from exc


# ----------------------------------------------------------------------------- conv arithmetic
def _half(total: int) -> int:
    """``total / 2`` rounded toward zero, as the ONNX spec's C arithmetic does."""
    return total // 2 if total >= 0 else -(-total // 2)


def _conv_pads(auto_pad: str, sizes: Sequence[int], kernel: Sequence[int],
               strides: Sequence[int], dilations: Sequence[int],
               pads: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """(begin, end) input padding of a Conv per spatial axis, as the ONNX spec defines it."""
    n = len(sizes)
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else big)
            ends.append(big if auto_pad == "SAME_UPPER" else small)
        return begins, ends
    pads = list(pads) if pads else [0] * (2 * n)
    return pads[:n], pads[n:]


def _conv_transpose_pads(auto_pad: str, sizes: Sequence[int], kernel: Sequence[int],
                         strides: Sequence[int], dilations: Sequence[int],
                         out_pads: Sequence[int], pads: Sequence[int] | None,
                         output_shape: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """(begin, end) output cropping of a ConvTranspose per spatial axis (ONNX spec)."""
    n = len(sizes)
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        targets = (list(output_shape)[-n:] if output_shape
                   else [size * s for size, s in zip(sizes, strides)])
        begins, ends = [], []
        for size, k, s, d, op, out in zip(sizes, kernel, strides, dilations, out_pads, targets):
            total = s * (size - 1) + op + (k - 1) * d + 1 - out
            if auto_pad == "SAME_UPPER":
                begins.append(_half(total))
                ends.append(total - _half(total))
            else:
                begins.append(total - _half(total))
                ends.append(_half(total))
        return begins, ends
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    pads = list(pads) if pads else [0] * (2 * n)
    return pads[:n], pads[n:]
