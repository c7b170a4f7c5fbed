"""perfmodels: the differentiable latency/energy model, exact and relaxed from one code path.

>>> from accel import HardwareConfig, Mapping
>>> from workloads import Layer
>>> m = Mapping.from_timeloop("L3[WIO] P56 Q56 - L2[WI] N1 K16X - L1[O] K4 C4 C16X - L0[W] N1")
>>> out = exact(Layer.conv2d(P=56, Q=56, C=64, K=64), HardwareConfig.preset("gemmini_default"), m)
>>> round(float(out.cycles))
432896
"""

from perfmodels import aware, relax
from perfmodels.accesses import LayerArrays, MappingArrays
from perfmodels.analytic import (
    Metrics,
    evaluate,
    evaluate_batch,
    exact,
    exact_batch,
    fast_jit,
    pack_layer,
    pack_mapping,
    stack_layers,
    stack_mappings,
)
from perfmodels.validate import TimeloopRow, read_rows, validate_timeloop

__all__ = [
    "LayerArrays",
    "MappingArrays",
    "Metrics",
    "TimeloopRow",
    "aware",
    "evaluate",
    "evaluate_batch",
    "exact",
    "exact_batch",
    "fast_jit",
    "pack_layer",
    "pack_mapping",
    "read_rows",
    "relax",
    "stack_layers",
    "stack_mappings",
    "validate_timeloop",
]
