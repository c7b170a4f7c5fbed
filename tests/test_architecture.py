"""The one-way data flow of the architecture map: workloads <- accel <- perfmodels <- baco."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "workloads": {"accel", "perfmodels", "baco"},
    "accel": {"perfmodels", "baco"},
    "perfmodels": {"baco"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_import_only_downstream(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_importing_a_package_loads_nothing_upstream(package):
    code = (f"import sys, {package}; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN[package])!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------ inside baco
BACO_LAYERS = (
    # what every part of baco may use: errors, settings, results, network loading
    {"errors", "config", "padding", "importance", "interrupts", "networks", "result",
     "progress", "checkpoint", "topk", "compile_cache", "profile"},
    # scoring and judging designs, the DSL
    {"rounding", "refine", "fusion", "yardsticks", "sim_hybrid", "simulate", "dsl",
     "program_validation", "rtl_validation", "objective", "rounding_factors",
     "rounding_hardware", "rounding_repair", "rounding_area", "rounding_score", "verdict",
     "final_pick", "export", "sim_cache"},
    {"search"},  # the baselines and what every gradient search shares (start points)
    {"codesign_loop", "codesign_problem", "codesign_ledger", "codesign_starts", "codesign_refine",
     "codesign_sim", "codesign_state"},  # BACO's search loop
    {"plots", "report"},  # figures, and a run's report from its results
    {"run", "dataset"},  # an experiment, a dataset
    {"reproduce"},  # the seed's tables and figures
    {"", "__main__", "cli", "cli_reproduce", "cli_simulate", "cli_surrogate",
     "cli_export"},  # the faces
)
"""baco's parts, bottom first: a part imports only parts of its own layer or below."""


def _baco_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "baco":
        return None
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[str]:
    """Every module `path` imports (at module level or inside a function), fully named;
    ``from package import name`` counts as ``package.name``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [f"{node.module}.{alias.name}" for alias in node.names]
    return out


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_baco_parts_import_only_their_layer_or_below():
    layer_of = {part: i for i, layer in enumerate(BACO_LAYERS) for part in layer}
    unknown, upward = set(), []
    for path in (ROOT / "baco").rglob("*.py"):
        me = _baco_part(_module(path))
        if me not in layer_of:
            unknown.add(me)
            continue
        for name in _imports(path):
            other = _baco_part(name)
            if other is None or other == me:
                continue
            if other not in layer_of:
                unknown.add(other)
            elif layer_of[other] > layer_of[me]:
                upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not unknown, f"place these parts of baco in BACO_LAYERS: {sorted(unknown)}"
    assert upward == []


# ------------------------------------------------------------------------------ faces
SUBPACKAGES = ("accel.lower", "accel.sim", "perfmodels.atformer", "baco.search", "baco.dsl",
               "baco.reproduce", "workloads.zoo")
"""Packages inside a package: a module outside one imports it through its face (its
``__init__``), never a module of it."""

def _past_face() -> set[tuple[str, str]]:
    found = set()
    for package in sorted(FORBIDDEN) + ["baco"]:
        for path in (ROOT / package).rglob("*.py"):
            me = _module(path)
            for name in _imports(path):
                for sub in SUBPACKAGES:
                    inside = me == sub or me.startswith(sub + ".")
                    if name.startswith(sub + ".") and not inside:
                        target = ".".join(name.split(".")[:len(sub.split(".")) + 1])
                        if (ROOT / Path(*target.split("."))).with_suffix(".py").exists() or (
                                ROOT / Path(*target.split("."))).is_dir():
                            found.add((me, target))
    return found


def test_no_new_import_past_a_face():
    assert _past_face() == set(), "import these through the package's __init__"


# ------------------------------------------------------------------------------ sizes
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_CLASS_LINES = 700, 120, 250


def _oversized() -> set[str]:
    found = set()
    for package in sorted(FORBIDDEN) + ["baco", "experiments"]:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            text = path.read_text()
            if text.count("\n") > MAX_MODULE_LINES:
                found.add(f"module {rel}")
            for node in ast.walk(ast.parse(text, filename=rel)):
                size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        size > MAX_FUNCTION_LINES):
                    found.add(f"function {rel}:{node.name}")
                elif isinstance(node, ast.ClassDef) and size > MAX_CLASS_LINES:
                    found.add(f"class {rel}:{node.name}")
    return found


def test_no_oversized_module_class_or_function():
    assert _oversized() == set(), "split these by concern"
