"""`baco export RESULTS.json`: a co-designed design in the forms other tools take.

* ``--gemmini DIR``: ``BacoGemminiConfig.scala`` (the design's ``GemminiArrayConfig`` for
  Chipyard) and ``baco_tiling.h`` (each layer's ``tiled_conv``/``tiled_matmul`` tiling
  arguments), from `accel.export_gemmini`; a design Gemmini's generator does not build is
  refused.
* ``--timeloop DIR``: Timeloop v3 inputs (`accel.export_timeloop`): ``arch.yaml`` once, and per
  unique layer ``LAYER/problem.yaml`` and ``LAYER/map.yaml``; ``layers.yaml`` lists the layers
  with what Timeloop's files do not hold (name, operator kind, count, groups, the compact
  mapping and its stages). A mapping that covers more than its layer (the search pads awkward
  dims) gets the covered shape as its problem, since Timeloop's factors multiply to the
  problem's dims; ``layers.yaml`` marks it ``padded`` and keeps the layer's own shape.
  `read_timeloop` reads the folder back into layers and mappings.

The design is read as `baco simulate` reads it (`baco.simulate.load_result`).
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import yaml

from accel.export_gemmini import check_exportable, scala_config, tiling_header
from accel.export_timeloop import (
    covered_layer,
    layer_from_timeloop_problem,
    mapping_from_timeloop_yaml,
    timeloop_arch,
    timeloop_mapping,
    timeloop_problem,
)
from accel.mapping import Mapping
from baco.result import CodesignResult
from baco.simulate import load_result
from workloads.errors import ConfigError
from workloads.files import write_atomic
from workloads.layer import Layer

SCALA_FILE = "BacoGemminiConfig.scala"
HEADER_FILE = "baco_tiling.h"
INDEX_FILE = "layers.yaml"


def _dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _named(result: CodesignResult) -> list[tuple[str, Layer, Mapping]]:
    return [(r.layer.name or f"layer{i}", r.layer, r.mapping)
            for i, r in enumerate(result.layers)]


def layer_dirs(result: CodesignResult) -> list[str]:
    """A folder name per unique layer: its index and its name, filesystem-safe."""
    return [f"{i:02d}_{re.sub(r'[^0-9A-Za-z_.-]+', '_', name).strip('_.') or 'layer'}"
            for i, (name, _, _) in enumerate(_named(result))]


def write_gemmini(result: CodesignResult, out: pathlib.Path, source: str = ""
                  ) -> list[pathlib.Path]:
    """The Scala config and the tiling header, in `out`."""
    check_exportable(result.hardware, where=source or "design")
    files = {out / SCALA_FILE: scala_config(result.hardware, source),
             out / HEADER_FILE: tiling_header(result.hardware, _named(result), source)}
    for path, text in files.items():
        write_atomic(path, text)
    return list(files)


def write_timeloop(result: CodesignResult, out: pathlib.Path) -> list[pathlib.Path]:
    """``arch.yaml``, per layer ``problem.yaml`` and ``map.yaml``, and ``layers.yaml``."""
    hw = result.hardware
    written = [out / "arch.yaml"]
    write_atomic(written[0], _dump(timeloop_arch(hw)))
    index = []
    for folder, r in zip(layer_dirs(result), result.layers):
        problem = covered_layer(r.layer, r.mapping)
        r.mapping.check_structure(problem, hw)
        for name, doc in (("problem.yaml", timeloop_problem(problem)),
                          ("map.yaml", timeloop_mapping(r.mapping, hw))):
            write_atomic(out / folder / name, _dump(doc))
            written.append(out / folder / name)
        index.append({"dir": folder, "name": r.layer.name, "kind": r.layer.kind,
                      "count": r.count, "groups": r.layer.groups,
                      "layer": r.layer.config_str(), "padded": problem != r.layer,
                      "mapping": r.mapping.to_timeloop(), "stages": r.mapping.stages.tolist(),
                      **({"fused_with": list(r.fused_with)} if r.fused_with else {})})
    doc = {"method": result.method, "network": result.network, "template": hw.template,
           "arch": "arch.yaml", "layers": index}
    write_atomic(out / INDEX_FILE, _dump(doc))
    return [*written, out / INDEX_FILE]


def _read_yaml(path: pathlib.Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({exc})") from None


def read_timeloop(folder: str | pathlib.Path, template: Any = None
                  ) -> list[tuple[Layer, Mapping]]:
    """Each layer's problem (as a conv2d `Layer`) and mapping, read back from a folder
    `write_timeloop` wrote; stages from ``layers.yaml``. `template` defaults to the one the
    index names."""
    from accel.arch import Template

    folder = pathlib.Path(folder)
    index = _read_yaml(folder / INDEX_FILE)
    if not isinstance(index, dict) or not isinstance(index.get("layers"), list):
        raise ConfigError(f"{folder / INDEX_FILE}: expected a 'layers' list")
    template = template or Template.load(str(index.get("template", "gemmini")))
    out = []
    for i, entry in enumerate(index["layers"]):
        where = f"{folder / INDEX_FILE}: layers[{i}]"
        if not isinstance(entry, dict) or "dir" not in entry:
            raise ConfigError(f"{where}: expected a mapping with 'dir'")
        sub = folder / str(entry["dir"])
        layer = layer_from_timeloop_problem(_read_yaml(sub / "problem.yaml"),
                                            str(sub / "problem.yaml"))
        mapping = mapping_from_timeloop_yaml(_read_yaml(sub / "map.yaml"), template,
                                             stages=entry.get("stages", 2),
                                             where=str(sub / "map.yaml"))
        out.append((layer, mapping))
    return out


def main_export(path: str, gemmini: str | None, timeloop: str | None, quiet: bool) -> int:
    """The command: write what was asked for; 0 when written."""
    if not gemmini and not timeloop:
        raise ConfigError("baco export: nothing to write; give --gemmini DIR and/or "
                          "--timeloop DIR")
    result = load_result(path)
    written: list[pathlib.Path] = []
    if gemmini:
        written += write_gemmini(result, pathlib.Path(gemmini), source=str(path))
    if timeloop:
        written += write_timeloop(result, pathlib.Path(timeloop))
    if not quiet:
        print(f"{len(written)} files from {path} ({result.method}, {result.network}, "
              f"{len(result.layers)} layers):")
        for p in written:
            print(f"  {p}")
    return 0


__all__ = ["HEADER_FILE", "INDEX_FILE", "SCALA_FILE", "layer_dirs", "main_export",
           "read_timeloop", "write_gemmini", "write_timeloop"]
