"""How much of a network's simulated cost its epilogue operands' moves are, on one design.

A layer's bias is moved as its trace moves it (an int32 row per output row, DRAM stride 0)
and a residual as int8 rows; the simulator charges both, while the per-layer models (plain and
instruction-aware) leave them uncounted. This judges the Gemmini library's programs for a
network on one hardware point (`baco.search.gemmini_tiler`) twice, as the network is and with
every layer's bias and residual dropped, and prints both yardsticks and the DRAM bytes read.

    .venv/bin/python experiments/bench/epilogue_moves.py [--network resnet50] \\
        [--hardware gemmini_default] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from accel.arch import HardwareConfig  # noqa: E402
from baco.networks import load_network  # noqa: E402
from accel.design import design_of  # noqa: E402
from baco.search.gemmini_tiler import gemmini_mapping  # noqa: E402
from baco.yardsticks import yardsticks  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet50", help="a zoo name or an ONNX path")
    parser.add_argument("--hardware", default="gemmini_default", help="a hardware preset")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    net = load_network(args.network)
    hw = HardwareConfig.preset(args.hardware)
    layers = list(net.layers)
    design = design_of(hw, [gemmini_mapping(x, hw)[0] for x in layers])
    bare = [dataclasses.replace(x, epilogue=tuple(e for e in x.epilogue
                                                  if e not in ("bias", "add")))
            for x in layers]
    out = {"network": args.network, "hardware": args.hardware}
    for name, variant in (("as_is", layers), ("without_bias_and_residual", bare)):
        judged = yardsticks(variant, list(net.counts), design)
        out[name] = {
            "simulated_edp": judged.simulated.edp,
            "simulated_cycles": judged.simulated.latency_cycles,
            "instruction_aware_edp": judged.instruction_aware.edp,
            "instruction_aware_cycles": judged.instruction_aware.latency_cycles,
            "dram_read_bytes": sum(c * x.dram_read_bytes
                                   for c, x in zip(net.counts, judged.layers))}
    a, b = out["as_is"], out["without_bias_and_residual"]
    out["share"] = {key: 1.0 - b[key] / a[key] for key in ("simulated_edp", "simulated_cycles",
                                                           "dram_read_bytes")}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for name in ("as_is", "without_bias_and_residual"):
            r = out[name]
            print(f"{name:26} simulated EDP {r['simulated_edp']:.4g} cycles "
                  f"{r['simulated_cycles']:.4g}  instruction-aware EDP "
                  f"{r['instruction_aware_edp']:.4g} cycles {r['instruction_aware_cycles']:.4g}"
                  f"  DRAM read bytes {r['dram_read_bytes']:.4g}")
        print("epilogue moves' share: " + ", ".join(f"{k} {v:.1%}"
                                                     for k, v in out["share"].items()))
    return out


if __name__ == "__main__":
    main()
