"""Lowered traces run on accel.sim and leave exactly the numpy reference in DRAM.

int8 inputs and weights, int32 accumulation, bias and residual in the accumulator, then
float32 scaling, round-half-even, relu and int8 saturation at mvout (or int32 outputs). Cases
are simulated in batches (`accel.sim.run_batch`, one compiled scan per hardware shape), and the
random ones are drawn with hypothesis: a few hundred small layers in the default run, thousands
under ``-m slow``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel.arch import HardwareConfig
from accel.lower import Lowered, check, im2col_input, im2col_weight, lower, reference
from accel.mapping import Mapping
from accel.sim import run_batch
from workloads.errors import InfeasibleError
from workloads.layer import Layer

MAX_INSTRUCTIONS = 1500  # keeps a batch in one trace-length bucket of the simulator
HARDWARE = (
    HardwareConfig(pe_rows=2, pe_cols=2, sp_kb=1, acc_kb=0.5, name="d2"),
    HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2, name="d4"),
    HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=8, acc_kb=4, name="d8"),
)


@dataclasses.dataclass
class Case:
    low: Lowered
    arrays: dict
    # What a test passes to `reference` instead of the lowered layer and its own arrays (the
    # im2col GEMM computes its conv).
    ref_layer: Layer | None = None
    ref_arrays: dict | None = None

    def expected(self) -> np.ndarray:
        layer = self.ref_layer or self.low.layer
        arr = self.ref_arrays or self.arrays
        epi = self.low.epilogue
        out = reference(layer, arr["input"], arr["weight"], arr.get("bias"),
                        arr.get("residual"), acc_scale=epi.acc_scale, relu=epi.relu,
                        full_output=epi.full_output, gelu=epi.gelu)
        return out.reshape(self.low.layout["output"].shape)


def random_arrays(low: Lowered, seed: int) -> dict:
    return check.random_arrays(low, np.random.default_rng(seed))


def simulate(cases: list[Case], hw: HardwareConfig) -> None:
    """Run the cases in one batch; assert each output equals its reference exactly.

    Outputs and partial sums start uninitialized, so the simulator also reports any read of
    a value the trace never wrote.
    """
    images, masks = zip(*(check.pack_inputs(case.low, case.arrays) for case in cases))
    results = run_batch([c.low.trace for c in cases], hw, images, initialized=masks)
    for case, res in zip(cases, results):
        got = case.low.layout.read(res.dram, "output")
        want = case.expected()
        if not np.array_equal(got, want):
            where = np.argwhere(got != want)[:3].tolist()
            raise AssertionError(
                f"{case.low.layer} with {case.low.mapping} on {hw.name}, epilogue "
                f"{case.low.epilogue}: output differs at {where}: got "
                f"{got[tuple(np.array(where).T)]}, want {want[tuple(np.array(where).T)]}")
        assert res.cycles > 0


# --------------------------------------------------------------------------- fixed cases
def tl(text: str, stages: int = 1) -> Mapping:
    return Mapping.from_timeloop(text, stages=stages)


FIXED_D4 = [
    (Layer.conv2d(R=3, S=3, P=5, Q=6, C=4, K=6, Hstride=2, Wstride=2, pads=(1, 1, 1, 1),
                  epilogue=("bias", "relu")),
     "L3[WIO] K2 S3 - L2[WI] R3 K3X - L1[O] P5 C4X - L0[W] Q6", {"acc_scale": 0.02}),
    (Layer.conv2d(R=2, S=3, P=3, Q=3, C=3, K=4, Hdilation=2, Wdilation=3, groups=3,
                  pads=(0, 2, 1, 0), epilogue=("add",)),
     "L3[WIO] C3 - L2[WI] S3 K4X - L1[O] R2 Q3 - L0[W] P3", {}),
    (Layer.conv1d(R=3, P=9, C=6, K=5, stride=2, dilation=2, pads=(2, 0, 1, 0), N=2,
                  epilogue=("bias", "add", "relu")),
     "L3[WIO] R3 N2 - L2[WI] K5 - L1[O] C2 P3 C3X - L0[W] P3", {"acc_scale": 0.05}),
    (Layer(kind="conv_transpose", R=3, S=3, P=6, Q=5, C=3, K=4, pads=(2, 2, 2, 1),
           upsample=(2, 2)),
     "L3[WIO] R3 - L2[WI] S3 K4X - L1[O] P2 C3X - L0[W] Q5 P3", {"full_output": True}),
    (Layer(kind="gemv", C=30, K=7, epilogue=("bias",)),
     "L3[WIO] C5 K7 - L2[WI] N1 - L1[O] C3 C2X - L0[W] N1", {"full_output": True}),
    (Layer.gemm(M=13, K_red=7, N_out=5),  # padded trailing blocks
     "L3[WIO] P4 C2 - L2[WI] K4X - L1[O] K2 C4X - L0[W] P4", {"acc_scale": 0.1}),
    (Layer.gemm(M=8, K_red=8, N_out=4, epilogue=("bias",)),  # partial sums leave and return
     "L3[WIO] C2 P2 - L2[WI] K4X - L1[O] C4X - L0[W] P4", {"acc_scale": 0.03}),
    (Layer.gemm(M=9, K_red=6, N_out=7, epilogue=("bias", "gelu")),  # I-GELU on the mvout
     "L3[WIO] P3 C2 - L2[WI] K4X - L1[O] K2 C3X - L0[W] P3", {"acc_scale": 1e-4}),
]


def test_fixed_cases_match_numpy_exactly():
    hw = HARDWARE[1]
    cases = []
    for i, (layer, text, kw) in enumerate(FIXED_D4):
        for stages in (1, 2):
            low = lower(layer, tl(text, stages), hw, **kw)
            cases.append(Case(low, random_arrays(low, 100 * i + stages)))
    assert any(c.low.stats.partial_spills for c in cases)
    simulate(cases, hw)


MACRO_D4 = [
    (Layer.gemm(M=20, K_red=16, N_out=8, epilogue=("bias", "relu")),
     "L3[WIO] P2 K2 C2 - L2[WI] K4X - L1[O] C2 C4X - L0[W] P10", {"acc_scale": 0.01}),
    (Layer.gemm(M=8, K_red=8, N_out=4),  # partials through full_C and D
     "L3[WIO] C2 P2 - L2[WI] K4X - L1[O] C4X - L0[W] P4", {"acc_scale": 0.1}),
    (Layer.gemm(M=13, K_red=7, N_out=5, batch=2, groups=2, epilogue=("bias",)),
     "L3[WIO] N2 P4 C2 K2 - L2[WI] K3X - L1[O] C4X - L0[W] P4", {"full_output": True}),
    (Layer.gemm(M=6, K_red=10, N_out=6, batch=3),  # batches merged into one loop's rows
     "L3[WIO] C2 - L2[WI] K3 K2X - L1[O] N3 C5 - L0[W] P6", {"acc_scale": 0.05}),
    (Layer.gemm(M=6, K_red=8, N_out=4, batch=2, epilogue=("bias",)),  # one loop per batch
     "L3[WIO] P2 C2 - L2[WI] K4X - L1[O] N2 C4X - L0[W] P3", {"acc_scale": 0.04}),
    (Layer(kind="gemv", C=21, K=9, epilogue=("bias", "relu")),
     "L3[WIO] C3 K3 - L2[WI] K3X - L1[O] C7 - L0[W] N1", {"acc_scale": 0.2}),
]


def test_loop_ws_form_matches_numpy_exactly():
    hw = HARDWARE[1]
    cases = []
    for i, (layer, text, kw) in enumerate(MACRO_D4):
        low = lower(layer, tl(text), hw, macro=True, **kw)
        cases.append(Case(low, random_arrays(low, 1000 + i)))
    assert any(c.low.stats.partial_spills for c in cases)
    simulate(cases, hw)


def test_seed_example_runs_as_its_im2col_gemm():
    """The 4x9x4 example on a 2x2 array: the im2col GEMM computes the conv."""
    conv = Layer.conv2d(R=3, S=3, P=2, Q=2, C=1, K=4)
    hw = HARDWARE[0]
    low = lower(conv.to_gemm(), tl("L3[WIO] N1 - L2[WI] N1 K2X - L1[O] P2 C5 K2 C2X - L0[W] P2"),
                hw, full_output=True)
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 4, 4, 1)).astype(np.int8)
    w = rng.integers(-128, 128, (1, 3, 3, 1, 4)).astype(np.int8)
    direct = lower(conv, tl("L3[WIO] N1 - L2[WI] N1 K2X - L1[O] R3 S3 K2 - L0[W] Q2 P2"), hw,
                   full_output=True)
    simulate([Case(low, {"input": im2col_input(conv, x), "weight": im2col_weight(conv, w)},
                   ref_layer=conv, ref_arrays={"input": x, "weight": w}),
              Case(direct, {"input": x, "weight": w})], hw)


# --------------------------------------------------------------------------- random cases
@st.composite
def small_layers(draw) -> Layer:
    kind = draw(st.sampled_from(["gemm", "gemv", "conv1d", "conv2d", "conv_transpose"]))
    epi = tuple(op for op in ("bias", "add") if draw(st.booleans()))
    epi += draw(st.sampled_from([(), ("relu",), ("gelu",)]))
    groups = draw(st.sampled_from([1, 1, 2]))
    small = st.integers(1, 6)
    if kind == "gemm":
        return Layer.gemm(M=draw(st.integers(1, 12)), K_red=draw(st.integers(1, 12)),
                          N_out=draw(st.integers(1, 12)), batch=draw(st.integers(1, 2)),
                          groups=groups, epilogue=epi)
    if kind == "gemv":
        return Layer(kind="gemv", C=draw(st.integers(1, 24)), K=draw(st.integers(1, 12)),
                     groups=groups, epilogue=epi)
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    common = {"C": draw(small), "K": draw(small), "groups": groups, "epilogue": epi}
    if kind == "conv1d":
        return Layer.conv1d(R=draw(st.integers(1, 3)), P=draw(st.integers(1, 8)),
                            N=draw(st.integers(1, 2)), stride=draw(st.integers(1, 2)),
                            dilation=draw(st.integers(1, 2)), pads=(pads[0], 0, pads[2], 0),
                            **common)
    if kind == "conv_transpose":
        return Layer(kind="conv_transpose", R=draw(st.integers(1, 3)),
                     S=draw(st.integers(1, 3)), P=draw(st.integers(1, 5)),
                     Q=draw(st.integers(1, 5)), pads=pads,
                     upsample=(draw(st.integers(1, 2)), draw(st.integers(1, 2))), **common)
    return Layer.conv2d(R=draw(st.integers(1, 3)), S=draw(st.integers(1, 3)),
                        P=draw(st.integers(1, 5)), Q=draw(st.integers(1, 5)),
                        N=draw(st.integers(1, 2)), Hstride=draw(st.integers(1, 2)),
                        Wstride=draw(st.integers(1, 2)), Hdilation=draw(st.integers(1, 2)),
                        Wdilation=draw(st.integers(1, 2)), pads=pads, **common)


def padded_target(layer: Layer, extra: dict) -> Layer:
    """The layer a mapping may cover instead: some dims grown (trailing tiles padded)."""
    fixed = {"gemm": "RSQ", "gemv": "RSQNP", "conv1d": "SQ"}.get(layer.kind, "")
    grown = {d: getattr(layer, d) + e for d, e in extra.items() if d not in fixed}
    return dataclasses.replace(layer, **grown)


def draw_cases(data, hw: HardwareConfig, count: int) -> list[Case]:
    cases, attempts = [], 0
    while len(cases) < count and attempts < 20 * count:
        attempts += 1
        layer = data.draw(small_layers())
        extra = data.draw(st.dictionaries(st.sampled_from("RSPQCKN"), st.integers(1, 2),
                                          max_size=2))
        seed = data.draw(st.integers(0, 2**32 - 1))
        stages = data.draw(st.sampled_from([None, 1, 2]))
        scale = data.draw(st.sampled_from([1.0, 0.1, 0.013, 0.5]))
        full = (data.draw(st.booleans()) and not {"relu", "gelu"} & set(layer.epilogue)
                and scale == 1.0)
        macro = (layer.kind in ("gemm", "gemv") and not {"add", "gelu"} & set(layer.epilogue)
                 and data.draw(st.booleans()))
        target = padded_target(layer, extra)
        try:
            mapping = Mapping.random(target, hw, np.random.default_rng(seed), stages=stages,
                                     tries=20)
            low = lower(layer, mapping, hw, acc_scale=scale, full_output=full, macro=macro)
        except InfeasibleError:
            continue
        if len(low.trace) > MAX_INSTRUCTIONS:
            continue
        cases.append(Case(low, random_arrays(low, seed)))
    assert len(cases) == count, "too few feasible cases; loosen the strategy"
    return cases


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_layers_mappings_and_hardware_match_numpy(data):
    """3 x 40 cases by default; `test_many_random_cases_match_numpy` (slow) runs 50 x 60."""
    hw = data.draw(st.sampled_from(HARDWARE))
    simulate(draw_cases(data, hw, 40), hw)


@pytest.mark.slow
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_many_random_cases_match_numpy(data):
    hw = data.draw(st.sampled_from(HARDWARE))
    simulate(draw_cases(data, hw, 60), hw)
