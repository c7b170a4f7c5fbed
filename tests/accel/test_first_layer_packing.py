"""First-layer packing: a convolution with few input channels puts several kernel columns in the
array's rows at once, as Gemmini's LoopConv does with ``max_pixels_per_row``.

The lowering emits ``config_ld`` with pixel repeats for the inputs and computes of ``p * C``
columns; the simulator writes each input row to the p rows before it as the PixelRepeater does
(``PixelRepeater.scala``), so the programs still leave exactly numpy's output in DRAM, with no
race and in fewer cycles; the instruction-aware model counts the same MACs.
"""

from __future__ import annotations

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import Funct, Instruction, IsaParams
from accel.lower import check, lower, reference
from accel.lower.nest import Nest
from accel.mapping import Mapping
from accel.sim import run_batch
from accel.sim.decode import decode
from accel.sim.hazards import find_races
from accel.trace import Trace
from workloads.errors import TraceError
from workloads.layer import Layer

D16 = HardwareConfig(pe_rows=16, pe_cols=16, sp_kb=64, acc_kb=16, name="d16")
D8 = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=8, acc_kb=4, name="d8")
CONV1 = Layer.conv2d(R=7, S=7, P=4, Q=4, C=3, K=16, Hstride=2, Wstride=2, pads=(3, 3, 3, 3),
                     epilogue=("bias", "relu"))

# (layer, mapping, hardware, kernel columns per row the lowering packs)
CASES = [
    (CONV1, "L3[WIO] K1 - L2[WI] K16X - L1[O] R7 S7 C3X - L0[W] Q4 P4", D16, 5),
    (CONV1, "L3[WIO] K2 - L2[WI] K8X - L1[O] R7 S7 C3X - L0[W] Q4 P4", D8, 2),
    # S split between the accumulator and the scratchpad: pack the inner loop's 4 columns
    (Layer.conv2d(R=3, S=8, P=3, Q=5, C=2, K=4, pads=(1, 3, 1, 4), epilogue=("bias", "add")),
     "L3[WIO] P3 - L2[WI] S2 K4X - L1[O] R3 S4 C2X - L0[W] Q5", D8, 4),
    # depthwise: one channel per group, the whole kernel row in one compute
    (Layer.conv2d(R=3, S=3, P=5, Q=5, C=1, K=1, groups=3, pads=(1, 1, 1, 1)),
     "L3[WIO] P1 - L2[WI] K1X - L1[O] R3 S3 C1X - L0[W] Q5 P5", D8, 3),
    # upsampled (transposed) convolution: the zero-stuffed input packs the same way
    (Layer(kind="conv_transpose", R=3, S=3, P=6, Q=5, C=2, K=4, pads=(2, 2, 2, 1),
           upsample=(2, 2)),
     "L3[WIO] R3 - L2[WI] K4X - L1[O] S3 P2 C2X - L0[W] Q5 P3", D8, 3),
]


def _mapping(text: str, stages: int) -> Mapping:
    return Mapping.from_timeloop(text, stages=stages)


def _unpacked(layer: Layer, mapping: Mapping, hw: HardwareConfig, **kw):
    """The same program without packing (a chip built without first-layer optimizations)."""
    return lower(layer, mapping, hw, first_layer=False, **kw)


@pytest.mark.parametrize("stages", [1, 2])
def test_packed_programs_leave_numpys_output_without_races_in_fewer_cycles(stages):
    by_hw: dict = {}
    for i, (layer, text, hw, p) in enumerate(CASES):
        mapping = _mapping(text, stages)
        assert Nest(layer, mapping, hw.pe_rows).pixels_per_row == p
        low = lower(layer, mapping, hw, acc_scale=0.03)
        flat = _unpacked(layer, mapping, hw, acc_scale=0.03)
        assert low.stats.macs == low.stats.block_macs
        assert low.stats.computes < flat.stats.computes
        assert low.stats.array_macs < flat.stats.array_macs
        repeats = [ins.fields()["pixel_repeats"] for ins in low.trace
                   if ins.mnemonic == "config_ld" and ins.fields()["id"] == 0]
        assert p in repeats
        assert not find_races(low.trace, hw).racing
        arrays = check.random_arrays(low, np.random.default_rng(10 * i + stages))
        by_hw.setdefault(hw.name, (hw, []))[1].append((low, flat, arrays))
    for hw, cases in by_hw.values():
        images, masks = zip(*(check.pack_inputs(low, arr) for low, _, arr in cases))
        results = run_batch([low.trace for low, _, _ in cases], hw, images, initialized=masks)
        timing = run_batch([c[0].trace for c in cases] + [c[1].trace for c in cases], hw,
                           functional=False)
        for k, ((low, _, arr), res) in enumerate(zip(cases, results)):
            epi = low.epilogue
            want = reference(low.layer, arr["input"], arr["weight"], arr.get("bias"),
                             arr.get("residual"), acc_scale=epi.acc_scale, relu=epi.relu,
                             full_output=epi.full_output, gelu=epi.gelu)
            got = low.layout.read(res.dram, "output")
            np.testing.assert_array_equal(got, want.reshape(got.shape))
            assert timing[k].cycles < timing[k + len(cases)].cycles


def test_the_repeater_writes_each_row_into_the_rows_before_it_shifted():
    """A 4-row mvin of 3 columns with pixel repeats 3 at row 2 (PixelRepeater.scala): row y's
    column block j holds source row y - 2 + j, so rows 2 and 3 hold three rows each."""
    hw = HardwareConfig(pe_rows=16, pe_cols=16, sp_kb=64, acc_kb=16)
    src = np.arange(1, 13, dtype=np.int8).reshape(4, 3)
    dram = np.zeros(128, np.uint8)
    dram[:12] = src.view(np.uint8).ravel()
    trace = Trace([Instruction.config_ld(3, block_stride=16, pixel_repeats=3),
                   Instruction.mvin(0, 2, rows=4, cols=3),
                   Instruction.fence(),
                   Instruction.config_st(9),
                   Instruction.mvout(64, 2, rows=2, cols=9)])
    res = run_batch([trace], hw, [dram])[0]
    got = res.dram[64:82].view(np.int8).reshape(2, 9)
    np.testing.assert_array_equal(got, np.stack([src[0:3].ravel(), src[1:4].ravel()]))
    decoded = decode(trace, IsaParams.from_hardware(hw), None)
    assert decoded.mvin_rows_before()[1] == 2  # rows 0 and 1 are written too
    one = decode(Trace([Instruction.config_ld(3, block_stride=16, pixel_repeats=3),
                        Instruction.mvin(0, 1, rows=4, cols=3)]),
                 IsaParams.from_hardware(hw), None)
    assert one.mvin_rows_before()[1] == 1  # not below the floor of its half (row 0)


def test_pixel_repeats_on_an_accumulator_mvin_are_refused():
    hw = HardwareConfig(pe_rows=16, pe_cols=16, sp_kb=64, acc_kb=16)
    trace = Trace([Instruction.config_ld(4, block_stride=16, pixel_repeats=2, id=2),
                   Instruction(Funct.MVIN3, 0, 1 << 48 | 4 << 32 | 1 << 31)])
    with pytest.raises(TraceError, match="pixel repeats"):
        decode(trace, IsaParams.from_hardware(hw), None)


@pytest.mark.parametrize("layer,text,hw,columns", [
    (CONV1, CASES[0][1], D16, 7 / 2),  # 7 kernel columns, 5 then 2
    (CONV1, CASES[1][1], D8, 7 / 4),  # 2, 2, 2, then 1
    (CASES[2][0], CASES[2][1], D8, 4.0),
    (CONV1, "L3[WIO] K1 - L2[WI] K16X - L1[O] R7 S7 C3 - L0[W] Q4 P4", D16, 1.0),  # Cs < C
    (CONV1, "L3[WIO] S7 - L2[WI] K16X - L1[O] R7 C3X - L0[W] Q4 P4", D16, 1.0),  # S in DRAM
])
def test_the_instruction_aware_model_packs_as_the_lowering_does(layer, text, hw, columns,
                                                                monkeypatch):
    """The model's compute falls by the kernel columns a compute packs on average, as many as
    the lowering's array rows do (`perfmodels.aware.packed_columns`)."""
    import jax
    import jax.numpy as jnp

    from perfmodels import aware as aware_model
    from perfmodels.analytic import pack_layer, pack_mapping

    mapping = _mapping(text, 2)
    spec, hwp = hw.template_spec, hw.to_params()
    lay, m = jax.tree_util.tree_map(jnp.asarray, (pack_layer(layer), pack_mapping(mapping)))
    fanout = aware_model.level_arrays(spec, hwp).fanout
    assert float(aware_model.packed_columns(spec, lay, m, fanout)) == pytest.approx(columns)
    low, flat = lower(layer, mapping, hw), _unpacked(layer, mapping, hw)
    assert flat.stats.array_macs / low.stats.array_macs == pytest.approx(columns)
    def compute_cycles() -> float:  # traced afresh each call, so it sees the patch below
        fn = jax.jit(lambda lay, hwp, m: aware_model.evaluate(spec, lay, hwp, m, True))
        return float(fn(lay, hwp, m).compute_cycles)

    packed = compute_cycles()
    monkeypatch.setattr(aware_model, "packed_columns", lambda *a: 1.0)
    unpacked = compute_cycles()
    assert unpacked / packed == pytest.approx(columns, rel=1e-5)
