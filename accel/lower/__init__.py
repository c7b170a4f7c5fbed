"""accel.lower: a layer, its mapping and a hardware point become a Gemmini instruction trace.

`lower` emits the weight-stationary program the mapping describes (or, for a GEMM, the
``loop_ws`` CISC form), places the tensors in DRAM (`DramLayout`), allocates the scratchpad
and accumulator (`Allocation`), and checks the result: AMOS's matching matrices, exactly-once
coverage of the blocked iteration space, and `Trace.validate`. `reference` is the numpy result
the trace must leave in DRAM. `lower_gemm_chain` fuses two GEMMs into one trace whose
intermediate stays on chip (`accel.lower.chain`). `random_inputs` and `expected_output` (and
their chain forms) give a trace's inputs and the answer it must leave (`accel.lower.check`).

>>> from accel.arch import HardwareConfig
>>> from accel.mapping import Mapping
>>> from workloads.layer import Layer
>>> hw = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=4)
>>> m = Mapping.from_timeloop("L3[WIO] K2 - L2[WI] K4X - L1[O] C4X - L0[W] P8", stages=1)
>>> low = lower(Layer.gemm(M=8, K_red=4, N_out=8), m, hw)
>>> low.stats.instructions["compute_preloaded"]
2
"""

from accel.lower.chain import (
    TILE_DIMS,
    LoweredChain,
    chain_dims,
    chain_epilogues,
    choose_tiles,
    footprint,
    lower_gemm_chain,
    softmax_passes,
)
from accel.lower.check import (
    check_scales,
    expected_chain_output,
    expected_output,
    random_chain_inputs,
    random_inputs,
)
from accel.lower.core import (
    EPILOGUE_OPS,
    Lowered,
    gelu_on_chip,
    lower,
    parse_epilogue,
    split_epilogue,
)
from accel.lower.coverage import (
    access_matrix,
    check_coverage,
    check_matching,
    check_tile_coverage,
    matching_matrices,
)
from accel.lower.emit import LowerStats
from accel.lower.layout import (
    DramLayout,
    TensorLayout,
    im2col_input,
    im2col_weight,
    input_hw,
    reference,
)
from accel.lower.nest import accumulator_tile, kernel_columns_per_row, padded_layer
from accel.lower.ws import Allocation, BufferRegion, Epilogue, iexp_constants, igelu_constants

__all__ = [
    "EPILOGUE_OPS",
    "TILE_DIMS",
    "Allocation",
    "BufferRegion",
    "DramLayout",
    "Epilogue",
    "LowerStats",
    "Lowered",
    "LoweredChain",
    "TensorLayout",
    "access_matrix",
    "accumulator_tile",
    "chain_dims",
    "chain_epilogues",
    "check_coverage",
    "check_matching",
    "check_scales",
    "check_tile_coverage",
    "choose_tiles",
    "expected_chain_output",
    "expected_output",
    "footprint",
    "gelu_on_chip",
    "iexp_constants",
    "igelu_constants",
    "im2col_input",
    "im2col_weight",
    "input_hw",
    "kernel_columns_per_row",
    "lower",
    "lower_gemm_chain",
    "matching_matrices",
    "padded_layer",
    "parse_epilogue",
    "random_chain_inputs",
    "random_inputs",
    "reference",
    "softmax_passes",
    "split_epilogue",
]
