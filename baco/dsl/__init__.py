"""baco.dsl: the block DSL (seed 001 §4.5, Table 6.1), Triton-like kernels for Gemmini.

A kernel is a Python function under ``@baco.jit`` that one *program instance* runs per point of a
grid. Array arguments (numpy int8 / int32 / float32) are pointers: ``a_ptr + offsets`` is a
block of pointers, ``baco.load(ptrs, mask=..., other=0)`` reads it, ``baco.store(ptrs, value,
mask=...)`` writes it; ``baco.make_block_ptr`` / ``baco.advance`` describe the same blocks by
shape, strides and offsets. Blocks have constant shapes, so block sizes are ``baco.const``
parameters. ``baco.dot`` multiplies int8 blocks into int32; ``baco.gelu(acc)`` (I-GELU),
``acc * scale``, ``baco.maximum(acc, 0)`` and ``.to(baco.int8)`` (round half to even,
saturate) form Gemmini's mvout epilogue; ``baco.softmax(acc, mask=...)`` is its normalizer's
row softmax (int8, 127 x the probabilities).

    @baco.jit
    def scale_rows(x_ptr, y_ptr, N, BLOCK: baco.const):
        offs = baco.program_id(0) * BLOCK + baco.arange(0, BLOCK)
        x = baco.load(x_ptr + offs, mask=offs < N, other=0)
        baco.store(y_ptr + offs, x * 2, mask=offs < N)

    scale_rows[(baco.cdiv(n, 64),)](x, y, n, BLOCK=64)      # numpy interpreter
    kernel[grid](*args, backend="sim", hw="gemmini_default", **consts)  # Gemmini trace + cycles

Pipeline: `frontend` (AST -> typed block IR, `ir`; ``kernel.ir(*args)`` prints it; errors are
`DSLError`s with file:line), `machine` (the grid walker and the numpy interpreter),
`sim_backend` (IR -> mvin/preload/compute/mvout trace on `accel.sim`, outputs written back),
`emit` (a design's layer + mapping -> kernel source), `autotune` (block sizes by simulator or
analytical model). Example kernels: ``experiments/kernels/``.
"""

from baco.dsl.autotune import Autotuner, Config, autotune
from baco.dsl.core import (
    advance,
    arange,
    cdiv,
    const,
    dot,
    full,
    gelu,
    load,
    make_block_ptr,
    maximum,
    minimum,
    softmax,
    num_programs,
    program_id,
    store,
    where,
    zeros,
)
from baco.dsl.emit import emit, load_source
from baco.dsl.ir import Function
from baco.dsl.jit import JITFunction, jit
from baco.dsl.types import float32, int1, int8, int32
from workloads.errors import DSLError

__all__ = [
    "Autotuner",
    "Config",
    "DSLError",
    "Function",
    "JITFunction",
    "advance",
    "arange",
    "autotune",
    "cdiv",
    "const",
    "dot",
    "emit",
    "float32",
    "full",
    "gelu",
    "int1",
    "int8",
    "int32",
    "jit",
    "load",
    "load_source",
    "make_block_ptr",
    "maximum",
    "minimum",
    "num_programs",
    "program_id",
    "softmax",
    "store",
    "where",
    "zeros",
]
