"""`baco export`: a design as a Chipyard Gemmini config, gemmini.h tiling factors and Timeloop
inputs that read back to the same layers and mappings."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from accel.arch import HardwareConfig
from accel.export_gemmini import layer_tiling
from accel.export_timeloop import covered_layer, mapping_from_timeloop_yaml
from accel.mapping import Mapping
from baco.cli import main
from baco.export import HEADER_FILE, INDEX_FILE, SCALA_FILE, layer_dirs, read_timeloop
from baco.result import CodesignResult, LayerResult
from baco.search import gemmini_mapping, tiled_matmul_auto
from workloads.errors import ConfigError
from workloads.layer import Layer

HW = HardwareConfig.preset("gemmini_default")
LAYERS = (
    Layer.conv2d(R=3, S=3, P=14, Q=14, C=64, K=64, Hstride=2, Wstride=2, pads=(1, 1, 1, 1),
                 name="stem/conv"),
    Layer.gemm(M=512, K_red=512, N_out=512, name="fc"),
    Layer.gemm(M=100, K_red=96, N_out=200, name="proj"),      # the tiler pads M and N
    Layer(kind="gemv", C=64, K=40, name="head"),
)


def _result(hw=HW, random_last=True):
    """The Gemmini library's mappings of LAYERS (as `gemmini_default` picks them), the last
    a random one with mixed stages, on `hw`."""
    entries = []
    for i, layer in enumerate(LAYERS):
        if random_last and i == len(LAYERS) - 1:
            mapping = Mapping.random(layer, hw, np.random.default_rng(5), stages=None)
        else:
            mapping, _ = gemmini_mapping(layer, hw)
        entries.append(LayerResult(layer, i + 1, mapping, 100.0, 10.0))
    return CodesignResult("baco", "tiny", hw, tuple(entries), samples=1)


@pytest.fixture
def exported(tmp_path):
    path = tmp_path / "results.json"
    result = _result()
    path.write_text(result.to_json())
    code = main(["export", str(path), "--gemmini", str(tmp_path / "g"), "--timeloop",
                 str(tmp_path / "t"), "--quiet"])
    assert code == 0
    return result, tmp_path / "g", tmp_path / "t"


def test_timeloop_files_read_back_to_the_same_mappings_and_shapes(exported):
    result, _, folder = exported
    for sub in layer_dirs(result):
        for name in ("problem.yaml", "map.yaml"):
            assert isinstance(yaml.safe_load((folder / sub / name).read_text()), dict)
    back = read_timeloop(folder)
    assert len(back) == len(result.layers)
    for (layer, mapping), entry in zip(back, result.layers):
        assert mapping == entry.mapping
        assert mapping.stages.tolist() == entry.mapping.stages.tolist()
        want = covered_layer(entry.layer, entry.mapping)
        assert layer.dims == want.dims
        assert (layer.Hstride, layer.Wstride, layer.Hdilation, layer.Wdilation) == (
            want.Hstride, want.Wstride, want.Hdilation, want.Wdilation)
    index = yaml.safe_load((folder / INDEX_FILE).read_text())
    padded = [e["padded"] for e in index["layers"]]
    assert padded == [covered_layer(r.layer, r.mapping) != r.layer for r in result.layers]
    assert True in padded and False in padded        # "proj" runs padded, "fc" does not
    assert back[0][0].dims == LAYERS[0].dims and back[0][0].Hstride == 2
    assert [e["count"] for e in index["layers"]] == [1, 2, 3, 4]


def test_timeloop_problem_names_output_channels_m_and_maps_the_compact_string(exported):
    result, _, folder = exported
    sub = folder / layer_dirs(result)[0]
    problem = yaml.safe_load((sub / "problem.yaml").read_text())["problem"]
    assert problem["shape"]["name"] == "CNN-Layer"
    assert problem["instance"]["M"] == 64 and problem["instance"]["Wstride"] == 2
    directives = yaml.safe_load((sub / "map.yaml").read_text())["mapping"]
    mapping = result.layers[0].mapping
    acc = next(d for d in directives if d["target"] == "Accumulator" and d["type"] == "temporal")
    loops = [w for w in mapping.to_timeloop().split(" - ")[2].split()[1:] if not w.endswith("X")]
    assert acc["permutation"].startswith("".join(w[0] for w in reversed(loops)).replace("K", "M"))
    spatial = {d["target"]: d for d in directives if d["type"] == "spatial"}
    assert "M=16" in spatial["Scratchpad"]["factors"].split()
    assert "C=16" in spatial["Accumulator"]["factors"].split()
    assert (spatial["Scratchpad"]["split"], spatial["Accumulator"]["split"]) == (7, 0)
    keeps = {d["target"]: d["keep"] for d in directives if d["type"] == "bypass"}
    assert keeps == {"DRAM": ["Weights", "Inputs", "Outputs"], "Scratchpad": ["Weights", "Inputs"],
                     "Accumulator": ["Outputs"], "Registers": ["Weights"]}


def test_timeloop_arch_has_the_designs_sizes(exported):
    _, _, folder = exported
    arch = yaml.safe_load((folder / "arch.yaml").read_text())["architecture"]
    assert arch["version"] == 0.3
    system = arch["subtree"][0]
    levels = {lv["name"]: lv["attributes"] for lv in system["local"]}
    cols = system["subtree"][0]
    rows = cols["subtree"][0]
    levels.update({lv["name"]: lv["attributes"] for lv in cols["local"] + rows["local"]})
    assert levels["Scratchpad"]["entries"] * 8 / 8192 == HW.sp_kb
    assert levels["Accumulator"]["entries"] * 32 / 8192 * HW.pe_cols == HW.acc_kb
    assert levels["Accumulator"]["instances"] == HW.pe_cols == levels["Accumulator"]["meshX"]
    assert cols["name"] == "PECols[0..15]" and rows["name"] == "PERows[0..15]"
    assert levels["MACC"]["instances"] == HW.n_pe and levels["DRAM"]["shared_bandwidth"] == 8


def test_gemmini_config_and_header(exported):
    result, folder, _ = exported
    scala = (folder / SCALA_FILE).read_text()
    for line in ("meshRows = 16", "meshColumns = 16", "tileRows = 1", "tileColumns = 1",
                 "sp_capacity = CapacityInKilobytes(256)",
                 "acc_capacity = CapacityInKilobytes(64)", "sp_banks = 4", "acc_banks = 2",
                 "dma_buswidth = 128", "inputType = SInt(8.W)", "accType = SInt(32.W)",
                 "class BacoGemminiConfig extends Config("):
        assert line in scala
    header = (folder / HEADER_FILE).read_text()
    macros = dict(line.split()[1:3] for line in header.splitlines()
                  if line.startswith("#define ") and len(line.split()) >= 3)
    assert macros["BACO_DIM"] == "16" and macros["BACO_SP_ROWS"] == "16384"
    # a layer the library tiles evenly gets the library's own tiles back
    assert (int(macros["BACO_FC_TILE_I"]), int(macros["BACO_FC_TILE_J"]),
            int(macros["BACO_FC_TILE_K"])) == tiled_matmul_auto(512, 512, 512)
    assert macros["BACO_STEM_CONV_CALL"] == "BACO_TILED_CONV"
    conv = layer_tiling(LAYERS[0], result.layers[0].mapping, HW)["args"]
    for arg, value in conv.items():
        assert macros[f"BACO_STEM_CONV_{arg.upper()}"] == str(value)
        assert 1 <= value
    assert macros["BACO_HEAD_CALL"] == "BACO_TILED_MATMUL"


def test_an_unbuildable_design_is_refused(tmp_path, capsys):
    hw = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=3, acc_kb=2)   # 96-row scratchpad banks
    path = tmp_path / "results.json"
    entries = [LayerResult(LAYERS[1], 1, Mapping.random(LAYERS[1], hw, np.random.default_rng(0)),
                           1.0, 1.0)]
    path.write_text(CodesignResult("baco", "t", hw, tuple(entries), samples=1).to_json())
    code = main(["export", str(path), "--gemmini", str(tmp_path / "g")])
    assert code == 2
    assert "does not build" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()
    assert main(["export", str(path), "--timeloop", str(tmp_path / "t"), "--quiet"]) == 0
    back = read_timeloop(tmp_path / "t")
    assert back[0][1] == entries[0].mapping     # Timeloop takes it: it has no generator rules
    odd = HardwareConfig(pe_rows=12, pe_cols=12, sp_kb=64, acc_kb=16)
    path.write_text(CodesignResult("baco", "t", odd, (), samples=1).to_json())
    assert main(["export", str(path), "--timeloop", str(tmp_path / "odd")]) == 2
    assert "not a whole number of 32-bit words" in capsys.readouterr().err


def test_nothing_asked_and_bad_mappings_are_errors(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_result().to_dict()))
    assert main(["export", str(path)]) == 2
    assert "nothing to write" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="target must be one of"):
        mapping_from_timeloop_yaml({"mapping": [{"target": "L2", "type": "temporal"}]},
                                   HW.template_spec)
    with pytest.raises(ConfigError, match="unknown dimension"):
        mapping_from_timeloop_yaml({"mapping": [{"target": "DRAM", "type": "temporal",
                                                 "factors": "K=4"}]}, HW.template_spec)
