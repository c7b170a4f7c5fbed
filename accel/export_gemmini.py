"""A design as Gemmini builds and runs it: a Chipyard config and the library's tiling factors.

* `scala_config`: a ``GemminiArrayConfig`` for Chipyard, ``GemminiConfigs.defaultConfig``
  with the design's array, buffers and DMA. Field names and defaults are read from ucb-bar/gemmini
  8c3f992, ``src/main/scala/gemmini/Configs.scala`` (``defaultConfig``, lines 21-69:
  ``inputType``/``weightType`` ``SInt(8.W)`` and ``accType`` ``SInt(32.W)`` at lines 23-25,
  ``tileRows``/``meshRows`` at 32-35, ``sp_capacity``/``acc_capacity`` at 41-42,
  ``sp_banks``/``acc_banks`` at 44-45, ``max_in_flight_mem_reqs`` at 66, ``dma_buswidth`` at
  69; ``CapacityInMatrices`` as ``GemminiConfigs.scala`` lines 107-114 read it) and the
  Chipyard wrapper from charleshong3/chipyard-dosa 4aaf8d3b,
  ``generators/chipyard/src/main/scala/config/RoCCAcceleratorConfigs.scala`` lines 11-15
  (``GemminiRocketConfig``).
* `tiling_header`: a C header with, per layer, the tiling arguments of gemmini-rocc-tests'
  ``tiled_conv`` and ``tiled_matmul`` (ucb-bar/gemmini-rocc-tests 180c468,
  ``include/gemmini.h``: ``tiled_matmul`` line 1104 takes ``tile_I, tile_J, tile_K`` in
  DIM-blocks of the padded dims and checks ``tile_X * DIM <= padded dim`` at lines 1134-1143;
  ``tiled_conv`` line 2168 takes ``batches, porows, pocols, pochs, krows, kcols, kchs`` in
  elements and loops over them outermost-first in that order, lines 2303-2320). Each is the
  extent of the design's tile below DRAM (every factor at L0-L2), the data one call of the
  library's hardware loop covers; the inner levels' order and the stages are the design's own
  and the library picks its own (the header keeps the compact mapping as a comment). It checks
  at compile time that ``gemmini_params.h`` (``DIM``, ``BANK_NUM * BANK_ROWS``, ``ACC_ROWS``)
  is the design's.

Only designs Gemmini's generator builds are exported (`accel.buildable`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.buildable import bank_entries, has_rules, unbuildable_reason
from accel.dma import bus_bytes, dram_bytes_per_cycle, inflight_requests
from accel.isa import IsaParams
from accel.mapping import DIM_INDEX, Mapping
from workloads.errors import ConfigError
from workloads.layer import Layer

CONV_ARGS = (("batches", "N"), ("porows", "P"), ("pocols", "Q"), ("pochs", "K"),
             ("krows", "R"), ("kcols", "S"), ("kchs", "C"))
"""``tiled_conv``'s tiling arguments (gemmini.h line 2178-2179) and the dims they tile."""

MATMUL_ARGS = (("tile_I", "P"), ("tile_J", "K"), ("tile_K", "C"))
"""``tiled_matmul``'s tiling arguments (gemmini.h line 1111) and the dims they tile: a GEMM is
a conv with P = M (rows of A and C), K = N_out (columns of B and C), C = K_red."""


def check_exportable(hw: HardwareConfig, where: str = "design") -> None:
    """Raise `ConfigError` unless Gemmini's generator builds `hw` with defaultConfig's types."""
    if not has_rules(hw) or hw.template_spec.buildable != "gemmini":
        raise ConfigError(f"{where}: template {hw.template!r} is not Gemmini's (its "
                          "`buildable` field is not gemmini); only Gemmini designs export")
    reason = unbuildable_reason(hw)
    if reason is not None:
        raise ConfigError(f"{where}: Gemmini's generator does not build this design: {reason}")
    widths = (hw.input_bits, hw.weight_bits, hw.acc_bits)
    if widths != (8, 8, 32):
        raise ConfigError(f"{where}: input/weight/acc bits are {widths}; the exported config "
                          "keeps defaultConfig's SInt(8)/SInt(8)/SInt(32)")
    if hw.dataflow not in ("WS", "OS"):
        raise ConfigError(f"{where}: dataflow {hw.dataflow!r}; Gemmini builds WS or OS")


def _capacity(field: str, hw: HardwareConfig) -> str:
    """``CapacityInKilobytes(kb)`` for whole KiB, else ``CapacityInMatrices`` (DIM x DIM
    blocks: the bank rows times the banks over DIM, GemminiConfigs.scala lines 107-114)."""
    kb = float(getattr(hw, field))
    if kb == int(kb):
        return f"CapacityInKilobytes({int(kb)})"
    bits = hw.input_bits if field == "sp_kb" else hw.acc_bits
    banks = IsaParams.sp_banks if field == "sp_kb" else IsaParams.acc_banks
    rows = bank_entries(field, hw.pe_rows, kb, bits) * banks
    return f"CapacityInMatrices({int(round(rows / hw.pe_rows))})"


def gemmini_fields(hw: HardwareConfig) -> dict[str, str]:
    """The ``GemminiArrayConfig`` fields the design sets, as Scala expressions."""
    check_exportable(hw)
    dram_bytes = dram_bytes_per_cycle(hw.dram_bw_words, hw.input_bits)
    return {
        "inputType": "SInt(8.W)", "weightType": "SInt(8.W)", "accType": "SInt(32.W)",
        "tileRows": "1", "tileColumns": "1",
        "meshRows": str(hw.pe_rows), "meshColumns": str(hw.pe_cols),
        "dataflow": f"Dataflow.{hw.dataflow}",
        "sp_capacity": _capacity("sp_kb", hw), "acc_capacity": _capacity("acc_kb", hw),
        "sp_banks": str(IsaParams.sp_banks), "acc_banks": str(IsaParams.acc_banks),
        # the DMA the generator needs for the design's bandwidth (accel/dma.py), which the
        # simulator times and the template prices
        "dma_buswidth": str(int(bus_bytes(dram_bytes)) * 8),
        "max_in_flight_mem_reqs": str(int(inflight_requests(dram_bytes))),
    }


def scala_config(hw: HardwareConfig, source: str = "", name: str = "BacoGemminiConfig") -> str:
    """``BacoGemminiConfig.scala``: the design's ``GemminiArrayConfig`` and a Chipyard config
    around it (one Rocket core, the system bus as wide as the DMA)."""
    fields = gemmini_fields(hw)
    bus_bits = max(128, int(fields["dma_buswidth"]))
    body = ",\n".join(f"    {k} = {v}" for k, v in fields.items())
    origin = f" from {source}" if source else ""
    return f"""// {name}: a Gemmini design exported by `baco export`{origin}.
// Fields: GemminiArrayConfig (ucb-bar/gemmini src/main/scala/gemmini/GemminiConfigs.scala),
// starting from GemminiConfigs.defaultConfig (Configs.scala lines 21-69), whose int8 inputs and
// weights and int32 accumulators it keeps. Place it in a Chipyard generator (e.g.
// generators/chipyard/src/main/scala/config/) and build CONFIG={name}.
package chipyard

import chisel3._
import org.chipsalliance.cde.config.Config
import gemmini._

object {name}Params {{
  val design = GemminiConfigs.defaultConfig.copy(
{body}
  )
}}

// As Chipyard's GemminiRocketConfig (RoCCAcceleratorConfigs.scala), with the design's Gemmini.
class {name} extends Config(
  new gemmini.DefaultGemminiConfig({name}Params.design) ++
  new freechips.rocketchip.subsystem.WithNBigCores(1) ++
  new chipyard.config.WithSystemBusWidth({bus_bits}) ++
  new chipyard.config.AbstractConfig)
"""


# --------------------------------------------------------------------------- tiling
def _macro_name(text: str) -> str:
    name = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").upper()
    return name if name and not name[0].isdigit() else f"L{name}"


def tile_extents(mapping: Mapping) -> np.ndarray:
    """Per dim, the extent of the mapping's tile below the outermost level."""
    return (mapping.temporal[:-1] * mapping.spatial[:-1]).prod(axis=0)


def layer_tiling(layer: Layer, mapping: Mapping, hw: HardwareConfig) -> dict[str, Any]:
    """The library call that runs `layer` and its tiling arguments: each the extent of the
    mapping's tile below DRAM (clipped to the layer; ``tiled_matmul``'s in DIM-blocks,
    rounded up, as its ``dim_X_padded`` counts them)."""
    below = tile_extents(mapping)
    extent = {d: int(min(below[i], getattr(layer, d))) for d, i in DIM_INDEX.items()}
    if layer.kind in ("gemm", "gemv"):
        dim = hw.pe_rows
        args = {arg: math.ceil(extent[d] / dim) for arg, d in MATMUL_ARGS}
        shape = {"dim_I": layer.P, "dim_J": layer.K, "dim_K": layer.C}
        notes = []
        if layer.N > 1:
            notes.append(f"a batched GEMM: {layer.N} tiled_matmul calls, one per batch")
        return {"call": "tiled_matmul", "args": args, "shape": shape, "notes": notes}
    args = {arg: extent[d] for arg, d in CONV_ARGS}
    shape = {"batch_size": layer.N, "in_channels": layer.C, "out_channels": layer.K,
             "out_row_dim": layer.P, "out_col_dim": layer.Q, "kernel_dim": layer.R,
             "stride": layer.Hstride, "kernel_dilation": layer.Hdilation}
    notes = []
    if (layer.R, layer.Hstride, layer.Hdilation) != (layer.S, layer.Wstride, layer.Wdilation):
        notes.append("tiled_conv takes one kernel_dim, stride and kernel_dilation; this layer's "
                     "rows and columns differ, so the library runs it only as the im2col "
                     "GEMM (tiled_matmul)")
    if layer.groups > 1:
        notes.append(f"{layer.groups} groups: one call per group (tiled_conv has no groups)")
    if layer.upsample != (1, 1):
        notes.append("a transposed conv: the extents are of its zero-inserted input")
    return {"call": "tiled_conv", "args": args, "shape": shape, "notes": notes}


def tiling_header(hw: HardwareConfig, layers: Sequence[tuple[str, Layer, Mapping]],
                  source: str = "") -> str:
    """``baco_tiling.h``: per layer ``BACO_<NAME>_<ARG>`` macros (see the module docstring)."""
    check_exportable(hw)
    dim = hw.pe_rows
    sp_rows = int(round(bank_entries("sp_kb", dim, hw.sp_kb, hw.input_bits)
                        * IsaParams.sp_banks))
    acc_rows = int(round(bank_entries("acc_kb", dim, hw.acc_kb, hw.acc_bits)
                         * IsaParams.acc_banks))
    lines = [
        "/* Tiling factors of a design exported by `baco export`"
        + (f" from {source}" if source else "") + ".",
        " * Per layer: BACO_<LAYER>_CALL names the gemmini-rocc-tests include/gemmini.h function",
        " * (tiled_conv: batches porows pocols pochs krows kcols kchs, in elements;",
        " * tiled_matmul: tile_I tile_J tile_K, in DIM-blocks), each the design's tile below",
        " * DRAM. Loop orders and multi-buffering inside a call are the library's own. */",
        "#ifndef BACO_TILING_H",
        "#define BACO_TILING_H",
        "",
        f"#define BACO_DIM {dim}",
        f"#define BACO_SP_ROWS {sp_rows}      /* BANK_NUM * BANK_ROWS */",
        f"#define BACO_ACC_ROWS {acc_rows}",
        "#if defined(DIM) && DIM != BACO_DIM",
        '#error "gemmini_params.h is not of this design: DIM differs"',
        "#endif",
        "#if defined(BANK_NUM) && defined(BANK_ROWS) && BANK_NUM * BANK_ROWS != BACO_SP_ROWS",
        '#error "gemmini_params.h is not of this design: scratchpad rows differ"',
        "#endif",
        "#if defined(ACC_ROWS) && ACC_ROWS != BACO_ACC_ROWS",
        '#error "gemmini_params.h is not of this design: accumulator rows differ"',
        "#endif",
        "",
        "#define BACO_TILED_CONV 0",
        "#define BACO_TILED_MATMUL 1",
        f"#define BACO_NUM_LAYERS {len(layers)}",
    ]
    seen: set[str] = set()
    for i, (name, layer, mapping) in enumerate(layers):
        macro = f"BACO_{_macro_name(name)}" if name else f"BACO_L{i}"
        if macro in seen:
            macro = f"{macro}_{i}"
        seen.add(macro)
        tiling = layer_tiling(layer, mapping, hw)
        lines += ["", f"/* layer {i}: {name or layer.config_str()} ({layer.kind}, "
                  f"{layer.config_str()}); mapping {mapping.to_timeloop()}, stages "
                  f"{mapping.stages.tolist()} */"]
        lines += [f"/* {note} */" for note in tiling["notes"]]
        lines.append(f"#define {macro}_CALL BACO_{tiling['call'].upper()}")
        for key, value in {**tiling["shape"], **tiling["args"]}.items():
            lines.append(f"#define {macro}_{key.upper()} {int(value)}")
    lines += ["", "#endif  /* BACO_TILING_H */", ""]
    return "\n".join(lines)


__all__ = ["CONV_ARGS", "MATMUL_ARGS", "check_exportable", "gemmini_fields", "layer_tiling",
           "scala_config", "tile_extents", "tiling_header"]
