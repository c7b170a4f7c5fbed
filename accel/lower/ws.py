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

The tile walk (`lower_ws`) decides when each tile moves; how (the load plans, an output tile's
init and write-back moves) is `accel.lower.tile_moves`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from accel.isa import Activation, Funct, IsaParams
from accel.lower.emit import GARBAGE, Emitter, acc_addr, new_instruction, operand
from accel.lower.layout import DramLayout
from accel.lower.nest import (
    ACC,
    DRAM,
    I_DIMS,
    O_DIMS,
    PIXEL_DIMS,
    RED_DIMS,
    SP,
    W_DIMS,
    C,
    K,
    Nest,
    S,
    TileLayout,
    enumerate_digits,
    index_matrix,
    input_layout,
    output_layout,
    weight_layout,
)
from accel.lower.tile_moves import OutputMoves, TileLoads
from accel.lower.tile_moves import OutputRuns, output_runs  # noqa: F401 - importable here
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
    lay = nest.layer
    steps = lay.groups * math.prod(lp.trip for lp in nest.loops[DRAM] + nest.loops[SP])
    if max_instructions is not None and steps > max_instructions:
        raise ProgramTooLongError(f"the program has {steps} tile steps, each at least one "
                                  f"instruction: more than {max_instructions}")
    # An accumulating residual mvin must not meet the execute unit's accumulating writes.
    alloc, il, wl, ol = allocate(nest, params, residual_in_sp=epi.bias and epi.residual)
    if nest.pixels_per_row > 1 and _straddles_half(alloc["input"], il.rows, params.sp_rows):
        return lower_ws(nest.unpacked(), params, layout, epi, max_instructions)
    em = Emitter(params, max_instructions)
    # config_ex's activation is the execute path's (results into the scratchpad): relu only.
    em.config_ex(act=Activation.RELU if epi.relu else Activation.NONE)
    if epi.gelu is not None:
        em.config_norm(*epi.gelu)
    walk = _TileWalk(nest, params, layout, epi, alloc, (il, wl, ol), em)
    walk.run()
    em.fence()
    counts = walk.counts
    return WSResult(em, alloc, walk.steps, counts["w"], counts["i"], counts["o"],
                    walk.outputs.spills)


class _TileWalk:
    """The tile walk of `lower_ws`: groups, then the DRAM and scratchpad loops' iterations, each
    an accumulator tile step. A step loads the weight and input tiles that changed into their
    next slots (`TileLoads`), moves to its output tile (writing back the one it leaves and
    initializing the new one: `OutputMoves`), and replays the tile shape's `Template`."""

    def __init__(self, nest: Nest, params: IsaParams, layout: DramLayout, epi: Epilogue,
                 alloc: Allocation, layouts: tuple[TileLayout, TileLayout, TileLayout],
                 em: Emitter) -> None:
        il, wl, ol = layouts
        self.nest, self.epi, self.alloc, self.layouts, self.em = nest, epi, alloc, layouts, em
        self.residual_d = any(r.name == "residual" for r in alloc.regions)
        self.loads = TileLoads(nest, params, layout, il, wl, em)
        self.outputs = OutputMoves(nest, layout, epi, ol, em,
                                   alloc["residual"] if self.residual_d else None)
        self.regions = {"w": alloc["weight"], "i": alloc["input"], "o": alloc["output"]}
        self.chunks = _StreamChunks(nest, il, ol)
        self.red_total = nest.red_steps()
        self.templates: dict[tuple, Template] = {}
        self.steps: list[StepRecord] = []
        self.counts = {"w": 0, "i": 0, "o": 0}
        self.slot = {"w": -1, "i": -1, "o": -1}
        self.cur: dict[str, tuple | None] = {"w": None, "i": None, "o": None}
        self.visits: dict[tuple, int] = {}
        self.tile: tuple | None = None  # the resident output tile: (g, origin, valid, base)
        self.first = False  # whether this step is the first of the tile's first visit

    def run(self) -> None:
        """Every step of the program, then the last output tile's write-back."""
        nest, lay = self.nest, self.nest.layer
        il, wl, _ = self.layouts
        outer = (nest.loops[DRAM], nest.loops[SP])
        d3, d2 = enumerate_digits(outer[0]), enumerate_digits(outer[1])
        off3 = d3 @ index_matrix(outer[0])
        off2 = d2 @ index_matrix(outer[1])
        a2 = (d2 @ il.coef_vector(outer[1])).tolist()
        w2 = (d2 @ wl.coef_vector(outer[1])).tolist()
        ext1, dims = nest.ext[ACC], nest.dims
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
                    self._load("w", wkey, self.loads.load_weights, g, o3)
                    self._load("i", ikey, self.loads.load_inputs, g, o3)
                    self._visit_output(g, origin, valid)
                    self._compute(g, origin, valid, a2[i2], w2[i2])
        self._leave_output()

    def _load(self, kind: str, key: tuple, load: Callable[[int, np.ndarray, int], None],
              g: int, o3: np.ndarray) -> None:
        """Load the ``kind`` tile (``"w"`` or ``"i"``) into its next slot if it changed."""
        if self.cur[kind] == key:
            return
        self.slot[kind] = (self.slot[kind] + 1) % self.regions[kind].slots
        load(g, o3, self.regions[kind].slot_row(self.slot[kind]))
        self.cur[kind] = key
        self.counts[kind] += 1

    def _visit_output(self, g: int, origin: np.ndarray, valid: np.ndarray) -> None:
        """Make the output tile at ``origin`` resident, leaving the previous one."""
        okey = (g, *origin[list(O_DIMS)].tolist())
        if self.cur["o"] != okey:
            self._leave_output()
            self.slot["o"] = (self.slot["o"] + 1) % self.regions["o"].slots
            base = self.regions["o"].slot_row(self.slot["o"])
            fresh = self.visits.get(okey, 0) == 0
            self.outputs.init(g, origin, valid, base, fresh, self.slot["o"])
            self.tile = (g, origin, valid, base)
            self.first = fresh
            self.cur["o"] = okey
            self.counts["o"] += 1
        else:
            self.first = False
        self.visits[okey] = self.visits.get(okey, 0) + 1

    def _leave_output(self) -> None:
        if self.cur["o"] is None:
            return
        g, origin, valid, base = self.tile
        self.outputs.write(g, origin, valid, base,
                           final=self.visits[self.cur["o"]] == self.red_total)
        self.cur["o"] = None

    def _compute(self, g: int, origin: np.ndarray, valid: np.ndarray, a_off: int,
                 w_off: int) -> None:
        """The step's computes: its tile shape's template at the slots' bases."""
        tkey = tuple(valid.tolist())
        tmpl = self.templates.get(tkey)
        if tmpl is None:
            tmpl = self.templates[tkey] = build_template(
                self.nest, valid, *self.layouts, self.chunks, overwrite_first=not self.epi.init,
                residual_d=self.residual_d)
        bases = (0, self.regions["i"].slot_row(self.slot["i"]) + a_off,
                 self.regions["w"].slot_row(self.slot["w"]) + w_off, self.tile[3],
                 self.alloc["residual"].slot_row(self.slot["o"]) if self.residual_d else 0)
        _replay(self.em, tmpl, bases, self.first)
        self.em.check_length()
        self.steps.append(StepRecord(g, origin, tmpl))


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
