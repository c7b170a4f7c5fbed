"""`baco sweep` with worker processes, stopped by SIGINT or SIGTERM: exit 130/143, finished
cases kept, the workers gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWEEP = """\
name: many
kind: end_to_end
params:
  networks: ["deepbench:set=ocr", "deepbench:set=face", "resnet50", "bert:seq=16"]
  seeds: [0, 1, 2]
  reference: Gemmini-Default
  methods:
    - {label: Gemmini-Default, search: gemmini_default, hardware: gemmini_default, budget: 1}
"""


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [int(x) for x in out.split()]


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")   # fork + exec: no JAX state
@pytest.mark.parametrize("sig, code", [
    (signal.SIGINT, 130),
    pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow),  # the same path, another signal
])
def test_a_signal_stops_the_sweep_and_its_workers(tmp_path, sig, code):
    config = tmp_path / "many.yaml"
    config.write_text(SWEEP)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "baco", "sweep", str(config), "--workers", "2", "--out",
         str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "BACO_JAX_CACHE": "off"})
    deadline = time.monotonic() + 300
    while not list((out / "cases").glob("*.json")) and proc.poll() is None:
        assert time.monotonic() < deadline, "no case finished in 300 s"
        time.sleep(0.1)
    workers = _children(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "rerun the same command" in err and "Traceback" not in err
    # (a worker killed mid-case may leave a semaphore of its own -- e.g. joblib's -- that
    # Python's resource tracker reports at exit: a warning, not a leak of the sweep's pool)
    assert list((out / "cases").glob("*.json"))          # finished cases are kept
    time.sleep(0.5)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()
             and "Z" not in Path(f"/proc/{w}/stat").read_text().split()[2]]
    assert not alive, f"workers still running: {alive}"
