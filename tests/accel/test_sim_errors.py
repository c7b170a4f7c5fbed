"""accel.sim on bad input: every rejection is a TraceError naming the instruction and field."""

from __future__ import annotations

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import Funct, Instruction, LocalAddr
from accel.sim import DramImage, run
from accel.trace import Trace
from workloads.errors import TraceError

HW = HardwareConfig.preset("gemmini_default")  # 16x16, 16384 scratchpad rows, 1024 acc rows
G = LocalAddr.garbage()
ACC = LocalAddr.accumulator


def _image():
    image = DramImage()
    a = image.add("A", np.ones((16, 16), np.int8))
    out = image.reserve("out", (16, 16), np.int8)
    return image, a, out


def _error(trace, image=None, functional=True) -> TraceError:
    with pytest.raises(TraceError) as info:
        run(trace, HW, image, functional=functional)
    return info.value


def test_unknown_funct_in_raw_arrays():
    trace = Trace([Instruction.config_ld(16), Instruction.fence()]).as_arrays()
    funct = trace.funct.copy()
    funct[1] = 99
    err = _error((funct, trace.rs1, trace.rs2), functional=False)
    assert (err.index, err.field) == (1, "funct")


def test_reserved_bits_in_raw_arrays():
    arrays = Trace([Instruction.flush()]).as_arrays()
    err = _error((arrays.funct, arrays.rs1 | np.uint64(1 << 40), arrays.rs2), functional=False)
    assert (err.index, err.field) == (0, "rs1")


def test_malformed_arrays():
    with pytest.raises(TraceError):
        run((np.array([2, 3]), np.array([0]), np.array([0, 0])), HW, functional=False)
    with pytest.raises(TraceError):
        run((np.array([-1]), np.array([0]), np.array([0])), HW, functional=False)


def test_rows_beyond_the_array():
    mvin = Instruction.mvin(0, 0, 16, 16)
    word = Instruction(Funct.MVIN, mvin.rs1, mvin.rs2 + (1 << 48))  # rows = 17
    err = _error(Trace([Instruction.config_ld(16), word]), functional=False)
    assert (err.index, err.field) == (1, "rows")
    pre = Instruction.preload(0, ACC(0), 16, 16, 16, 16).replace(bd_cols=20)
    err = _error(Trace([pre]), functional=False)
    assert (err.index, err.field) == (0, "bd_cols")


def test_scratchpad_address_out_of_range():
    image, a, _ = _image()
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(a, 0, 16, 16),
                   Instruction.mvin(a, 16384 - 8, 16, 16)])
    err = _error(trace, image)
    assert (err.index, err.field) == (2, "sp")
    assert "16384" in str(err)


def test_accumulator_capacity_overflow_by_blocks():
    image = DramImage()
    a = image.add("A", np.ones((16, 64), np.int8))
    # An mvin of 4 column blocks spaced 300 rows apart from row 200: block 3 ends past 1024.
    trace = Trace([Instruction.config_ld(64, shrunk=True, block_stride=300),
                   Instruction.mvin(a, ACC(200), 16, 64)])
    err = _error(trace, image)
    assert (err.index, err.field) == (1, "sp")


def test_compute_operand_out_of_range():
    trace = Trace([Instruction.preload(G, ACC(1020), 16, 16, 16, 16),
                   Instruction.compute_preloaded(0, G, 16, 16, 16, 16)])
    err = _error(trace, functional=False)
    assert (err.index, err.field) == (0, "c")
    strided = Trace([Instruction.config_ex(a_stride=2000), Instruction.preload(G, ACC(0), 16, 16,
                                                                               16, 16),
                     Instruction.compute_preloaded(0, G, 16, 16, 16, 16)])
    err = _error(strided, functional=False)
    assert (err.index, err.field) == (2, "a")


def test_dram_out_of_range():
    image, a, _ = _image()
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(a + image.size_bytes, 0, 16, 16)])
    err = _error(trace, image)
    assert (err.index, err.field) == (1, "dram")


def test_read_of_never_written_scratchpad():
    image, a, _ = _image()
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(a, 0, 16, 16),
                   Instruction.preload(G, ACC(0), 16, 16, 16, 16),
                   Instruction.compute_preloaded(64, G, 16, 16, 16, 16)])
    err = _error(trace, image)
    assert (err.index, err.field, err.mnemonic) == (3, "a", "compute_preloaded")


def test_partial_column_write_leaves_the_rest_unwritten():
    image, a, _ = _image()
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(a, 0, 16, 8),
                   Instruction.preload(G, ACC(0), 16, 16, 16, 16),
                   Instruction.compute_preloaded(0, G, 16, 8, 16, 16),  # reads 8 columns: fine
                   Instruction.preload(G, ACC(16), 16, 16, 16, 16),
                   Instruction.compute_preloaded(0, G, 16, 9, 16, 16)])  # column 8: never written
    err = _error(trace, image)
    assert (err.index, err.field) == (5, "a")


def test_read_of_uninitialized_dram():
    image, _, out = _image()
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(out, 0, 16, 16)])
    err = _error(trace, image)
    assert (err.index, err.field) == (1, "dram")


def test_accumulate_onto_never_written_accumulator():
    image, a, _ = _image()
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(a, 0, 16, 16),
                   Instruction.preload(G, ACC(0, accumulate=True), 16, 16, 16, 16),
                   Instruction.compute_preloaded(0, G, 16, 16, 16, 16)])
    err = _error(trace, image)
    assert (err.index, err.field) == (3, "c")


def test_mvout_of_never_written_accumulator():
    image, _, out = _image()
    trace = Trace([Instruction.config_st(16), Instruction.mvout(out, ACC(0), 16, 16)])
    err = _error(trace, image)
    assert (err.index, err.field) == (1, "sp")


def test_unsupported_features_are_named():
    image, _, out = _image()
    pool = Trace([Instruction.config_st(16, pool_stride=2, pool_size=2, pool_out_dim=4),
                  Instruction.mvout(out, ACC(0), 16, 16)])
    assert _error(pool, image).field == "pool_stride"
    # Pixel repeats are simulated on scratchpad mvins of one block, not beyond.
    repeats = Trace([Instruction.config_ld(16, pixel_repeats=17)])
    assert _error(repeats, image).field == "pixel_repeats"
    wide = Trace([Instruction.config_ld(64, pixel_repeats=2), Instruction.mvin(0, 0, 4, 32)])
    assert _error(wide, image).field == "sp"
    conv = Trace(Instruction.loop_conv_ws(batch_size=1, weights=0, output=0, bias=0, input=0))
    err = _error(conv, image)
    assert err.field == "funct" and err.index == 0
    norm = Trace([Instruction.config_ex(act="layernorm")])
    assert _error(norm, image).field == "act"
    both = Trace([Instruction.config_ex("ws", a_transpose=True, b_transpose=True),
                  Instruction.preload(G, ACC(0), 16, 16, 16, 16),
                  Instruction.compute_preloaded(G, G, 16, 16, 16, 16)])
    assert _error(both, image).field == "b_transpose"


def test_moves_to_the_garbage_address():
    image, a, _ = _image()
    err = _error(Trace([Instruction.mvin(a, G, 16, 16)]), image)
    assert (err.index, err.field) == (0, "sp")
