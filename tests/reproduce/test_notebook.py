"""experiments/notebooks/quickstart.ipynb uses only the public API, is saved with its outputs
(so it reads on GitHub without running it), and runs headless from top to bottom, showing its
plots and its two checks against numpy."""

import ast
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "experiments" / "notebooks" / "quickstart.ipynb"


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text())["cells"]


def _code(cell: dict) -> str:
    source = "".join(cell["source"])
    return "\n".join(line for line in source.splitlines() if not line.startswith("%"))


def _imported_modules() -> set[str]:
    names: set[str] = set()
    for cell in _cells():
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(_code(cell))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add(node.module or "")
    return names


def _check_outputs(cells: list[dict]) -> None:
    code = [c for c in cells if c["cell_type"] == "code"]
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3                       # convergence, trade-off, per-layer bars
    text = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")
    assert "interpreter output == numpy: True" in text
    assert "simulated output == numpy: True" in text


def test_notebook_imports_only_public_modules():
    modules = _imported_modules()
    assert "baco" in modules
    private = sorted(m for m in modules
                     if m.startswith("baco.reproduce") or any(p.startswith("_")
                                                              for p in m.split(".")))
    assert not private, f"the notebook imports internal modules: {private}"


def test_notebook_is_saved_with_its_outputs():
    code = [c for c in _cells() if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), "a code cell was never run"
    assert sum(bool(c.get("outputs")) for c in code) >= len(code) - 1   # the setup cell shows none
    _check_outputs(_cells())


@pytest.mark.skipif(importlib.util.find_spec("baco.dsl") is None,
                    reason="baco.dsl is not installed")
@pytest.mark.skipif(importlib.util.find_spec("nbclient") is None
                    or importlib.util.find_spec("ipykernel") is None,
                    reason="needs the test extra: nbclient, ipykernel")
@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    _check_outputs(json.loads(nbformat.writes(nb))["cells"])
