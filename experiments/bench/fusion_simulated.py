"""Chimera's BMM chains G1-G12 fused and unfused on the simulator, on one fixed accelerator.

Unfused: each GEMM lowered alone, C written to DRAM and read back, judged by
`baco.yardsticks.simulate_design`, with Gemmini's library tiling (`baco.search.gemmini_tiler`)
or, with ``--budget N``, the programs BACO's search finds for the two layers on this hardware
(``hw_mode: fixed``, N samples, the instruction-aware model). Fused: the chain
as one trace (`accel.lower.chain.lower_gemm_chain`, order mlkn, the tiles of least modelled
traffic that fit, `baco.fusion.plan_chain_tiles`), C moved on chip by ``mvout_spad``, judged
by `baco.yardsticks.simulate_chain`. Both count energy from
their traces the same way. A chain's batch shares its weights, as a `Layer` GEMM's batch does.
This is fusion on fixed hardware, not yet co-designed. Prints a table, or JSON with ``--json``.

    .venv/bin/python experiments/bench/fusion_simulated.py [--hardware gemmini_default] \\
        [--chains G1 G2 ...] [--budget N] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from accel.arch import HardwareConfig  # noqa: E402
from accel.lower import lower_gemm_chain  # noqa: E402
from baco.codesign_loop import codesign  # noqa: E402
from baco.config import CodesignConfig  # noqa: E402
from baco.fusion import plan_chain_tiles  # noqa: E402
from accel.design import design_of  # noqa: E402
from baco.search.gemmini_tiler import gemmini_mapping  # noqa: E402
from baco.yardsticks import simulate_chain, simulate_design  # noqa: E402
from workloads.suites import suite  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="gemmini_default", help="a hardware preset")
    parser.add_argument("--chains", nargs="+", default=None, help="chain names (default all)")
    parser.add_argument("--budget", type=int, default=None,
                        help="search the unfused programs with this many samples (default: "
                             "Gemmini's library tiling)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    hw = HardwareConfig.preset(args.hardware)
    rows = []
    for net in suite("bmm_chain"):
        if args.chains and net.name not in args.chains:
            continue
        first, second = net.layers[net.order[0]], net.layers[net.order[1]]
        if args.budget:
            config = CodesignConfig(hw_mode="fixed", budget_samples=args.budget, seed=0)
            found = codesign(net, config=config, hardware=hw)
            mappings = [found.layers[net.order[i]].mapping for i in range(2)]
        else:
            mappings = [gemmini_mapping(x, hw)[0] for x in (first, second)]
        design = design_of(hw, mappings)
        apart, per_layer = simulate_design([first, second], [1, 1], design)
        tiles = plan_chain_tiles(first, second, hw)
        fused = simulate_chain(lower_gemm_chain(first, second, hw, tiles))
        apart_bytes = sum(x.dram_read_bytes + x.dram_write_bytes for x in per_layer)
        fused_bytes = fused.dram_read_bytes + fused.dram_write_bytes
        fused_edp = fused.cycles * fused.energy_pj
        rows.append({
            "chain": net.name, "fused_tiles": tiles, "unfused_cycles": apart.latency_cycles,
            "fused_cycles": fused.cycles, "unfused_pj": apart.energy_pj,
            "fused_pj": fused.energy_pj, "unfused_dram_bytes": apart_bytes,
            "fused_dram_bytes": fused_bytes, "edp_gain": apart.edp / fused_edp,
            "cycles_gain": apart.latency_cycles / fused.cycles,
            "dram_gain": apart_bytes / fused_bytes})
    gains = [r["edp_gain"] for r in rows]
    out = {"hardware": args.hardware, "unfused": f"searched, {args.budget} samples"
           if args.budget else "library tiling", "rows": rows,
           "geomean_edp_gain": math.exp(sum(map(math.log, gains)) / len(gains))}
    if args.json:
        print(json.dumps(out, indent=1))
        return out
    print(f"hardware {args.hardware}; unfused ({out['unfused']}, C through DRAM) over fused")
    print(f"{'chain':5} {'cycles':>12} {'fused':>12} {'x':>6} {'DRAM bytes':>12} {'fused':>12} "
          f"{'x':>6} {'EDP x':>7}")
    for r in rows:
        print(f"{r['chain']:5} {r['unfused_cycles']:12.0f} {r['fused_cycles']:12d} "
              f"{r['cycles_gain']:6.2f} {r['unfused_dram_bytes']:12d} "
              f"{r['fused_dram_bytes']:12d} {r['dram_gain']:6.2f} {r['edp_gain']:7.2f}")
    print(f"geomean EDP gain {out['geomean_edp_gain']:.2f}x")
    return out


if __name__ == "__main__":
    main()
