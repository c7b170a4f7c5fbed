"""The project's error hierarchy.

It lives in `workloads` because `workloads` sits at the bottom of the import graph (every package
may import it and it imports none of them); users catch these names from `baco.errors`. Each
message names the file, field, node or instruction at fault and says what to do.
"""


class BacoError(Exception):
    """Base of every error baco raises on bad input."""


class ConfigError(BacoError):
    """A config file or option is malformed: an unknown key, a wrong type, a bad value."""


class WorkloadError(BacoError):
    """A network cannot be read: a broken ONNX file, a dynamic dimension, an unknown name."""


class UnsupportedOpError(WorkloadError):
    """An operator on a compute path that baco cannot map onto the accelerator."""


class InfeasibleError(BacoError):
    """A constraint cannot be met: a tile that overflows a buffer, factors that do not divide."""


class TraceError(BacoError):
    """A malformed or unexecutable instruction trace; names the instruction index and field."""


class ProgramTooLongError(TraceError):
    """A lowered program would exceed the instruction cap its caller set (`accel.lower.lower`
    ``max_instructions``): too long to build and simulate here."""


class DSLError(BacoError):
    """An unsupported construct in a block-DSL kernel; carries file:line."""
