"""The `baco` command line: outputs, JSON schema, and one-line errors with exit code 2."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from baco.cli import main

ROOT = Path(__file__).resolve().parents[1]
LAYER_KEYS = {"kind", "R", "S", "P", "Q", "C", "K", "N", "Hstride", "Wstride", "Hdilation",
              "Wdilation", "groups", "count", "macs"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_resnet50_json(capsys):
    code, out, _ = run(capsys, "workloads", "show", "resnet50", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "resnet50"
    assert data["unique_layers"] == len(data["layers"]) == 24
    assert sum(layer["count"] for layer in data["layers"]) == data["total_layers"] == 54
    assert all(LAYER_KEYS <= set(layer) for layer in data["layers"])
    assert data["total_macs"] == sum(layer["count"] * layer["macs"] for layer in data["layers"])


def test_show_table_and_list(capsys):
    code, out, _ = run(capsys, "workloads", "show", "resnet50")
    assert code == 0 and "24 unique of 54 layers" in out
    code, out, _ = run(capsys, "workloads", "list", "--json")
    listing = json.loads(out)
    assert code == 0 and "resnet50" in listing["zoo"] and "gemm" in listing["suites"]


def test_show_onnx_file_with_input_shape(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", pads=[1, 1, 1, 1])
    model = helper.make_model(helper.make_graph([node], "g", [x, w], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)

    code, _, err = run(capsys, "workloads", "show", str(path), "--json")
    assert code == 2 and "batch" in err and "--input-shape" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err

    code, out, _ = run(capsys, "workloads", "show", str(path), "--json",
                       "--input-shape", "x=2x3x8x8")
    layer = json.loads(out)["layers"][0]
    assert code == 0 and (layer["N"], layer["P"], layer["Q"], layer["C"], layer["K"]) == (2, 8, 8, 3, 4)


@pytest.mark.parametrize("argv, needle", [
    (["workloads", "show", "resnet5O"], "resnet50"),          # typo: suggests the real name
    (["workloads", "show", "missing.onnx"], "missing.onnx"),
    (["workloads", "show", "resnet50", "--input-shape", "x=1x3"], "ONNX files only"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_truncated_onnx_file(tmp_path, capsys):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07\x12\x04junk\x3a")
    code, _, err = run(capsys, "workloads", "show", str(path))
    assert code == 2 and "broken.onnx" in err and "Traceback" not in err


def test_console_script_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "baco", "workloads", "show", "nosuchnet"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert re.fullmatch(r"baco: error: .*nosuchnet.*\n", proc.stderr)


def test_quick_start_matches_ci():
    """The README's test command is the one CI runs, so the two cannot drift apart."""
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", readme)
    assert len(commands) == 2, "the quick start is exactly two commands"
    assert "baco " in commands[0] and commands[1].endswith("pytest")
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


DATA = ROOT / "data"


def test_validate_timeloop_json(tmp_path, capsys):
    rows = (DATA / "timeloop_gemmini_10k.csv").read_text().splitlines()[:201]
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(rows) + "\n")
    code, out, _ = run(capsys, "validate", "timeloop", str(path), "--json")
    report = json.loads(out)
    assert code == 0 and report["rows"] == 200
    assert set(report) == {"rows", "cycles_mean_abs_rel_err", "cycles_max_abs_rel_err",
                           "energy_mean_abs_rel_err", "energy_max_abs_rel_err"}
    assert report["cycles_mean_abs_rel_err"] <= 0.01 and report["energy_mean_abs_rel_err"] <= 0.01


def test_validate_rtl_sim_json(capsys):
    code, out, _ = run(capsys, "validate", "rtl", str(DATA / "gemmini_rtl_train.csv"),
                       "--predictor", "sim", "--limit", "12", "--json")
    report = json.loads(out)
    assert code == 0 and report["rows"] == 12
    assert {"pearson", "pearson_log", "spearman", "mape"} <= set(report)
    assert -1.0 <= report["spearman"] <= 1.0 and report["mape"] >= 0.0


def test_validate_missing_file_is_one_line(capsys):
    code, _, err = run(capsys, "validate", "timeloop", "no/such/file.csv")
    assert code == 2 and "no/such/file.csv" in err and len(err.strip().splitlines()) == 1


def _options(parser, path=("baco",)):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        elif action.option_strings and action.dest != "help":
            yield " ".join(path), parser, action


def test_every_option_has_help_with_its_default():
    from baco.cli import build_parser

    seen = 0
    for command, parser, action in _options(build_parser()):
        seen += 1
        text = parser._get_formatter()._get_help_string(action)
        assert text.strip(), f"{command} {action.option_strings[0]} has no help"
        if action.nargs != 0 and not action.required:      # flags and required ones aside
            assert "default" in text, f"{command} {action.option_strings[0]}: no default"
            if action.default not in (None, []):
                assert "%(default)s" in text or str(action.default) in text
    assert seen > 40


def test_run_help_lists_the_new_options(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for option in ("--budget", "--seed", "--set", "--force", "--resume"):
        assert option in out


def _readme_python_snippets():
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


@pytest.mark.parametrize("index", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_readme_python_snippets_run_from_the_project_root(index):
    snippets = _readme_python_snippets()
    assert len(snippets) == 2
    proc = subprocess.run([sys.executable, "-c", snippets[index]], capture_output=True,
                          text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_workloads_list_describes_every_network_and_suite(capsys):
    import workloads
    from workloads.network import format_macs

    code, out, _ = run(capsys, "workloads", "list")
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert code == 0
    resnet = workloads.load("resnet50")
    assert "54 layers (24 unique)" in lines["resnet50"]
    assert format_macs(resnet.total_macs) in lines["resnet50"] and "ResNet-50" in lines["resnet50"]
    for name in workloads.zoo_names():
        assert re.search(r"\d+ layers \( ?\d+ unique\), +[\d.]+ [kMGT]?MAC  \w", lines[name])
    for name in workloads.suite_names():
        assert re.search(r"\d+ cases, .*MAC to .*MAC  \w", lines[name]), lines[name]


@pytest.mark.parametrize("macs, text", [(0, "0 MAC"), (999, "999 MAC"), (200_000, "200 kMAC"),
                                        (999_999, "1 MMAC"), (4_089_184_256, "4.09 GMAC")])
def test_mac_counts_read_in_the_unit_that_fits(macs, text):
    from workloads.network import format_macs

    assert format_macs(macs) == text


def test_a_small_network_is_not_zero_gmac(capsys):
    import workloads
    from workloads.network import format_macs

    case = next(net for net in workloads.suite("gemv") if 1e5 < net.total_macs < 1e6)
    code, out, _ = run(capsys, "workloads", "show", case.name)
    assert code == 0 and "0.000 GMAC" not in out
    assert f"{format_macs(case.total_macs)}" in out and "kMAC" in out
