"""Emitted kernels: a design's layer and mapping as @baco.jit source that compiles back to a trace
with the same result as `accel.lower`'s, for toy layers and co-designed ResNet-50 mappings."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.lower import igelu_constants, lower
from accel.lower.layout import DramLayout, reference
from accel.sim import run
from baco.dsl.emit import blocks, emit, load_source
from baco.result import CodesignResult
from baco.run import write_kernels
from baco.search.gemmini_tiler import gemmini_mapping
from workloads.errors import DSLError
from workloads.layer import Layer

DATA = pathlib.Path(__file__).parent / "data"
GEMMINI = HardwareConfig.preset("gemmini_default")
# Layers of the stored co-design (tests/dsl/data/resnet50_codesign.json) run by default: a 1x1
# conv, a strided padded 3x3 conv and a 1x1 conv into 1024 channels (one simulator compile).
DEFAULT_LAYERS = (1, 12, 13)


def _tensors(layer: Layer, names, dim: int, rng) -> dict[str, np.ndarray]:
    lay = DramLayout.for_layer(layer, dim=dim)
    out = {}
    for name in names:
        shape = lay[name].shape
        if name == "output":
            out[name] = np.zeros(shape, np.int8)
        elif name == "bias":
            out[name] = rng.integers(-3000, 3000, shape).astype(np.int32)
        else:
            out[name] = rng.integers(-128, 128, shape).astype(np.int8)
    return out


def _expected(layer: Layer, t: dict, scale: float) -> np.ndarray:
    return reference(layer, t["input"], t["weight"], t.get("bias"), t.get("residual"),
                     acc_scale=scale, relu="relu" in layer.epilogue,
                     gelu=igelu_constants() if "gelu" in layer.epilogue else None)


def _check_layer(layer: Layer, mapping, hw, scale: float, seed: int, backends=("sim",)):
    module = load_source(emit(layer, mapping, hw, acc_scale=scale))
    t = _tensors(layer, module.TENSORS, hw.pe_rows, np.random.default_rng(seed))
    want = _expected(layer, t, scale)
    reports = {}
    for backend in backends:
        t["output"][...] = 0
        reports[backend] = module.launch(t, backend=backend, hw=hw)
        np.testing.assert_array_equal(t["output"], want, err_msg=f"{layer.name} {backend}")
    return module, t, want, reports


TOY = [
    Layer.conv2d(R=3, S=3, P=7, Q=7, C=20, K=40, Hstride=2, Wstride=2, pads=(1, 1, 1, 1),
                 epilogue=("bias", "add", "relu"), name="strided3x3"),
    Layer.conv2d(R=1, S=1, P=9, Q=5, C=33, K=17, N=2, epilogue=("bias",), name="pointwise"),
    Layer.gemm(M=45, K_red=70, N_out=30, epilogue=("relu",), name="gemm"),
    Layer.gemm(M=1, K_red=100, N_out=37, epilogue=("bias",), name="gemv"),
    # Gemmini's I-GELU, whose output scale is negative (BERT's FFN dense layer).
    Layer.gemm(M=20, K_red=24, N_out=18, epilogue=("bias", "gelu"), name="ffn_gelu"),
]


@pytest.mark.parametrize("layer", TOY, ids=lambda l: l.name)
def test_emitted_kernel_equals_lowered_trace(layer):
    mapping, _ = gemmini_mapping(layer, GEMMINI)
    gelu = "gelu" in layer.epilogue
    scale = -2e-7 if gelu else 0.05
    _, t, want, _ = _check_layer(layer, mapping, GEMMINI, scale, 0,
                                      backends=("interpreter", "sim"))
    assert not gelu or len(np.unique(want)) > 50      # not saturated: the check means something
    low = lower(layer, mapping, GEMMINI, acc_scale=scale)
    image = low.layout.pack({k: v for k, v in t.items() if k != "output"})
    np.testing.assert_array_equal(low.layout.read(run(low.trace, GEMMINI, image).dram), want)


def test_blocks_are_the_mappings_accumulator_tile():
    layer = Layer.gemm(M=128, K_red=768, N_out=768)
    mapping, _ = gemmini_mapping(layer, GEMMINI)
    b = blocks(layer, mapping, GEMMINI)
    assert b["TP"] == 64 and b["BLOCK_C"] == 48 * 16 and b["BLOCK_N"] == 5 * 16
    source = emit(layer, mapping, GEMMINI)
    assert "@baco.jit" in source and mapping.to_timeloop() in source


def test_emit_rejects_what_the_kernel_cannot_express():
    grouped = Layer.conv2d(R=3, S=3, P=4, Q=4, C=4, K=4, groups=2, pads=(1, 1, 1, 1))
    with pytest.raises(DSLError, match="groups=1"):
        emit(grouped, gemmini_mapping(Layer.conv2d(R=3, S=3, P=4, Q=4, C=4, K=4,
                                                   pads=(1, 1, 1, 1)), GEMMINI)[0], GEMMINI)


@pytest.fixture(scope="module")
def design() -> CodesignResult:
    """ResNet-50 co-designed by `baco.codesign` (tests/baco/data/tiny.yaml's settings, seed 3),
    stored by experiments/kernels/codesign_resnet50.py so the test does not rerun the search."""
    return CodesignResult.from_json((DATA / "resnet50_codesign.json").read_text())


def _resnet_case(design: CodesignResult, index: int):
    row = design.layers[index]
    _, _, _, reports = _check_layer(row.layer, row.mapping, design.hardware, 0.02, index)
    assert reports["sim"].cycles > 0


@pytest.mark.parametrize("index", DEFAULT_LAYERS)
def test_codesigned_resnet50_kernels_simulate_correctly(design, index):
    _resnet_case(design, index)


@pytest.mark.slow
@pytest.mark.parametrize("index", [i for i in range(24) if i not in DEFAULT_LAYERS])
def test_every_codesigned_resnet50_kernel_simulates_correctly(design, index):
    _resnet_case(design, index)


def test_run_writes_one_kernel_per_layer_that_compiles(design, tmp_path):
    written, skipped = write_kernels(design, tmp_path / "kernels")
    assert not skipped and len(written) == len(design.layers)
    module = load_source(written[0].read_text(), str(written[0]))
    kernel = next(v for k, v in vars(module).items() if k.endswith("_kernel"))
    t = _tensors(design.layers[0].layer, module.TENSORS, design.hardware.pe_rows,
                 np.random.default_rng(0))
    text = str(kernel.ir(*(t[n] for n in module.TENSORS), **module.CONSTS))
    assert text.count(" dot ") == 1 and " for " in text
