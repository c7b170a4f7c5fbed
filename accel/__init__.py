"""accel: the accelerator side. Hardware configs and templates, mappings, the Gemmini-like ISA,
instruction traces and their scheduling.

>>> from accel import Instruction
>>> Instruction.fence().to_text()
'fence'
"""

from accel.arch import DATAFLOWS
from accel.arch import MAX_STAGES
from accel.arch import TENSORS
from accel.arch import HardwareConfig
from accel.arch import HwParams
from accel.arch import LevelArrays
from accel.arch import Template
from accel.arch import level_arrays
from accel.arch import stack_hw
from accel.isa import GARBAGE_ADDR
from accel.isa import MNEMONICS
from accel.isa import Funct
from accel.isa import Instruction
from accel.isa import IsaParams
from accel.isa import LocalAddr
from accel.mapping import Mapping
from accel.mapping import footprint_kb
from accel.mapping import tile_kb
from accel.mapping import tile_words
from accel.schedule import DEFAULT_LATENCIES
from accel.schedule import GEMMINI_UNITS
from accel.schedule import Dependence
from accel.schedule import Latency
from accel.schedule import Op
from accel.schedule import Schedule
from accel.schedule import Unit
from accel.schedule import schedule
from accel.schedule import schedule_ops
from accel.trace import Access
from accel.trace import Region
from accel.trace import Trace
from accel.trace import TraceArrays

__all__ = [
    "Access",
    "DATAFLOWS",
    "DEFAULT_LATENCIES",
    "Dependence",
    "footprint_kb",
    "Funct",
    "GARBAGE_ADDR",
    "GEMMINI_UNITS",
    "HardwareConfig",
    "HwParams",
    "Instruction",
    "IsaParams",
    "Latency",
    "level_arrays",
    "LevelArrays",
    "LocalAddr",
    "Mapping",
    "MAX_STAGES",
    "MNEMONICS",
    "Op",
    "Region",
    "Schedule",
    "schedule",
    "schedule_ops",
    "stack_hw",
    "Template",
    "TENSORS",
    "tile_kb",
    "tile_words",
    "Trace",
    "TraceArrays",
    "Unit",
]
