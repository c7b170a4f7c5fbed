"""Memory primitives in the front end: ``load`` and ``store`` through pointer blocks or block
pointers, and ``make_block_ptr`` / ``advance``, with their pointer, mask and boundary checks."""

from __future__ import annotations

from baco.dsl.frontend_builder import PY_NUMBER, Builder
from baco.dsl.ir import Value
from baco.dsl.types import Type, broadcast_shapes


def _pointer(bld: Builder, node, pointer, what) -> Value:
    if not isinstance(pointer, Value) or not (pointer.type.ptr or pointer.type.block_ptr):
        raise bld.error(node, f"{what} needs a pointer (an array argument plus offsets) or "
                        f"a block pointer, got {pointer!r}")
    return pointer


def _boundary(bld: Builder, node, ptr: Value, boundary_check, what) -> tuple[int, ...]:
    check = tuple(bld.constant_int(b, node, "boundary_check axis")
                  for b in (boundary_check or ()))
    if check and not ptr.type.block_ptr:
        raise bld.error(node, f"{what}: boundary_check applies to block pointers; use "
                        "mask= with pointer blocks")
    if any(not 0 <= b < len(ptr.type.shape) for b in check):
        raise bld.error(node, f"{what}: boundary_check axes must be < {len(ptr.type.shape)}")
    return check


def b_load(bld: Builder, node, pointer, mask, other, boundary_check):
    ptr = _pointer(bld, node, pointer, "baco.load")
    shape = ptr.type.shape
    m = bld.mask_of(node, mask, shape, "baco.load")
    if m is not None and ptr.type.block_ptr:
        raise bld.error(node, "baco.load: a block pointer takes boundary_check=, not mask=")
    check = _boundary(bld, node, ptr, boundary_check, "baco.load")
    if isinstance(other, Value) or not isinstance(other, PY_NUMBER):
        raise bld.error(node, "baco.load: `other` must be a constant number")
    ops = [ptr] + ([m] if m is not None else [])
    attrs = {"other": other, **({"boundary_check": check} if check else {})}
    return bld.emit("load", node, ops, Type(ptr.type.dtype, shape), **attrs)


def b_store(bld: Builder, node, pointer, value, mask, boundary_check):
    ptr = _pointer(bld, node, pointer, "baco.store")
    shape = ptr.type.shape
    val = bld.runtime(value, node, "baco.store value")
    if val.type.ptr or val.type.block_ptr:
        raise bld.error(node, "baco.store: cannot store a pointer")
    if val.type.dtype != ptr.type.dtype:
        raise bld.error(node, f"baco.store: the value is {val.type.dtype} but the pointer "
                        f"is ptr<{ptr.type.dtype}>; convert it with "
                        f"value.to({ptr.type.dtype!r})")
    if broadcast_shapes(val.type.shape, shape) != shape:
        raise bld.error(node, f"baco.store: value {val.type} does not broadcast to the "
                        f"pointer block {shape}")
    m = bld.mask_of(node, mask, shape, "baco.store")
    if m is not None and ptr.type.block_ptr:
        raise bld.error(node, "baco.store: a block pointer takes boundary_check=, not "
                        "mask=")
    check = _boundary(bld, node, ptr, boundary_check, "baco.store")
    ops = [ptr, val] + ([m] if m is not None else [])
    bld.emit("store", node, ops, None, **({"boundary_check": check} if check else {}))


def b_make_block_ptr(bld: Builder, node, base, shape, strides, offsets, block_shape, order):
    if not isinstance(base, Value) or not base.type.ptr or base.type.shape:
        raise bld.error(node, "baco.make_block_ptr: base must be an array argument")
    block = bld.shape_of(block_shape, node, "make_block_ptr block_shape")
    rank = len(block)
    parts = []
    for what, items in (("shape", shape), ("strides", strides), ("offsets", offsets)):
        items = tuple(items) if isinstance(items, (tuple, list)) else (items,)
        if len(items) != rank:
            raise bld.error(node, f"baco.make_block_ptr: {what} has {len(items)} entries "
                            f"for a rank-{rank} block")
        for v in items:
            t = bld.type_of(v)
            if t is None or t.shape or not t.dtype.is_int or t.ptr:
                raise bld.error(node, f"baco.make_block_ptr: {what} must be integer "
                                f"scalars, got {v!r}")
        parts += [bld.runtime(v, node, what) for v in items]
    order = tuple(order) if order is not None else tuple(reversed(range(rank)))
    if sorted(order) != list(range(rank)):
        raise bld.error(node, f"baco.make_block_ptr: order {order} is not a permutation")
    return bld.emit("make_block_ptr", node, [base, *parts],
                    Type(base.type.dtype, block, block_ptr=True), order=order)


def b_advance(bld: Builder, node, block_ptr, offsets):
    if not isinstance(block_ptr, Value) or not block_ptr.type.block_ptr:
        raise bld.error(node, "baco.advance needs a block pointer (baco.make_block_ptr)")
    items = tuple(offsets) if isinstance(offsets, (tuple, list)) else (offsets,)
    if len(items) != len(block_ptr.type.shape):
        raise bld.error(node, "baco.advance: one offset per axis")
    vals = [bld.runtime(v, node, "advance offset") for v in items]
    for v in vals:
        if v.type.shape or not v.type.dtype.is_int:
            raise bld.error(node, "baco.advance: offsets must be integer scalars")
    return bld.emit("advance", node, [block_ptr, *vals], block_ptr.type)


__all__ = ["b_advance", "b_load", "b_make_block_ptr", "b_store"]
