"""baco.reproduce: the seed's tables and figures from experiment files, resumable.

An experiment (``experiments/configs/NAME.yaml``, `baco.reproduce.spec`) expands into
independent cases (`baco.reproduce.runners`); each finished case is one small JSON file
(`baco.reproduce.store`); cases run here, in local processes or on Ray
(`baco.reproduce.executor`); a reducer writes ``table.md``, ``table.csv`` and PNG plots.

>>> from baco.reproduce import known_names
>>> "table6_6" in known_names()
True

``baco reproduce NAME [--quick]`` and ``baco sweep CONFIG`` (`baco.cli_reproduce`) call
`reproduce`.
"""

from baco.reproduce.engine import Outcome, plan, reproduce
from baco.reproduce.executor import BACKENDS
from baco.reproduce.methods import MethodSpec
from baco.reproduce.runners import RUNNERS
from baco.reproduce.spec import find_experiment, known_names
from baco.reproduce.store import Case, CaseStore

__all__ = [
    "BACKENDS",
    "RUNNERS",
    "Case",
    "CaseStore",
    "MethodSpec",
    "Outcome",
    "find_experiment",
    "known_names",
    "plan",
    "reproduce",
]
