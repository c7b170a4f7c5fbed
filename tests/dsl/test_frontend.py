"""The front end and the interpreter: the IR's text form, the language's semantics on numpy,
and bad input as DSLErrors that name the kernel's file:line and what to change."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import baco
from baco.dsl.sim_backend import CapacityError
from workloads.errors import DSLError

FILE = __file__


def line_of(fn, text: str) -> int:
    """The file line of the first source line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(getattr(fn, "fn", fn))
    return first + next(i for i, line in enumerate(lines) if text in line)


@baco.jit
def add_scaled(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: baco.const):
    pid = baco.program_id(0)
    offs = pid * BLOCK + baco.arange(0, BLOCK)
    mask = offs < n
    x = baco.load(x_ptr + offs, mask=mask, other=0)
    y = baco.load(y_ptr + offs, mask=mask, other=0)
    z = baco.where(x > y, x * alpha, baco.minimum(x, y) + baco.num_programs(0))
    baco.store(out_ptr + offs, z, mask=mask)


def test_interpreter_elementwise_semantics_match_numpy():
    rng = np.random.default_rng(0)
    n = 37
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    add_scaled[(baco.cdiv(n, 16),)](x, y, out, n, 2.5, BLOCK=16)
    want = np.where(x > y, x * np.float32(2.5), np.minimum(x, y) + 3).astype(np.float32)
    np.testing.assert_array_equal(out, want)


def test_ir_text_is_typed_and_located():
    x = np.zeros(37, np.float32)
    text = str(add_scaled.ir(x, x, x, 37, 2.5, BLOCK=16))
    assert text.startswith("kernel @add_scaled(%x_ptr1: ptr<f32>")
    assert "BLOCK: const = 16" in text
    assert "arange {start=0, end=16} : block<16xi32>" in text
    assert ": block<16xptr<f32>>" in text and "store " in text
    assert f"{FILE}:{line_of(add_scaled, 'def add_scaled')}" in text
    # One IR per specialization: other constants or dtypes build another.
    assert add_scaled.ir(x, x, x, 37, 2.5, BLOCK=16) is add_scaled.ir(x, x, x, 5, 1.0, BLOCK=16)
    assert add_scaled.ir(x, x, x, 37, 2.5, BLOCK=8) is not add_scaled.ir(x, x, x, 37, 2.5,
                                                                           BLOCK=16)


@baco.jit
def relu_round(x_ptr, y_ptr, scale, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    x = baco.load(x_ptr + offs)
    baco.store(y_ptr + offs, (baco.maximum(x, 0) * scale).to(baco.int8))


def test_to_int8_rounds_half_to_even_and_saturates():
    x = np.array([5, 15, 25, -7, 100000, 35, 45, 1], np.int32)
    y = np.zeros(8, np.int8)
    relu_round[(1,)](x, y, 0.1, BLOCK=8)
    # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2 (float32 products), relu, saturation at 127
    want = np.clip(np.rint(np.maximum(x, 0).astype(np.float32) * np.float32(0.1)), -128, 127)
    np.testing.assert_array_equal(y, want.astype(np.int8))
    assert y[4] == 127 and y[3] == 0


def _raises_at(kernel, text: str, match: str, *args, **kwargs):
    with pytest.raises(DSLError, match=match) as info:
        kernel[(1,)](*args, **kwargs)
    assert f"{FILE}:{line_of(kernel, text)}:" in str(info.value)
    return info.value


@baco.jit
def uses_while(x_ptr, n):
    i = 0
    while i < n:  # unsupported
        i += 1


@baco.jit
def bad_dot(a_ptr, b_ptr, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    a = baco.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    rows = baco.arange(0, 2 * BLOCK)
    b = baco.load(b_ptr + rows[:, None] * BLOCK + offs[None, :])
    c = baco.dot(a, b)  # mismatch  # noqa: F841


@baco.jit
def runtime_block(x_ptr, n):
    offs = baco.arange(0, n)  # not constant  # noqa: F841


@baco.jit
def no_mask(x_ptr, y_ptr, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    x = baco.load(x_ptr + offs)  # out of bounds
    baco.store(y_ptr + offs, x)


@baco.jit
def int_div(x_ptr, n):
    half = n / 2  # true division  # noqa: F841


@baco.jit
def store_i32_into_i8(x_ptr, y_ptr, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    x = baco.load(x_ptr + offs)
    baco.store(y_ptr + offs, x + 1)  # i32 into i8


@baco.jit
def loop_type_change(x_ptr, K, BLOCK: baco.const):
    acc = 0
    for k in range(K):  # acc becomes a block
        acc += baco.load(x_ptr + baco.arange(0, BLOCK))


def test_unsupported_statement():
    _raises_at(uses_while, "while i", "unsupported statement `While`", np.zeros(4, np.int8), 4)


def test_dot_shape_mismatch():
    a = np.zeros(64, np.int8)
    b = np.zeros(4096, np.int8)
    with pytest.raises(DSLError, match="dot: shape mismatch") as info:
        bad_dot.ir(a, b, BLOCK=8)
    assert f"{FILE}:{line_of(bad_dot, '# mismatch')}:" in str(info.value)


def test_non_constant_block_size():
    err = _raises_at(runtime_block, "arange(0, n)", "non-constant", np.zeros(4, np.int8), 4)
    assert "baco.const" in str(err)


@pytest.mark.parametrize("backend", ["interpreter", "sim"])
def test_load_out_of_bounds_without_mask(backend):
    x, y = np.zeros(10, np.int8), np.zeros(16, np.int8)
    err = _raises_at(no_mask, "# out of bounds", "out of bounds", x, y, BLOCK=16,
                     backend=backend)
    assert "add a mask" in str(err) and "`x_ptr`" in str(err)


def test_integer_true_division_suggests_floor_division():
    _raises_at(int_div, "n / 2", "use `//`", np.zeros(4, np.int8), 4)


def test_store_dtype_mismatch_suggests_a_conversion():
    x, y = np.zeros(8, np.int8), np.zeros(8, np.int8)
    _raises_at(store_i32_into_i8, "# i32 into i8", r"value\.to\(baco\.int8\)", x, y, BLOCK=8)


def test_loop_carried_type_change():
    _raises_at(loop_type_change, "for k in range", "changes type in the loop",
               np.zeros(8, np.int8), 2, BLOCK=8)


def test_primitives_refuse_to_run_outside_a_kernel():
    with pytest.raises(DSLError, match="inside a @baco.jit kernel"):
        baco.load(None)
    with pytest.raises(DSLError, match=r"kernel\[grid\]"):
        add_scaled(1, 2)
    assert baco.cdiv(10, 4) == 3      # host arithmetic for grids


def test_bad_arguments_are_named():
    with pytest.raises(DSLError, match="argument `x_ptr`.*int8, int32 or float32"):
        no_mask[(1,)](np.zeros(16, np.float64), np.zeros(16, np.int8), BLOCK=16)
    with pytest.raises(DSLError, match="C-contiguous"):
        no_mask[(1,)](np.zeros((16, 2), np.int8)[:, 0], np.zeros(16, np.int8), BLOCK=16)


def test_sim_backend_rejects_float_data_and_oversized_blocks(kernel):
    x = np.zeros(37, np.float32)
    with pytest.raises(DSLError, match="float32 data does not run on Gemmini"):
        add_scaled[(3,)](x, x, x, 37, 2.5, BLOCK=16, backend="sim")
    matmul = kernel("matmul", "matmul_kernel")
    a = np.zeros((8, 8), np.int8)
    c = np.zeros((8, 8), np.int32)
    with pytest.raises(CapacityError, match="accumulator"):
        matmul[(1,)](a, a, c, 8, 8, 8, 8, 1, 8, 1, 8, 1, BLOCK_SIZE_M=2048, BLOCK_SIZE_N=1024,
                     BLOCK_SIZE_K=16, backend="sim")


@baco.jit
def gelu_float(x_ptr, y_ptr, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    baco.store(y_ptr + offs, baco.gelu(baco.load(x_ptr + offs)))


@baco.jit
def gelu_int(x_ptr, y_ptr, scale, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    baco.store(y_ptr + offs, (baco.gelu(baco.load(x_ptr + offs)) * scale).to(baco.int8))


@baco.jit
def row_softmax(q_ptr, kt_ptr, p_ptr, M, L, KEEP, BLOCK_M: baco.const, BLOCK_L: baco.const):
    offs_m = baco.arange(0, BLOCK_M)
    offs_l = baco.arange(0, BLOCK_L)
    offs_d = baco.arange(0, 16)
    q = baco.load(q_ptr + offs_m[:, None] * 16 + offs_d[None, :], mask=offs_m[:, None] < M,
                  other=0)
    kt = baco.load(kt_ptr + offs_d[:, None] * L + offs_l[None, :], mask=offs_l[None, :] < L,
                   other=0)
    p = baco.softmax(baco.dot(q, kt), mask=offs_l[None, :] < KEEP)
    baco.store(p_ptr + offs_m[:, None] * L + offs_l[None, :], p,
               mask=(offs_m[:, None] < M) & (offs_l[None, :] < KEEP))


@baco.jit
def softmax_of_scaled(x_ptr, y_ptr, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    s = baco.dot(baco.load(x_ptr + offs[:, None] * BLOCK + offs[None, :]),
                 baco.load(x_ptr + offs[:, None] * BLOCK + offs[None, :]))
    p = baco.softmax((s * 2).to(baco.int32))
    baco.store(y_ptr + offs[:, None] * BLOCK + offs[None, :], p)


@baco.jit
def softmax_float(x_ptr, y_ptr, BLOCK: baco.const):
    offs = baco.arange(0, BLOCK)
    baco.store(y_ptr + offs, baco.softmax(baco.load(x_ptr + offs)))


def test_softmax_is_the_normalizers_row_softmax_on_both_backends():
    """`baco.softmax` over each row's kept columns (a prefix), 0 elsewhere: the interpreter and
    the simulator (three passes of one-row mvouts per row, stored) equal the reference."""
    from accel.lower import iexp_constants
    from accel.sim.reference import softmax_rows

    rng = np.random.default_rng(2)
    m, l_, keep = 10, 37, 30
    q, kt = (rng.integers(-12, 13, s).astype(np.int8) for s in ((m, 16), (16, l_)))
    scores = q.astype(np.int32) @ kt.astype(np.int32)
    want = np.zeros((m, l_), np.int8)
    want[:, :keep] = softmax_rows(scores[:, :keep], iexp_constants())
    assert len(np.unique(want)) > 10
    for backend in ("interpreter", "sim"):
        got = np.zeros((m, l_), np.int8)
        row_softmax[(1,)](q, kt, got, m, l_, keep, BLOCK_M=16, BLOCK_L=48, backend=backend)
        np.testing.assert_array_equal(got, want, err_msg=backend)
    _raises_at(softmax_float, "baco.softmax(", "baco.softmax: the operand must be a 2-D int32",
               np.zeros(4, np.int32), np.zeros(4, np.int8), BLOCK=4)
    x = np.zeros((16, 16), np.int8)
    _raises_at(softmax_of_scaled, "baco.softmax(", "raw int32 accumulator", x,
               np.zeros((16, 16), np.int8), BLOCK=16, backend="sim")


def test_gelu_is_gemminis_integer_gelu_on_int32_blocks():
    from accel.lower import igelu_constants
    from accel.sim.reference import requantize

    x = np.arange(-200, 200, 25, dtype=np.int32)
    y = np.zeros(x.size, np.int8)
    gelu_int[(1,)](x, y, -2e-4, BLOCK=x.size)
    np.testing.assert_array_equal(y, requantize(x, -2e-4, gelu=igelu_constants()))
    _raises_at(gelu_float, "baco.gelu(", "baco.gelu: the operand must be an int32 block",
               np.zeros(4, np.float32), np.zeros(4, np.float32), BLOCK=4)
