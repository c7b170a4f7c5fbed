"""`TraceError`s that say where in a trace, a line or an instruction the problem is.

The ISA, the trace files and the simulator's decoder raise these, so a caller (or a test) finds
the instruction index, source line and field as attributes instead of parsing the message.
"""

from __future__ import annotations

from typing import Any

from workloads.errors import TraceError


def trace_error(
    detail: str,
    *,
    field: str | None = None,
    index: int | None = None,
    line: int | None = None,
    source: str | None = None,
    mnemonic: str | None = None,
) -> TraceError:
    """A `TraceError` whose message and attributes name where the problem is.

    The attributes ``index``, ``line``, ``field``, ``source``, ``mnemonic`` and ``detail`` let
    callers (and tests) check the location without parsing the message.
    """
    prefix = ""
    if source is not None:
        prefix = f"{source}:{line}: " if line is not None else f"{source}: "
    elif line is not None:
        prefix = f"line {line}: "
    where = []
    if index is not None:
        where.append(f"instruction #{index}" + (f" ({mnemonic})" if mnemonic else ""))
    elif mnemonic:
        where.append(mnemonic)
    if field is not None:
        where.append(f"field {field!r}")
    err = TraceError(prefix + (", ".join(where) + ": " if where else "") + detail)
    err.detail = detail
    err.field = field
    err.index = index
    err.line = line
    err.source = source
    err.mnemonic = mnemonic
    return err


def with_context(err: TraceError, **context: Any) -> TraceError:
    """The same error with more location (index, line, source) filled in where it was unknown."""
    merged = {
        key: getattr(err, key, None)
        for key in ("field", "index", "line", "source", "mnemonic")
    }
    for key, value in context.items():
        if merged.get(key) is None:
            merged[key] = value
    return trace_error(getattr(err, "detail", str(err)), **merged)


__all__ = ["trace_error", "with_context"]
