"""The DSL's primitives as plain Python names, tagged so the front end can recognize them.

They only mean something inside a ``@baco.jit`` kernel, where the front end turns each call into
IR ops; called from ordinary Python they raise `DSLError`, as Triton's builtins do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from workloads.errors import DSLError

BUILTIN_TAG = "__baco_builtin__"


class const:
    """Annotation of a compile-time parameter: ``BLOCK_M: baco.const``.

    Block sizes must be constants: the IR is specialized on their values.
    """


def builtin(fn: Callable | None = None, *, host: bool = False) -> Callable:
    """Tag ``fn`` as a DSL primitive; outside a kernel it runs only if ``host`` (plain Python
    arithmetic such as `cdiv`), else it refuses."""
    if fn is None:
        return functools.partial(builtin, host=host)

    @functools.wraps(fn)
    def outside(*args, **kwargs):
        if host:
            return fn(*args, **kwargs)
        raise DSLError(f"baco.{fn.__name__} can only be called inside a @baco.jit kernel; "
                       "decorate the function with @baco.jit and launch it as kernel[grid](...)")

    setattr(outside, BUILTIN_TAG, fn.__name__)
    return outside


@builtin
def program_id(axis=0):
    """The index of this program instance along grid axis ``axis`` (0, 1 or 2)."""


@builtin
def num_programs(axis=0):
    """The number of program instances along grid axis ``axis``."""


@builtin
def arange(start, end):
    """The block ``[start, start+1, ..., end-1]`` (int32); start and end are constants."""


@builtin
def zeros(shape, dtype="int32"):
    """A block of zeros; ``shape`` is a tuple of constants."""


@builtin
def full(shape, value, dtype="int32"):
    """A block filled with ``value``."""


@builtin
def load(pointer, mask=None, other=0, boundary_check=()):
    """Read the elements a pointer block (or block pointer) points at; masked-off ones are
    ``other``. An unmasked element outside its array is an error."""


@builtin
def store(pointer, value, mask=None, boundary_check=()):
    """Write ``value`` where the pointer block points (only where ``mask`` holds)."""


@builtin
def dot(a, b, acc=None):
    """``a @ b`` (+ ``acc``): [M, K] x [K, N]; int8 operands accumulate in int32."""


@builtin(host=True)
def cdiv(a, b):
    """Ceiling division ``(a + b - 1) // b`` (also usable on the host, for grids)."""
    return -(-a // b)


@builtin
def where(condition, x, y):
    """Elementwise ``x if condition else y`` (broadcast)."""


@builtin
def maximum(x, y):
    """Elementwise maximum (``baco.maximum(acc, 0)`` is a ReLU)."""


@builtin
def minimum(x, y):
    """Elementwise minimum."""


@builtin
def gelu(x):
    """Gemmini's I-GELU on an int32 accumulator block (I-BERT's integer GELU with
    `accel.lower.igelu_constants`' defaults, `accel.sim.reference.igelu`), before its scale."""


@builtin
def softmax(x, mask=None):
    """Gemmini's normalizer softmax over each row of an unscaled int32 accumulator block
    (I-BERT's i-exp with `accel.lower.iexp_constants`' defaults,
    `accel.sim.reference.softmax_rows`): an int8 block of 127 x the probabilities. ``mask``
    keeps a prefix of each row's columns: the others take no part and are 0."""


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order=None):
    """A pointer to a ``block_shape`` block at ``offsets`` of a ``shape`` tensor at ``base``."""


@builtin
def advance(block_ptr, offsets):
    """The block pointer moved by ``offsets`` elements along each axis."""


BUILTINS = {getattr(f, BUILTIN_TAG): f for f in (
    program_id, num_programs, arange, zeros, full, load, store, dot, cdiv, where, maximum,
    minimum, gelu, softmax, make_block_ptr, advance)}

__all__ = ["BUILTINS", "BUILTIN_TAG", "advance", "arange", "builtin", "cdiv", "const", "dot",
           "full", "gelu", "load", "make_block_ptr", "maximum", "minimum", "num_programs",
           "program_id", "softmax", "store", "where", "zeros"]
