"""`lower_gemm_chain`: E = (A x B) x D as one trace whose intermediate C never leaves the chip.

Chimera-style fusion on the weight-stationary array. A is M x K, B is K x L, D is L x N and E
is M x N (per batch). For each batch, each m tile and (order ``"mnlk"``) each n tile, for each
l tile:

1. for each k tile: mvin the A and B tiles, preload each DIM x DIM block of B and stream the A
   rows through it into the C tile's accumulator rows (its first k block overwrites, the rest
   accumulate);
2. ``mvout_spad`` moves the C tile into the scratchpad, requantized with the first layer's
   scale and activation: the int8 values an mvout would have stored to DRAM;
3. for each n tile (all of N with ``"mlkn"``, the current one with ``"mnlk"``): mvin the D
   tile, preload its blocks and stream the C rows through them into E's accumulator rows (the
   first l block overwrites, the rest accumulate).

A tile that covers the whole of what varies under it is loaded once and stays: A's when K is
one k tile; B's (D's) across m tiles when K and L (L and N) are one tile each, and across the
batch too when the weights are shared. After the last l tile, E's rows go to DRAM by mvout
with the second layer's scale and activation. So the trace reads A, B and D (and the
epilogues' operands) and writes E, and nothing else. ``"mlkn"`` keeps E
resident for all of N and computes each C tile once; ``"mnlk"`` keeps one n tile of E and
recomputes C per n tile (less accumulator, more A and B traffic).

Epilogues, as `accel.lower.ws` applies a layer's: a GEMM's bias (int32, one row repeated by a
zero DRAM stride) is mvin3'd into a C or E tile's accumulator rows before its first compute,
and the second GEMM's residual ("add", int8, ``shrunk``) on top, with the accumulate bit; the
first compute into those rows then accumulates. relu or I-GELU is applied by the requantizing
move (one config_norm holds the I-GELU constants for both GEMMs). The first GEMM takes no
residual: its output is the intermediate no other layer may feed.

Softmax (attention's QK^T -> softmax -> AV): the first GEMM may end in ``"softmax"`` over its
output rows (L), applied by the normalizer as Gemmini's software drives it, row by row: a pass
of moves with the MAX command (the row's maximum), one with SUM_EXP, the last block
INV_SUM_EXP (sum of i-exp(x - max), then 127 / sum), and the requantizing pass with the
softmax activation, ``127 i-exp(x - max) / sum`` in int8 (`accel.sim.reference.softmax_rows`).
The first two passes write nothing. A row must be whole in the accumulator, so the l tile is
all of L, and the C tile moves one row per instruction (three per row and DIM block). The
softmax shares the I-GELU registers, so a chain applies one of the two. A scale before the
softmax (1/sqrt(d)) is part of its input scale (`accel.lower.ws.SOFTMAX_INPUT_SCALE`), a mask
added before it is the first GEMM's bias.

Local layouts, rows DIM elements wide (a tile's blocks of DIM columns are stacked): A tile row
``kb * tm + m``, B ``lb * tk + k``, C (scratchpad and accumulator) ``lb * tm + m``, D
``nb * tl + l``, E (accumulator) ``nb * tm + m``. Edge tiles use partial rows and columns, as
`accel.lower.ws` does for GEMMs: moves and computes name only the valid block.

>>> from accel.arch import HardwareConfig
>>> hw = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2)
>>> low = lower_gemm_chain(Layer.gemm(M=8, K_red=6, N_out=5), Layer.gemm(M=8, K_red=5, N_out=3),
...                        hw)
>>> low.dram_read_bytes, low.dram_write_bytes
({'A': 48, 'B': 30, 'D': 15}, {'E': 24})
>>> low = lower_gemm_chain(Layer.gemm(M=8, K_red=6, N_out=5, epilogue=("bias", "relu")),
...                        Layer.gemm(M=8, K_red=5, N_out=3, epilogue=("bias", "add")), hw)
>>> low.dram_read_bytes  # a bias row per accumulator row (int32), the residual once
{'bias_E': 96, 'residual': 24, 'bias_C': 160, 'A': 48, 'B': 30, 'D': 15}
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

from accel.arch import HardwareConfig
from accel.isa import Activation, Funct, IsaParams, NormCmd
from accel.lower.core import parse_epilogue
from accel.lower.emit import GARBAGE, Emitter, acc_addr, new_instruction, operand
from accel.lower.layout import ALIGN_BYTES, DramLayout, TensorLayout
from accel.lower.ws import Allocation, BufferRegion, Epilogue, iexp_constants
from accel.trace import Trace
from workloads.errors import ConfigError, InfeasibleError, UnsupportedOpError
from workloads.layer import Layer

ORDERS = ("mlkn", "mnlk")
TILE_DIMS = ("m", "k", "l", "n")
_SHRINK_ORDER = ("k", "n", "l", "m")  # ties shrink reduction and n tiles before m (reuse)


@dataclasses.dataclass(frozen=True)
class LoweredChain:
    """A lowered GEMM chain: its trace, where A, B, D and E live, and the DRAM bytes the trace
    reads and writes per tensor (counted from its mvin / mvout instructions)."""

    trace: Trace
    layout: DramLayout
    alloc: Allocation
    tiles: dict[str, int]
    order: str
    first: Layer
    second: Layer
    hw: HardwareConfig
    epilogues: tuple[Epilogue, Epilogue]
    batched_weights: bool
    dram_read_bytes: dict[str, int]
    dram_write_bytes: dict[str, int]

    @property
    def params(self) -> IsaParams:
        return IsaParams.from_hardware(self.hw)

    @property
    def acc_scales(self) -> tuple[float, float]:
        return self.epilogues[0].acc_scale, self.epilogues[1].acc_scale

    @property
    def instructions(self) -> dict[str, int]:
        return dict(collections.Counter(ins.mnemonic for ins in self.trace))


def _name(layer: Layer) -> str:
    return repr(layer.name) if layer.name else (
        f"gemm(M={layer.P}, K={layer.C}, N={layer.K}, batch={layer.N})")


def chain_dims(first: Layer, second: Layer) -> tuple[int, int, int, int, int]:
    """``(batch, M, K, L, N)`` of the chain, or `ConfigError` if the layers do not chain."""
    where = f"gemm chain {_name(first)} -> {_name(second)}"
    for layer in (first, second):
        if layer.kind not in ("gemm", "gemv") or layer.groups != 1:
            raise ConfigError(f"{where}: {_name(layer)} is a {layer.kind} with "
                              f"{layer.groups} group(s); a chain fuses two ungrouped GEMMs")
    if (second.N, second.P, second.C) != (first.N, first.P, first.K):
        raise ConfigError(
            f"{where}: the second GEMM must read the first one's output: expected batch "
            f"{first.N}, M={first.P}, K_red={first.K}; got batch {second.N}, M={second.P}, "
            f"K_red={second.C}")
    return first.N, first.P, first.C, first.K, second.K


def chain_epilogues(first: Layer, second: Layer, acc_scales: tuple[float, float] = (1.0, 1.0)
                    ) -> tuple[Epilogue, Epilogue]:
    """The two GEMMs' epilogues as the fused trace applies them (module docstring);
    `UnsupportedOpError` names the layer whose epilogue it cannot apply."""
    out = []
    for position, (layer, scale) in enumerate(zip((first, second), acc_scales)):
        ops = tuple(layer.epilogue)
        softmax = position == 0 and ops[-1:] == ("softmax",)
        try:
            epi = parse_epilogue(ops[:-1] if softmax else ops, acc_scale=scale)
        except UnsupportedOpError as exc:
            raise UnsupportedOpError(f"gemm chain: {_name(layer)}: {exc}") from None
        if epi.residual and position == 0:
            raise UnsupportedOpError(
                f"gemm chain: {_name(layer)} has epilogue {ops}; the first GEMM's output is the "
                "intermediate, which takes no residual: lower the layers apart")
        if softmax:
            if epi.act != Activation.NONE:
                raise UnsupportedOpError(
                    f"gemm chain: {_name(layer)} has epilogue {ops}; the softmax reads the "
                    "accumulator, so only a bias may come before it")
            epi = dataclasses.replace(epi, softmax=iexp_constants())
        out.append(epi)
    if out[0].softmax and out[1].gelu:
        raise UnsupportedOpError(
            f"gemm chain {_name(first)} -> {_name(second)}: softmax and I-GELU share the "
            "normalizer's constant registers; lower the layers apart")
    return out[0], out[1]


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def footprint(tiles: dict[str, int], n_extent: int, order: str, dim: int
              ) -> tuple[dict[str, int], dict[str, int]]:
    """Scratchpad and accumulator rows of each buffer, for tiles in DIM multiples."""
    tm, tk, tl, tn = (tiles[d] for d in TILE_DIMS)
    e_cols = _round_up(n_extent, dim) if order == "mlkn" else tn
    sp = {"A": tk // dim * tm, "B": tl // dim * tk, "C": tl // dim * tm, "D": tn // dim * tl}
    acc = {"C": tl // dim * tm, "E": e_cols // dim * tm}
    return sp, acc


def choose_tiles(first: Layer, second: Layer, params: IsaParams, order: str = "mlkn",
                 tiles: dict[str, int] | None = None, whole_l: bool = False
                 ) -> dict[str, int]:
    """Tiles (DIM multiples, at most each dimension rounded up to DIM) that fit the memories.

    Given tiles are kept (cut to their dimension); the others start at their whole dimension
    and the largest one the overflowing memory holds is halved until the buffers fit
    (``whole_l``, as a softmax needs: never the l tile).
    `InfeasibleError` names the layers, the rows needed and the rows available when nothing
    fits.
    """
    _, m, k, l_, n = chain_dims(first, second)
    dim = params.dim
    full = {"m": _round_up(m, dim), "k": _round_up(k, dim), "l": _round_up(l_, dim),
            "n": _round_up(n, dim)}
    given = dict(tiles or {})
    for name, value in given.items():
        if name not in TILE_DIMS:
            raise ConfigError(f"gemm chain tiles: unknown dimension {name!r}; use "
                              f"{', '.join(TILE_DIMS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < dim or value % dim:
            raise ConfigError(f"gemm chain tiles: {name}={value!r} must be a positive multiple "
                              f"of DIM={dim}")
    t = {d: min(given.get(d, full[d]), full[d]) for d in TILE_DIMS}
    if whole_l and t["l"] < full["l"]:
        raise InfeasibleError(f"gemm chain {_name(first)} -> {_name(second)}: the softmax "
                              f"needs whole rows of C, but the l tile is {t['l']} < "
                              f"{full['l']}")

    def fits() -> tuple[bool, dict, dict]:
        sp, acc = footprint(t, n, order, dim)
        return (sum(sp.values()) <= params.sp_rows and sum(acc.values()) <= params.acc_rows,
                sp, acc)

    acc_dims = ("l", "m", "n") if order == "mnlk" else ("l", "m")
    ok, sp, acc = fits()
    while not ok:
        # Shrink only tiles of the memory that overflows (the accumulator holds C and E).
        over_acc = sum(acc.values()) > params.acc_rows
        free = [d for d in _SHRINK_ORDER if d not in given and t[d] > dim
                and (d in acc_dims or not over_acc) and not (whole_l and d == "l")]
        if not free:
            hint = ("pass smaller tiles" if given else "the tiles are already DIM")
            if order == "mlkn":
                hint += "; order='mnlk' keeps only one n tile of E in the accumulator"
            raise InfeasibleError(
                f"gemm chain {_name(first)} -> {_name(second)}: tiles {t} need "
                f"{sum(sp.values())} scratchpad rows {sp} and {sum(acc.values())} accumulator "
                f"rows {acc}, but the hardware has {params.sp_rows} and {params.acc_rows} "
                f"rows of {dim}; {hint}")
        d = max(free, key=lambda x: t[x])
        t[d] = max(dim, _round_up(t[d] // 2, dim))
        ok, sp, acc = fits()
    return t


def chain_layout(batch: int, m: int, k: int, l_: int, n: int, batched_weights: bool,
                 epilogues: tuple[Epilogue, Epilogue] = (Epilogue(), Epilogue())) -> DramLayout:
    """A, B, D (int8), the epilogues' operands and E (int8) packed after a zero region at
    address 0 (Gemmini's DMA reads a NULL source as zeros, so no tensor starts there). B and D
    are per batch with ``batched_weights`` (BMM), else shared by every batch, as a `Layer`
    GEMM's weight is. ``bias_C`` (L) and ``bias_E`` (N) are int32, ``residual`` is E's shape."""
    lead = (batch,) if batched_weights else ()
    first, second = epilogues
    specs = (("zeros", (ALIGN_BYTES,), "int8"), ("A", (batch, m, k), "int8"),
             ("B", (*lead, k, l_), "int8"), ("D", (*lead, l_, n), "int8"),
             *((("bias_C", (l_,), "int32"),) if first.bias else ()),
             *((("bias_E", (n,), "int32"),) if second.bias else ()),
             *((("residual", (batch, m, n), "int8"),) if second.residual else ()),
             ("E", (batch, m, n), "int8"))
    tensors, offset = [], 0
    for name, shape, dtype in specs:
        tensor = TensorLayout(name, offset, shape, dtype)
        tensors.append(tensor)
        offset += _round_up(tensor.nbytes, ALIGN_BYTES)
    return DramLayout(tuple(tensors), offset)


def _tile_matmul(out: list, dim: int, a_base: int, w_base: int, w_stride: int, c_base: int,
                 tm: int, rows: int, red: int, cols: int, overwrite: bool) -> None:
    """C[rows x cols] (+)= A[rows x red] @ W[red x cols] on the array, one weight block at a
    time, its A rows streamed through it in DIM-row computes (`accel.lower.ws`'s pattern).

    A row (rb, m) is at ``a_base + rb * tm + m``, W row (cb, r) at ``w_base + cb * w_stride +
    r``, C row (cb, m) at accumulator ``c_base + cb * tm + m``; ``overwrite`` makes the first
    reduction block overwrite C instead of accumulating.
    """
    for rb in range(-(-red // dim)):
        rc = min(dim, red - rb * dim)
        for cb in range(-(-cols // dim)):
            cc = min(dim, cols - cb * dim)
            w = w_base + cb * w_stride + rb * dim
            for j, m0 in enumerate(range(0, rows, dim)):
                mc = min(dim, rows - m0)
                c = acc_addr(c_base + cb * tm + m0, accumulate=not (overwrite and rb == 0))
                out.append(new_instruction(Funct.PRELOAD, operand(rc, cc, w if j == 0 else GARBAGE),
                                           operand(mc, cc, c)))
                out.append(new_instruction(
                    Funct.COMPUTE_PRELOADED if j == 0 else Funct.COMPUTE_ACCUMULATED,
                    operand(mc, rc, a_base + rb * tm + m0), operand(mc, cc, GARBAGE)))


def softmax_passes(cols: int, dim: int, write_cols: int | None = None
                   ) -> Iterator[tuple[int, NormCmd, int]]:
    """A row's moves through the normalizer, as Gemmini's software issues them: ``(block,
    command, columns)`` per DIM-wide block of each pass, MAX, SUM_EXP (INV_SUM_EXP on the last
    block) over ``cols``, then the written pass (RESET) over ``write_cols`` (default
    ``cols``)."""
    blocks = -(-cols // dim)
    for other, last, span in ((NormCmd.MAX, NormCmd.MAX, cols),
                              (NormCmd.SUM_EXP, NormCmd.INV_SUM_EXP, cols),
                              (NormCmd.RESET, NormCmd.RESET,
                               cols if write_cols is None else write_cols)):
        for nb in range(-(-span // dim)):
            yield nb, last if nb == blocks - 1 else other, min(dim, span - nb * dim)


def _softmax_moves(out: list, dim: int, c_acc: int, c_sp: int, tm: int, rows: int,
                   cols: int) -> None:
    """The C tile's rows through the normalizer into the scratchpad (module docstring): per
    row, each pass moves its blocks one at a time; only the last pass writes."""
    for r in range(rows):
        for nb, cmd, n in softmax_passes(cols, dim):
            out.append(new_instruction(
                Funct.MVOUT_SPAD, acc_addr(c_acc + nb * tm + r, norm=int(cmd)),
                operand(1, n, c_sp + nb * tm + r)))


def _allocation(tiles: dict[str, int], n_extent: int, order: str, params: IsaParams
                ) -> Allocation:
    """The chain's buffers (`footprint`) one after another: A, B, C, D in the scratchpad (B and
    D hold weights), ``C_acc`` and ``E_acc`` in the accumulator, one slot each."""
    sp_rows, acc_rows = footprint(tiles, n_extent, order, params.dim)
    regions, start = [], 0
    for name, rows in sp_rows.items():
        regions.append(BufferRegion(name, "sp", start, rows, 1, weights=name in "BD"))
        start += rows
    sp_used, start = start, 0
    for name, rows in acc_rows.items():
        regions.append(BufferRegion(f"{name}_acc", "acc", start, rows, 1))
        start += rows
    return Allocation(tuple(regions), sp_used, params.sp_rows, start, params.acc_rows)


def lower_gemm_chain(first: Layer, second: Layer, hw: HardwareConfig,
                     tiles: dict[str, int] | None = None, order: str = "mlkn", *,
                     acc_scales: tuple[float, float] = (1.0, 1.0),
                     batched_weights: bool = False) -> LoweredChain:
    """Lower the chain ``E = requant(requant(A @ B + bias_C) @ D + bias_E + residual)`` (each
    epilogue term where the layer's epilogue has it; the first requant a softmax where the first
    GEMM ends in one) to one fused trace (module docstring).

    Args:
        first: the GEMM A (M x K) x B (K x L) (``Layer.gemm(M, K_red=K, N_out=L, batch)``).
        second: the GEMM C (M x L) x D (L x N); its batch and M equal ``first``'s.
        hw: a square-array `HardwareConfig` (DIM = ``pe_rows``).
        tiles: some or all of ``m, k, l, n`` tile sizes in DIM multiples; the rest are chosen
            to fit the scratchpad and accumulator (`choose_tiles`).
        order: ``"mlkn"`` (E resident for all of N) or ``"mnlk"`` (one n tile of E, C
            recomputed per n tile).
        acc_scales: the accumulator scale of C's requantizing move and of E's mvout.
        batched_weights: B and D differ per batch (a BMM) instead of being shared.

    Raises:
        ConfigError: the layers do not chain, or a bad tile or order.
        UnsupportedOpError: an epilogue op other than bias, add, relu and gelu (and the first
            GEMM's softmax, last, after a bias at most), a residual on the first GEMM, two
            GEMMs' I-GELU constants that differ, or I-GELU beside a softmax.
        InfeasibleError: the tiles do not fit, or a softmax's l tile is not all of L (names
            the layers, rows needed and available).
    """
    if order not in ORDERS:
        raise ConfigError(f"gemm chain order {order!r}: use one of {', '.join(ORDERS)}")
    batch, m, k, l_, n = chain_dims(first, second)
    epis = chain_epilogues(first, second, acc_scales)
    params = IsaParams.from_hardware(hw)
    t = choose_tiles(first, second, params, order, tiles, whole_l=epis[0].softmax is not None)
    alloc = _allocation(t, n, order, params)
    layout = chain_layout(batch, m, k, l_, n, batched_weights, epis)
    em = Emitter(params)
    em.config_ex()
    gelus = {e.gelu for e in epis} - {None}
    if len(gelus) > 1:
        raise UnsupportedOpError(f"gemm chain {_name(first)} -> {_name(second)}: I-GELU with "
                                 "two sets of constants (one config_norm holds one)")
    if gelus:
        em.config_norm(*gelus.pop())
    program = _ChainProgram(em, layout, alloc, t, order, epis, bool(batched_weights),
                            (batch, m, k, l_, n))
    program.emit()
    em.fence()
    trace = Trace(em.out)
    trace.validate(params)
    return LoweredChain(trace, layout, alloc, t, order, first, second, hw, epis,
                        bool(batched_weights), program.reads, {"E": em.dram_write_bytes})


class _ChainProgram:
    """The loops of `lower_gemm_chain` (module docstring) for a chain of ``dims`` ``(batch,
    M, K, L, N)``, emitted into ``em``: per E tile, per l tile the C tile (its k tiles of A and
    B) requantized into the scratchpad, then its products with the D tiles into E; ``reads``
    counts the DRAM bytes each tensor's mvins read."""

    def __init__(self, em: Emitter, layout: DramLayout, alloc: Allocation,
                 tiles: dict[str, int], order: str, epis: tuple[Epilogue, Epilogue],
                 batched_weights: bool, dims: tuple[int, int, int, int, int]) -> None:
        self.em, self.layout, self.tiles, self.order, self.epis = em, layout, tiles, order, epis
        self.batched_weights = batched_weights
        self.batch, self.m, self.k, self.l_, self.n = dims
        self.dim = em.params.dim
        self.per_mvin = em.params.max_block_len
        self.a_sp, self.b_sp, self.c_sp, self.d_sp = (alloc[x].start_row for x in "ABCD")
        self.c_acc, self.e_acc = alloc["C_acc"].start_row, alloc["E_acc"].start_row
        self.reads: dict[str, int] = {}
        # A tile that is the whole of its tensor's varying extent stays put: A's across l (and
        # n) tiles with one k tile, B's and D's across m tiles (and batches, if shared) with
        # one tile.
        self.a_resident = self.b_resident = self.d_resident = False

    def _move(self, ld_id: int, tensor: TensorLayout, dram: int, local: int, rows: int,
              cols: int) -> None:
        self.em.mvin(ld_id, dram, local, rows, cols, tensor.itemsize)
        self.reads[tensor.name] = self.reads.get(tensor.name, 0) + rows * cols * tensor.itemsize

    def _load(self, ld_id: int, tensor: TensorLayout, origin: tuple[int, ...], local: int,
              block_stride: int, rows: int, cols: int) -> None:
        """The rows x cols tile at `origin` of a row-major tensor: DIM rows per mvin, up to
        MAX_BLOCK_LEN column blocks each (block_stride scratchpad rows apart)."""
        dim, per_mvin = self.dim, self.per_mvin
        *lead, row, col = origin
        self.em.config_ld(ld_id, tensor.shape[-1], block_stride=block_stride)
        for r0 in range(0, rows, dim):
            for c0 in range(0, cols, per_mvin * dim):
                self._move(ld_id, tensor, tensor.address(*lead, row + r0, col + c0),
                           local + c0 // dim * block_stride + r0, min(dim, rows - r0),
                           min(per_mvin * dim, cols - c0))

    def _init_tile(self, epi: Epilogue, bias: str, acc_base: int, b: int, m0: int, rows: int,
                   col0: int, cols: int) -> None:
        """A C or E tile's accumulator rows (blocks of DIM columns tm rows apart) start as the
        bias row repeated (DRAM stride 0) and, for E, plus the residual's rows on top."""
        layout, dim, tm, n = self.layout, self.dim, self.tiles["m"], self.n
        sources = []
        if epi.bias:
            sources.append((layout[bias], 0, lambda r0, c0: layout[bias].address(c0), False))
        if epi.residual:
            res = layout["residual"]
            sources.append((res, n, lambda r0, c0: res.address(b, m0 + r0, c0), epi.bias))
        for tensor, stride, address, accumulate in sources:
            self.em.config_ld(2, stride, shrunk=tensor.itemsize == 1)
            for cb in range(-(-cols // dim)):
                for r0 in range(0, rows, dim):
                    self._move(2, tensor, address(r0, col0 + cb * dim),
                               acc_addr(acc_base + cb * tm + r0, accumulate=accumulate),
                               min(dim, rows - r0), min(dim, cols - cb * dim))

    def emit(self) -> None:
        """The whole chain: per batch, m tile and group of n tiles (all of N with ``"mlkn"``),
        one E tile."""
        batch, m, n = self.batch, self.m, self.n
        tm, tn = self.tiles["m"], self.tiles["n"]
        n_groups = ([(0, n)] if self.order == "mlkn"
                    else [(n0, min(n, n0 + tn)) for n0 in range(0, n, tn)])
        for b in range(batch):
            if self.batched_weights:
                self.b_resident = self.d_resident = False
            for m0 in range(0, m, tm):
                mv = min(tm, m - m0)
                self.a_resident = False
                for n_lo, n_hi in n_groups:
                    self._e_tile(b, m0, mv, n_lo, n_hi)

    def _e_tile(self, b: int, m0: int, mv: int, n_lo: int, n_hi: int) -> None:
        """E's rows ``m0 .. m0 + mv`` and columns ``n_lo .. n_hi`` of batch ``b``: initialized,
        accumulated over the l tiles, then moved to DRAM."""
        l_, n = self.l_, self.n
        em, dim, td = self.em, self.dim, self.layout["D"]
        tm, tl, tn = self.tiles["m"], self.tiles["l"], self.tiles["n"]
        wb = (b,) if self.batched_weights else ()
        self._init_tile(self.epis[1], "bias_E", self.e_acc, b, m0, mv, n_lo, n_hi - n_lo)
        for l0 in range(0, l_, tl):
            lv = min(tl, l_ - l0)
            self._c_tile(b, m0, mv, l0, lv)
            self._requantize_c(mv, lv)
            for n0 in range(n_lo, n_hi, tn):
                nv = min(tn, n_hi - n0)
                if not self.d_resident:
                    self._load(2, td, (*wb, l0, n0), self.d_sp, tl, lv, nv)
                    self.d_resident = tl >= l_ and tn >= n
                _tile_matmul(em.out, dim, self.c_sp, self.d_sp, tl,
                             self.e_acc + (n0 - n_lo) // dim * tm, tm, mv, lv, nv,
                             overwrite=l0 == 0 and not self.epis[1].init)
        self._write_e(b, m0, mv, n_lo, n_hi)

    def _c_tile(self, b: int, m0: int, mv: int, l0: int, lv: int) -> None:
        """C's rows ``m0 .. m0 + mv`` and columns ``l0 .. l0 + lv`` in the accumulator: its
        initial rows, then the products of the k tiles of A and B."""
        k, l_, ta, tb = self.k, self.l_, self.layout["A"], self.layout["B"]
        tm, tk, tl = self.tiles["m"], self.tiles["k"], self.tiles["l"]
        wb = (b,) if self.batched_weights else ()
        self._init_tile(self.epis[0], "bias_C", self.c_acc, b, m0, mv, l0, lv)
        for k0 in range(0, k, tk):
            kv = min(tk, k - k0)
            if not self.a_resident:
                self._load(0, ta, (b, m0, k0), self.a_sp, tm, mv, kv)
                self.a_resident = tk >= k
            if not self.b_resident:
                self._load(1, tb, (*wb, k0, l0), self.b_sp, tk, kv, lv)
                self.b_resident = tk >= k and tl >= l_
            _tile_matmul(self.em.out, self.dim, self.a_sp, self.b_sp, tk, self.c_acc, tm, mv,
                         kv, lv, overwrite=k0 == 0 and not self.epis[0].init)

    def _requantize_c(self, mv: int, lv: int) -> None:
        """C stays on chip: requantized (or softmaxed) into the scratchpad, never to DRAM."""
        em, dim, tm, first = self.em, self.dim, self.tiles["m"], self.epis[0]
        c_acc, c_sp, n = self.c_acc, self.c_sp, self.n
        if first.softmax:
            em.config_st(n, act=Activation.NONE, acc_scale=first.acc_scale)
            em.config_softmax(*first.softmax)
            _softmax_moves(em.out, dim, c_acc, c_sp, tm, mv, lv)
            return
        em.config_st(n, act=first.act, acc_scale=first.acc_scale)
        for lb in range(-(-lv // dim)):
            for r0 in range(0, mv, dim):
                em.out.append(new_instruction(
                    Funct.MVOUT_SPAD, acc_addr(c_acc + lb * tm + r0),
                    operand(min(dim, mv - r0), min(dim, lv - lb * dim), c_sp + lb * tm + r0)))

    def _write_e(self, b: int, m0: int, mv: int, n_lo: int, n_hi: int) -> None:
        """E's tile to DRAM with the second GEMM's scale and activation."""
        em, dim, tm, second = self.em, self.dim, self.tiles["m"], self.epis[1]
        te = self.layout["E"]
        em.config_st(self.n, act=second.act, acc_scale=second.acc_scale)
        for nb in range(-(-(n_hi - n_lo) // dim)):
            for r0 in range(0, mv, dim):
                em.mvout(te.address(b, m0 + r0, n_lo + nb * dim),
                         acc_addr(self.e_acc + nb * tm + r0), min(dim, mv - r0),
                         min(dim, n_hi - n_lo - nb * dim), 1)


__all__ = ["ORDERS", "TILE_DIMS", "LoweredChain", "chain_dims", "chain_epilogues",
           "chain_layout", "choose_tiles", "footprint", "lower_gemm_chain", "softmax_passes"]
