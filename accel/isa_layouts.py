"""Each mnemonic's `Layout`: the named bit fields of rs1 and rs2, and how a field's raw bits read
as a Python value and as assembly text.

Bits outside every field are reserved and must be zero, and every field must fit its width, so
each valid (funct, rs1, rs2) has exactly one text form and the text and binary round trips are
exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from accel.isa_encoding import U64_MAX, ConfigType, Dataflow, Funct
from accel.isa_values import LocalAddr, f32_bits, f32_text, f32_value, parse_uint
from accel.trace_errors import trace_error
from workloads.errors import TraceError

# ---------------------------------------------------------------------------------------------
# Field layouts.


@dataclasses.dataclass(frozen=True)
class Field:
    """One named bit field of rs1 or rs2.

    ``kind`` says how the field reads and prints: ``int`` (decimal), ``hex`` (addresses),
    ``bool``, ``local`` (`LocalAddr`), ``f32`` (an IEEE float32 bit pattern, printed as its
    value) or ``choice`` (a small enum printed by name). ``default`` (None = required) is used
    by the typed constructors and by text parsing when the operand is omitted; ``fixed``
    marks a selector (config type) that is part of the mnemonic, not an operand.
    """

    name: str
    reg: str
    lsb: int
    width: int
    kind: str = "int"
    default: Any = 0
    choices: tuple[str, ...] = ()
    fixed: int | None = None

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    @property
    def max(self) -> int:
        return (1 << self.width) - 1


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mnemonic's funct, its rs1/rs2 fields, and the bits that must be zero."""

    mnemonic: str
    funct: int
    fields: tuple[Field, ...]

    @property
    def operands(self) -> tuple[Field, ...]:
        """The fields shown in text (selectors excluded), in text order."""
        return tuple(f for f in self.fields if f.fixed is None)

    def __post_init__(self) -> None:
        # Every instruction made checks its operands against these, so they are computed once
        # here (a cache keyed on the layout would hash its fields on every lookup).
        masks = {}
        for reg in ("rs1", "rs2"):
            used = 0
            for f in self.fields:
                if f.reg == reg:
                    used |= f.mask
            masks[reg] = U64_MAX & ~used
        object.__setattr__(self, "_reserved", masks)

    def reserved_mask(self, reg: str) -> int:
        """Bits of ``reg`` no field uses (they must be zero)."""
        return self._reserved[reg]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def _f(name, reg, lsb, width, kind="int", default=0, choices=(), fixed=None) -> Field:
    return Field(name, reg, lsb, width, kind, default, choices, fixed)


_ACT2 = ("none", "relu", "layernorm", "igelu")
_ACT3 = ("none", "relu", "layernorm", "igelu", "softmax")
_REQ = None  # a required operand


def _move(mnemonic: str, funct: Funct) -> Layout:
    # gemmini_extended_mvin / mvout: rs1 = DRAM byte address, rs2 = rows<<48 | cols<<32 | addr.
    return Layout(mnemonic, funct, (
        _f("dram", "rs1", 0, 64, "hex", _REQ),
        _f("sp", "rs2", 0, 32, "local", _REQ),
        _f("rows", "rs2", 48, 16, "int", _REQ),
        _f("cols", "rs2", 32, 16, "int", _REQ),
    ))


def _pair(mnemonic: str, funct: Funct, x: str, y: str) -> Layout:
    # preload / compute: rs1 and rs2 are each rows<<48 | cols<<32 | local address.
    return Layout(mnemonic, funct, (
        _f(x, "rs1", 0, 32, "local", _REQ),
        _f(f"{x}_rows", "rs1", 48, 16, "int", _REQ),
        _f(f"{x}_cols", "rs1", 32, 16, "int", _REQ),
        _f(y, "rs2", 0, 32, "local", _REQ),
        _f(f"{y}_rows", "rs2", 48, 16, "int", _REQ),
        _f(f"{y}_cols", "rs2", 32, 16, "int", _REQ),
    ))


def _two(mnemonic: str, funct: Funct, x: str, y: str, kind: str = "hex") -> Layout:
    # Two bare 64-bit operands: loop addresses (hex) or strides (int, in elements).
    return Layout(mnemonic, funct, (
        _f(x, "rs1", 0, 64, kind, _REQ), _f(y, "rs2", 0, 64, kind, _REQ),
    ))


def _packed(mnemonic: str, funct: Funct, rs1: list, rs2: list) -> Layout:
    # (name, lsb, width) lists, for the loop_conv_ws configs; all plain integers.
    return Layout(mnemonic, funct, tuple(
        [_f(n, "rs1", lsb, w) for n, lsb, w in rs1] + [_f(n, "rs2", lsb, w) for n, lsb, w in rs2]
    ))


LAYOUTS: dict[str, Layout] = {layout.mnemonic: layout for layout in (
    # gemmini_extended3_config_ex; ConfigExRs1 / ConfigExRs2 in GemminiISA.scala.
    # Text shows operands in layout order, so the important ones come first.
    Layout("config_ex", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.EX),
        _f("dataflow", "rs1", 2, 1, "choice", Dataflow.WS, ("os", "ws")),
        _f("act", "rs1", 3, 2, "choice", 0, _ACT2),
        _f("a_stride", "rs1", 16, 16, "int", 1),
        _f("c_stride", "rs2", 48, 16, "int", 1),
        _f("a_transpose", "rs1", 8, 1, "bool"),
        _f("b_transpose", "rs1", 9, 1, "bool"),
        _f("set_only_strides", "rs1", 7, 1, "bool"),
        _f("acc_scale", "rs1", 32, 32, "f32", 1.0),
        _f("sys_shift", "rs2", 0, 32),
        _f("relu6_shift", "rs2", 32, 16),
    )),
    # gemmini_extended5_config_ld; ConfigMvinRs1. rs2 is the DRAM row stride in bytes.
    Layout("config_ld", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.LD),
        _f("id", "rs1", 3, 2),
        _f("stride", "rs2", 0, 64, "int", _REQ),
        _f("block_stride", "rs1", 16, 16, "int", _REQ),
        _f("scale", "rs1", 32, 32, "f32", 1.0),
        _f("shrunk", "rs1", 2, 1, "bool"),
        _f("pixel_repeats", "rs1", 8, 8, "int", 1),
    )),
    # gemmini_extended2_config_st; ConfigMvoutRs1 / ConfigMvoutRs2.
    Layout("config_st", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.ST),
        _f("stride", "rs2", 0, 32, "int", _REQ),
        _f("act", "rs1", 2, 2, "choice", 0, _ACT2),
        _f("acc_scale", "rs2", 32, 32, "f32", 1.0),
        _f("pool_stride", "rs1", 4, 2),
        _f("pool_size", "rs1", 6, 2),
        _f("pool_out_dim", "rs1", 24, 8),
        _f("porows", "rs1", 32, 8),
        _f("pocols", "rs1", 40, 8),
        _f("orows", "rs1", 48, 8),
        _f("ocols", "rs1", 56, 8),
        _f("upad", "rs1", 8, 2),
        _f("lpad", "rs1", 10, 2),
    )),
    # gemmini_config_bert (CONFIG_BERT = 3): normalizer / I-GELU constants.
    Layout("config_norm", Funct.CONFIG, (
        _f("cmd_type", "rs1", 0, 2, fixed=ConfigType.NORM),
        _f("stat_id", "rs1", 8, 8),
        _f("act_msb", "rs1", 16, 1, "bool"),
        _f("set_stats_id_only", "rs1", 17, 1, "bool"),
        _f("q_const_type", "rs1", 18, 1, "bool"),
        _f("q_const", "rs1", 32, 32),
        _f("igelu_qb", "rs2", 0, 32),
        _f("igelu_qc", "rs2", 32, 32),
    )),
    _move("mvin", Funct.MVIN),
    _move("mvin2", Funct.MVIN2),
    _move("mvin3", Funct.MVIN3),
    _move("mvout", Funct.MVOUT),
    # baco extension (`accel.isa_encoding`): rs1 = source accumulator address, rs2 as a move's.
    Layout("mvout_spad", Funct.MVOUT_SPAD, (
        _f("src", "rs1", 0, 32, "local", _REQ),
        _f("dst", "rs2", 0, 32, "local", _REQ),
        _f("rows", "rs2", 48, 16, "int", _REQ),
        _f("cols", "rs2", 32, 16, "int", _REQ),
    )),
    _pair("preload", Funct.PRELOAD, "bd", "c"),
    _pair("compute_preloaded", Funct.COMPUTE_PRELOADED, "a", "bd"),
    _pair("compute_accumulated", Funct.COMPUTE_ACCUMULATED, "a", "bd"),
    Layout("flush", Funct.FLUSH, (_f("skip", "rs1", 0, 1, "bool"),)),
    # gemmini_loop_ws: five configs, then LOOP_WS itself.
    Layout("loop_ws_config_bounds", Funct.LOOP_WS_CONFIG_BOUNDS, (
        _f("i", "rs2", 0, 16, "int", _REQ),
        _f("j", "rs2", 16, 16, "int", _REQ),
        _f("k", "rs2", 32, 16, "int", _REQ),
        _f("pad_i", "rs1", 0, 16),
        _f("pad_j", "rs1", 16, 16),
        _f("pad_k", "rs1", 32, 16),
    )),
    _two("loop_ws_config_addrs_ab", Funct.LOOP_WS_CONFIG_ADDRS_AB, "a", "b"),
    _two("loop_ws_config_addrs_dc", Funct.LOOP_WS_CONFIG_ADDRS_DC, "d", "c"),
    _two("loop_ws_config_strides_ab", Funct.LOOP_WS_CONFIG_STRIDES_AB, "a_stride", "b_stride",
         "int"),
    _two("loop_ws_config_strides_dc", Funct.LOOP_WS_CONFIG_STRIDES_DC, "d_stride", "c_stride",
         "int"),
    Layout("loop_ws", Funct.LOOP_WS, (
        _f("ex_accumulate", "rs1", 0, 1, "bool"),
        _f("full_c", "rs1", 1, 1, "bool"),
        _f("low_d", "rs1", 2, 1, "bool"),
        _f("act", "rs1", 8, 3, "choice", 0, _ACT3),
        _f("b_spad_id", "rs1", 16, 2),
        _f("a_spad_id", "rs1", 18, 2),
        _f("a_transpose", "rs2", 0, 1, "bool"),
        _f("b_transpose", "rs2", 1, 1, "bool"),
        _f("is_resadd", "rs2", 2, 1, "bool"),
    )),
    # gemmini_loop_conv_ws: CONFIG_1..6 (funct 16-21), then LOOP_CONV_WS (15).
    _packed("loop_conv_ws_config_1", Funct.LOOP_CONV_WS_CONFIG_1,
            [("batch_size", 0, 16), ("in_row_dim", 16, 16), ("in_channels", 32, 16),
             ("out_channels", 48, 16)],
            [("out_row_dim", 0, 16), ("pool_out_row_dim", 16, 16), ("out_col_dim", 32, 16),
             ("stride", 48, 8), ("padding", 56, 8)]),
    _packed("loop_conv_ws_config_2", Funct.LOOP_CONV_WS_CONFIG_2,
            [("pool_padding", 0, 8), ("pool_stride", 8, 8), ("pool_size", 16, 16),
             ("pool_out_col_dim", 32, 16), ("kernel_dim", 48, 16)],
            [("pochs", 0, 16), ("pocols", 16, 16), ("porows", 32, 16), ("batches", 48, 16)]),
    _packed("loop_conv_ws_config_3", Funct.LOOP_CONV_WS_CONFIG_3,
            [("lpad", 0, 16), ("kchs", 16, 16), ("kcols", 32, 16), ("krows", 48, 16)],
            [("in_col_dim", 0, 16), ("plpad", 16, 8), ("dpad", 24, 8), ("upad", 32, 16),
             ("rpad", 48, 16)]),
    _packed("loop_conv_ws_config_4", Funct.LOOP_CONV_WS_CONFIG_4,
            [("kernel_dilation", 0, 10), ("pdpad", 10, 11), ("pupad", 21, 11),
             ("prpad", 32, 16), ("orows", 48, 16)],
            [("ocols", 0, 16), ("out_stride", 16, 16), ("weight_stride", 32, 16),
             ("in_stride", 48, 16)]),
    _two("loop_conv_ws_config_5", Funct.LOOP_CONV_WS_CONFIG_5, "weights", "output"),
    _two("loop_conv_ws_config_6", Funct.LOOP_CONV_WS_CONFIG_6, "bias", "input"),
    Layout("loop_conv_ws", Funct.LOOP_CONV_WS, (
        _f("no_bias", "rs1", 0, 1, "bool"),
        _f("wrot180", "rs1", 1, 1, "bool"),
        _f("trans_output_1203", "rs1", 2, 1, "bool"),
        _f("trans_weight_1203", "rs1", 3, 1, "bool"),
        _f("trans_weight_0132", "rs1", 4, 1, "bool"),
        _f("trans_input_3120", "rs1", 5, 1, "bool"),
        _f("dw", "rs1", 6, 1, "bool"),
        _f("max_pixels_per_row", "rs1", 8, 8, "int", 1),
        _f("b_spad_id", "rs1", 16, 2),
        _f("a_spad_id", "rs1", 18, 2),
        _f("no_pool", "rs2", 0, 1, "bool"),
        _f("downsample", "rs2", 1, 1, "bool"),
        _f("input_dilated", "rs2", 2, 1, "bool"),
        _f("activation", "rs2", 3, 3, "choice", 0, _ACT3),
    )),
    Layout("fence", Funct.FENCE, ()),
)}

MNEMONICS: tuple[str, ...] = tuple(LAYOUTS)
_CONFIG_LAYOUTS = {
    ConfigType.EX: LAYOUTS["config_ex"],
    ConfigType.LD: LAYOUTS["config_ld"],
    ConfigType.ST: LAYOUTS["config_st"],
    ConfigType.NORM: LAYOUTS["config_norm"],
}
_BY_FUNCT = {
    layout.funct: layout for layout in LAYOUTS.values() if layout.funct != Funct.CONFIG
}


def layout_of(funct: int, rs1: int = 0) -> Layout:
    """The layout for a funct (and, for CONFIG, the config type in rs1[1:0])."""
    if funct == Funct.CONFIG:
        return _CONFIG_LAYOUTS[ConfigType(rs1 & 3)]
    try:
        return _BY_FUNCT[funct]
    except KeyError:
        raise trace_error(
            f"unknown funct {funct}; Gemmini functs are 0-21 (and {int(Funct.MVOUT_SPAD)} for "
            f"mvout_spad, {int(Funct.FENCE)} for fence)",
            field="funct",
        ) from None



# ---------------------------------------------------------------------------------------------
# A field's value in bits, in Python and in text.


def raw_from_text(f: Field, text: str) -> int:
    """A field's raw bits from its text (the inverse of `text_from_raw`)."""
    if f.kind == "local":
        return LocalAddr.from_text(text).raw
    if f.kind == "f32":
        if text.lower().startswith("0x"):
            return parse_uint(text)
        try:
            return f32_bits(float(text))
        except ValueError:
            raise trace_error(f"{text!r} is not a float (or 0x.. float32 bits)") from None
    if f.kind == "bool" and text in ("true", "false"):
        return int(text == "true")
    if f.kind == "choice" and text in f.choices:
        return f.choices.index(text)
    return parse_uint(text)


def text_from_raw(f: Field, raw: int) -> str:
    if f.kind == "local":
        return LocalAddr.from_raw(raw).to_text()
    if f.kind == "hex":
        return f"{raw:#x}"
    if f.kind == "f32":
        return f32_text(raw)
    if f.kind == "choice" and raw < len(f.choices):
        return f.choices[raw]
    return str(raw)


def raw_from_value(f: Field, value: Any) -> int:
    """A field's raw bits from a Python value (a typed-constructor argument)."""
    if f.kind == "local":
        if isinstance(value, LocalAddr):
            return value.raw
    elif f.kind == "f32":
        if isinstance(value, (float, np.floating)) or (
            isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        ):
            return f32_bits(float(value))
        raise trace_error(f"expected a float, got {value!r}", field=f.name)
    elif f.kind == "choice" and isinstance(value, str):
        if value in f.choices:
            return f.choices.index(value)
        raise trace_error(f"{value!r} is not one of {f.choices}", field=f.name)
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise trace_error(f"expected an integer, got {value!r}", field=f.name)


def value_from_raw(f: Field, raw: int) -> Any:
    if f.kind == "local":
        return LocalAddr.from_raw(raw)
    if f.kind == "bool":
        return bool(raw)
    if f.kind == "f32":
        return f32_value(raw)
    return raw


def pack(layout: Layout, raws: Mapping[str, int]) -> tuple[int, int]:
    """rs1 and rs2 from every operand's raw bits (selectors filled in); too wide a value raises."""
    regs = {"rs1": 0, "rs2": 0}
    for f in layout.fields:
        raw = f.fixed if f.fixed is not None else raws[f.name]
        if not 0 <= raw <= f.max:
            raise trace_error(
                f"value {raw} ({raw:#x}) does not fit in {f.width} bits (max {f.max})",
                field=f.name, mnemonic=layout.mnemonic,
            )
        regs[f.reg] |= raw << f.lsb
    return regs["rs1"], regs["rs2"]



# ---------------------------------------------------------------------------------------------
# A mnemonic's operands by name.


def layout_by_name(mnemonic: str) -> Layout:
    try:
        return LAYOUTS[mnemonic]
    except KeyError:
        raise trace_error(f"unknown mnemonic {mnemonic!r}; known: {', '.join(MNEMONICS)}",
                          field="mnemonic") from None


def raws_from_values(layout: Layout, values: Mapping[str, Any]) -> dict[str, int]:
    by_name = {f.name: f for f in layout.operands}
    raws = {}
    for name, value in values.items():
        if name not in by_name:
            raise trace_error(
                f"{layout.mnemonic} has no operand {name!r}; operands: {', '.join(by_name)}",
                field=name, mnemonic=layout.mnemonic)
        try:
            raws[name] = raw_from_value(by_name[name], value)
        except TraceError as err:
            raise trace_error(err.detail, field=name, mnemonic=layout.mnemonic) from None
    return raws



def raws_from_text(layout: Layout, tokens: list[str]) -> dict[str, int]:
    """Raw bits of the ``name=value`` operands of one assembly line, by name."""
    mnemonic = layout.mnemonic
    by_name = {f.name: f for f in layout.operands}
    raws: dict[str, int] = {}
    for token in tokens:
        name, sep, text = token.partition("=")
        if not sep or not name or not text:
            raise trace_error(f"operand {token!r} is not name=value", mnemonic=mnemonic,
                              field=name or None)
        if name not in by_name:
            raise trace_error(
                f"{mnemonic} has no operand {name!r}; operands: {', '.join(by_name)}",
                field=name, mnemonic=mnemonic)
        if name in raws:
            raise trace_error("operand given twice", field=name, mnemonic=mnemonic)
        try:
            raws[name] = raw_from_text(by_name[name], text)
        except TraceError as err:
            raise trace_error(err.detail, field=name, mnemonic=mnemonic) from None
    return raws


def with_defaults(layout: Layout, raws: dict[str, int]) -> dict[str, int]:
    """``raws`` with each omitted operand at its default; a missing required one raises."""
    for f in layout.operands:
        if f.name not in raws:
            if f.default is None:
                raise trace_error("required operand is missing", field=f.name,
                                  mnemonic=layout.mnemonic)
            raws[f.name] = raw_from_value(f, f.default)
    return raws


__all__ = [
    "LAYOUTS",
    "MNEMONICS",
    "Field",
    "Layout",
    "layout_by_name",
    "layout_of",
    "pack",
    "raw_from_text",
    "raw_from_value",
    "raws_from_text",
    "raws_from_values",
    "text_from_raw",
    "value_from_raw",
    "with_defaults",
]
