"""accel: the accelerator side. Hardware configs and templates, mappings, the Gemmini-like ISA,
instruction traces and their scheduling.

>>> from accel import Instruction
>>> Instruction.fence().to_text()
'fence'
"""

from accel.isa import GARBAGE_ADDR
from accel.isa import MNEMONICS
from accel.isa import Funct
from accel.isa import Instruction
from accel.isa import IsaParams
from accel.isa import LocalAddr
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
    "DEFAULT_LATENCIES",
    "Dependence",
    "Funct",
    "GARBAGE_ADDR",
    "GEMMINI_UNITS",
    "Instruction",
    "IsaParams",
    "Latency",
    "LocalAddr",
    "MNEMONICS",
    "Op",
    "Region",
    "Schedule",
    "Trace",
    "TraceArrays",
    "Unit",
    "schedule",
    "schedule_ops",
]
