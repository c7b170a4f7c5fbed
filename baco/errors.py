"""baco's error hierarchy: catch `baco.errors.BacoError` for any bad-input error."""

from workloads.errors import BacoError
from workloads.errors import ConfigError
from workloads.errors import DSLError
from workloads.errors import InfeasibleError
from workloads.errors import ProgramTooLongError
from workloads.errors import TraceError
from workloads.errors import UnsupportedOpError
from workloads.errors import WorkloadError

__all__ = [
    "BacoError",
    "ConfigError",
    "DSLError",
    "InfeasibleError",
    "ProgramTooLongError",
    "TraceError",
    "UnsupportedOpError",
    "WorkloadError",
]
