"""`baco run` as a user drives it: interrupted by signals and resumed, options that change the
config, and an output folder that already holds a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from baco.cli import main
from baco.config import ExperimentConfig, apply_overrides
from baco.run import OUTPUTS, prepare_output
from workloads.errors import ConfigError

TINY = Path(__file__).parent / "data" / "tiny.yaml"
ROOT = Path(__file__).resolve().parents[2]
# 20 saved rounds (2 starts x 40 steps / 4): more than the six interruptions can use up, even
# when a loaded machine lets two rounds pass between a save and the signal.
OVERRIDES = ("--budget", "400", "--seed", "5", "--set", "codesign.checkpoint_every=1",
             "--set", "codesign.round_every=4")


def _start(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "baco", "run", str(TINY), "--out", str(out), "--quiet",
         *OVERRIDES, *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def _interrupt_after_a_round(out: Path, sig: int, *extra: str) -> tuple[int, str]:
    """Start (or resume) the run, wait until it saves one more round of the search, then
    send `sig`: the signal lands mid-search, with work under way."""
    checkpoint = out / "checkpoint" / "baco.npz"
    before = _mtime(checkpoint)
    proc = _start(out, *extra)
    deadline = time.monotonic() + 240
    while _mtime(checkpoint) == before and proc.poll() is None:
        assert time.monotonic() < deadline, "the search saved no round in 240 s"
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")   # fork + exec: no JAX state
def test_interrupted_repeatedly_then_resumed_gives_the_uninterrupted_results(tmp_path):
    reference = tmp_path / "reference"
    assert main(["run", str(TINY), "--out", str(reference), "--quiet", *OVERRIDES]) == 0
    written = yaml.safe_load((reference / "config.yaml").read_text())
    assert written["codesign"]["budget_samples"] == 400 and written["codesign"]["seed"] == 5

    out = tmp_path / "interrupted"
    code, err = _interrupt_after_a_round(out, signal.SIGINT)
    assert code == 130, err
    assert "Traceback" not in err and "--resume" in err and "SIGINT" in err
    assert not (out / "results.json").exists()
    # Interrupted again after resuming, by the other signal.
    code, err = _interrupt_after_a_round(out, signal.SIGTERM, "--resume")
    assert code == 143 and "SIGTERM" in err and "Traceback" not in err, err

    proc = _start(out, "--resume")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    got, want = (out / "results.json").read_bytes(), (reference / "results.json").read_bytes()
    assert got == want, _first_difference(json.loads(got), json.loads(want))


def _first_difference(a, b, path="results.json"):
    """Where two JSON documents first differ, for the failure message."""
    if type(a) is not type(b) or not isinstance(a, (dict, list)):
        return f"{path}: {a!r} != {b!r}"
    keys = sorted(set(a) | set(b)) if isinstance(a, dict) else range(max(len(a), len(b)))
    for k in keys:
        try:
            x, y = a[k], b[k]
        except (KeyError, IndexError):
            return f"{path}[{k!r}] is in only one of them"
        if x != y:
            return _first_difference(x, y, f"{path}[{k!r}]")
    return f"{path}: equal"


def test_resume_says_where_it_continues(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", str(TINY), "--out", str(out), "--budget", "60", "--set", "baselines=[]"]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "resuming from" in err and "60 of 60 samples done" in err


def test_an_existing_output_folder_is_refused_without_resume_or_force(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "kernels").mkdir(parents=True)
    (out / "kernels" / "00_old.py").write_text("stale")
    (out / "results.json").write_text("{}")
    code = main(["run", str(TINY), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "--resume" in err and "--force" in err and str(out) in err
    assert len(err.strip().splitlines()) == 1
    assert (out / "results.json").read_text() == "{}"


def test_force_clears_only_the_outputs_of_a_run(tmp_path):
    out = tmp_path / "run"
    (out / "kernels").mkdir(parents=True)
    (out / "checkpoint").mkdir()
    for name in ("results.json", "config.yaml", "history.csv", "notes.txt"):
        (out / name).write_text("old")
    prepare_output(out, resume=False, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert "kernels" in OUTPUTS and "checkpoint" in OUTPUTS
    prepare_output(tmp_path / "absent", resume=False, force=False)   # a new folder is fine


def test_overrides_are_typed_nested_and_checked_like_the_file(tmp_path):
    data = {"codesign": {"starts": 2}, "name": "x"}
    out = apply_overrides(data, ["codesign.budget_samples=5000", "codesign.importance.alpha=0.5",
                                 "codesign.max_sp_kb=null", "name=y"], "cfg")
    assert out["codesign"] == {"starts": 2, "budget_samples": 5000,
                               "importance": {"alpha": 0.5}, "max_sp_kb": None}
    assert out["name"] == "y" and data == {"codesign": {"starts": 2}, "name": "x"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides(data, ["codesign.starts"], "cfg")
    with pytest.raises(ConfigError, match="name is 'x', not a mapping"):
        apply_overrides(data, ["name.first=1"], "cfg")
    with pytest.raises(ConfigError, match="codesign.strats.*did you mean 'starts'"):
        ExperimentConfig.load(TINY, ["codesign.strats=3"])
    with pytest.raises(ConfigError, match="codesign.starts"):
        ExperimentConfig.load(TINY, ["codesign.starts=many"])
    config = ExperimentConfig.load(TINY, ["codesign.budget_samples=77"])
    assert config.codesign.budget_samples == 77 and "--set" in config.source


def test_bad_override_on_the_command_line_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", str(TINY), "--out", str(out), "--set", "codesign.round_evry=3"])
    err = capsys.readouterr().err
    assert code == 2 and "codesign.round_evry" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_an_unknown_network_names_the_file_and_the_field(tmp_path, capsys):
    config = tmp_path / "x.yaml"
    config.write_text(TINY.read_text().replace('network: "bert:seq=16"', "network: resnet5"))
    out = tmp_path / "out"
    code = main(["run", str(config), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{config}: network: unknown zoo model 'resnet5'" in err and "resnet50" in err
    assert not out.exists()


def test_an_out_under_a_file_is_one_line_and_leaves_nothing(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "run"
    code = main(["run", str(TINY), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err == f"baco: error: cannot write results to {out}: Not a directory\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into any folder")
def test_an_unwritable_out_is_one_line_and_leaves_nothing(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        for out in (locked / "new" / "run", locked):
            code = main(["run", str(TINY), "--out", str(out), "--quiet"])
            err = capsys.readouterr().err
            assert code == 2
            assert err == f"baco: error: cannot write results to {out}: Permission denied\n"
            assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def _stopped(monkeypatch, save: bool):
    """`codesign` as stopped by Ctrl-C before it saved anything, or after its first save."""
    import baco.codesign_loop

    def interrupted(*args, checkpoint, **kwargs):
        if save:
            Path(checkpoint).write_bytes(b"saved")
        raise KeyboardInterrupt
    monkeypatch.setattr(baco.codesign_loop, "codesign", interrupted)


def test_ctrl_c_says_whether_there_is_a_checkpoint_to_resume(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    _stopped(monkeypatch, save=False)
    assert main(["run", str(TINY), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "no checkpoint was written yet" in err and "--resume" not in err
    prepare_output(out, resume=False, force=False)     # the same command is not refused
    _stopped(monkeypatch, save=True)
    assert main(["run", str(TINY), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert f"rerun with --resume to continue from the checkpoint in {out / 'checkpoint'}" in err
    with pytest.raises(ConfigError, match="--resume"):
        prepare_output(out, resume=False, force=False)


def test_resume_with_other_settings_names_each_before_starting(tmp_path, capsys):
    from baco.checkpoint import save_checkpoint
    from baco.codesign_loop import _Search
    from baco.networks import load_network

    config = ExperimentConfig.load(TINY)      # the checkpoint of a run stopped at once
    search = _Search(load_network(config.network_source()), config.hardware_config(),
                     config.codesign)
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    save_checkpoint(out / "checkpoint" / "baco.npz", search.checkpoint(search.start()))
    saved = (out / "checkpoint" / "baco.npz").read_bytes()
    code = main(["run", str(TINY), "--out", str(out), "--resume", "--budget", "10000",
                 "--set", "codesign.starts=3"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err     # no header before it
    assert "codesign.budget_samples: 180 there, 10000 now" in err
    assert "codesign.starts: 2 there, 3 now" in err and "--force" in err
    assert "codesign.seed" not in err and "delete" not in err
    assert (out / "checkpoint" / "baco.npz").read_bytes() == saved
