"""`emit`: a design's layer and mapping as the Python source of a ``@baco.jit`` kernel.

The kernel is the layer's implicit-im2col GEMM (a GEMM is the conv with R=S=Q=1): one program
instance per accumulator tile of the mapping (``TN x TP x TQ`` output pixels by ``BLOCK_N``
output channels, the mapping's level-1 tile), reducing over (r, s, channel blocks of
``BLOCK_C``, the level-1 tile's channels). Tensors are the ones `accel.lower.DramLayout` lays
out (input NHWC unpadded, weight ``(groups, R, S, C, K)``, bias, residual, output), so the
kernel's simulated output can be compared with `accel.lower.reference` and with the lowered
trace's. The emitted module also defines ``GRID``, ``CONSTS``, ``TENSORS`` and
``launch(tensors, **options)``.
"""

from __future__ import annotations

import linecache
import math
import types

from accel.arch import HardwareConfig
from accel.isa import IsaParams
from accel.lower import EPILOGUE_OPS, accumulator_tile
from accel.mapping import Mapping
from workloads.errors import DSLError
from workloads.layer import Layer

_TEMPLATE = '''"""{title}

Emitted by baco.dsl.emit from mapping `{timeloop}` on {hw}.
Blocks: {bm} output pixels ({tn} x {tp} x {tq} of N x P x Q) by {bn} output channels per
program; reduction over R x S x ceil(C / {bc}) steps of {bc} channels.
"""
import baco

TENSORS = {tensors!r}
GRID = ({tiles_m}, {tiles_k})
CONSTS = {consts!r}


@baco.jit
def {name}({ptrs},
        NB: baco.const, H: baco.const, W: baco.const, C: baco.const, P: baco.const,
        Q: baco.const, K: baco.const, R: baco.const, S: baco.const, STRIDE_H: baco.const,
        STRIDE_W: baco.const, DIL_H: baco.const, DIL_W: baco.const, PAD_T: baco.const,
        PAD_L: baco.const, TN: baco.const, TP: baco.const, TQ: baco.const,
        BLOCK_N: baco.const, BLOCK_C: baco.const):
    pid_m = baco.program_id(0)
    pid_k = baco.program_id(1)
    tiles_q = baco.cdiv(Q, TQ)
    tiles_p = baco.cdiv(P, TP)
    offs = baco.arange(0, TN * TP * TQ)
    n = pid_m // (tiles_q * tiles_p) * TN + offs // (TP * TQ)
    p = pid_m // tiles_q % tiles_p * TP + offs // TQ % TP
    q = pid_m % tiles_q * TQ + offs % TQ
    pixel_ok = (n < NB) & (p < P) & (q < Q)
    offs_k = pid_k * BLOCK_N + baco.arange(0, BLOCK_N)
    offs_c = baco.arange(0, BLOCK_C)
    acc = baco.zeros((TN * TP * TQ, BLOCK_N), dtype=baco.int32)
    for r in range(0, R):
        for s in range(0, S):
            h = p * STRIDE_H + r * DIL_H - PAD_T
            w = q * STRIDE_W + s * DIL_W - PAD_L
            inside = pixel_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            pixels = ((n * H + h) * W + w) * C
            for c in range(0, C, BLOCK_C):
                a_mask = inside[:, None] & (offs_c[None, :] < C - c)
                a = baco.load(x_ptr + pixels[:, None] + c + offs_c[None, :], mask=a_mask, other=0)
                w_rows = (r * S + s) * C + c + offs_c[:, None]
                b_mask = (offs_c[:, None] < C - c) & (offs_k[None, :] < K)
                b = baco.load(w_ptr + w_rows * K + offs_k[None, :], mask=b_mask, other=0)
                acc += baco.dot(a, b)
    out_rows = ((n * P + p) * Q + q) * K
    out_mask = pixel_ok[:, None] & (offs_k[None, :] < K)
{epilogue}
    baco.store(y_ptr + out_rows[:, None] + offs_k[None, :], out, mask=out_mask)


def launch(tensors, **options):
    """Run the kernel on ``tensors`` (DramLayout names -> arrays); options: backend=, hw=."""
    return {name}[GRID](*(tensors[t] for t in TENSORS), **CONSTS, **options)
'''


def blocks(layer: Layer, mapping: Mapping, hw: HardwareConfig) -> dict[str, int]:
    """The kernel's block sizes: the mapping's accumulator tile, clipped to the layer."""
    tile = accumulator_tile(layer, mapping, IsaParams.from_hardware(hw).dim)
    return {"TN": min(tile["N"], layer.N), "TP": min(tile["P"], layer.P),
            "TQ": min(tile["Q"], layer.Q), "BLOCK_N": min(tile["K"], layer.K),
            "BLOCK_C": min(tile["C"], layer.C)}


def emit(layer: Layer, mapping: Mapping, hw: HardwareConfig, *, acc_scale: float = 1.0,
         full_output: bool = False, name: str | None = None) -> str:
    """The Python source of a ``@baco.jit`` kernel implementing ``mapping`` for ``layer``.

    The epilogue is the layer's (``bias``, ``add``, ``relu`` or ``gelu``), then ``acc_scale`` and
    int8 saturation on the store (int32 with ``full_output``), as `accel.lower.lower` does.
    """
    from accel.lower import input_hw

    if layer.groups != 1 or layer.upsample != (1, 1):
        raise DSLError(f"layer {layer.name or layer.kind}: emit handles groups=1 convs and "
                       f"GEMMs without upsampling, got groups={layer.groups}, "
                       f"upsample={layer.upsample}")
    epi = tuple(layer.epilogue)
    unknown = [e for e in epi if e not in EPILOGUE_OPS]
    if unknown:
        raise DSLError(f"layer {layer.name or layer.kind}: epilogue {unknown} has no kernel "
                       f"form (supported: {', '.join(EPILOGUE_OPS)})")
    if full_output and ({"relu", "gelu"} & set(epi) or acc_scale != 1.0):
        raise DSLError("full_output stores raw int32 accumulators: no activation, acc_scale "
                       "1.0")
    if not (acc_scale > 0 or (acc_scale < 0 and "gelu" in epi)):
        raise DSLError(f"acc_scale must be positive (negative only after gelu), got "
                       f"{acc_scale}")
    b = blocks(layer, mapping, hw)
    h, w = input_hw(layer)
    top, left = layer.pads[0], layer.pads[1]
    consts = {"NB": layer.N, "H": h, "W": w, "C": layer.C, "P": layer.P, "Q": layer.Q,
              "K": layer.K, "R": layer.R, "S": layer.S, "STRIDE_H": layer.Hstride,
              "STRIDE_W": layer.Wstride, "DIL_H": layer.Hdilation, "DIL_W": layer.Wdilation,
              "PAD_T": top, "PAD_L": left, **b}
    tensors = ["input", "weight"]
    lines = []
    if "bias" in epi:
        tensors.append("bias")
        lines.append("    acc += baco.load(bias_ptr + offs_k, mask=offs_k < K, other=0)"
                     "[None, :]")
    if "add" in epi:
        tensors.append("residual")
        lines.append("    acc += baco.load(res_ptr + out_rows[:, None] + offs_k[None, :], "
                     "mask=out_mask, other=0)")
    tensors.append("output")
    value = ("baco.maximum(acc, 0)" if "relu" in epi else "baco.gelu(acc)" if "gelu" in epi
             else "acc")
    if acc_scale != 1.0:
        value = f"{value} * {float(acc_scale)!r}"
    lines.append(f"    out = {value}" if full_output else f"    out = ({value}).to(baco.int8)")
    ptr_names = {"input": "x_ptr", "weight": "w_ptr", "bias": "bias_ptr",
                 "residual": "res_ptr", "output": "y_ptr"}
    kernel = name or f"{_identifier(layer.name) or layer.kind}_kernel"
    tiles_m = (math.ceil(layer.N / b["TN"]) * math.ceil(layer.P / b["TP"])
               * math.ceil(layer.Q / b["TQ"]))
    title = (f"{layer.kind} {layer.name or ''}: R={layer.R} S={layer.S} P={layer.P} "
             f"Q={layer.Q} C={layer.C} K={layer.K} N={layer.N}, stride "
             f"{layer.Hstride}x{layer.Wstride}, pads {layer.pads}, epilogue {list(epi)}")
    return _TEMPLATE.format(
        title=title, timeloop=mapping.to_timeloop(),
        hw=f"{hw.name or 'hardware'} ({hw.pe_rows}x{hw.pe_cols} PEs, scratchpad {hw.sp_kb:g} "
           f"KB, accumulator {hw.acc_kb:g} KB)",
        bm=b["TN"] * b["TP"] * b["TQ"], tn=b["TN"], tp=b["TP"], tq=b["TQ"], bn=b["BLOCK_N"],
        bc=b["BLOCK_C"], tensors=tuple(tensors), tiles_m=tiles_m,
        tiles_k=math.ceil(layer.K / b["BLOCK_N"]), consts=consts, name=kernel,
        ptrs=", ".join(ptr_names[t] for t in tensors), epilogue="\n".join(lines))


def _identifier(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")
    return f"k_{out}" if out[:1].isdigit() else out


_COUNTER = [0]


def load_source(source: str, filename: str | None = None) -> types.ModuleType:
    """Execute emitted source as a module (registered with linecache so the front end can read
    its kernel's source)."""
    if filename is None:
        _COUNTER[0] += 1
        filename = f"<baco-emitted-{_COUNTER[0]}>"
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    module = types.ModuleType(filename.strip("<>").replace("-", "_"))
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102  (our own source)
    return module


__all__ = ["blocks", "emit", "load_source"]
