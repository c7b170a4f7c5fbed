"""The case store: atomic files, finished only with the same parameters."""

import json

import pytest

from baco.reproduce.store import Case, CaseStore, safe_id, write_atomic
from workloads.errors import ConfigError


def test_save_load_and_parameter_change(tmp_path):
    store = CaseStore(tmp_path)
    case = Case(safe_id("gemm/001", "Gemmini-BACO", "s0"), {"budget": 10, "m": {"a": [1, 2]}})
    assert case.id == "gemm-001__Gemmini-BACO__s0"
    assert not store.finished(case)
    store.save(case, {"edp": 2.5}, seconds=1.25)
    assert store.finished(case)
    assert store.load(case) == {"edp": 2.5}
    assert store.seconds(case) == 1.25
    assert store.ran_with(case.id) is None            # saved without it: not recorded
    store.save(case, {"edp": 2.5}, seconds=1.25, ran_with={"backend": "local", "workers": 2})
    assert store.ran_with(case.id) == {"backend": "local", "workers": 2}
    assert store.load(case) == {"edp": 2.5} and store.ran_with("no-such-case") is None
    assert not store.finished(Case(case.id, {"budget": 11, "m": {"a": [1, 2]}}))
    assert [p.name for p in (tmp_path / "cases").iterdir()] == [f"{case.id}.json"]


def test_unreadable_case_file_is_reported(tmp_path):
    store = CaseStore(tmp_path)
    case = Case("x", {})
    store.path(case).parent.mkdir(parents=True)
    store.path(case).write_text("{not json")
    with pytest.raises(ConfigError, match=r"x.json: unreadable .*delete it"):
        store.finished(case)


def test_write_atomic_leaves_no_temporary(tmp_path):
    target = tmp_path / "a" / "b.json"
    write_atomic(target, json.dumps({"k": 1}))
    write_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert [p.name for p in target.parent.iterdir()] == ["b.json"]
