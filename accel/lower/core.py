"""`lower`: one layer, its mapping and a hardware point become a Gemmini instruction trace."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from accel.arch import HardwareConfig
from accel.isa import IsaParams
from accel.lower.coverage import (
    check_coverage,
    check_matching,
    check_tile_coverage,
    matching_matrices,
)
from accel.lower.emit import LowerStats
from accel.lower.layout import DramLayout, input_hw, output_shape
from accel.lower.nest import C, K, N, Nest, P, Q, R, S, padded_layer
from accel.lower.ws import (
    GELU_INPUT_SCALE,
    Allocation,
    Epilogue,
    igelu_constants,
    lower_ws,
    needs_partial,
)
from accel.mapping import Mapping
from accel.trace import Trace
from workloads.errors import ConfigError, TraceError, UnsupportedOpError
from workloads.layer import Layer

EPILOGUE_OPS = ("bias", "add", "relu", "gelu")
ACTIVATIONS = ("relu", "gelu")  # applied by the final mvout: one at most, last


@dataclasses.dataclass(frozen=True)
class Lowered:
    """A lowered layer: the trace, where its tensors live, what it allocates, what it does."""

    trace: Trace
    layout: DramLayout
    alloc: Allocation
    stats: LowerStats
    layer: Layer
    mapping: Mapping
    hw: HardwareConfig
    epilogue: Epilogue
    dataflow: str = "ws"
    macro: bool = False
    steps: tuple = dataclasses.field(default=(), repr=False, compare=False)

    @property
    def params(self) -> IsaParams:
        return IsaParams.from_hardware(self.hw)

    def compute_blocks(self) -> np.ndarray:
        """What each compute instruction covers, in trace order (unrolled form only).

        ``[computes, 11]`` int64 columns: group, then the global N, P, Q of its first row, its
        k-block and c-block (``Ks``/``Cs`` wide), R, S, and its rows, input and output
        channels (``a_cols``, ``bd_cols``).
        """
        if self.macro:
            raise ConfigError("compute_blocks: the loop_ws form leaves computes to the FSM")
        nest = Nest(self.layer, self.mapping, self.params.dim)
        out = []
        for step in self.steps:
            for rec in step.template.records:
                glob = rec.outer_index + step.origin
                first = rec.pixels[0] + step.origin[[N, P, Q]]
                out.append([step.group, *first.tolist(), glob[K] // nest.ks,
                            glob[C] // nest.cs, glob[R], glob[S], len(rec.pixels), rec.ccols,
                            rec.kcols])
        return np.array(out, np.int64).reshape(-1, 11)


def parse_epilogue(ops: Sequence[str], *, acc_scale: float = 1.0, full_output: bool = False,
                   gelu_scale: float = GELU_INPUT_SCALE) -> Epilogue:
    """An `Epilogue` from epilogue op names (``"bias"``, ``"add"``, ``"relu"``, ``"gelu"``).

    bias and add happen in the accumulator, relu or Gemmini's I-GELU (`igelu_constants` of
    ``gelu_scale``) at the final mvout, so the activation must come last; anything else raises
    `UnsupportedOpError`. ``acc_scale`` is positive, or negative after gelu (I-GELU's output
    scale is negative).
    """
    ops = tuple(ops)
    for op in ops:
        if op not in EPILOGUE_OPS:
            raise UnsupportedOpError(
                f"epilogue op {op!r} cannot be lowered (supported: {', '.join(EPILOGUE_OPS)}); "
                "pass epilogue=... to lower the layer without it")
    if len(set(ops)) != len(ops):
        raise UnsupportedOpError(f"epilogue {ops} repeats an op")
    acts = [op for op in ops if op in ACTIVATIONS]
    if acts and (len(acts) > 1 or ops[-1] != acts[0]):
        raise UnsupportedOpError(f"epilogue {ops}: {' and '.join(acts)} is applied on the final "
                                 "mvout, so one activation at most, as the last op")
    if full_output and (acts or acc_scale != 1.0):
        raise ConfigError("full_output reads the accumulator at int32 without scaling or "
                          "activation; drop the activation and acc_scale")
    if not (acc_scale > 0 or (acc_scale < 0 and "gelu" in ops)):
        raise ConfigError(f"acc_scale must be positive (negative only after gelu, whose output "
                          f"scale is), got {acc_scale}")
    return Epilogue(bias="bias" in ops, residual="add" in ops, relu="relu" in ops,
                    acc_scale=float(acc_scale), full_output=bool(full_output),
                    gelu=igelu_constants(gelu_scale) if "gelu" in ops else None)


def gelu_on_chip(layers: Sequence[Layer]) -> bool:
    """Whether a layer applies GELU on the accelerator (its unit is then part of the design)."""
    return any("gelu" in split_epilogue(x.epilogue)[0] for x in layers)


def split_epilogue(ops: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(fused, host)``: the leading epilogue ops the accelerator can apply (bias and add in
    the accumulator, relu or I-GELU on the final mvout; each once, the activation last) and the
    rest, which run on the host after the output is stored (a softmax, a division, a second
    add...)."""
    ops = tuple(ops)
    fused: list[str] = []
    for i, op in enumerate(ops):
        if op not in EPILOGUE_OPS or op in fused or any(a in fused for a in ACTIVATIONS):
            return tuple(fused), ops[i:]
        fused.append(op)
    return tuple(fused), ()


def _check_layout(layout: DramLayout, layer: Layer, epi: Epilogue, partial: bool,
                  dim: int) -> None:
    h, w = input_hw(layer)
    gc, gk = layer.groups * layer.C, layer.groups * layer.K
    want = {"zeros": None, "input": ((layer.N, h, w, gc), "int8"),
            "weight": ((layer.groups, layer.R, layer.S, layer.C, layer.K), "int8"),
            "output": (output_shape(layer), "int32" if epi.full_output else "int8")}
    if epi.bias:
        want["bias"] = ((gk,), "int32")
    if epi.residual:
        want["residual"] = (output_shape(layer), "int8")
    if partial:
        want["partial"] = (output_shape(layer), "int32")
    for name, spec in want.items():
        if name not in layout:
            raise ConfigError(f"DRAM layout: missing tensor {name!r} (this lowering needs "
                              f"{sorted(want)})")
        t = layout[name]
        if spec is not None and (t.shape, t.dtype) != spec:
            raise ConfigError(f"DRAM layout: tensor {name!r} is {t.shape} {t.dtype}; expected "
                              f"{spec[0]} {spec[1]}")
    zeros = layout["zeros"]
    if zeros.offset_bytes != 0 or zeros.nbytes < dim * gc + 64:
        raise ConfigError(f"DRAM layout: the zero region must start at address 0 and hold at "
                          f"least {dim * gc + 64} bytes")


def lower(layer: Layer, mapping: Mapping, hw: HardwareConfig, *, dataflow: str = "ws",
          layout: DramLayout | None = None, macro: bool = False,
          epilogue: Sequence[str] | None = None, acc_scale: float = 1.0,
          full_output: bool = False, check: bool = True,
          max_instructions: int | None = None, first_layer: bool = True) -> Lowered:
    """Lower one layer with one mapping on one Gemmini-like hardware point to a trace.

    Args:
        layer: a gemm, gemv, conv1d, conv2d or conv_transpose `Layer` (groups allowed).
        mapping: its program; factors may cover more than the layer (trailing tiles are
            padded), and must fit `hw` (`Mapping.validate` on the padded layer).
        hw: a square-array `HardwareConfig` (DIM = ``pe_rows``).
        dataflow: ``"ws"`` (weight stationary).
        layout: where the tensors live in DRAM; default `DramLayout.for_layer`.
        macro: emit GEMMs as ``loop_ws`` CISC groups instead of the unrolled sequence.
        epilogue: epilogue ops; default the layer's (``"bias"``, ``"add"``, ``"relu"``).
        acc_scale: the float scale applied to the accumulator on the final mvout.
        full_output: write int32 outputs (no scale, no activation) instead of int8.
        check: run the coverage check and `Trace.validate` (off only for bulk runs).
        max_instructions: stop with `ProgramTooLongError` as soon as the program would pass
            this many instructions (weight-stationary unrolled programs; None: no cap).
        first_layer: pack a small-C convolution's kernel columns into the array's rows with
            pixel repeats where the mapping allows (`accel.lower.nest.Nest`), as Gemmini
            does when built with ``has_first_layer_optimizations`` (its default).

    Returns:
        A `Lowered` with the trace, DRAM layout, allocation and statistics.

    Raises:
        InfeasibleError: the mapping does not fit, or a tile overflows the scratchpad or
            accumulator (the message names the buffer, rows needed and rows available).
        UnsupportedOpError: an epilogue op that cannot be lowered.
        ProgramTooLongError: the program passes `max_instructions`.

    >>> from accel.arch import HardwareConfig
    >>> hw = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=4)
    >>> layer = Layer.gemm(M=8, K_red=8, N_out=8)
    >>> m = Mapping.from_timeloop("L3[WIO] K2 C2 - L2[WI] K4X - L1[O] C4X - L0[W] P8", stages=1)
    >>> low = lower(layer, m, hw)
    >>> low.stats.computes, low.stats.macs == low.stats.block_macs
    (8, True)
    """
    if dataflow.lower() != "ws":
        raise ConfigError(f"dataflow {dataflow!r}: lowering emits weight-stationary programs "
                          "('ws')")
    params = IsaParams.from_hardware(hw)
    padded = padded_layer(layer, mapping)
    mapping.validate(padded, hw)
    nest = Nest(layer, mapping, params.dim, pack=first_layer)
    if check:
        ok, why = check_matching(*matching_matrices(*nest.matching(macro)))
        if not ok:
            raise TraceError(f"instruction matching is invalid: {why}")
    ops = layer.epilogue if epilogue is None else epilogue
    epi = parse_epilogue(ops, acc_scale=acc_scale, full_output=full_output)
    if macro:
        from accel.lower.macro import lower_loop_ws, macro_needs_partial
        partial = macro_needs_partial(nest)
    else:
        partial = needs_partial(nest)
    if layout is None:
        layout = DramLayout.for_layer(layer, dim=params.dim, bias=epi.bias,
                                      residual=epi.residual, partial=partial,
                                      full_output=epi.full_output)
    _check_layout(layout, layer, epi, partial, params.dim)
    if macro:
        result = lower_loop_ws(nest, params, layout, epi)
    else:
        result = lower_ws(nest, params, layout, epi, max_instructions)
    em = result.emitter
    trace = Trace(em.out)
    if check:
        if macro:
            check_tile_coverage(layer, result.tiles)
        else:
            check_coverage(layer, nest.cs, nest.ks, result.steps, trace)
        trace.validate(params)
    stats = LowerStats(
        instructions=em.counts(), computes=em.computes, preloads=em.preloads,
        macs=layer.macs, block_macs=em.block_macs, array_macs=em.array_macs,
        dram_read_bytes=em.dram_read_bytes, dram_write_bytes=em.dram_write_bytes,
        weight_tile_loads=result.weight_tile_loads, input_tile_loads=result.input_tile_loads,
        output_tile_visits=result.output_tile_visits, partial_spills=result.partial_spills)
    return Lowered(trace, layout, result.alloc, stats, layer, mapping, hw, epi, "ws", macro,
                   tuple(result.steps))


__all__ = ["ACTIVATIONS", "EPILOGUE_OPS", "Lowered", "gelu_on_chip", "lower", "parse_epilogue",
           "split_epilogue"]
