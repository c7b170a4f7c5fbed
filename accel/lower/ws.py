"""The unrolled weight-stationary program of one layer: moves, preloads, computes.

The nest, outermost first: groups; the DRAM loops (each iteration a scratchpad tile of weights
and inputs); the scratchpad loops (each iteration an accumulator tile of outputs); the
accumulator and register loops (one accumulator tile's program, built once per tile shape as a
`Template` and replayed with base addresses). Inside that program each iteration of the loops
outside the *stream* (see `Nest.stream_loops`) preloads one ``Cs x Ks`` weight block, and the
stream's pixels go through the array in computes of up to DIM rows: ``compute_preloaded`` for
the first, ``compute_accumulated`` (weights stay) for the rest, each after a preload naming its
accumulator rows, as in ``sp_tiled_conv``. Consecutive rows share a compute when their
scratchpad rows are evenly spaced (``config_ex`` ``a_stride``: a strided conv's rows) and their
accumulator rows are consecutive.

First-layer packing (`Nest.pixels_per_row` p > 1, a convolution whose few input channels all
sit in the array's rows): as Gemmini's LoopConv, the inputs are mvin'd with ``config_ld`` pixel
repeats p, so each scratchpad row holds p consecutive pixels' channels, and one preload and its
computes take p kernel columns (``p * C`` array rows); each input slot keeps p - 1 guard rows
before its tile for the repeats, and a tile that would cross the middle of the scratchpad
(where the repeats stop) is lowered unpacked.

Tiles are loaded when they change (the DRAM loop that moved is relevant to them), into the next
of ``stages`` slots (2 = double buffering: consecutive tiles alternate halves, so the load of
one overlaps the computes on the other). An accumulator tile stays resident while consecutive
scratchpad iterations reduce into it; when the nest leaves it before its reduction is done, the
int32 partial sums go to the DRAM ``partial`` tensor (mvout with the full-width bit) and come
back on the next visit (mvin3 into the accumulator, after a fence: Gemmini's load and store
queues do not order their DRAM accesses).

Epilogues: bias is mvin3'd (int32, DRAM stride 0: one row repeated) into a tile's accumulator
rows before its first compute. A residual ("add") without a bias is mvin'd as int8 (``shrunk``)
into the accumulator rows the same way. With a bias, the residual goes to the scratchpad (a
region laid out as the accumulator tile) and enters as the D operand of each row's first
compute (weight-stationary computes add D to their product), so that nothing but the execute
unit accumulates into the accumulator: an accumulating mvin beside the execute unit's
accumulating writes into another accumulator bank corrupts both on the chip (its banks share
one adder; `accel.sim.hazards`). Where the scratchpad has no room for that region, the residual
is mvin'd with the accumulate bit between two fences instead. Scaling, relu and int8 saturation
happen on the final mvout (``config_st``). Without bias or residual, the first compute into each
row overwrites instead of accumulating.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from accel.isa import Activation, Funct, IsaParams
from accel.lower.emit import GARBAGE, Emitter, acc_addr, new_instruction, operand
from accel.lower.layout import DramLayout, input_hw
from accel.lower.nest import (
    ACC,
    DRAM,
    I_DIMS,
    O_DIMS,
    PIXEL_DIMS,
    RED_DIMS,
    REG,
    SP,
    W_DIMS,
    C,
    K,
    N,
    Nest,
    P,
    Q,
    R,
    S,
    TileLayout,
    enumerate_digits,
    index_matrix,
    input_layout,
    output_layout,
    runs,
    weight_layout,
    window_geometry,
)
from workloads.errors import ConfigError, InfeasibleError, ProgramTooLongError

_NO_BASE, _A_BASE, _W_BASE, _C_BASE, _R_BASE = range(5)


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What happens to the accumulator between the first compute and the final mvout.

    ``gelu``: Gemmini's I-GELU on the mvout read path, as its constants ``(qb, qc)``
    (`igelu_constants`), set by a ``config_norm`` before the moves. ``softmax``: the
    normalizer's softmax over each output row, as its i-exp constants ``(qln2, qln2_inv, qb,
    qc)`` (`iexp_constants`); only a fused chain's first GEMM applies it
    (`accel.lower.chain`)."""

    bias: bool = False
    residual: bool = False
    relu: bool = False
    acc_scale: float = 1.0
    full_output: bool = False
    gelu: tuple[int, int] | None = None
    softmax: tuple[int, int, int, int] | None = None

    @property
    def init(self) -> bool:
        """Whether a tile's rows are written (bias or residual) before its first compute."""
        return self.bias or self.residual

    @property
    def act(self) -> Activation:
        """The activation of the requantizing moves (softmax's most significant bit is set
        by ``config_norm``, ``config_st`` holds the other two)."""
        if self.softmax is not None:
            return Activation.SOFTMAX
        if self.gelu is not None:
            return Activation.IGELU
        return Activation.RELU if self.relu else Activation.NONE


GELU_INPUT_SCALE = 1 / 32
"""The real value of one accumulator unit that the I-GELU constants assume by default: int8-like
inputs (4.0 at 128). I-GELU computes in int32, so its inputs must stay small: past
|q| ~ 2**31 / (2 |qc|) its product wraps, as the hardware's does."""


def igelu_constants(input_scale: float = GELU_INPUT_SCALE) -> tuple[int, int]:
    """``(qb, qc)`` of I-BERT's integer GELU (i-GELU) for inputs of scale S, the two constants
    Gemmini's IGELU reads: erf(x) ~ sign(x) (a (min(|x|, -b) + b)^2 + 1), a = -0.2888,
    b = -1.769, on x / sqrt 2, so ``qb = floor(b / S')``, ``qc = floor(1 / (a S'^2))`` with
    ``S' = S / sqrt 2``. The output
    ``q (q_erf + qc)`` has scale ``S a S'^2 / 2`` (negative, as a is), which the move's
    ``acc_scale`` takes on: a negative scale maps it to GELU's sign."""
    if not input_scale > 0:
        raise ConfigError(f"gelu input scale must be positive, got {input_scale}")
    s = input_scale / math.sqrt(2.0)
    return math.floor(-1.769 / s), math.floor(1.0 / (-0.2888 * s * s))


SOFTMAX_INPUT_SCALE = 1 / 64
"""The real value of one accumulator unit that the softmax's i-exp constants assume by default
(a scale such as 1/sqrt(d) before the softmax is part of it; we track no quantization
scales)."""

def iexp_constants(input_scale: float = SOFTMAX_INPUT_SCALE) -> tuple[int, int, int, int]:
    """``(qln2, qln2_inv, qb, qc)`` of I-BERT's integer exp (i-exp) for inputs of scale S, as
    Gemmini's software sets them for its normalizer: exp(x) = 2^-z exp(p), x = -z ln2 + p,
    exp(p) ~ a (p + b)^2 + c with a = 0.3585, b = 1.353, c = 0.344, so ``qln2 = floor(ln2 /
    S)``, ``qln2_inv = 2^16 // qln2`` (z = (-q qln2_inv) >> 16), ``qb = floor(b / S)`` and
    ``qc = floor(c / (a S^2))``; the result has scale a S^2, which the softmax divides out."""
    if not input_scale > 0:
        raise ConfigError(f"softmax input scale must be positive, got {input_scale}")
    qln2 = math.floor(math.log(2.0) / input_scale)
    if not 1 <= qln2 < 2 ** 16:
        raise ConfigError(f"softmax input scale {input_scale}: ln2 / S = {qln2} must lie in "
                          f"[1, 65536)")
    qc = math.floor(0.344 / (0.3585 * input_scale * input_scale))
    if qc >= 2 ** 31:
        raise ConfigError(f"softmax input scale {input_scale} is too small: qc = {qc} does not "
                          "fit in 32 bits")
    return qln2, 2 ** 16 // qln2, math.floor(1.353 / input_scale), qc


@dataclasses.dataclass(frozen=True)
class BufferRegion:
    """``slots`` tiles of ``rows_per_slot`` rows from ``start_row`` in ``space`` (sp / acc);
    ``weights``: it holds weights (W), which energy counting tells apart from inputs (I)."""

    name: str
    space: str
    start_row: int
    rows_per_slot: int
    slots: int
    weights: bool = False
    guard: int = 0  # rows at the start of each slot that pixel repeats may write, before the tile

    @property
    def rows(self) -> int:
        return self.rows_per_slot * self.slots

    def slot_row(self, slot: int) -> int:
        """The first row of the tile in ``slot`` (after the slot's guard rows)."""
        return self.start_row + slot * self.rows_per_slot + self.guard


@dataclasses.dataclass(frozen=True)
class Allocation:
    """Scratchpad and accumulator regions of a lowered layer, and how full the memories are."""

    regions: tuple[BufferRegion, ...]
    sp_rows_used: int
    sp_rows_available: int
    acc_rows_used: int
    acc_rows_available: int

    def __getitem__(self, name: str) -> BufferRegion:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    def holds_weights(self, sp_rows: np.ndarray) -> np.ndarray:
        """Which of these scratchpad rows lie in a region that holds weights."""
        rows = np.asarray(sp_rows)
        out = np.zeros(rows.shape, bool)
        for r in self.regions:
            if r.weights and r.space == "sp":
                out |= (rows >= r.start_row) & (rows < r.start_row + r.rows)
        return out


def _bank_start(row: int, bank_rows: int) -> int:
    """The first row of the first scratchpad bank at or after ``row``."""
    return -(-row // bank_rows) * bank_rows


def allocate(nest: Nest, params: IsaParams, residual_in_sp: bool = False,
             ) -> tuple[Allocation, TileLayout, TileLayout, TileLayout]:
    """Place input and weight slots in the scratchpad and output slots in the accumulator;
    with ``residual_in_sp``, also a residual region (as many rows and slots as the output) in
    the scratchpad when it fits there, which ``alloc["residual"]`` then names.

    Raises `InfeasibleError` naming the buffer, the rows needed and the rows available.
    """
    il, wl, ol = input_layout(nest), weight_layout(nest), output_layout(nest)
    s2, s1 = int(nest.stages[SP]), int(nest.stages[ACC])
    # Pixel repeats write up to p - 1 rows before an input mvin's first: each slot keeps them.
    guard = nest.pixels_per_row - 1
    inp = BufferRegion("input", "sp", 0, il.rows + guard, s2, guard=guard)
    sp_need = inp.rows + wl.rows * s2
    extra = ol.rows * s1 if residual_in_sp else 0
    # The execute unit reads one row per scratchpad bank per cycle: a compute's inputs and the
    # weights preloaded beside it (and the residual it adds) go to other banks where they fit.
    bank = params.sp_bank_rows
    w_start = _bank_start(inp.rows, bank)
    if w_start + wl.rows * s2 + extra > params.sp_rows:
        w_start = inp.rows
    wgt = BufferRegion("weight", "sp", w_start, wl.rows, s2, weights=True)
    out = BufferRegion("output", "acc", 0, ol.rows, s1)
    acc_need = out.rows
    if sp_need > params.sp_rows:
        raise InfeasibleError(
            f"scratchpad: the tiles need {sp_need} rows (input {inp.rows_per_slot} + weight "
            f"{wl.rows} rows, x {s2} stage(s)) but the scratchpad has {params.sp_rows} rows of "
            f"{params.dim} elements; shrink the level-2 tile or its stages")
    if acc_need > params.acc_rows:
        raise InfeasibleError(
            f"accumulator: the output tile needs {acc_need} rows ({ol.rows} rows x {s1} "
            f"stage(s)) but the accumulator has {params.acc_rows} rows of {params.dim} "
            "elements; shrink the level-1 tile or its stages")
    regions = (inp, wgt, out)
    end = wgt.start_row + wgt.rows
    if residual_in_sp and max(end, sp_need) + extra <= params.sp_rows:
        r_start = _bank_start(end, bank)
        if r_start + extra > params.sp_rows:
            r_start = end
        regions += (BufferRegion("residual", "sp", r_start, ol.rows, s1),)
        sp_need += extra
    alloc = Allocation(regions, sp_need, params.sp_rows, acc_need, params.acc_rows)
    return alloc, il, wl, ol


# --------------------------------------------------------------------------- templates
@dataclasses.dataclass
class ComputeRecord:
    """What one compute covers, in accumulator-tile-local indices (for the coverage check)."""

    outer_index: np.ndarray  # [7] local index of the weight block (and outer pixels)
    pixels: np.ndarray  # [rows, 3] local (n, p, q) of its rows, stream offsets included
    ccols: int  # the compute's A columns: input channels x kernel columns packed
    kcols: int
    scols: int = 1  # kernel columns packed from outer_index's S on (first-layer packing)


@dataclasses.dataclass
class Template:
    """One accumulator tile's program relative to base addresses, for one tile shape."""

    ops: list  # (funct, rs1, base1, rs2, base2, rs2_first, base2_first, a_stride)
    records: list[ComputeRecord]
    block_macs: int
    array_rows: int


class _StreamChunks:
    """The stream's pixels grouped into computes, per pattern of valid pixels."""

    def __init__(self, nest: Nest, il: TileLayout, ol: TileLayout) -> None:
        loops = nest.stream_loops
        digits = enumerate_digits(loops)
        self.index = digits @ index_matrix(loops)
        self.a = digits @ il.coef_vector(loops)
        self.c = digits @ ol.coef_vector(loops)
        self.dim = nest.dim
        self.cache: dict[tuple, list] = {}

    def get(self, limit: tuple[int, int, int]) -> list:
        if limit in self.cache:
            return self.cache[limit]
        mask = np.ones(len(self.a), bool)
        for d, v in zip(PIXEL_DIMS, limit):
            mask &= self.index[:, d] < v
        rows = np.flatnonzero(mask)
        a, c = self.a[rows].tolist(), self.c[rows].tolist()
        chunks, i, n = [], 0, len(rows)
        while i < n:
            j, stride = i + 1, 0
            while j < n and j - i < self.dim and c[j] == c[j - 1] + 1:
                step = a[j] - a[j - 1]
                if stride == 0:
                    if not 0 < step <= 0xFFFF:
                        break
                    stride = step
                elif step != stride:
                    break
                j += 1
            chunks.append((a[i], c[i], j - i, stride or 1,
                           self.index[rows[i:j]][:, list(PIXEL_DIMS)]))
            i = j
        self.cache[limit] = chunks
        return chunks


def build_template(nest: Nest, valid: np.ndarray, il: TileLayout, wl: TileLayout,
                   ol: TileLayout, chunks: _StreamChunks, overwrite_first: bool,
                   residual_d: bool) -> Template:
    """The computes of one accumulator tile whose in-range extents are ``valid[7]``.

    Each op has a variant for the tile's first visit: the first compute into each row
    overwrites (``overwrite_first``: nothing was loaded into the rows) and adds the residual
    from the scratchpad as D (``residual_d``)."""
    outer = nest.outer_inner_loops
    digits = enumerate_digits(outer)
    index = digits @ index_matrix(outer)
    a_out = digits @ il.coef_vector(outer)
    w_out = digits @ wl.coef_vector(outer)
    c_out = digits @ ol.coef_vector(outer)
    red = [i for i, lp in enumerate(outer) if lp.dim in RED_DIMS]
    first = ~np.any(digits[:, red] != 0, axis=1) if red else np.ones(len(digits), bool)
    inside = np.all(index < valid, axis=1)
    packed = [i for i, lp in enumerate(outer) if lp is nest.packed_loop]
    p = nest.pixels_per_row
    ops, records, block_macs, array_rows = [], [], 0, 0
    for o in np.flatnonzero(inside):
        idx = index[o]
        scols = 1
        if packed:  # this group's kernel columns: p, fewer at the loop's or the layer's end
            scols = int(min(p, nest.packed_trip - digits[o, packed[0]] * p, valid[S] - idx[S]))
        ccols = int(min(nest.cs, valid[C] - idx[C])) * scols
        kcols = int(min(nest.ks, valid[K] - idx[K]))
        limit = tuple(int(valid[d] - idx[d]) for d in PIXEL_DIMS)
        for j, (a_off, c_off, rows, stride, pixels) in enumerate(chunks.get(limit)):
            bd = operand(ccols, kcols, int(w_out[o]) if j == 0 else GARBAGE)
            c_rel = int(c_out[o]) + c_off
            rs2_acc = operand(rows, kcols, acc_addr(c_rel, accumulate=True))
            over = first[o] and overwrite_first
            rs2_first = operand(rows, kcols, acc_addr(c_rel)) if over else rs2_acc
            # A config_ex may not split a preload from its compute (Gemmini's execute unit
            # pairs them), so the compute's a_stride is set before the preload.
            ops.append((Funct.PRELOAD, bd, _W_BASE if j == 0 else _NO_BASE,
                        rs2_acc, _C_BASE, rs2_first, _C_BASE, stride if rows > 1 else 0))
            garbage = operand(rows, kcols, GARBAGE)
            d_first = (operand(rows, kcols, c_rel), _R_BASE) if first[o] and residual_d \
                else (garbage, _NO_BASE)
            ops.append((Funct.COMPUTE_PRELOADED if j == 0 else Funct.COMPUTE_ACCUMULATED,
                        operand(rows, ccols, int(a_out[o]) + a_off), _A_BASE,
                        garbage, _NO_BASE, *d_first, 0))
            pix = pixels + idx[list(PIXEL_DIMS)]
            records.append(ComputeRecord(idx.copy(), pix, ccols, kcols, scols))
            block_macs += rows * ccols * kcols
            array_rows += rows
    return Template(ops, records, block_macs, array_rows)


# --------------------------------------------------------------------------- output rows
@dataclasses.dataclass
class OutputRuns:
    """Accumulator-tile rows grouped into moves of consecutive rows (one DRAM stride)."""

    acc: list[int]
    elem: list[int]  # output element offset of each move's first row, tile-relative
    cols: list[int]
    rows: list[int]
    elem_stride: int  # output elements between consecutive rows of a move
    # The bias moves: rows grouped by output channel (a bias row is one channel vector).
    bias_acc: list[int]
    bias_k: list[int]  # output channel of each bias move's first row, tile-relative
    bias_cols: list[int]
    bias_rows: list[int]
    k_stride: int  # output channels between consecutive rows of a bias move


def output_runs(nest: Nest, valid: np.ndarray, ol: TileLayout) -> OutputRuns:
    lay = nest.layer
    gk = lay.groups * lay.K
    elem_per = {N: lay.P * lay.Q * gk, P: lay.Q * gk, Q: gk, K: 1}
    loops = [lp for lp in nest.inner_loops if lp.dim in O_DIMS]
    digits = enumerate_digits(loops)
    index = digits @ index_matrix(loops)
    acc = digits @ ol.coef_vector(loops)
    elem = sum(index[:, d] * elem_per[d] for d in O_DIMS)
    ok = np.all(index[:, list(O_DIMS)] < valid[list(O_DIMS)], axis=1)
    cols = np.minimum(nest.ks, valid[K] - index[:, K])
    if loops:
        inner = loops[-1]
        elem_stride = inner.coef * elem_per[inner.dim]
        k_stride = inner.coef if inner.dim == K else 0
    else:
        elem_stride, k_stride = gk, 0
    kind = ok.astype(np.int64)
    sp, first, _, cols_r, rows = runs(acc, elem, kind, cols, elem_stride, nest.dim)
    b_sp, b_k, _, b_cols, b_rows = runs(acc, index[:, K], kind, cols, k_stride, nest.dim)
    return OutputRuns(sp.tolist(), first.tolist(), cols_r.tolist(), rows.tolist(),
                      int(elem_stride), b_sp.tolist(), b_k.tolist(), b_cols.tolist(),
                      b_rows.tolist(), int(k_stride))


# --------------------------------------------------------------------------- the lowering
@dataclasses.dataclass
class StepRecord:
    """One accumulator-tile step as emitted (for the coverage check)."""

    group: int
    origin: np.ndarray  # [7] global index of the tile's first element
    template: Template


@dataclasses.dataclass
class WSResult:
    emitter: Emitter
    alloc: Allocation
    steps: list[StepRecord]
    weight_tile_loads: int
    input_tile_loads: int
    output_tile_visits: int
    partial_spills: int


def needs_partial(nest: Nest) -> bool:
    """Whether some accumulator tile is left before its reduction is done (partial sums spill).

    The tile sequence is the nest's: a tile is revisited when a reduction loop sits outside a
    loop over an output dim among the scratchpad and DRAM loops.
    """
    seen_out = False
    for lp in reversed(nest.loops[DRAM] + nest.loops[SP]):
        if lp.dim in O_DIMS:
            seen_out = True
        elif lp.dim in RED_DIMS and seen_out:
            return True
    return False


def lower_ws(nest: Nest, params: IsaParams, layout: DramLayout, epi: Epilogue,
             max_instructions: int | None = None) -> WSResult:
    """Emit the whole weight-stationary program of ``nest.layer`` (see the module docstring);
    `ProgramTooLongError` as soon as it would pass `max_instructions` (None: no cap)."""
    lay, dim = nest.layer, nest.dim
    steps = lay.groups * math.prod(lp.trip for lp in nest.loops[DRAM] + nest.loops[SP])
    if max_instructions is not None and steps > max_instructions:
        raise ProgramTooLongError(f"the program has {steps} tile steps, each at least one "
                                  f"instruction: more than {max_instructions}")
    # An accumulating residual mvin must not meet the execute unit's accumulating writes.
    alloc, il, wl, ol = allocate(nest, params, residual_in_sp=epi.bias and epi.residual)
    if nest.pixels_per_row > 1 and _straddles_half(alloc["input"], il.rows, params.sp_rows):
        return lower_ws(nest.unpacked(), params, layout, epi, max_instructions)
    residual_d = any(r.name == "residual" for r in alloc.regions)
    em = Emitter(params, max_instructions)
    act = epi.act
    # config_ex's activation is the execute path's (results into the scratchpad): relu only.
    em.config_ex(act=Activation.RELU if epi.relu else Activation.NONE)
    if epi.gelu is not None:
        em.config_norm(*epi.gelu)

    gc, gk = lay.groups * lay.C, lay.groups * lay.K
    x, w, out = layout["input"], layout["weight"], layout["output"]
    bias = layout["bias"] if epi.bias else None
    resid = layout["residual"] if epi.residual else None
    part = layout.get("partial")
    out_bytes = out.itemsize

    outer = (nest.loops[DRAM], nest.loops[SP])
    d3, d2 = enumerate_digits(outer[0]), enumerate_digits(outer[1])
    off3 = d3 @ index_matrix(outer[0])
    off2 = d2 @ index_matrix(outer[1])
    a2 = (d2 @ il.coef_vector(outer[1])).tolist()
    w2 = (d2 @ wl.coef_vector(outer[1])).tolist()
    ext1, ext2, dims = nest.ext[ACC], nest.ext[SP], nest.dims
    red_total = nest.red_steps()

    templates: dict[tuple, Template] = {}
    oruns: dict[tuple, OutputRuns] = {}
    chunks = _StreamChunks(nest, il, ol)
    steps: list[StepRecord] = []
    counts = {"w": 0, "i": 0, "o": 0, "spill": 0}
    slot = {"w": -1, "i": -1, "o": -1}
    cur = {"w": None, "i": None, "o": None}
    o_state: dict = {}
    visits: dict[tuple, int] = {}

    # Tile loads are planned once per tile shape (and, for inputs, per pattern of padding
    # rows) relative to the tile's DRAM origin and slot, then replayed with those bases.
    plans: dict[tuple, list] = {}

    def replay_plan(ld_id: int, plan: list, dram_base: int, local_base: int) -> None:
        zeros = layout["zeros"].offset_bytes
        for d_, s_, n_, c_ in plan:
            em.mvin(ld_id, zeros if d_ is None else dram_base + d_, local_base + s_, n_, c_, 1)

    def weight_plan(v: np.ndarray) -> list:
        key = ("w", *v.tolist())
        if key in plans:
            return plans[key]
        r2, s2, c2 = ext2[R], ext2[S], ext2[C]
        rr, ss, cc = np.meshgrid(np.arange(v[R]), np.arange(v[S]), np.arange(v[C]),
                                 indexing="ij")
        rr, ss, cc = rr.ravel(), ss.ravel(), cc.ravel()
        sp = (rr * s2 + ss) * c2 + cc
        dram = ((rr * lay.S + ss) * lay.C + cc) * lay.K
        ones = np.ones_like(sp)
        spr, dr, _, _, rows = runs(sp, dram, ones, ones, lay.K, dim)
        kblocks = -(-int(v[K]) // nest.ks)
        per_mvin = params.max_block_len if nest.ks == dim else 1
        plan = []
        for kb in range(0, kblocks, per_mvin):
            cols = int(min(per_mvin * nest.ks, v[K] - kb * nest.ks))
            shift = kb * (r2 * s2 * c2)
            plan += [(d_ + kb * nest.ks, shift + s_, n_, cols)
                     for s_, d_, n_ in zip(spr.tolist(), dr.tolist(), rows.tolist())]
        plans[key] = plan
        return plan

    def load_weights(g: int, o3: np.ndarray, base: int) -> None:
        v = np.clip(dims - o3, 0, ext2)
        em.config_ld(1, lay.K, block_stride=int(wl.rows // (ext2[K] // nest.ks)))
        origin = w.address(g, int(o3[R]), int(o3[S]), int(o3[C]), int(o3[K]))
        replay_plan(1, weight_plan(v), origin, base)

    h_in, w_in = input_hw(lay)
    uh, uw = lay.upsample
    hz_total, wz_total = (h_in - 1) * uh + 1, (w_in - 1) * uw + 1

    def window_plan(v: np.ndarray, h0: int, w0: int) -> list:
        geo = window_geometry(nest)
        hneed = int((v[P] - 1) * lay.Hstride + (v[R] - 1) * lay.Hdilation + 1)
        wneed = int((v[Q] - 1) * lay.Wstride + (v[S] - 1) * lay.Wdilation + 1)
        clip = (min(hneed, max(0, -h0)), min(hneed, max(0, h0 + hneed - hz_total)),
                min(wneed, max(0, -w0)), min(wneed, max(0, w0 + wneed - wz_total)))
        key = ("i", *v.tolist(), h0 % uh, w0 % uw, *clip)
        if key in plans:
            return plans[key]
        nn, hh, ww = np.meshgrid(np.arange(v[N]), np.arange(hneed), np.arange(wneed),
                                 indexing="ij")
        nn, hh, ww = nn.ravel(), hh.ravel(), ww.ravel()
        sp = (nn * geo.span_h + hh) * geo.span_w + ww
        hr, wr = h0 % uh + hh, w0 % uw + ww  # rows relative to the tile's origin pixel
        real = ((hh >= clip[0]) & (hh < hneed - clip[1]) & (hr % uh == 0)
                & (ww >= clip[2]) & (ww < wneed - clip[3]) & (wr % uw == 0))
        kind = np.where(real, 1, 2)
        dram = ((nn * h_in + hr // uh) * w_in + wr // uw) * gc
        ones = np.ones_like(sp)
        spr, dr, kd, _, rows = runs(sp, dram, kind, ones, gc, dim)
        block_stride = geo.n * geo.span_h * geo.span_w
        cblocks = -(-int(v[C]) // nest.cs)
        per_mvin = params.max_block_len if nest.cs == dim else 1
        plan = []
        for cb in range(0, cblocks, per_mvin):
            cols = int(min(per_mvin * nest.cs, v[C] - cb * nest.cs))
            shift = cb * block_stride
            plan += [(d_ + cb * nest.cs if k_ == 1 else None, shift + s_, n_, cols)
                     for s_, d_, k_, n_ in zip(spr.tolist(), dr.tolist(), kd.tolist(),
                                               rows.tolist())]
        plans[key] = plan
        return plan

    blocked_loops = [lp for l in (SP, ACC, REG) for lp in nest.loops[l]
                     if lp.dim in (N, P, Q, C)]
    blocked_per = {N: h_in * w_in * gc, P: w_in * gc, Q: gc, C: 1}
    blocked_stride = (blocked_loops[-1].coef * blocked_per[blocked_loops[-1].dim]
                      if blocked_loops else gc)

    def blocked_plan(v: np.ndarray) -> list:
        key = ("b", *v.tolist())
        if key in plans:
            return plans[key]
        digits = enumerate_digits(blocked_loops)
        index = digits @ index_matrix(blocked_loops)
        sp = digits @ il.coef_vector(blocked_loops)
        ok = np.all(index[:, [N, P, Q, C]] < v[[N, P, Q, C]], axis=1)
        cols = np.minimum(nest.cs, v[C] - index[:, C])
        dram = sum(index[:, d] * blocked_per[d] for d in (N, P, Q, C))
        spr, dr, _, cr, rows = runs(sp, dram, ok.astype(np.int64), cols, blocked_stride, dim)
        plans[key] = list(zip(dr.tolist(), spr.tolist(), rows.tolist(), cr.tolist()))
        return plans[key]

    def load_inputs(g: int, o3: np.ndarray, base: int) -> None:
        v = np.clip(dims - o3, 0, ext2)
        if nest.window:
            geo = window_geometry(nest)
            h0 = int(o3[P] * lay.Hstride + o3[R] * lay.Hdilation - lay.pads[0])
            w0 = int(o3[Q] * lay.Wstride + o3[S] * lay.Wdilation - lay.pads[1])
            em.config_ld(0, gc, block_stride=geo.n * geo.span_h * geo.span_w,
                         pixel_repeats=nest.pixels_per_row)
            origin = x.offset_bytes + ((int(o3[N]) * h_in + h0 // uh) * w_in + w0 // uw) * gc \
                + g * lay.C + int(o3[C])
            replay_plan(0, window_plan(v, h0, w0), origin, base)
            return
        em.config_ld(0, int(blocked_stride))
        origin = x.address(int(o3[N]), int(o3[P]), int(o3[Q]), g * lay.C + int(o3[C]))
        replay_plan(0, blocked_plan(v), origin, base)

    def o_runs(valid: np.ndarray) -> OutputRuns:
        key = tuple(valid.tolist())
        if key not in oruns:
            oruns[key] = output_runs(nest, valid, ol)
        return oruns[key]

    def out_elem(g: int, origin: np.ndarray) -> int:
        return int(((origin[N] * lay.P + origin[P]) * lay.Q + origin[Q]) * gk
                   + g * lay.K + origin[K])

    def init_tile(g: int, origin: np.ndarray, valid: np.ndarray, base: int,
                  fresh: bool) -> None:
        rr = o_runs(valid)
        e0 = out_elem(g, origin)
        if not fresh:
            # The load and store queues do not order DRAM accesses: wait for the spill.
            em.fence()
            em.config_ld(2, rr.elem_stride * 4)
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvin(2, part.offset_bytes + (e0 + e_) * 4, acc_addr(base + a_), n_, c_, 4)
            return
        if epi.bias:
            em.config_ld(2, rr.k_stride * 4)
            k0 = g * lay.K + int(origin[K])
            for a_, k_, c_, n_ in zip(rr.bias_acc, rr.bias_k, rr.bias_cols, rr.bias_rows):
                em.mvin(2, bias.offset_bytes + (k0 + k_) * 4, acc_addr(base + a_), n_, c_, 4)
        if residual_d:
            em.config_ld(2, rr.elem_stride)
            r_base = alloc["residual"].slot_row(slot["o"])
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvin(2, resid.offset_bytes + (e0 + e_), r_base + a_, n_, c_, 1)
        elif epi.residual:
            # Accumulating (after the bias): fenced off from every compute on either side.
            if epi.bias:
                em.fence()
            em.config_ld(2, rr.elem_stride, shrunk=True)
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvin(2, resid.offset_bytes + (e0 + e_),
                        acc_addr(base + a_, accumulate=epi.bias), n_, c_, 1)
            if epi.bias:
                em.fence()

    def write_tile(g: int, origin: np.ndarray, valid: np.ndarray, base: int,
                   final: bool) -> None:
        rr = o_runs(valid)
        e0 = out_elem(g, origin)
        if final:
            em.config_st(rr.elem_stride * out_bytes, act=act, acc_scale=epi.acc_scale)
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvout(out.offset_bytes + (e0 + e_) * out_bytes,
                         acc_addr(base + a_, full=epi.full_output), n_, c_, out_bytes)
        else:
            counts["spill"] += 1
            em.config_st(rr.elem_stride * 4, act=act, acc_scale=epi.acc_scale)
            for a_, e_, c_, n_ in zip(rr.acc, rr.elem, rr.cols, rr.rows):
                em.mvout(part.offset_bytes + (e0 + e_) * 4, acc_addr(base + a_, full=True),
                         n_, c_, 4)

    def leave_output() -> None:
        if cur["o"] is None:
            return
        g, origin, valid, base = o_state["tile"]
        write_tile(g, origin, valid, base, final=visits[cur["o"]] == red_total)
        cur["o"] = None

    wreg, ireg, oreg = alloc["weight"], alloc["input"], alloc["output"]
    for g in range(lay.groups):
        for i3 in range(len(d3)):
            o3 = off3[i3]
            wkey = (g, *o3[list(W_DIMS)].tolist())
            ikey = (g, *o3[list(I_DIMS)].tolist())
            for i2 in range(len(d2)):
                origin = o3 + off2[i2]
                valid = np.clip(dims - origin, 0, ext1)
                if np.any(valid[list(O_DIMS)] == 0):
                    continue
                if cur["w"] != wkey:
                    slot["w"] = (slot["w"] + 1) % wreg.slots
                    load_weights(g, o3, wreg.slot_row(slot["w"]))
                    cur["w"] = wkey
                    counts["w"] += 1
                if cur["i"] != ikey:
                    slot["i"] = (slot["i"] + 1) % ireg.slots
                    load_inputs(g, o3, ireg.slot_row(slot["i"]))
                    cur["i"] = ikey
                    counts["i"] += 1
                okey = (g, *origin[list(O_DIMS)].tolist())
                if cur["o"] != okey:
                    leave_output()
                    slot["o"] = (slot["o"] + 1) % oreg.slots
                    base = oreg.slot_row(slot["o"])
                    fresh = visits.get(okey, 0) == 0
                    init_tile(g, origin, valid, base, fresh)
                    o_state["tile"] = (g, origin, valid, base)
                    o_state["first"] = fresh
                    cur["o"] = okey
                    counts["o"] += 1
                else:
                    o_state["first"] = False
                visits[okey] = visits.get(okey, 0) + 1
                tkey = tuple(valid.tolist())
                tmpl = templates.get(tkey)
                if tmpl is None:
                    tmpl = templates[tkey] = build_template(
                        nest, valid, il, wl, ol, chunks, overwrite_first=not epi.init,
                        residual_d=residual_d)
                bases = (0, ireg.slot_row(slot["i"]) + a2[i2], wreg.slot_row(slot["w"]) + w2[i2],
                         o_state["tile"][3],
                         alloc["residual"].slot_row(slot["o"]) if residual_d else 0)
                _replay(em, tmpl, bases, o_state["first"])
                em.check_length()
                steps.append(StepRecord(g, origin, tmpl))
    leave_output()
    em.fence()
    return WSResult(em, alloc, steps, counts["w"], counts["i"], counts["o"], counts["spill"])


def _straddles_half(region: BufferRegion, tile_rows: int, sp_rows: int) -> bool:
    """Whether some input tile crosses the middle of the scratchpad, where pixel repeats stop
    (a row in the upper half does not write below it: ``PixelRepeater.scala`` ~60-68)."""
    half = sp_rows // 2
    return any(region.slot_row(k) < half < region.slot_row(k) + tile_rows
               for k in range(region.slots))


def _replay(em: Emitter, tmpl: Template, bases: tuple, first: bool) -> None:
    out = em.out
    for funct, rs1, b1, rs2, b2, rs2_first, b2_first, stride in tmpl.ops:
        if stride and stride != em.a_stride:
            em.set_a_stride(stride)
        if first:
            rs2, b2 = rs2_first, b2_first
        out.append(new_instruction(funct, rs1 + bases[b1], rs2 + bases[b2]))
    em.computes += len(tmpl.records)
    em.preloads += len(tmpl.records)
    em.block_macs += tmpl.block_macs
    em.array_macs += tmpl.array_rows * em.params.dim * em.params.dim


__all__ = ["Allocation", "BufferRegion", "Epilogue", "StepRecord", "WSResult", "allocate",
           "lower_ws", "needs_partial"]
