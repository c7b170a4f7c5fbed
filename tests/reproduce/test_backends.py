"""The same experiment on worker processes and on a local Ray instance gives the same cases as
in-process."""

import importlib.util
import json

import pytest

from baco.reproduce import reproduce
from workloads.errors import ConfigError


def _results(out):
    return {p.stem: json.loads(p.read_text())["result"] for p in (out / "cases").iterdir()}


def _same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        for field in ("edp", "cycles", "energy_pj", "edp_plain", "samples"):
            assert a[key][field] == pytest.approx(b[key][field], rel=1e-6), (key, field)


@pytest.mark.slow
def test_process_pool_matches_in_process(tiny_experiment, tmp_path):
    reproduce(str(tiny_experiment), out=tmp_path / "one", progress=False)
    outcome = reproduce(str(tiny_experiment), out=tmp_path / "two", workers=2, progress=False)
    assert outcome.ran == 2
    _same(_results(tmp_path / "one"), _results(tmp_path / "two"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_ray_backend_on_a_local_instance(tiny_experiment, tmp_path):
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        tiny_experiment.write_text(tiny_experiment.read_text().replace(
            "    - {label: NVDLA-Large", "    # - {label: NVDLA-Large"))
        outcome = reproduce(str(tiny_experiment), out=tmp_path / "ray", backend="ray",
                            progress=False)
        assert (outcome.ran, outcome.reused) == (1, 0)
        local = reproduce(str(tiny_experiment), out=tmp_path / "local", progress=False)
        assert local.ran == 1
        _same(_results(tmp_path / "ray"), _results(tmp_path / "local"))
        again = reproduce(str(tiny_experiment), out=tmp_path / "ray", backend="ray",
                          progress=False)
        assert (again.ran, again.reused) == (0, 1)
    finally:
        ray.shutdown()


def test_ray_backend_without_ray_is_a_clear_error(tiny_experiment, tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"--backend ray needs Ray: pip install 'baco\[ray\]'"):
        reproduce(str(tiny_experiment), out=tmp_path / "x", backend="ray", progress=False)
