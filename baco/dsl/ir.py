"""The block IR: typed SSA ops in structured regions, with a printable text form.

A `Function` is what the front end makes of one kernel specialized on its argument types and
constants. Its body is a list of `Op`s; ``for`` ops hold a `Region` whose arguments are the
induction variable and the loop-carried values (as MLIR's ``scf.for`` ``iter_args``) and whose
``yields`` feed the next iteration. Every op keeps the kernel source location it came from, so
the backends' errors name ``file:line`` too.

>>> from baco.dsl.types import Type, int32
>>> v = Value(0, Type(int32), "pid")
>>> str(Op("program_id", [v], [], {"axis": 0}, Loc("k.py", 3)))
'%pid0 = program_id {axis=0} : i32'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from baco.dsl.types import Type
from workloads.errors import DSLError


@dataclasses.dataclass(frozen=True)
class Loc:
    """A kernel source location."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def error(self, message: str, cls: type[DSLError] = DSLError) -> DSLError:
        """A `DSLError` (or subclass ``cls``) that starts with this location."""
        err = cls(f"{self}: {message}")
        err.loc = self
        return err


@dataclasses.dataclass(eq=False)
class Value:
    """One SSA value: a unique id, its type, and a name hint from the source."""

    id: int
    type: Type
    hint: str = ""

    @property
    def name(self) -> str:
        return f"%{self.hint}{self.id}" if self.hint else f"%{self.id}"

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass(eq=False)
class Region:
    """A loop body: its arguments (induction variable first), ops, and yielded values."""

    args: list[Value]
    ops: list[Op]
    yields: list[Value]


@dataclasses.dataclass(eq=False)
class Op:
    """One operation: results, operands, compile-time attributes, location, optional body."""

    name: str
    results: list[Value]
    operands: list[Value]
    attrs: dict[str, Any]
    loc: Loc
    region: Region | None = None

    def text(self, indent: str = "") -> list[str]:
        lhs = ", ".join(map(str, self.results))
        head = f"{lhs} = " if lhs else ""
        args = ", ".join(map(str, self.operands))
        attrs = ""
        if self.attrs:
            attrs = " {" + ", ".join(f"{k}={_attr(v)}" for k, v in self.attrs.items()) + "}"
        types = ", ".join(str(r.type) for r in self.results)
        line = f"{indent}{head}{self.name}{' ' + args if args else ''}{attrs}"
        if types:
            line += f" : {types}"
        if self.region is None:
            return [line]
        body = self.region
        bargs = ", ".join(f"{a}: {a.type}" for a in body.args)
        lines = [f"{line} ({bargs}) {{"]
        for op in body.ops:
            lines += op.text(indent + "  ")
        lines.append(f"{indent}  yield {', '.join(map(str, body.yields))}")
        lines.append(f"{indent}}}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.text())


def _attr(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_attr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


@dataclasses.dataclass(eq=False)
class Param:
    """A kernel parameter: a run-time argument (``value`` set) or a constant (``const`` set)."""

    name: str
    value: Value | None = None
    const: Any = None


@dataclasses.dataclass(eq=False)
class Function:
    """A kernel specialized on its argument types and constants."""

    name: str
    params: list[Param]
    ops: list[Op]
    loc: Loc

    @property
    def args(self) -> list[Value]:
        """The run-time arguments' values, in parameter order."""
        return [p.value for p in self.params if p.value is not None]

    def walk(self):
        """Every op, nested ones included, in program order."""
        stack = list(reversed(self.ops))
        while stack:
            op = stack.pop()
            yield op
            if op.region is not None:
                stack.extend(reversed(op.region.ops))

    def __str__(self) -> str:
        sig = []
        for p in self.params:
            if p.value is not None:
                sig.append(f"{p.value}: {p.value.type}")
            else:
                sig.append(f"{p.name}: const = {p.const!r}")
        lines = [f"kernel @{self.name}({', '.join(sig)}) {{  // {self.loc}"]
        for op in self.ops:
            lines += op.text("  ")
        lines.append("}")
        return "\n".join(lines)


__all__ = ["Function", "Loc", "Op", "Param", "Region", "Value"]
