"""Executing the block IR, one program instance at a time: the shared walker and the interpreter.

`Machine` walks a `Function` with concrete scalars, index blocks, masks and pointers (numpy),
so address arithmetic means the same on every backend. `Interpreter` adds numpy semantics for
the data ops (load, store, dot, casts); the simulator backend (`baco.dsl.sim_backend`)
overrides the same methods to emit Gemmini instructions instead.

Numeric semantics (shared with the simulator, bit for bit): int8 x int8 `dot` accumulates in
int32; arithmetic on int8 widens to int32; ``x.to(int8)`` rounds floats half to even and
saturates to [-128, 127] (Gemmini's mvout), ints saturate too; ``int32 * float`` is a float32
multiply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from baco.dsl.ir import Function, Op, Value
from baco.dsl.types import Type, int1, promote

_NP_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
              "floordiv": np.floor_divide, "mod": np.mod, "truediv": np.true_divide,
              "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
              "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
              "eq": np.equal, "ne": np.not_equal}
_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")


@dataclasses.dataclass(frozen=True)
class Ptr:
    """Pointers into array argument ``arg``: element offsets (a 0-d array for one pointer)."""

    arg: int
    offsets: np.ndarray


@dataclasses.dataclass(frozen=True)
class BlockPtr:
    """A block pointer (`make_block_ptr`): tensor shape/strides, block offsets and shape."""

    arg: int
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offsets: tuple[int, ...]
    block: tuple[int, ...]
    order: tuple[int, ...]


def as_type(x: Any, type_: Type) -> Any:
    """``x`` as a value of ``type_``: a Python scalar or a numpy block of its dtype."""
    if type_.shape:
        return np.broadcast_to(np.asarray(x), type_.shape).astype(type_.dtype.numpy)
    return np.asarray(x).astype(type_.dtype.numpy).item()


def convert(x: Any, src: Type, dst: Type) -> Any:
    """``.to(dtype)``: float -> int rounds half to even, every int target saturates."""
    arr = np.asarray(x)
    dt = dst.dtype
    if dt == int1:
        out = arr != 0
    elif dt.is_int:
        info = np.iinfo(dt.numpy)
        if src.dtype.is_float:
            arr = np.rint(arr.astype(np.float64))
        out = np.clip(arr.astype(np.float64) if src.dtype.is_float else arr.astype(np.int64),
                      info.min, info.max).astype(dt.numpy)
    else:
        out = arr.astype(np.float32)
    return as_type(out, dst)


class Machine:
    """Runs a kernel's IR for every program of a grid; subclasses give the data semantics."""

    def __init__(self, fn: Function, args: Sequence[Any], grid: tuple[int, ...]) -> None:
        self.fn = fn
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.arrays: list[np.ndarray] = []
        self.inputs: dict[Value, Any] = {}
        for value, arg in zip(fn.args, args):
            if value.type.ptr:
                self.inputs[value] = Ptr(len(self.arrays), np.zeros((), np.int64))
                self.arrays.append(arg)
            else:
                self.inputs[value] = as_type(arg, value.type)
        self.pid = (0, 0, 0)

    # ------------------------------------------------------------------ driving
    def run(self) -> None:
        for x in range(self.grid[0]):
            for y in range(self.grid[1]):
                for z in range(self.grid[2]):
                    self.pid = (x, y, z)
                    self.begin_program()
                    self.execute(self.fn.ops, dict(self.inputs))
                    self.end_program()

    def begin_program(self) -> None:
        """Hook: a program instance starts."""

    def end_program(self) -> None:
        """Hook: a program instance ended."""

    def execute(self, ops: list[Op], env: dict[Value, Any]) -> None:
        for op in ops:
            vals = [env[v] for v in op.operands]
            if op.name == "for":
                outs = self.op_for(op, env, vals)
            else:
                out = getattr(self, f"op_{op.name}")(op, *vals)
                outs = [out] if op.results else []
            for r, v in zip(op.results, outs):
                env[r] = v

    def op_for(self, op: Op, env: dict[Value, Any], vals: list[Any]) -> list[Any]:
        lo, hi, step, *carried = vals
        if step == 0:
            raise op.loc.error("range() step is zero at run time")
        region = op.region
        for i in range(int(lo), int(hi), int(step)):
            inner = dict(env)
            inner[region.args[0]] = i
            for a, v in zip(region.args[1:], carried):
                inner[a] = v
            self.execute(region.ops, inner)
            carried = [inner[y] for y in region.yields]
        return carried

    # ------------------------------------------------------------------ scalars, indices
    def op_const(self, op: Op) -> Any:
        return op.attrs["value"]

    def op_program_id(self, op: Op) -> int:
        return self.pid[op.attrs["axis"]]

    def op_num_programs(self, op: Op) -> int:
        return self.grid[op.attrs["axis"]]

    def op_arange(self, op: Op) -> np.ndarray:
        return np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)

    def op_full(self, op: Op) -> Any:
        return as_type(op.attrs["value"], op.results[0].type)

    def binary(self, op: Op, a: Any, b: Any) -> Any:
        name = op.name
        rtype = op.results[0].type
        ta, tb = op.operands[0].type, op.operands[1].type
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            p, off = (a, b) if isinstance(a, Ptr) else (b, a)
            delta = np.asarray(off, np.int64)
            return Ptr(p.arg, np.broadcast_to(p.offsets + (delta if name == "add" else -delta),
                                              rtype.shape))
        if name in ("floordiv", "mod") and not ta.dtype.is_float and np.any(np.asarray(b) == 0):
            raise op.loc.error(f"integer `{name}` by zero")
        compute = (promote(ta.dtype, tb.dtype) if name in _COMPARE else rtype.dtype).numpy
        if name in ("and", "or", "xor") and rtype.dtype == int1:
            compute = np.bool_
        x, y = np.asarray(a).astype(compute), np.asarray(b).astype(compute)
        with np.errstate(all="ignore"):
            return as_type(_NP_BINARY[name](x, y), rtype)

    def op_neg(self, op: Op, x: Any) -> Any:
        rtype = op.results[0].type
        return as_type(-np.asarray(x).astype(rtype.dtype.numpy), rtype)

    def op_not(self, op: Op, x: Any) -> Any:
        return as_type(~np.asarray(x, bool), op.results[0].type)

    def op_expand_dims(self, op: Op, x: Any) -> Any:
        shape = op.results[0].type.shape
        if isinstance(x, Ptr):
            return Ptr(x.arg, x.offsets.reshape(shape))
        return np.asarray(x).reshape(shape)

    def op_cast(self, op: Op, x: Any) -> Any:
        return convert(x, op.operands[0].type, op.results[0].type)

    def _select(self, op: Op, fn, *xs) -> Any:
        rtype = op.results[0].type
        arrays = [np.asarray(x) for x in xs]
        if op.name != "where":
            arrays = [a.astype(rtype.dtype.numpy) for a in arrays]
        else:
            arrays = [arrays[0].astype(bool)] + [a.astype(rtype.dtype.numpy) for a in arrays[1:]]
        return as_type(fn(*arrays), rtype)

    def op_maximum(self, op: Op, x: Any, y: Any) -> Any:
        return self._select(op, np.maximum, x, y)

    def op_minimum(self, op: Op, x: Any, y: Any) -> Any:
        return self._select(op, np.minimum, x, y)

    def op_gelu(self, op: Op, x: Any) -> Any:
        from accel.lower import igelu_constants
        from accel.sim import igelu

        return as_type(igelu(np.asarray(x, np.int32), *igelu_constants()), op.results[0].type)

    def op_softmax(self, op: Op, x: Any, mask: Any = None) -> Any:
        from accel.lower import iexp_constants
        from accel.sim import softmax_rows

        x = np.asarray(x, np.int32)
        keep = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
        out = np.zeros(x.shape, np.int8)
        for r in range(x.shape[0]):
            out[r, keep[r]] = softmax_rows(x[r:r + 1, keep[r]], iexp_constants())[0]
        return as_type(out, op.results[0].type)

    def op_where(self, op: Op, c: Any, x: Any, y: Any) -> Any:
        return self._select(op, np.where, c, x, y)

    # ------------------------------------------------------------------ pointers
    def op_make_block_ptr(self, op: Op, base: Ptr, *parts: int) -> BlockPtr:
        rank = len(op.results[0].type.shape)
        shape, strides, offsets = (tuple(int(v) for v in parts[i * rank:(i + 1) * rank])
                                   for i in range(3))
        return BlockPtr(base.arg, int(base.offsets), shape, strides, offsets,
                        op.results[0].type.shape, op.attrs["order"])

    def op_advance(self, op: Op, bp: BlockPtr, *deltas: int) -> BlockPtr:
        return dataclasses.replace(bp, offsets=tuple(o + int(d)
                                                     for o, d in zip(bp.offsets, deltas)))

    def address(self, op: Op, pointer: Ptr | BlockPtr, mask: Any, what: str
                ) -> tuple[int, np.ndarray, np.ndarray | None]:
        """(array index, element offsets, mask or None) of a load/store, bounds checked."""
        shape = op.operands[0].type.shape
        if isinstance(pointer, BlockPtr):
            offsets = np.full(shape, pointer.base, np.int64)
            keep = np.ones(shape, bool)
            for axis, size in enumerate(pointer.block):
                idx = pointer.offsets[axis] + np.arange(size, dtype=np.int64)
                view = [1] * len(shape)
                view[axis] = size
                idx = idx.reshape(view)
                offsets = offsets + idx * pointer.strides[axis]
                if axis in op.attrs.get("boundary_check", ()):
                    keep = keep & (idx >= 0) & (idx < pointer.shape[axis])
            m = keep if op.attrs.get("boundary_check", ()) else None
            arg = pointer.arg
        else:
            offsets = np.broadcast_to(pointer.offsets, shape).astype(np.int64)
            m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
            arg = pointer.arg
        size = self.arrays[arg].size
        bad = (offsets < 0) | (offsets >= size)
        if m is not None:
            bad = bad & m
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            param = self.fn.args[[i for i, v in enumerate(self.fn.args) if v.type.ptr][arg]]
            raise op.loc.error(
                f"{what} out of bounds in program {self.pid[:len(self.grid)]}: element "
                f"{list(where)} is offset {int(offsets[where])} of `{param.hint}`, which has "
                f"{size} elements; add a mask (e.g. mask=offs < N) or use a block pointer "
                "with boundary_check")
        return arg, offsets, m


def _binary_op(self: Machine, op: Op, a: Any, b: Any) -> Any:
    return self.binary(op, a, b)


for _name in _NP_BINARY:
    setattr(Machine, f"op_{_name}", _binary_op)


class Interpreter(Machine):
    """The reference backend: every program instance on numpy."""

    def op_load(self, op: Op, pointer: Any, mask: Any = None) -> np.ndarray:
        arg, offsets, m = self.address(op, pointer, mask, "load")
        rtype = op.results[0].type
        flat = self.arrays[arg].reshape(-1)
        out = np.full(rtype.shape, op.attrs["other"], rtype.dtype.numpy)
        if m is None:
            out[...] = flat[offsets]
        else:
            out[m] = flat[offsets[m]]
        return as_type(out, rtype)

    def op_store(self, op: Op, pointer: Any, value: Any, mask: Any = None) -> None:
        arg, offsets, m = self.address(op, pointer, mask, "store")
        flat = self.arrays[arg].reshape(-1)
        vals = np.broadcast_to(np.asarray(value), offsets.shape)
        if m is None:
            flat[offsets] = vals
        else:
            flat[offsets[m]] = vals[m]

    def op_dot(self, op: Op, a: np.ndarray, b: np.ndarray, acc: Any = None) -> np.ndarray:
        rtype = op.results[0].type
        out = np.matmul(a.astype(rtype.dtype.numpy), b.astype(rtype.dtype.numpy))
        if acc is not None:
            out = out + acc
        return as_type(out, rtype)


__all__ = ["BlockPtr", "Interpreter", "Machine", "Ptr", "as_type", "convert"]
