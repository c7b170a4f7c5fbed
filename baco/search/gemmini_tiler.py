"""The "Gemmini default" baseline: Gemmini's own library tiler on the default hardware.

A port of ``tiled_matmul_auto`` and ``tiled_conv_auto`` (ucb-bar/gemmini-rocc-tests
``include/gemmini.h``; reference dosa-gemmini-isa.md §B.7) and the `Mapping` that scores what
they run on a Gemmini-template `HardwareConfig` (``gemmini_default`` by default).

**The tilers** choose how much of each loop one call of the hardware loop FSM (``LOOP_WS``,
``LOOP_CONV_WS``) covers, under weight-stationary double buffering (each FSM call may use half
of the scratchpad and half of the accumulator):

* ``tiled_matmul_auto`` works in DIM-blocks of the padded I (rows of A and C), J (columns of B
  and C) and K (the reduction): start from ``db_max_tile_i_j`` (I, J) and ``db_max_tile_k`` (K),
  then greedily grow J, I, K by one block while the scratchpad (``(I*K + K*J) * DIM`` rows)
  and accumulator (``I*J*DIM`` rows) budgets hold;
* ``tiled_conv_auto`` starts from the whole layer ``{batches, porows, pocols, pochs, krows,
  kcols, kchs}``, shrinks the largest argument (channels by DIM, others by 1, not ocols below
  DIM while orows > 1) until ``tiled_conv_total_spad_rows`` fits, then regrows ocols and then
  every argument by one while the budgets hold.

**Which tiler.** GEMM/GEMV layers use ``tiled_matmul_auto``. Convolutions use
``tiled_conv_auto``, except (with ``pointwise_as_matmul``, the default) 1x1, stride-1,
unpadded, ungrouped convolutions, which Gemmini's ResNet-50 program
(gemmini-rocc-tests ``imagenet/resnet50.c``) runs as ``tiled_matmul_nn_auto`` on the im2col
GEMM ``I = N*P*Q, J = K, K = C``.

**The mapping** follows DOSA's encoding of the Gemmini default in its calibration
(ucb-bar/dosa ``dataset/hw/gemmini/calibration/calibration.py``, reference §B.7), on the
template's levels L0 registers [W], L1 accumulator [O], L2 scratchpad [W, I], L3 DRAM, and runs
the library's loops as the library runs them, edge tiles included:

* L3 DRAM: the library's outer loops, ceil-divided as in ``tiled_matmul_outer`` (I0, J0, K0 =
  padded dim / tile, rounded up) and ``tiled_conv`` (``num_b``, ``num_porow``, ...
  ``num_kch`` = ``ceil_divide_int(dim, tile)``): the same number of FSM calls per loop;
* spatial: C across the PE rows at L1, K across the PE columns at L2: DIM whenever the
  library's tile of the dim has DIM elements or more (the last block of a dim that is not a
  multiple of DIM runs zero-padded, as ``sp_tiled_*``'s ``pad_K``/``pad_J`` do), else the
  tile's channels (e.g. C=3 uses 3 PE rows; the instruction-aware scorer charges the 13 idle
  rows);
* L1 (accumulator) temporal: one call's share of the dim, in DIM-blocks for C and K (matmul
  rows P, over Q, P, N for a pointwise conv, whole image rows once a tile holds one;
  ``tile_K`` / ``kchs`` for C, ``tile_J`` / ``pochs`` for K; conv ``batches`` (N),
  ``porows`` (P), ``pocols`` (Q), ``krows`` (R), ``kcols`` (S)). A mapping has one tile size
  per loop, while the library's last call is smaller (``last_I``, ``porows_`` ...), so the
  dim is spread evenly over the library's calls: ``ceil(dim / calls)`` elements (C, K:
  ``ceil(blocks / calls)`` blocks), never more than the library's tile. The mapping's
  factors then multiply to *more* than the layer (padding < one element per call, < one
  DIM-block per call for C and K, beyond the zero-padding to DIM the hardware really runs);
  using the library's tile size on every call instead would charge its short last call as a
  full one (e.g. P=56 in tiles of 22 as 66 rows);
* L0 registers and L2 scratchpad: no temporal loops (the weight sits in the PE while the FSM
  streams rows, which the L1 order below expresses);
* orders, innermost first as DOSA writes them: DRAM ``CRSKPQN``, accumulator ``PQNCRSK``,
  registers ``PQRSCKN`` (DOSA swaps P/Q and R/S relative to gemmini.h's loops; equal for the
  square loops of these networks);
* stages 2 below DRAM: the FSM double-buffers the scratchpad and accumulator (the tiler's half
  budgets) and each PE double-buffers its weight register.

**Scoring a padded mapping.** `Mapping.validate` and the analytic model take a mapping whose
factors multiply to the layer's dims (the model counts MACs from the layer, accesses from the
factors), so the mapping is validated and scored on `accel.lower.padded_layer` (the layer
grown to what the mapping covers), as the lowering does and as `baco.rounding.common_score`
does for any design: the padded MACs, PE cycles and on-chip traffic are counted. The DRAM
traffic of the padded edge is counted too, although ``mvin`` reads only the real bytes and
zero-fills the rest on chip: an overcount bounded by the padded / real tensor sizes (e.g.
3% on ResNet-50's 2048x1000 classifier).

If the model's footprint of that tile overflows a buffer (its strided-input tile includes the
rows a stride-2 1x1 conv skips, which Gemmini's ``downsample`` mode does not load), that
level drops to one stage, and if it still overflows the largest L1 extent is halved until it
fits; `gemmini_mapping` reports such adjustments.

>>> tiled_matmul_auto(512, 512, 512)
(5, 6, 32)
>>> tiled_matmul_auto(3136, 64, 64)
(8, 4, 4)
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, NamedTuple

import numpy as np

from accel.arch import HardwareConfig
from accel.lower import padded_layer
from accel.mapping import Mapping
from baco.errors import ConfigError, InfeasibleError
from baco.result import CodesignResult, HistoryPoint, LayerResult
from baco.search._space import check_network, fixed_hardware_budget, resolve_hardware
from perfmodels.analytic import exact
from workloads.layer import DIMS, Layer
from workloads.network import Network

_D = {d: i for i, d in enumerate(DIMS)}


# --------------------------------------------------------------------------- parameters
@dataclasses.dataclass(frozen=True)
class GemminiParams:
    """The ``gemmini_params.h`` constants the tilers read: DIM, scratchpad rows
    (``BANK_NUM * BANK_ROWS``) and accumulator rows (``ACC_ROWS``); a row is DIM elements.

    >>> GemminiParams.from_hardware(HardwareConfig.preset("gemmini_default"))
    GemminiParams(dim=16, sp_rows=16384, acc_rows=1024)
    """

    dim: int = 16
    sp_rows: int = 16384
    acc_rows: int = 1024

    @classmethod
    def from_hardware(cls, hw: HardwareConfig) -> GemminiParams:
        if hw.template != "gemmini" or hw.pe_rows != hw.pe_cols:
            raise ConfigError(f"gemmini tiler: needs a square Gemmini-template array, got "
                              f"template {hw.template!r} with {hw.pe_rows}x{hw.pe_cols} PEs")
        dim = hw.pe_rows
        sp_rows = int(hw.sp_kb * 1024 * 8 // (dim * hw.input_bits))
        acc_rows = int(hw.acc_kb * 1024 * 8 // (dim * hw.acc_bits))
        if sp_rows < 4 * dim or acc_rows < 2 * dim:
            raise ConfigError(f"gemmini tiler: {hw.name or 'hardware'} is too small for the "
                              f"tiler ({sp_rows} scratchpad rows, {acc_rows} accumulator rows "
                              f"of DIM={dim}); it needs at least one DIM block double-buffered")
        return cls(dim=dim, sp_rows=sp_rows, acc_rows=acc_rows)


DEFAULT_PARAMS = GemminiParams()


# --------------------------------------------------------------------------- matmul tiler
def _ceil_blocks(n: int, dim: int) -> int:
    return n // dim + (n % dim != 0)


def tiled_matmul_auto(dim_I: int, dim_J: int, dim_K: int,
                      params: GemminiParams = DEFAULT_PARAMS, dataflow: str = "WS",
                      act: str = "none") -> tuple[int, int, int]:
    """``tile_I, tile_J, tile_K`` (in DIM-blocks) that ``tiled_matmul_auto`` picks.

    C (I x J) = A (I x K) @ B (K x J). WS double-buffers (half budgets); OS does not.
    ``act`` in ("layernorm", "softmax") forces whole rows (``tile_I = tile_K = 1``).

    >>> tiled_matmul_auto(128, 768, 768), tiled_matmul_auto(128, 768, 3072, dataflow="OS")
    ((5, 5, 48), (8, 8, 64))
    """
    if dataflow not in ("WS", "OS"):
        raise ConfigError(f"tiled_matmul_auto: dataflow must be 'WS' or 'OS', got {dataflow!r}")
    dim = params.dim
    I_blocks, J_blocks, K_blocks = (_ceil_blocks(x, dim) for x in (dim_I, dim_J, dim_K))
    if act in ("layernorm", "softmax"):
        return 1, J_blocks, 1
    partition_rows = params.sp_rows // 2
    mats_in_partition = partition_rows // dim
    mats_in_acc = params.acc_rows // dim
    max_tile_i_j = math.isqrt(mats_in_acc)
    max_tile_k = mats_in_partition // max_tile_i_j
    db_partition_rows = params.sp_rows // 2 // 2
    db_mats_in_partition = db_partition_rows // dim
    db_mats_in_acc = params.acc_rows // 2 // dim
    db_max_tile_i_j = math.isqrt(db_mats_in_acc)
    db_max_tile_k = db_mats_in_partition // db_max_tile_i_j

    double_buffered = dataflow == "WS"
    max_spad_rows = params.sp_rows // 2 if double_buffered else params.sp_rows
    max_acc_rows = params.acc_rows // 2 if double_buffered else params.acc_rows
    if double_buffered:
        ti, tj, tk = min(I_blocks, db_max_tile_i_j), min(J_blocks, db_max_tile_i_j), \
            min(K_blocks, db_max_tile_k)
    else:
        ti, tj, tk = min(I_blocks, max_tile_i_j), min(J_blocks, max_tile_i_j), \
            min(K_blocks, max_tile_k)

    def spad_rows(i: int, j: int, k: int) -> int:
        return (i * k + k * j) * dim

    def acc_rows(i: int, j: int) -> int:
        return i * j * dim

    while True:
        increased = False
        if spad_rows(ti, tj + 1, tk) <= max_spad_rows and acc_rows(ti, tj + 1) <= max_acc_rows \
                and tj + 1 <= J_blocks:
            tj += 1
            increased = True
        if spad_rows(ti + 1, tj, tk) <= max_spad_rows and acc_rows(ti + 1, tj) <= max_acc_rows \
                and ti + 1 <= I_blocks:
            ti += 1
            increased = True
        if spad_rows(ti, tj, tk + 1) <= max_spad_rows and tk + 1 <= K_blocks:
            tk += 1
            increased = True
        if not increased:
            break
    return ti, tj, tk


# --------------------------------------------------------------------------- conv tiler
class ConvTiles(NamedTuple):
    """What ``tiled_conv_auto`` hands to ``tiled_conv``: the extent of each loop per FSM call
    (pool rows/cols = output rows/cols without pooling)."""

    batches: int
    porows: int
    pocols: int
    pochs: int
    krows: int
    kcols: int
    kchs: int


def tiled_conv_total_spad_rows(acc: bool, stride: int, input_dilation: int,
                               kernel_dilation: int, downsample: bool,
                               trans_weight_0132: bool, trans_input_3120: bool,
                               batches: int, porows: int, pocols: int, ochs: int,
                               krows: int, kcols: int, kchs: int,
                               pool_size: int, pool_stride: int,
                               params: GemminiParams = DEFAULT_PARAMS) -> int:
    """Scratchpad rows (A + B) or, with `acc`, accumulator rows (C) of one conv tile."""
    dim = params.dim
    orows = porows * pool_stride + pool_size - 1
    ocols = pocols * pool_stride + pool_size - 1
    krows_dilated = krows + (kernel_dilation - 1) * (krows - 1)
    kcols_dilated = kcols + (kernel_dilation - 1) * (kcols - 1)
    irows = orows * stride + krows_dilated - 1
    icols = ocols * stride + kcols_dilated - 1
    ichs = kchs
    irows = irows // input_dilation + (irows % input_dilation != 0)
    icols = icols // input_dilation + (icols % input_dilation != 0)
    in_channels_per_bank = _ceil_blocks(ichs, dim)
    out_channels_per_bank = _ceil_blocks(ochs, dim)
    batches_per_bank = _ceil_blocks(batches, dim)
    ds = int(downsample)
    if trans_input_3120:
        a_rows = batches_per_bank * ichs * (irows >> ds) * (icols >> ds)
    else:
        a_rows = in_channels_per_bank * batches * (irows >> ds) * (icols >> ds)
    if trans_weight_0132:
        b_rows = in_channels_per_bank * kcols * krows * ochs
    else:
        b_rows = out_channels_per_bank * kcols * krows * kchs
    c_rows = out_channels_per_bank * batches * orows * ocols
    return c_rows if acc else a_rows + b_rows


def tiled_conv_auto(batch_size: int, in_row_dim: int, in_col_dim: int, in_channels: int,
                    out_channels: int, out_row_dim: int, out_col_dim: int, stride: int,
                    input_dilation: int, kernel_dilation: int, padding: int,
                    kernel_dim: int | tuple[int, int],
                    pool_size: int = 1, pool_stride: int = 0, pool_padding: int = 0,
                    trans_weight_0132: bool = False, trans_input_3120: bool = False,
                    params: GemminiParams = DEFAULT_PARAMS) -> ConvTiles:
    """The tile ``tiled_conv_auto`` picks (``pool_stride=0``: no pooling, as in gemmini.h).

    ``kernel_dim`` may be a (rows, cols) pair for a non-square (e.g. 1-D) kernel; gemmini.h
    takes one square size.

    >>> tiled_conv_auto(1, 56, 56, 64, 64, 56, 56, 1, 1, 1, 1, 3)
    ConvTiles(batches=1, porows=22, pocols=23, pochs=16, krows=3, kcols=3, kchs=64)
    """
    krows, kcols = (kernel_dim, kernel_dim) if isinstance(kernel_dim, int) else kernel_dim
    no_pool = pool_stride == 0
    if no_pool:
        pool_size, pool_stride, pool_padding = 1, 1, 0
    pool_out_row_dim = (out_row_dim + 2 * pool_padding - pool_size) // pool_stride + 1
    pool_out_col_dim = (out_col_dim + 2 * pool_padding - pool_size) // pool_stride + 1
    downsample = (stride == 2 and krows == 1 and kcols == 1 and padding == 0 and no_pool
                  and in_row_dim % 2 == 0 and in_col_dim % 2 == 0)
    dim = params.dim
    args = [batch_size, pool_out_row_dim, pool_out_col_dim, out_channels, krows, kcols,
            in_channels]
    max_args = list(args)
    orows_idx, ocols_idx, out_channels_idx, in_channels_idx = 1, 2, 3, 6
    max_spad_rows = params.sp_rows // 2
    max_acc_rows = params.acc_rows // 2

    def rows(a: list[int], acc: bool) -> int:
        return tiled_conv_total_spad_rows(acc, stride, input_dilation, kernel_dilation,
                                          downsample, trans_weight_0132, trans_input_3120,
                                          *a, pool_size, pool_stride, params=params)

    def fits(a: list[int]) -> bool:
        return rows(a, False) <= max_spad_rows and rows(a, True) <= max_acc_rows

    while not fits(args):
        max_val, max_idx = -1, -1
        for i, value in enumerate(args):
            # Avoid shrinking ocols below DIM to keep the array busy, as gemmini.h does.
            if not (i == ocols_idx and value <= dim and args[orows_idx] > 1) and value > max_val:
                max_val, max_idx = value, i
        if max_idx in (out_channels_idx, in_channels_idx):
            if args[max_idx] % dim != 0:
                args[max_idx] = (args[max_idx] // dim) * dim
            else:
                args[max_idx] -= dim
            args[max_idx] = 1 if args[max_idx] == 0 else args[max_idx]
        else:
            args[max_idx] -= 1
        if all(a == 1 for a in args) and not fits(args):
            raise InfeasibleError("tiled_conv_auto: even a 1x1 tile does not fit the buffers")

    not_increased = False
    while not not_increased:
        not_increased = True
        candidate = list(args)
        candidate[ocols_idx] += 1
        if candidate[ocols_idx] > max_args[ocols_idx]:
            continue
        if fits(candidate):
            args[ocols_idx] = candidate[ocols_idx]
            not_increased = False

    nothing_increased = False
    while not nothing_increased:
        nothing_increased = True
        for i in range(len(args)):
            candidate = list(args)
            candidate[i] += 1
            if candidate[i] > max_args[i]:
                continue
            if fits(candidate):
                args[i] = candidate[i]
                nothing_increased = False
    return ConvTiles(*args)


# --------------------------------------------------------------------------- the mapping
def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _order_outermost_first(innermost_first: str) -> list[int]:
    return [_D[d] for d in reversed(innermost_first)]


# DOSA's calibration encoding (ranks [2,3,5,6,1,4,7], [5,6,1,2,4,7,3], [3,4,1,2,5,6,7]).
DRAM_ORDER = "CRSKPQN"
ACCUMULATOR_ORDER = "PQNCRSK"
REGISTER_ORDER = "PQRSCKN"


def _input_size(out: int, kernel: int, stride: int, dilation: int, pads: int) -> int:
    """The largest input size giving `out` outputs (`Layer` keeps no input size; the largest
    is the even one in ResNet's stride-2 layers, which is what Gemmini's downsample checks)."""
    return (out - 1) * stride + (kernel - 1) * dilation + 1 - pads + (stride - 1)


def gemmini_tiles(layer: Layer, params: GemminiParams = DEFAULT_PARAMS,
                  pointwise_as_matmul: bool = True) -> dict[str, Any]:
    """Which tiler runs `layer` and what it picks (JSON-serializable).

    >>> gemmini_tiles(Layer.gemm(M=128, K_red=768, N_out=768))
    {'tiler': 'tiled_matmul_auto', 'dim_I': 128, 'dim_J': 768, 'dim_K': 768, 'tile_I': 5, 'tile_J': 5, 'tile_K': 48}
    """
    pointwise = (layer.kind == "conv2d" and layer.R == layer.S == 1
                 and layer.Hstride == layer.Wstride == 1 and not any(layer.pads)
                 and layer.groups == 1 and layer.upsample == (1, 1))
    if layer.kind in ("gemm", "gemv") or (pointwise_as_matmul and pointwise):
        rows = layer.P * layer.Q if layer.kind in ("gemm", "gemv") else \
            layer.N * layer.P * layer.Q
        ti, tj, tk = tiled_matmul_auto(rows, layer.K, layer.C, params)
        return {"tiler": "tiled_matmul_auto", "dim_I": rows, "dim_J": layer.K,
                "dim_K": layer.C, "tile_I": ti, "tile_J": tj, "tile_K": tk}
    if layer.Hstride != layer.Wstride or layer.Hdilation != layer.Wdilation:
        raise ConfigError(f"gemmini tiler: layer {layer.name or layer.config_str()} has "
                          "different row and column strides or dilations; tiled_conv_auto "
                          "takes one of each")
    top, left, bottom, right = layer.pads
    in_rows = _input_size(layer.P, layer.R, layer.Hstride, layer.Hdilation, top + bottom)
    in_cols = _input_size(layer.Q, layer.S, layer.Wstride, layer.Wdilation, left + right)
    tiles = tiled_conv_auto(layer.N, in_rows, in_cols, layer.C, layer.K, layer.P, layer.Q,
                            layer.Hstride, 1, layer.Hdilation, max(layer.pads),
                            (layer.R, layer.S), params=params)
    return {"tiler": "tiled_conv_auto", "in_row_dim": in_rows, "in_col_dim": in_cols,
            **tiles._asdict()}


def gemmini_mapping(layer: Layer, hw: HardwareConfig | None = None,
                    pointwise_as_matmul: bool = True) -> tuple[Mapping, dict[str, Any]]:
    """The `Mapping` that scores what Gemmini's library runs for `layer` on `hw`, and the
    tiler's record (with the dims the mapping pads, and any footprint adjustment; see the
    module docstring).

    The mapping covers `padded_layer(layer, mapping)`, which may exceed `layer` (the edge
    tiles are padded): validate and score it on that layer, as `gemmini_default` does.

    >>> m, info = gemmini_mapping(Layer.gemm(M=512, K_red=512, N_out=512))
    >>> m.to_timeloop(), info["padded_dims"]
    ('L3[WIO] P7 K6 - L2[WI] N1 K16X - L1[O] K6 C32 P74 C16X - L0[W] N1', {'P': 518, 'K': 576})
    """
    hw = hw if hw is not None else HardwareConfig.preset("gemmini_default")
    params = GemminiParams.from_hardware(hw)
    dim = params.dim
    info = gemmini_tiles(layer, params, pointwise_as_matmul)
    dims = np.array([getattr(layer, d) for d in DIMS], np.int64)
    # extent[d]: the elements of d one FSM call covers (the library's tile, clipped to the dim);
    # unit[d]: the elements of one L1 step: the PE rows (C) or columns (K) a block uses, else 1.
    extent = np.ones(7, np.int64)
    if info["tiler"] == "tiled_matmul_auto":
        rows = info["tile_I"] * dim
        if layer.kind in ("gemm", "gemv"):
            extent[_D["P"]] = rows
        else:  # the im2col rows run (n, p, q) row-major: whole image rows once a tile has one
            q = min(layer.Q, rows)
            p = min(layer.P, rows // layer.Q) if q == layer.Q else 1
            n = min(layer.N, rows // (layer.P * layer.Q)) if q == layer.Q and p == layer.P \
                else 1
            extent[_D["Q"]], extent[_D["P"]], extent[_D["N"]] = q, p, n
        extent[_D["C"]] = info["tile_K"] * dim
        extent[_D["K"]] = info["tile_J"] * dim
    else:
        for dim_name, key in (("N", "batches"), ("P", "porows"), ("Q", "pocols"),
                              ("R", "krows"), ("S", "kcols"), ("C", "kchs"), ("K", "pochs")):
            extent[_D[dim_name]] = info[key]
    extent = np.clip(extent, 1, dims)     # a tiler that found no fitting tile says 0
    spatial_c = min(dim, int(extent[_D["C"]]))
    spatial_k = min(dim, int(extent[_D["K"]]))
    unit = np.ones(7, np.int64)                       # the elements of one L1 step of each dim
    unit[_D["C"]], unit[_D["K"]] = spatial_c, spatial_k

    template = hw.template_spec
    order = np.stack([_order_outermost_first(REGISTER_ORDER),
                      _order_outermost_first(ACCUMULATOR_ORDER),
                      _order_outermost_first(ACCUMULATOR_ORDER),
                      _order_outermost_first(DRAM_ORDER)])
    stages = np.array([2, 2, 2, 1])
    spatial = np.ones((4, 7), np.int64)
    spatial[1, _D["C"]] = spatial_c
    spatial[2, _D["K"]] = spatial_k
    cap = np.array([hw.capacities_kb()[lv.name] for lv in template.levels[:-1]])
    adjustments: list[str] = []
    while True:
        calls = np.array([_cdiv(t, e) for t, e in zip(dims, extent)])   # the library's loops
        temporal = np.ones((4, 7), np.int64)
        temporal[3] = calls
        # each call's share of the dim's elements (C, K: DIM-blocks), evened out over the calls
        temporal[1] = [_cdiv(_cdiv(t, u), c) for t, u, c in zip(dims, unit, calls)]
        mapping = Mapping(temporal=temporal, spatial=spatial, order=order, stages=stages,
                          tags=template.tags)
        need = mapping.footprint_kb(layer, hw)
        over = np.flatnonzero(need[:-1] > cap * (1 + 1e-6))
        if over.size == 0:
            break
        l = int(over[0])
        if stages[l] > 1:
            stages = stages.copy()
            stages[l] = 1
            adjustments.append(f"{template.levels[l].name}: 1 stage")
            continue
        d = int(np.argmax(temporal[1]))
        if temporal[1, d] == 1:
            raise InfeasibleError(f"gemmini tiler: no tile of {layer.config_str()} fits "
                                  f"{hw.name or 'the hardware'}")
        extent[d] = unit[d] * (temporal[1, d] // 2)
        adjustments.append(f"{DIMS[d]} tile halved")
    mapping.validate(padded_layer(layer, mapping), hw)
    cover = (mapping.temporal * mapping.spatial).prod(axis=0)
    info["padded_dims"] = {d: int(cover[i]) for i, d in enumerate(DIMS) if cover[i] > dims[i]}
    if adjustments:
        info["adjustments"] = adjustments
    return mapping, info


# --------------------------------------------------------------------------- the baseline
def gemmini_default(network: Network | str, *, budget_samples: int = 1, seed: int = 0,
                    hardware: HardwareConfig | str = "gemmini_default",
                    pointwise_as_matmul: bool = True,
                    area_budget_mm2: float | None = None) -> CodesignResult:
    """Gemmini's library tiling of every layer on fixed hardware: one sample, no search.

    ``budget_samples`` and ``seed`` are accepted for the common interface and do not change
    anything: the tiler is deterministic and its one whole-network point is one sample.
    ``area_budget_mm2`` does not change it either (the hardware is fixed): hardware over the
    budget runs as the reference it is, with an `AreaBudgetWarning`, and ``extra`` records
    ``area_mm2``, ``area_budget_mm2`` and ``within_area_budget``.
    """
    del budget_samples  # nothing to search
    start = time.perf_counter()
    network = check_network(network, "gemmini_default")
    hw = resolve_hardware(hardware, "gemmini_default")
    budget_info = fixed_hardware_budget(hw, area_budget_mm2, "gemmini_default")
    rows, tiles = [], {}
    for layer, count in network:
        mapping, info = gemmini_mapping(layer, hw, pointwise_as_matmul)
        out = exact(padded_layer(layer, mapping), hw, mapping)   # the padded work counted
        rows.append(LayerResult(layer=layer, count=int(count), mapping=mapping,
                                latency_cycles=float(out.cycles),
                                energy_pj=float(out.energy_pj)))
        tiles[layer.name or layer.config_str()] = info
    result = CodesignResult(method="gemmini_default", network=network.name, hardware=hw,
                            layers=tuple(rows), samples=1, seed=int(seed),
                            extra={"tiles": tiles, "pointwise_as_matmul": pointwise_as_matmul,
                                   **budget_info})
    point = HistoryPoint(samples=1, seconds=time.perf_counter() - start, best_edp=result.edp)
    return dataclasses.replace(result, history=(point,))


__all__ = [
    "ACCUMULATOR_ORDER",
    "DEFAULT_PARAMS",
    "DRAM_ORDER",
    "REGISTER_ORDER",
    "ConvTiles",
    "GemminiParams",
    "gemmini_default",
    "gemmini_mapping",
    "gemmini_tiles",
    "tiled_conv_auto",
    "tiled_conv_total_spad_rows",
    "tiled_matmul_auto",
]
