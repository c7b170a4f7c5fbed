"""The Gemmini a simulator-backend trace drives: its DRAM image, the instructions so far, the
load and store configurations they leave set, and the scratchpad and accumulator allocators."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accel.arch import HardwareConfig
from accel.isa import Instruction, IsaParams, LocalAddr
from accel.lower import iexp_constants, igelu_constants
from accel.sim import DramImage
from accel.trace import Trace
from baco.dsl.ir import Loc
from baco.dsl.sim_blocks import AccTile, CapacityError, SpTile

MOVES = {0: Instruction.mvin, 1: Instruction.mvin2, 2: Instruction.mvin3}
SP_DATA, ZERO_FILL, ACC_DATA = (0, 1), (2, 1, 0), (2,)  # config_ld ids each may use


class Chip:
    """The instruction stream of one launch and the on-chip state it has set up so far."""

    def __init__(self, arrays: Sequence[np.ndarray], hw: HardwareConfig) -> None:
        self.params = IsaParams.from_hardware(hw)
        p = self.params
        self.dim = p.dim
        self.max_cols = {False: p.max_block_len * p.dim, True: p.max_block_len_acc * p.dim}
        self.image = DramImage()
        zero_bytes = 8 * p.dim * max(p.max_block_len, p.max_block_len_acc) + 64
        self.zero_addr = self.image.add("zeros", np.zeros(zero_bytes, np.int8))
        self.addr = [self.image.add(f"arg{i}", a) for i, a in enumerate(arrays)]
        self.ins: list[Instruction] = [Instruction.config_ex("ws", "none")]
        self.ld_config: dict[int, tuple] = {}
        self.ld_lru = [0, 1, 2]
        self.st_config: tuple | None = None
        self.igelu_set = False
        self.sp_ptr = 0
        self.sp_tiles: list[SpTile] = []
        self.acc_ptr = 0
        self.acc_tiles: list[AccTile] = []

    # ------------------------------------------------------------------ allocation
    def sp_alloc(self, rows: int, loc: Loc, what: str) -> int:
        cap = self.params.sp_rows
        if rows > cap:
            raise loc.error(f"sim backend: {what} needs {rows} scratchpad rows but the "
                            f"scratchpad has {cap}; use smaller blocks", CapacityError)
        if self.sp_ptr + rows > cap:
            self.sp_ptr = 0
        lo, hi = self.sp_ptr, self.sp_ptr + rows
        for t in list(self.sp_tiles):
            if t.base < hi and lo < t.base + t.rows:
                if t.pinned:
                    raise loc.error(f"sim backend: the operands of this dot need more than the "
                                    f"{cap} scratchpad rows; use smaller blocks", CapacityError)
                t.alive = False
                self.sp_tiles.remove(t)
        self.sp_ptr = hi
        return lo

    def acc_tile(self, shape: tuple[int, ...], loc: Loc) -> AccTile:
        if len(shape) != 2:
            raise loc.error(f"sim backend: accumulator blocks are 2-D, got shape {shape}")
        d, cap = self.dim, self.params.acc_rows
        nmb, nnb = -(-shape[0] // d), -(-shape[1] // d)
        rows = nmb * nnb * d
        if rows > cap:
            raise loc.error(f"sim backend: a {shape[0]}x{shape[1]} accumulator block needs "
                            f"{rows} accumulator rows but the accumulator has {cap}; use "
                            "smaller BLOCK sizes", CapacityError)
        if self.acc_ptr + rows > cap:
            self.acc_ptr = 0
        lo, hi = self.acc_ptr, self.acc_ptr + rows
        if any(t.base < hi and lo < t.base + t.written.size * d for t in self.acc_tiles):
            raise loc.error(f"sim backend: this program's accumulator blocks need more than "
                            f"the {cap} accumulator rows; use smaller BLOCK sizes",
                            CapacityError)
        self.acc_ptr = hi
        tile = AccTile(lo, (shape[0], shape[1]), np.zeros((nmb, nnb), bool))
        self.acc_tiles.append(tile)
        return tile

    # ------------------------------------------------------------------ configuration
    def config_ld(self, ids: tuple[int, ...], stride_bytes: int | None, shrunk: bool | None
                  ) -> int:
        """A load config id among ``ids`` set to this stride (None: any; shrunk None: any),
        reconfiguring the least recently used one if none is."""
        for ident in ids:
            cur = self.ld_config.get(ident)
            if cur is not None and stride_bytes in (None, cur[0]) and shrunk in (None, cur[1]):
                self.ld_lru.remove(ident)
                self.ld_lru.append(ident)
                return ident
        ident = next(i for i in self.ld_lru if i in ids)
        key = (0 if stride_bytes is None else stride_bytes, bool(shrunk))
        self.ins.append(Instruction.config_ld(key[0], shrunk=key[1], block_stride=self.dim,
                                              id=ident))
        self.ld_config[ident] = key
        self.ld_lru.remove(ident)
        self.ld_lru.append(ident)
        return ident

    def config_softmax(self) -> None:
        """The normalizer's softmax for the next moves: scale 1 (127 x the probabilities)."""
        self.config_st(None, "none", 1.0)
        self.ins.extend(Instruction.config_softmax(*iexp_constants()))
        self.st_config = None     # the activation is now softmax: config_st must clear it
        self.igelu_set = False    # i-exp's qb and qc took I-GELU's registers

    def config_st(self, stride_bytes: int | None, act: str, scale: float) -> None:
        if act == "igelu" and not self.igelu_set:
            self.ins.append(Instruction.config_igelu(*igelu_constants()))
            self.igelu_set = True
        current = self.st_config
        if stride_bytes is None:
            if current is not None and current[1:] == (act, scale):
                return
            stride_bytes = 0
        key = (stride_bytes, act, scale)
        if current != key:
            self.ins.append(Instruction.config_st(stride_bytes, act=act, acc_scale=scale))
            self.st_config = key

    # ------------------------------------------------------------------ moves
    def zero_fill(self, local: int, rows: int, cols: int, acc: bool) -> None:
        ident = self.config_ld(ZERO_FILL, 0, None)
        addr = LocalAddr.accumulator(local) if acc else LocalAddr.sp(local)
        self.ins.append(MOVES[ident](self.zero_addr, addr, rows, cols))

    def trace(self) -> Trace:
        return Trace([*self.ins, Instruction.fence()])


__all__ = ["ACC_DATA", "MOVES", "SP_DATA", "ZERO_FILL", "Chip"]
