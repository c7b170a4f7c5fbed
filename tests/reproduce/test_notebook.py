"""experiments/notebooks/quickstart.ipynb runs headless from top to bottom and shows its plots
and its two checks against numpy."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "experiments" / "notebooks" / "quickstart.ipynb"


@pytest.mark.skipif(importlib.util.find_spec("baco.dsl") is None,
                    reason="baco.dsl (issue 6) is not installed")
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
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3                       # convergence, trade-off, per-layer bars
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "interpreter output == numpy: True" in text
    assert "simulated output == numpy: True" in text
