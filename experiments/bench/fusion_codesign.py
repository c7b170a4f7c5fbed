"""Fused against unfused co-design over Chimera's BMM chains G1-G12, at the same budget.

For each chain, `baco.codesign` runs twice with the same seed and sample budget: without
fusion (each GEMM alone, C through DRAM) and with ``codesign.fusion: true`` (the search
scores the chain fused wherever that lowers a design's EDP, `baco.fusion`), each co-designing
its own hardware. Both designs are judged by `baco.run.judge`'s code (`baco.yardsticks`): the
simulated yardstick runs a fused chain as one trace. Prints per chain the simulated EDP and
DRAM bytes of both, the gains on the three yardsticks, the designs' areas, and the geomean
gains (``--json``: JSON). ``--area-budget`` holds both searches to one area. ``--epilogues``
gives every chain an MLP block's epilogues (first GEMM + bias -> relu, second GEMM + bias +
residual), which the fused trace applies on chip. ``--free-between`` drops the host ops
(softmax, a scale, a mask add...) between every chained pair, as if an on-chip unit applied
them at no cost: both searches then see the same network, and the gain is what fusing every
chain could give at most. ``--config`` runs one experiment config's
network instead, with its ``codesign`` section (``--set KEY=VALUE`` overrides it, as for
``baco run``; the budget and seed come from the config), the fusion switch flipped.

    .venv/bin/python experiments/bench/fusion_codesign.py [--budget 1000] [--seed 0] \\
        [--suite bmm_chain|conv_chain] [--chains G1 G2 ...] [--area-budget MM2] \\
        [--epilogues] [--free-between] [--config CONFIG.yaml [--set KEY=VALUE ...]] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from accel.lower import split_epilogue  # noqa: E402
from baco.codesign_loop import codesign  # noqa: E402
from baco.config import CodesignConfig, ExperimentConfig  # noqa: E402
from baco.fusion import fused_chains  # noqa: E402
from baco.networks import load_network  # noqa: E402
from accel.design import design_of  # noqa: E402
from baco.yardsticks import YARDSTICKS, yardsticks  # noqa: E402
from workloads.network import Network  # noqa: E402
from workloads.suites import suite  # noqa: E402

MLP_EPILOGUES = (("bias", "relu"), ("bias", "add"))


def _with_epilogues(net: Network) -> Network:
    """The chain's two GEMMs (positions 0, 1) with an MLP block's epilogues."""
    epilogues = tuple(MLP_EPILOGUES[min(i, 1)] for i in range(len(net.order)))
    layers = [dataclasses.replace(x, epilogue=MLP_EPILOGUES[min(net.order.index(i), 1)])
              for i, x in enumerate(net.layers)]
    return dataclasses.replace(net, layers=tuple(layers), epilogues=epilogues)


def _free_between(net: Network) -> Network:
    """`net` with the host ops of every chain's producer dropped, and the ops on the path
    between the two GEMMs with them, so that every chain of GEMMs fuses."""
    epilogues = list(net.epilogues)
    layers = list(net.layers)
    chains = []
    for chain in net.chains:
        p = chain.positions[0]
        on_chip, host = split_epilogue(epilogues[p])
        if host:
            epilogues[p] = on_chip
            layers[net.order[p]] = dataclasses.replace(layers[net.order[p]], epilogue=on_chip)
            chain = dataclasses.replace(chain, between=())
        chains.append(chain)
    return dataclasses.replace(net, layers=tuple(layers), epilogues=tuple(epilogues),
                               chains=tuple(chains))


def _chain_share(net: Network, layers) -> dict[str, float]:
    """The fraction of the unfused design's simulated cycles and energy in chained layers."""
    by_index = {x.index: x for x in layers}
    share = {}
    for key in ("cycles", "energy_pj"):
        total = sum(x.count * getattr(x, key) for x in layers)
        chained = sum(getattr(by_index[net.order[p]], key)
                      for chain in net.chains for p in chain.positions)
        share[key] = chained / total
    return share


def _judged(result, config):
    layers = [r.layer for r in result.layers]
    design = design_of(result.hardware, [r.mapping for r in result.layers])
    return yardsticks(layers, [r.count for r in result.layers], design,
                      sram_step_kb=config.sram_step_kb,
                      fused=fused_chains(result.extra, layers))


def _geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--suite", default="bmm_chain")
    parser.add_argument("--chains", nargs="+", default=None, help="chain names (default all)")
    parser.add_argument("--area-budget", type=float, default=None,
                        help="codesign.area_budget_mm2 for both searches (default: none)")
    parser.add_argument("--epilogues", action="store_true",
                        help="an MLP block's bias, relu and residual on every chain")
    parser.add_argument("--free-between", action="store_true",
                        help="drop the host ops between chained GEMMs (the gain's ceiling)")
    parser.add_argument("--config", default=None, help="an experiment config: its network")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a --config value")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.config:
        experiment = ExperimentConfig.load(args.config, args.overrides)
        base = experiment.codesign
        nets = [load_network(experiment.network_source(), input_shapes=experiment.input_shapes)]
    else:
        base = CodesignConfig(budget_samples=args.budget, seed=args.seed,
                              area_budget_mm2=args.area_budget)
        nets = [n for n in suite(args.suite) if not args.chains or n.name in args.chains]
    rows = []
    for net in nets:
        if args.epilogues:
            net = _with_epilogues(net)
        if args.free_between:
            net = _free_between(net)
        row = {"chain": net.name}
        for fusion in (False, True):
            config = dataclasses.replace(base, fusion=fusion)
            start = time.perf_counter()
            found = codesign(net, config=config, progress=False)
            judged = _judged(found, config)
            key = "fused" if fusion else "apart"
            sim = judged.simulated
            row[key] = {
                "seconds": time.perf_counter() - start,
                "hardware": {k: found.hardware.to_dict()[k]
                             for k in ("pe_rows", "pe_cols", "sp_kb", "acc_kb")},
                "area_mm2": judged.area_mm2,
                "fused": [c["fused"] for c in found.extra.get("fusion", {}).get("chains", [])],
                **{f"{name}_edp": judged[name].edp if judged[name] else None
                   for name in YARDSTICKS},
                "dram_bytes": sum(x.count * (x.dram_read_bytes + x.dram_write_bytes)
                                  for x in judged.layers) if sim else None}
            if not fusion and judged.simulated:
                row["chain_share"] = _chain_share(net, judged.layers)
        row["gain"] = {name: row["apart"][f"{name}_edp"] / row["fused"][f"{name}_edp"]
                       for name in YARDSTICKS if row["fused"][f"{name}_edp"]}
        rows.append(row)
        if not args.json:
            print(f"{net.name:4} simulated EDP {row['apart']['simulated_edp']:.4g} -> "
                  f"{row['fused']['simulated_edp']:.4g}  DRAM bytes "
                  f"{row['apart']['dram_bytes']:.4g} -> {row['fused']['dram_bytes']:.4g}  "
                  f"gain sim {row['gain']['simulated']:.2f}x aware "
                  f"{row['gain']['instruction_aware']:.2f}x plain {row['gain']['plain']:.2f}x"
                  f"  area {row['apart']['area_mm2']:.3g} -> {row['fused']['area_mm2']:.3g} mm2"
                  f"  fused {row['fused']['fused']}", flush=True)
            if "chain_share" in row:
                print(f"     apart, the chained layers take {row['chain_share']['cycles']:.1%} "
                      f"of the simulated cycles and {row['chain_share']['energy_pj']:.1%} of "
                      "the energy", flush=True)
    out = {"suite": args.config or args.suite, "budget": base.budget_samples, "seed": base.seed,
           "epilogues": args.epilogues,
           "free_between": args.free_between, "rows": rows,
           "geomean_gain": {name: _geomean([r["gain"][name] for r in rows])
                            for name in YARDSTICKS if all(name in r["gain"] for r in rows)}}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print("geomean gain (unfused EDP / fused EDP): " + ", ".join(
            f"{k} {v:.2f}x" for k, v in out["geomean_gain"].items()))
    return out


if __name__ == "__main__":
    main()
