"""Time `baco.yardsticks.yardsticks` on whole ResNet-50 designs, and print the three yardsticks.

Two designs are built here, each a hardware point and one mapping per unique layer (24):

* ``gemmini_default``: Gemmini's own library tiler on the ``gemmini_default`` hardware
  (`baco.search.gemmini_tiler.gemmini_default`);
* ``baco``: a short co-design (`baco.codesign`, ``--budget`` samples, ``--seed``; the default
  settings otherwise: instruction-aware, min_hw), typically a 64x64 array.

For each, ``yardsticks(...)`` runs cold (an empty `SimCache`: every layer lowered and simulated;
the simulator's compiled scan may be reused from an earlier design of the same array shape,
and the first design pays one compilation) and then warm (the same cache: nothing simulated
again). The figures are wall-clock seconds and this process's CPU seconds (the machine is
shared; the load average at the start is printed too), the plain / instruction-aware /
simulated EDP, latency and energy, the area, and the simulated-to-model ratios. Prints one
JSON object per design.

    .venv/bin/python experiments/bench/simulate_design.py [--budget 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from accel.design import design_of
from baco.codesign_loop import codesign
from baco.config import CodesignConfig
from baco.networks import load_network
from baco.search.gemmini_tiler import gemmini_default
from baco.yardsticks import SimCache, yardsticks


def _timed(fn):
    start, start_cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - start_cpu


def report(label: str, result, sram_step_kb: float) -> dict:
    layers = [r.layer for r in result.layers]
    counts = [r.count for r in result.layers]
    design = design_of(result.hardware, [r.mapping for r in result.layers])
    cache = SimCache()
    load = os.getloadavg()[0]
    cold, cold_s, cold_cpu = _timed(lambda: yardsticks(layers, counts, design, cache=cache,
                                                       sram_step_kb=sram_step_kb))
    warm, warm_s, warm_cpu = _timed(lambda: yardsticks(layers, counts, design, cache=cache,
                                                       sram_step_kb=sram_step_kb))
    if warm.to_dict() != cold.to_dict():
        raise SystemExit(f"{label}: the warm result differs from the cold one")
    sticks = {name: {k: cold[name].to_dict()[k] for k in ("edp", "latency_cycles", "energy_pj",
                                                          "area_mm2", "grown")}
              for name in ("plain", "instruction_aware", "simulated")}
    sim, plain, aware = cold.simulated, cold.plain, cold.instruction_aware
    hw = result.hardware
    return {
        "design": label,
        "hardware": f"{hw.pe_rows}x{hw.pe_cols} PEs, sp {hw.sp_kb:g} KB, acc {hw.acc_kb:g} KB",
        "unique_layers": len(layers),
        "instructions": sum(x.instructions for x in cold.layers),
        "cold_seconds": round(cold_s, 2), "cold_cpu_seconds": round(cold_cpu, 2),
        "warm_seconds": round(warm_s, 3), "warm_cpu_seconds": round(warm_cpu, 3),
        "cache": {"hits": cache.hits, "misses": cache.misses},
        "load_average_at_start": round(load, 2),
        "area_mm2": cold.area_mm2,
        **sticks,
        "simulated_over_plain": {
            "latency": sim.latency_cycles / plain.latency_cycles,
            "energy": sim.energy_pj / plain.energy_pj, "edp": sim.edp / plain.edp},
        "simulated_over_instruction_aware": {
            "latency": sim.latency_cycles / aware.latency_cycles,
            "energy": sim.energy_pj / aware.energy_pj, "edp": sim.edp / aware.edp},
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet50")
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    net = load_network(args.network)
    config = CodesignConfig(budget_samples=args.budget, seed=args.seed)
    designs = [("gemmini_default", gemmini_default(net)),
               (f"baco ({args.budget} samples, seed {args.seed})",
                codesign(net, config=config))]
    out = []
    for label, result in designs:
        record = report(label, result, config.sram_step_kb)
        print(json.dumps(record, indent=2), flush=True)
        out.append(record)
    ratio = out[0]["simulated"]["edp"] / out[1]["simulated"]["edp"]
    model_ratio = out[0]["plain"]["edp"] / out[1]["plain"]["edp"]
    print(json.dumps({"baco_edp_gain_simulated": ratio, "baco_edp_gain_plain": model_ratio}))
    return out


if __name__ == "__main__":
    main()
