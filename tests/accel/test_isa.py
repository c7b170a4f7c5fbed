"""The Gemmini ISA and traces: encodings against gemmini.h, exact round trips, errors."""

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.isa import (
    FENCE_WORD,
    GARBAGE_ADDR,
    LAYOUTS,
    MNEMONICS,
    Funct,
    Instruction,
    IsaParams,
    LocalAddr,
    f32_bits,
    f32_value,
)
from accel.trace import MAGIC, Region, Trace
from workloads.errors import ConfigError, TraceError

ONE_F32 = 0x3F800000  # float32 1.0 (ACC_SCALE_IDENTITY / MVIN_SCALE_IDENTITY)


# ---------------------------------------------------------------------------------------------
# Strategies.

local_raws = st.one_of(
    st.integers(0, 0x3FFF),  # scratchpad rows
    st.integers(0, 0x3FF).map(lambda r: 1 << 31 | r),  # accumulator
    st.integers(0, 0x3FF).map(lambda r: 3 << 30 | r),  # accumulate
    st.integers(0, 0x3FF).map(lambda r: 7 << 29 | r),  # accumulate + full
    st.just(GARBAGE_ADDR),
    st.integers(0, 0xFFFFFFFF),  # anything, including flags and norm bits
)
f32_raws = st.one_of(
    st.integers(0, 0xFFFFFFFF),
    st.floats(width=32, allow_nan=False).map(f32_bits),
    st.sampled_from([ONE_F32, 0x7FC00001, 0xFF800000, 0x80000000, 1]),
)


def field_raws(f):
    if f.kind == "local":
        return local_raws
    if f.kind == "f32":
        return f32_raws
    return st.one_of(st.integers(0, min(f.max, 64)), st.integers(0, f.max))


@st.composite
def field_values(draw, mnemonics=st.sampled_from(MNEMONICS)):
    """A mnemonic and raw values for each of its operands."""
    layout = LAYOUTS[draw(mnemonics)]
    return layout, {f.name: draw(field_raws(f)) for f in layout.operands}


def pack(layout, raws):
    """rs1, rs2 packed here, independently of the library's packing."""
    regs = {"rs1": 0, "rs2": 0}
    for f in layout.fields:
        value = f.fixed if f.fixed is not None else raws[f.name]
        regs[f.reg] |= value << f.lsb
    return regs["rs1"], regs["rs2"]


@st.composite
def instructions(draw):
    layout, raws = draw(field_values())
    return Instruction(layout.funct, *pack(layout, raws))


# ---------------------------------------------------------------------------------------------
# Encodings against the reference.


def test_funct_numbers_match_gemmini_h():
    expected = {
        "config_ex": 0, "config_ld": 0, "config_st": 0, "config_norm": 0, "mvin2": 1, "mvin": 2,
        "mvout": 3, "compute_preloaded": 4, "compute_accumulated": 5, "preload": 6, "flush": 7,
        "loop_ws": 8, "loop_ws_config_bounds": 9, "loop_ws_config_addrs_ab": 10,
        "loop_ws_config_addrs_dc": 11, "loop_ws_config_strides_ab": 12,
        "loop_ws_config_strides_dc": 13, "mvin3": 14, "loop_conv_ws": 15,
        **{f"loop_conv_ws_config_{n}": 15 + n for n in range(1, 7)},
    }
    assert {m: int(LAYOUTS[m].funct) for m in expected} == expected
    assert set(MNEMONICS) == set(expected) | {"fence", "mvout_spad"}   # baco's extension


@pytest.mark.parametrize("mnemonic", [m for m in MNEMONICS if m != "fence"])
def test_words_are_rocc_custom3_with_funct7(mnemonic):
    ins = Instruction.build(mnemonic, **{
        f.name: 0 for f in LAYOUTS[mnemonic].operands if f.default is None})
    word, rs1, rs2 = ins.encode()
    assert word & 0x7F == 0b1111011  # custom-3
    assert word >> 12 & 7 == 3  # xs1, xs2, no xd
    assert word >> 7 & 31 == 0  # rd = x0
    assert word >> 25 == LAYOUTS[mnemonic].funct
    assert (rs1, rs2) == (ins.rs1, ins.rs2)


def test_mvin_mvout_packing():
    # gemmini_extended_mvin: rs2 = rows << (ADDR_LEN + 16) | cols << ADDR_LEN | spad_addr.
    acc = (1 << 31) | (1 << 29) | 0x20
    ins = Instruction.mvout(0xDEAD_BEEF_00, LocalAddr.accumulator(0x20, full=True), 7, 48)
    assert (ins.funct, ins.rs1, ins.rs2) == (3, 0xDEAD_BEEF_00, 7 << 48 | 48 << 32 | acc)
    ins = Instruction.mvin2(0x1000, 0x123, 16, 64)
    assert (ins.funct, ins.rs1, ins.rs2) == (1, 0x1000, 16 << 48 | 64 << 32 | 0x123)
    assert Instruction.mvin3(0, LocalAddr.accumulator(0), 1, 1).funct == 14


def test_preload_and_compute_packing():
    c = 3 << 30 | 0x10
    ins = Instruction.preload(LocalAddr.garbage(), c, 16, 16, 12, 9)
    assert ins.rs1 == 16 << 48 | 16 << 32 | GARBAGE_ADDR
    assert ins.rs2 == 12 << 48 | 9 << 32 | c
    ins = Instruction.compute_accumulated(0x40, LocalAddr.garbage(), 5, 6, 7, 8)
    assert ins.rs1 == 5 << 48 | 6 << 32 | 0x40
    assert ins.rs2 == 7 << 48 | 8 << 32 | GARBAGE_ADDR
    assert ins.fields()["bd"].is_garbage


def test_config_packing_matches_gemmini_macros():
    # gemmini_extended3_config_ex(WS, RELU, sys_shift=3, acc_scale=1.0, C_stride=2,
    # A_stride=4, A_transpose=1, B_transpose=0, set_only_strides=0).
    ex = Instruction.config_ex("ws", "relu", sys_shift=3, acc_scale=1.0, c_stride=2,
                               a_stride=4, a_transpose=True)
    assert ex.rs1 == ONE_F32 << 32 | 4 << 16 | 0 << 9 | 1 << 8 | 0 << 7 | 1 << 3 | 1 << 2 | 0
    assert ex.rs2 == 2 << 48 | 3
    # gemmini_extended5_config_ld(stride=64, scale=0.5, shrunk=1, block_mvin_stride=16,
    # pixel_repeats=2, id=2).
    ld = Instruction.config_ld(64, scale=0.5, shrunk=True, block_stride=16, pixel_repeats=2, id=2)
    assert ld.rs1 == 0x3F000000 << 32 | 16 << 16 | 2 << 8 | 2 << 3 | 1 << 2 | 1
    assert ld.rs2 == 64
    # gemmini_extended2_config_st(stride=128, acc_act=RELU, acc_scale=2.0, pool_stride=2,
    # pool_size=3, pool_out_dim=9, porows=4, pocols=5, orows=6, ocols=7, upad=1, lpad=2).
    st_ = Instruction.config_st(128, act="relu", acc_scale=2.0, pool_stride=2, pool_size=3,
                                pool_out_dim=9, porows=4, pocols=5, orows=6, ocols=7,
                                upad=1, lpad=2)
    assert st_.rs1 == (7 << 56 | 6 << 48 | 5 << 40 | 4 << 32 | 9 << 24 | 2 << 10 | 1 << 8
                       | 3 << 6 | 2 << 4 | 1 << 2 | 2)
    assert st_.rs2 == 0x40000000 << 32 | 128
    assert [i.mnemonic for i in (ex, ld, st_)] == ["config_ex", "config_ld", "config_st"]
    assert ex.fields()["acc_scale"] == 1.0 and ld.fields()["scale"] == 0.5


def test_loop_ws_sequence_matches_gemmini_loop_ws():
    seq = Instruction.loop_ws(i=2, j=3, k=4, pad_i=1, pad_j=2, pad_k=3, a=0xA000, b=0xB000,
                              c=0xC000, d=0xD000, a_stride=64, b_stride=48, c_stride=32,
                              d_stride=16, full_c=True, ex_accumulate=True, act="relu",
                              a_spad_id=1, b_spad_id=2, b_transpose=True, is_resadd=True)
    assert [i.funct for i in seq] == [9, 10, 11, 12, 13, 8]
    assert (seq[0].rs1, seq[0].rs2) == (3 << 32 | 2 << 16 | 1, 4 << 32 | 3 << 16 | 2)
    assert (seq[1].rs1, seq[1].rs2) == (0xA000, 0xB000)
    assert (seq[2].rs1, seq[2].rs2) == (0xD000, 0xC000)
    assert (seq[3].rs1, seq[3].rs2) == (64, 48)
    assert (seq[4].rs1, seq[4].rs2) == (16, 32)
    assert seq[5].rs1 == 1 << 18 | 2 << 16 | 1 << 8 | 0 << 2 | 1 << 1 | 1
    assert seq[5].rs2 == 1 << 2 | 1 << 1 | 0


def test_loop_conv_ws_sequence_matches_gemmini_loop_conv_ws():
    seq = Instruction.loop_conv_ws(
        batch_size=1, in_row_dim=56, in_channels=64, out_channels=128, out_row_dim=28,
        pool_out_row_dim=14, out_col_dim=27, stride=2, padding=1, kernel_dim=3,
        pool_out_col_dim=13, pool_size=3, pool_stride=2, pool_padding=1, batches=1,
        porows=7, pocols=6, pochs=32, krows=3, kcols=3, kchs=64, lpad=1, rpad=2, upad=3,
        dpad=4, plpad=5, in_col_dim=55, orows=9, prpad=6, pupad=7, pdpad=8,
        kernel_dilation=2, ocols=10, in_stride=64, weight_stride=128, out_stride=96,
        weights=0x1000, output=0x2000, bias=0x3000, input=0x4000, no_bias=True, dw=True,
        max_pixels_per_row=4, a_spad_id=3, b_spad_id=1, activation="relu", no_pool=True)
    assert [i.funct for i in seq] == [16, 17, 18, 19, 20, 21, 15]
    c1, c2, c3, c4, c5, c6, loop = seq
    assert c1.rs1 == 128 << 48 | 64 << 32 | 56 << 16 | 1
    assert c1.rs2 == 1 << 56 | 2 << 48 | 27 << 32 | 14 << 16 | 28
    assert c2.rs1 == 3 << 48 | 13 << 32 | 3 << 16 | 2 << 8 | 1
    assert c2.rs2 == 1 << 48 | 7 << 32 | 6 << 16 | 32
    assert c3.rs1 == 3 << 48 | 3 << 32 | 64 << 16 | 1
    assert c3.rs2 == 2 << 48 | 3 << 32 | 4 << 24 | 5 << 16 | 55
    assert c4.rs1 == 9 << 48 | 6 << 32 | 7 << 21 | 8 << 10 | 2
    assert c4.rs2 == 64 << 48 | 128 << 32 | 96 << 16 | 10
    assert (c5.rs1, c5.rs2, c6.rs1, c6.rs2) == (0x1000, 0x2000, 0x3000, 0x4000)
    assert loop.rs1 == 3 << 18 | 1 << 16 | 4 << 8 | 1 << 6 | 1
    assert loop.rs2 == 1 << 3 | 1


def test_local_addresses():
    assert LocalAddr.sp(5).raw == 5
    assert LocalAddr.accumulator(5).raw == 1 << 31 | 5
    assert LocalAddr.accumulator(5, accumulate=True).raw == 3 << 30 | 5  # C_sp_addr_start
    assert LocalAddr.accumulator(5, full=True).raw == 1 << 31 | 1 << 29 | 5
    assert LocalAddr.accumulator(0, norm=2).raw == 1 << 31 | 2 << 26
    assert LocalAddr.garbage().raw == GARBAGE_ADDR and LocalAddr.garbage().is_garbage
    assert not LocalAddr.accumulator(0x3FFFFFF, accumulate=True, full=True).is_garbage
    for raw in (0, 0x3FFF, 1 << 31 | 7, 0xC0000010, 0xE4000003, GARBAGE_ADDR, 0x20000001):
        addr = LocalAddr.from_raw(raw)
        assert addr.raw == raw
        assert LocalAddr.from_text(addr.to_text()) == addr
    assert LocalAddr.from_raw(0xC0000010).to_text() == "acc:0x0010+accumulate"
    assert LocalAddr.from_text("sp:0x20") == LocalAddr.sp(0x20)
    with pytest.raises(TraceError):
        LocalAddr.from_text("acc:0x10+bogus")
    with pytest.raises(TraceError):
        LocalAddr.sp(1 << 26)


def test_fence_encodes_to_the_base_isa_fence():
    fence = Instruction.fence()
    assert fence.encode() == (FENCE_WORD, 0, 0) and fence.funct == Funct.FENCE
    assert Instruction.decode(0x0FF0000F) == fence
    assert fence.to_text() == "fence" and Instruction.from_text("  fence  # done") == fence
    with pytest.raises(TraceError) as err:
        Instruction.decode(FENCE_WORD, 1, 0)
    assert err.value.field == "rs1"


def test_text_example_from_the_brief():
    line = "mvin dram=0x1000 sp=0x0000 rows=16 cols=16"
    ins = Instruction.from_text(line + "   # load A")
    assert ins == Instruction.mvin(0x1000, 0, 16, 16)
    assert ins.to_text() == line
    pre = Instruction.from_text("preload bd=garbage bd_rows=16 bd_cols=16 "
                                "c=acc:0x0010+accumulate c_rows=16 c_cols=16")
    assert pre.fields()["c"] == LocalAddr.accumulator(0x10, accumulate=True)
    # Omitted optional operands take gemmini.h's defaults.
    assert Instruction.from_text("config_ex") == Instruction.config_ex()
    assert Instruction.from_text("config_ex").fields()["a_stride"] == 1


def test_f32_fields_print_as_values_and_keep_nan_payloads():
    ins = Instruction.config_st(16, acc_scale=0.1)
    assert "acc_scale=0.1 " in ins.to_text() + " "
    nan = Instruction(0, 2, 0x7FC00001 << 32)
    assert "acc_scale=0x7fc00001" in nan.to_text()
    assert Instruction.from_text(nan.to_text()) == nan


# ---------------------------------------------------------------------------------------------
# Round trips (all functs).


@settings(max_examples=400)
@given(field_values())
def test_fields_pack_and_unpack_exactly(layout_and_raws):
    layout, raws = layout_and_raws
    ins = Instruction(layout.funct, *pack(layout, raws))
    assert ins.mnemonic == layout.mnemonic
    assert ins.raw_fields() == raws
    # The typed path: the same operands as Python values build the same instruction.
    values = {}
    for name, raw in raws.items():
        kind = layout.field(name).kind
        values[name] = (LocalAddr.from_raw(raw) if kind == "local"
                        else f32_value(raw) if kind == "f32" else raw)
    if not any(isinstance(v, float) and math.isnan(v) for v in values.values()):
        assert Instruction.build(layout.mnemonic, **values) == ins
    assert ins.fields().keys() == raws.keys()


@settings(max_examples=400)
@given(instructions())
def test_word_and_text_round_trips_are_exact(ins):
    word, rs1, rs2 = ins.encode()
    assert 0 <= word < 1 << 32
    back = Instruction.decode(word, rs1, rs2)
    assert back == ins and back.encode() == (word, rs1, rs2)
    text = ins.to_text()
    assert "\n" not in text and "#" not in text
    assert Instruction.from_text(text) == ins
    assert Instruction.from_text(text).to_text() == text


@settings(max_examples=400)
@given(st.integers(0, 0xFFFFFFFF), st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1))
def test_decode_is_exact_or_a_trace_error(word, rs1, rs2):
    try:
        ins = Instruction.decode(word, rs1, rs2)
    except TraceError as err:
        assert err.field is not None
        return
    assert ins.encode() == (word, rs1, rs2)


@given(st.lists(instructions(), max_size=12))
def test_trace_text_and_binary_round_trips(items):
    trace = Trace(items)
    text = trace.to_text()
    assert Trace.from_text(text) == trace
    assert Trace.from_text(text).to_text() == text
    assert Trace.from_bytes(trace.to_bytes()) == trace
    assert len(trace.to_bytes()) == 16 + 20 * len(trace)
    arrays = trace.as_arrays()
    assert all(a.dtype == np.uint64 and a.shape == (len(trace),) for a in arrays)
    assert Trace.from_arrays(*arrays) == trace


@given(st.text(max_size=80))
def test_text_parser_raises_only_trace_errors(text):
    try:
        Trace.from_text(text)
    except TraceError:
        pass


@given(st.binary(max_size=120))
def test_binary_parser_raises_only_trace_errors(data):
    try:
        Trace.from_bytes(data)
    except TraceError:
        pass
    try:
        Trace.from_bytes(MAGIC + struct.pack("<HHI", 1, 0, len(data) // 20) + data)
    except TraceError:
        pass


def test_text_allows_comments_and_blank_lines():
    text = """
    # a tiny program
    config_ld stride=16 block_stride=16   # A rows are 16 bytes apart

    mvin dram=0x1000 sp=0x0000 rows=16 cols=16
    fence
    """
    trace = Trace.from_text(text)
    assert [i.mnemonic for i in trace] == ["config_ld", "mvin", "fence"]
    assert trace[1:].to_text().splitlines()[0].startswith("mvin ")


@pytest.mark.parametrize("suffix", [".s", ".txt", ".bin", ".trace"])
def test_save_and_load_choose_the_format_by_suffix(tmp_path, suffix):
    trace = Trace([Instruction.config_ld(16), Instruction.mvin(0x40, 3, 16, 16),
                   Instruction.fence()])
    path = tmp_path / f"prog{suffix}"
    trace.save(path)
    assert Trace.load(path) == trace
    raw = path.read_bytes()
    assert raw.startswith(MAGIC) == (suffix in (".bin", ".trace"))


def test_unknown_suffix_is_rejected(tmp_path):
    with pytest.raises(TraceError, match="suffix"):
        Trace([]).save(tmp_path / "prog.xyz")


# ---------------------------------------------------------------------------------------------
# Errors name the instruction and the field.


def test_unknown_funct():
    with pytest.raises(TraceError) as err:
        Instruction(22, 0, 0)
    assert err.value.field == "funct"
    word = Instruction.fence().encode()[0]
    custom3_funct22 = (Instruction.mvin(0, 0, 1, 1).encode()[0] & 0x01FFFFFF) | 22 << 25
    with pytest.raises(TraceError) as err:
        Instruction.decode(custom3_funct22, 0, 0)
    assert err.value.field == "funct" and word == FENCE_WORD


def test_opcode_must_be_custom3():
    addi = 0x00000013  # addi x0, x0, 0
    with pytest.raises(TraceError) as err:
        Instruction.decode(addi, 0, 0)
    assert err.value.field == "opcode" and "custom-3" in str(err.value)
    custom0 = (Instruction.mvin(0, 0, 1, 1).encode()[0] & ~0x7F) | 0x0B
    with pytest.raises(TraceError) as err:
        Instruction.decode(custom0, 0, 0)
    assert err.value.field == "opcode"


def test_non_canonical_register_fields_are_rejected():
    word = Instruction.mvin(0, 0, 1, 1).encode()[0]
    for name, flipped in (("rd", word | 1 << 7), ("funct3", word & ~(1 << 12)),
                          ("rs1_reg", word ^ 1 << 15), ("rs2_reg", word ^ 1 << 20)):
        with pytest.raises(TraceError) as err:
            Instruction.decode(flipped, 0, 0)
        assert err.value.field == name


def test_field_overflow_names_the_field():
    with pytest.raises(TraceError) as err:
        Instruction.mvin(0, 0, 1 << 16, 16)
    assert err.value.field == "rows" and "16 bits" in str(err.value)
    with pytest.raises(TraceError) as err:
        Instruction.mvin(1 << 64, 0, 1, 1)
    assert err.value.field == "dram"
    with pytest.raises(TraceError) as err:
        Instruction.config_ld(16, id=4)
    assert err.value.field == "id"


def test_reserved_bits_are_rejected():
    flush = Instruction.flush()
    with pytest.raises(TraceError) as err:
        Instruction(flush.funct, 1 << 5, 0)
    assert err.value.field == "rs1" and "[5]" in str(err.value)
    with pytest.raises(TraceError) as err:
        Instruction(flush.funct, 0, 1)
    assert err.value.field == "rs2"
    word = Instruction.config_ex().encode()[0]
    with pytest.raises(TraceError) as err:
        Instruction.decode(word, Instruction.config_ex().rs1 | 1 << 12, 0)  # bits 10-15: spacer
    assert err.value.field == "rs1" and err.value.mnemonic == "config_ex"


def test_text_errors_name_line_index_and_field():
    text = "config_ld stride=16 block_stride=16\n\n# comment\nmvin dram=0 sp=0 rows=99999 cols=1\n"
    with pytest.raises(TraceError) as err:
        Trace.from_text(text, source="prog.s")
    e = err.value
    assert (e.line, e.index, e.field) == (4, 1, "rows")
    assert str(e).startswith("prog.s:4: instruction #1 (mvin), field 'rows'")
    for line, field in (("mvinn dram=0", "mnemonic"), ("mvin dram=0 sp=0 rows=1", "cols"),
                        ("mvin dram=0 sp=0 rows=1 cols=1 color=3", "color"),
                        ("mvin dram=zero sp=0 rows=1 cols=1", "dram"),
                        ("mvin dram=0 sp=acc:0x1+wat rows=1 cols=1", "sp"),
                        ("mvin dram=0 dram=1 sp=0 rows=1 cols=1", "dram"),
                        ("config_ex dataflow=diagonal", "dataflow"),
                        ("config_st stride=1 acc_scale=1e99", "acc_scale")):
        with pytest.raises(TraceError) as err:
            Trace.from_text("fence\n" + line)
        assert (err.value.line, err.value.index, err.value.field) == (2, 1, field), line


def test_binary_errors():
    trace = Trace([Instruction.fence(), Instruction.mvin(0, 0, 1, 1), Instruction.fence()])
    data = trace.to_bytes()
    with pytest.raises(TraceError) as err:
        Trace.from_bytes(data[:-7], source="p.bin")
    assert err.value.field == "record" and err.value.index == 2 and "truncated" in str(err.value)
    with pytest.raises(TraceError) as err:
        Trace.from_bytes(data[:10])
    assert err.value.field == "header"
    with pytest.raises(TraceError) as err:
        Trace.from_bytes(b"NOTATRCE" + data[8:])
    assert err.value.field == "magic"
    with pytest.raises(TraceError) as err:
        Trace.from_bytes(data[:8] + struct.pack("<H", 9) + data[10:])
    assert err.value.field == "version"
    with pytest.raises(TraceError) as err:
        Trace.from_bytes(data + b"\0")
    assert "trailing" in str(err.value)
    corrupt = bytearray(data)
    corrupt[16 + 20 + 3] = 22 << 1  # funct7 of record #1 := 22
    with pytest.raises(TraceError) as err:
        Trace.from_bytes(bytes(corrupt))
    assert (err.value.index, err.value.field) == (1, "funct")


def test_validate_checks_ranges_against_the_hardware():
    params = IsaParams()
    garbage, acc = LocalAddr.garbage(), LocalAddr.accumulator
    Trace([Instruction.mvin(0, params.sp_rows - 16, 16, 16),
           Instruction.mvin3(0, acc(params.acc_rows - 16), 16, 16)]).validate(params)
    fence = Instruction.fence()
    cases = [
        ([Instruction.mvin(0, params.sp_rows - 8, 16, 16)], "sp", "out of range"),
        ([Instruction.mvin(0, params.sp_rows - 40, 16, 64)], "sp", "out of range"),  # 4 blocks
        ([Instruction.mvin(0, 0, 17, 16)], "rows", "array dimension"),
        ([Instruction.mvin(0, 0, 16, 65)], "cols", "exceed"),
        ([Instruction.mvin3(0, acc(0), 16, 17)], "cols", "exceed"),  # int32 rows: one block
        ([Instruction.mvout(0, acc(params.acc_rows), 1, 1)], "sp", "out of range"),
        ([Instruction.mvout(0, garbage, 1, 1)], "sp", "garbage"),
        ([Instruction.compute_preloaded(16380, garbage, 16, 16, 16, 16)], "a", "out of range"),
        ([Instruction.compute_preloaded(0, garbage, 16, 20, 16, 16)], "a_cols", "dimension"),
        ([Instruction.config_ld(16, id=3)], "id", "load state"),
        # C is written by the compute that pairs with the preload, so the compute is named.
        ([Instruction.preload(garbage, acc(1020), 16, 16, 16, 16),
          Instruction.compute_preloaded(0, garbage, 16, 16, 16, 16)], "c", "out of range"),
    ]
    for bad, field, words in cases:
        trace = Trace([fence, *bad])
        with pytest.raises(TraceError, match=words) as err:
            trace.validate(params)
        assert (err.value.index, err.value.field) == (len(bad), field), bad[-1].to_text()
    # A smaller machine rejects what the default one accepts.
    with pytest.raises(TraceError):
        Trace([Instruction.mvin(0, 1000, 16, 16)]).validate(IsaParams(sp_rows=1008))


def test_accesses_follow_the_configuration():
    trace = Trace([
        Instruction.config_ld(100, block_stride=32, id=1),
        Instruction.mvin2(0x1000, 0, 16, 64),  # 4 DIM-wide blocks, 32 rows apart
        Instruction.config_ld(0, id=2),
        Instruction.mvin3(0x2000, LocalAddr.accumulator(0, accumulate=True), 4, 16),
        Instruction.config_ex(a_stride=2, c_stride=3),
        Instruction.preload(0x40, LocalAddr.accumulator(8), 16, 16, 4, 16),
        Instruction.compute_preloaded(0x80, LocalAddr.garbage(), 3, 16, 16, 16),
        Instruction.config_st(64),
        Instruction.mvout(0x3000, LocalAddr.accumulator(8, full=True), 2, 16),
    ])
    acc = trace.accesses()
    dram = [r for r in acc[1].reads if r.space == "dram"]
    assert dram == [Region("dram", 0x1000 + 100 * r, 0x1000 + 100 * r + 64) for r in range(16)]
    assert acc[1].writes == tuple(Region("sp", 32 * b, 32 * b + 16) for b in range(4))
    assert acc[1].rows == 64
    # Zero stride: one DRAM row, int32 elements; accumulate reads the rows it writes.
    assert [r for r in acc[3].reads if r.space == "dram"] == [Region("dram", 0x2000, 0x2040)]
    assert Region("acc", 0, 4) in acc[3].reads and acc[3].writes == (Region("acc", 0, 4),)
    # The preload hands C (4 rows, c_stride 3 apart) to the compute; A rows are 2 apart.
    assert all(r.space != "acc" for r in acc[5].writes)
    assert Region("sp", 0x40, 0x50) in acc[5].reads
    assert [r for r in acc[6].writes if r.space == "acc"] == [
        Region("acc", 8 + 3 * n, 9 + 3 * n) for n in range(4)]
    assert [r for r in acc[6].reads if r.space == "sp"] == [
        Region("sp", 0x80 + 2 * n, 0x81 + 2 * n) for n in range(3)]
    # Two int32 rows of 64 bytes, 64 bytes apart: one contiguous DRAM range.
    assert acc[8].writes == (Region("dram", 0x3000, 0x3080),)
    assert Region("acc", 8, 10) in acc[8].reads and Region.cell("cfg.ex") in acc[8].reads


def test_trace_is_a_sequence_and_instructions_are_editable():
    a, b = Instruction.mvin(0, 0, 16, 16), Instruction.fence()
    trace = Trace([a]) + [b]
    assert len(trace) == 2 and trace[0] == a and list(trace) == [a, b] and b in trace
    assert isinstance(trace[1:], Trace) and trace[1:] == Trace([b])
    assert a["rows"] == 16 and a.replace(rows=4)["rows"] == 4 and a.replace(rows=4) != a
    with pytest.raises(TraceError) as err:
        a.replace(rows=1 << 16)
    assert err.value.field == "rows"
    with pytest.raises(TraceError) as err:
        Trace([a, "mvin"])
    assert err.value.index == 1


def test_loading_non_utf8_text_is_a_trace_error(tmp_path):
    path = tmp_path / "prog.s"
    path.write_bytes(b"fence\n\xff\xfe\n")
    with pytest.raises(TraceError, match="UTF-8") as err:
        Trace.load(path)
    assert err.value.source == str(path)


def test_isa_params_from_a_hardware_config():
    from types import SimpleNamespace

    gemmini = SimpleNamespace(pe_rows=16, pe_cols=16, sp_kb=256.0, acc_kb=64.0, input_bits=8,
                              acc_bits=32)
    assert IsaParams.from_hardware(gemmini) == IsaParams()
    small = SimpleNamespace(pe_rows=8, pe_cols=8, sp_kb=32.0, acc_kb=8.0, input_bits=8,
                            acc_bits=32)
    assert (IsaParams.from_hardware(small).sp_rows,
            IsaParams.from_hardware(small).acc_rows) == (4096, 256)
    with pytest.raises(ConfigError, match="square"):
        IsaParams.from_hardware(SimpleNamespace(**{**vars(small), "pe_cols": 4}))
