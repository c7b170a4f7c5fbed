"""A run's report: what `baco run` writes beside results.json, `baco report` rebuilding it,
and the HTML opening in a real headless browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from baco.cli import main
from baco.report import PLOTS, REPORT_FILES, sections
from baco.simulate import load_result


def test_a_run_writes_its_report_and_plots(tiny_run):
    for name in (*REPORT_FILES, *PLOTS):
        assert (tiny_run / name).stat().st_size > 0, name
    doc = json.loads((tiny_run / "results.json").read_text())
    md = (tiny_run / "report.md").read_text()
    for title in ("Contestants", "Simulated energy by event", "per layer",
                  "per layer and memory level", "Area by component", "Assumptions",
                  "Search progress"):
        assert title in md
    for label in ("baco", *doc["baselines"]):
        assert re.search(rf"^\| {label} \|", md, re.M), label
    for layer in doc["layers"]:
        assert layer["layer"]["name"] in md
    for level in ("Registers", "Accumulator", "Scratchpad", "DRAM"):
        assert f"| {level} |" in md
    assert "40 nm" in md and f"{doc['hardware']['clock_mhz']:g} MHz" in md
    for plot in PLOTS:
        assert f"]({plot})" in md
    html = (tiny_run / "report.html").read_text()
    assert html.count("src='data:image/png;base64,") == len(PLOTS)
    assert "src='http" not in html and "href=" not in html   # nothing outside the file


def test_the_report_adds_up_to_the_results(tiny_run):
    doc = json.loads((tiny_run / "results.json").read_text())
    parts = {s.title: s for s in sections(doc, load_result(tiny_run / "results.json"))}
    head, rows = parts["Area by component (mm2)"].tables[0]
    total = dict(rows)["total"]
    assert float(total) == pytest.approx(doc["area_mm2"], abs=1e-3)
    assert sum(float(v) for k, v in rows if k != "total") == pytest.approx(float(total),
                                                                             abs=0.01)
    head, rows = parts["Simulated energy by event (pJ)"].tables[0]
    totals = dict(zip(head[1:], rows[-1][1:]))
    assert float(totals["baco"]) == pytest.approx(
        doc["yardsticks"]["simulated"]["energy_pj"], rel=1e-3)
    head, rows = parts["Contestants"].tables[0]
    baco = dict(zip(head, rows[0]))
    assert float(baco["EDP simulated"]) == pytest.approx(doc["yardsticks"]["simulated"]["edp"],
                                                         rel=1e-3)
    assert baco["simulated EDP / BACO's"] == "1.00x"


def test_baco_report_rebuilds_it_elsewhere(tiny_run, tmp_path, capsys):
    assert main(["report", str(tiny_run), "--out", str(tmp_path)]) == 0
    assert "report.html" in capsys.readouterr().out
    assert (tmp_path / "report.md").read_text() == (tiny_run / "report.md").read_text()


def test_a_missing_results_file_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nothing.json")]) == 2
    err = capsys.readouterr().err
    assert "nothing.json" in err and len(err.strip().splitlines()) == 1


def _chromium() -> str:
    """A headless Chromium: on PATH, else Debian's package installed (as root, with apt)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if not shutil.which("apt-get"):
        pytest.skip("no Chromium on PATH and no apt-get to install Debian's package")
    if os.geteuid() != 0:
        pytest.skip("no Chromium on PATH, and installing Debian's package needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        done = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                               "chromium"], capture_output=True, text=True, env=env,
                              timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip("installing Debian's chromium package took over 15 minutes")
    if done.returncode != 0 or not shutil.which("chromium"):
        pytest.skip("Debian's chromium package could not be installed: "
                    + (done.stderr.strip().splitlines() or ["no output"])[-1])
    return shutil.which("chromium")


def test_the_html_opens_in_headless_chromium_with_its_plots(tiny_run, tmp_path):
    browser = _chromium()
    page = tiny_run / "report.html"
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
         "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # the page's script counts the images the browser decoded and drew
    assert f'data-plots-shown="{len(PLOTS)}"' in dom
    doc = json.loads((tiny_run / "results.json").read_text())
    for label in ("baco", *doc["baselines"]):
        assert f"<td>{label}</td>" in dom
    assert "Scratchpad" in dom and "Area by component" in dom
