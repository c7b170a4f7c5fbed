"""Experiment configs: every shipped one loads; bad ones fail naming the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from baco.config import CodesignConfig, ExperimentConfig
from baco.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# `baco run` configs; the files with a ``kind`` are `baco reproduce` experiments
# (tests/reproduce/test_spec.py loads those).
CONFIGS = sorted(p for p in (ROOT / "experiments" / "configs").glob("*.yaml")
                 if "kind" not in (yaml.safe_load(p.read_text()) or {}))
REPRODUCE = sorted(set((ROOT / "experiments" / "configs").glob("*.yaml")) - set(CONFIGS))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_load(path):
    config = ExperimentConfig.load(path)
    assert config.name == path.stem
    assert config.codesign.budget_samples > 0
    assert config.hardware_config().template == "gemmini"


def test_a_reproduce_experiment_is_not_a_run_config():
    assert CONFIGS and REPRODUCE
    with pytest.raises(ConfigError, match="baco reproduce table6_6"):
        ExperimentConfig.load(ROOT / "experiments" / "configs" / "table6_6.yaml")


def test_the_default_config_lists_the_issue_baselines():
    config = ExperimentConfig.load(ROOT / "experiments" / "configs" / "resnet50.yaml")
    assert [b.label for b in config.baselines] == ["gemmini_default", "dosa", "dosa_iso_area"]
    assert config.baselines[2].name == "dosa"
    assert config.baselines[2].options["area_budget_mm2"] == "match"
    assert config.network == "resnet50"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, needles", [
    ("name: x\nnetwork: resnet50\ncodesign: {learning_rat: 0.1}\n",
     ["'codesign.learning_rat'", "did you mean 'learning_rate'"]),
    ("name: x\nnetwork: resnet50\nnetwrok: resnet50\n", ["'netwrok'", "did you mean 'network'"]),
    ("name: x\nnetwork: resnet50\ncodesign: {importance: {alpah: 0.3}}\n",
     ["'codesign.importance.alpah'", "did you mean 'alpha'"]),
    ("name: x\nnetwork: resnet50\nbaselines: [{name: dosa, optoins: {}}]\n",
     ["'baselines[0].optoins'", "did you mean 'options'"]),
])
def test_unknown_key_names_the_key_path_and_the_file(tmp_path, text, needles):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.load(path)
    message = str(info.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("text, key, expected", [
    ("name: x\nnetwork: resnet50\ncodesign: {starts: '8'}\n", "codesign.starts", "an integer"),
    ("name: x\nnetwork: resnet50\ncodesign: {learning_rate: fast}\n", "codesign.learning_rate",
     "a number"),
    ("name: x\nnetwork: resnet50\ncodesign: {instruction_aware: 1}\n",
     "codesign.instruction_aware", "true/false"),
    ("name: x\nnetwork: [resnet50]\n", "network", "a string"),
    ("name: x\nnetwork: resnet50\ncodesign: {importance: {patience: 2.5}}\n",
     "codesign.importance.patience", "an integer"),
    ("name: x\nnetwork: resnet50\ncodesign: 3\n", "codesign", "a mapping"),
])
def test_wrong_type_names_the_key_the_type_and_the_file(tmp_path, text, key, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.load(path)
    message = str(info.value)
    assert str(path) in message and key in message and expected in message


@pytest.mark.parametrize("text, needle", [
    ("name: x\n", "missing key 'network'"),
    ("name: x\nnetwork: resnet50\ncodesign: {hw_mode: minhw}\n", "codesign.hw_mode"),
    ("name: x\nnetwork: resnet50\ncodesign: {budget_samples: 0}\n", "codesign.budget_samples"),
    ("name: x\nnetwork: resnet50\nhardware: gemini_default\n", "gemmini_default"),
    ("name: x\nnetwork: resnet50\nbaselines: [dosa, dosa]\n", "twice"),
    ("name: x\nnetwork: resnet50\ncodesign: {max_sp_kb: -4}\n", "codesign.max_sp_kb"),
    ("name: x\nnetwork: resnet50\n  bad: [indent\n", "line"),
])
def test_other_bad_configs(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.load(path)
    assert needle in str(info.value) and str(path) in str(info.value)


def test_baselines_as_a_mapping_and_defaults(tmp_path):
    path = write(tmp_path, "name: x\nnetwork: bert\nbaselines: {dosa: {learning_rate: 1.0e-5}}\n")
    config = ExperimentConfig.load(path)
    assert config.baselines[0].name == "dosa"
    assert config.baselines[0].options == {"learning_rate": 1e-5}
    assert config.codesign == CodesignConfig()
    # round trip through the dict form written to DIR/config.yaml
    again = ExperimentConfig.from_dict(config.to_dict(), source=str(path))
    assert again == config


def test_onnx_paths_resolve_against_the_config_folder(tmp_path):
    path = write(tmp_path, "name: x\nnetwork: models/net.onnx\n")
    config = ExperimentConfig.load(path)
    assert config.network_source() == str(tmp_path / "models" / "net.onnx")


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n"])
def test_an_empty_file_is_called_empty_and_named(tmp_path, text):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="is empty") as info:
        ExperimentConfig.load(path, ["codesign.seed=1"])
    assert str(path) in str(info.value) and "NoneType" not in str(info.value)
