"""accel.lower: a layer, its mapping and a hardware point become a Gemmini instruction trace.

`lower` emits the weight-stationary program the mapping describes (or, for a GEMM, the
``loop_ws`` CISC form), places the tensors in DRAM (`DramLayout`), allocates the scratchpad
and accumulator (`Allocation`), and checks the result: AMOS's matching matrices, exactly-once
coverage of the blocked iteration space, and `Trace.validate`. `reference` is the numpy result
the trace must leave in DRAM. `lower_gemm_chain` fuses two GEMMs into one trace whose
intermediate stays on chip (`accel.lower.chain`).

>>> from accel.arch import HardwareConfig
>>> from accel.mapping import Mapping
>>> from workloads.layer import Layer
>>> hw = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=4)
>>> m = Mapping.from_timeloop("L3[WIO] K2 - L2[WI] K4X - L1[O] C4X - L0[W] P8", stages=1)
>>> low = lower(Layer.gemm(M=8, K_red=4, N_out=8), m, hw)
>>> low.stats.instructions["compute_preloaded"]
2
"""

from accel.lower.chain import LoweredChain
from accel.lower.chain import lower_gemm_chain
from accel.lower.core import EPILOGUE_OPS
from accel.lower.core import Lowered
from accel.lower.core import gelu_on_chip
from accel.lower.core import lower
from accel.lower.core import parse_epilogue
from accel.lower.core import split_epilogue
from accel.lower.coverage import access_matrix
from accel.lower.coverage import check_coverage
from accel.lower.coverage import check_matching
from accel.lower.coverage import check_tile_coverage
from accel.lower.coverage import matching_matrices
from accel.lower.emit import LowerStats
from accel.lower.layout import DramLayout
from accel.lower.layout import TensorLayout
from accel.lower.layout import im2col_input
from accel.lower.layout import im2col_weight
from accel.lower.layout import input_hw
from accel.lower.layout import reference
from accel.lower.nest import kernel_columns_per_row
from accel.lower.nest import padded_layer
from accel.lower.ws import Allocation
from accel.lower.ws import BufferRegion
from accel.lower.ws import Epilogue
from accel.lower.ws import iexp_constants
from accel.lower.ws import igelu_constants

__all__ = [
    "EPILOGUE_OPS",
    "Allocation",
    "BufferRegion",
    "DramLayout",
    "Epilogue",
    "LowerStats",
    "Lowered",
    "LoweredChain",
    "TensorLayout",
    "access_matrix",
    "check_coverage",
    "check_matching",
    "check_tile_coverage",
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
    "reference",
    "split_epilogue",
]
