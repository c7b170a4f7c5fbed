"""Experiment files: strict parsing, the quick overrides, and every shipped file plans."""

import pytest

from baco.reproduce import known_names, plan
from baco.reproduce.runners import parse_params
from baco.reproduce.spec import experiment_from_dict, find_experiment, merge, read_experiment
from workloads.errors import ConfigError

SHIPPED = ["table6_6", "table6_7", "fig6_10", "fig6_11", "fig6_12"]


def test_every_result_of_the_seed_has_an_experiment():
    assert set(SHIPPED) <= set(known_names())
    assert "resnet50" not in known_names()          # `baco run` configs are not experiments


@pytest.mark.parametrize("name", SHIPPED + ["experiments/configs/sweep_networks.yaml"])
@pytest.mark.parametrize("quick", [False, True])
def test_shipped_experiments_plan(name, quick):
    _, _, cases = plan(name, quick=quick)
    assert cases and len({c.id for c in cases}) == len(cases)
    if quick:
        assert len(cases) <= len(plan(name, quick=False)[2])


def test_table6_6_full_covers_the_evaluated_subsets():
    _, params, cases = plan("table6_6")
    per_suite = {}
    for c in cases:
        per_suite.setdefault(c.params["suite"], set()).add(c.params["index"])
    assert {k: len(v) for k, v in per_suite.items()} == {
        "gemm": 170, "gemv": 174, "conv1d": 68, "conv2d": 128}
    assert len(cases) == (170 + 174 + 68 + 128) * len(params.methods)


def test_unknown_experiment_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown experiment 'table6_8'.*did you mean "
                                          r"'table6_(6|7)'.*known: .*fig6_10"):
        find_experiment("table6_8")


def _exp(params, kind="end_to_end"):
    return experiment_from_dict({"name": "t", "kind": kind, "params": params}, "t.yaml")


def test_typo_in_a_parameter_names_the_key_and_file():
    exp = _exp({"network": ["resnet50"], "methods": []})
    with pytest.raises(ConfigError, match=r"t.yaml: unknown key 'params.network'; did you mean "
                                          r"'networks'\?"):
        parse_params(exp.kind, exp.params, exp.source)


def test_typo_inside_a_method_is_named():
    exp = _exp({"methods": [{"label": "x", "search": "baco", "budgte": 3}]})
    with pytest.raises(ConfigError, match=r"unknown key 'params.methods\[0\].budgte'; did you "
                                          r"mean 'budget'"):
        parse_params(exp.kind, exp.params, exp.source)


def test_bad_values_are_named():
    exp = _exp({"methods": [{"label": "x", "search": "bacoo"}]})
    with pytest.raises(ConfigError, match=r"unknown search 'bacoo'; did you mean 'baco'"):
        parse_params(exp.kind, exp.params, exp.source)
    exp = _exp({"seeds": "0", "methods": [{"label": "x", "search": "baco"}]})
    with pytest.raises(ConfigError, match=r"params.seeds must be a list, got '0'"):
        parse_params(exp.kind, exp.params, exp.source)
    exp = _exp({"methods": [{"label": "x", "search": "baco", "options": {"lr": 1}}]})
    with pytest.raises(ConfigError, match=r"unknown key 'codesign.lr'"):
        parse_params(exp.kind, exp.params, exp.source)
    with pytest.raises(ConfigError, match="unknown kind 'nope'"):
        parse_params("nope", {}, "t.yaml")


def test_top_level_keys_are_checked(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nkind: end_to_end\nparms: {}\n")
    with pytest.raises(ConfigError, match=r"x.yaml: unknown key 'parms'; did you mean 'params'"):
        read_experiment(path)
    path.write_text("name: x\nkind: [\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        read_experiment(path)


def test_quick_merges_nested_mappings():
    assert merge({"a": {"x": 1, "y": 2}, "b": [1, 2]}, {"a": {"y": 3}, "b": [3]}) == {
        "a": {"x": 1, "y": 3}, "b": [3]}
    exp = find_experiment("fig6_12")
    assert exp.effective(True)["limit"] < 1000 and exp.effective(False)["limit"] is None
