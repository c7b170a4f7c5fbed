"""DRAM traffic of Chimera's BMM chains G1-G12 fused vs unfused, at one on-chip capacity.

For each chain (`workloads.suites.suite("bmm_chain")`): the searched fused tiling
(`perfmodels.fusion.search_chain_tiles`, tiles kept on chip while their indices do not change),
the same under Algorithm 1 as printed (``full_tile_reuse=False``), the unfused baseline (C
written to DRAM and read back, each GEMM searched alone), their ratio, Eq. 3.18's DV* and the
compulsory traffic, all in words. The default capacity is Gemmini's 256 KiB int8 scratchpad.
Prints a table, or one JSON object with ``--json``.

    .venv/bin/python experiments/bench/fusion_chains.py [--capacity-words 262144] [--json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from perfmodels.fusion import (  # noqa: E402
    ChainDims,
    closed_form_optimum,
    search_chain_tiles,
    unfused_data_volume,
)
from workloads.suites import suite  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity-words", type=int, default=262144)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cap = args.capacity_words
    rows = []
    for net in suite("bmm_chain"):
        dims = ChainDims.from_network(net)
        fused = search_chain_tiles(dims, cap)
        printed = search_chain_tiles(dims, cap, full_tile_reuse=False)
        unfused = unfused_data_volume(dims, cap)
        star = closed_form_optimum(dims.M, dims.K, dims.L, dims.N, cap, batch=dims.batch)
        rows.append({
            "chain": net.name, **dims._asdict(),
            "fused_dv_words": fused.dv_words, "fused_order": fused.order,
            "fused_tiles": list(fused.tiles), "fused_mu_words": fused.mu_words,
            "algorithm1_dv_words": printed.dv_words, "unfused_dv_words": unfused.dv_words,
            "unfused_over_fused": unfused.dv_words / fused.dv_words,
            "closed_form_dv_words": star.dv_words,
            "compulsory_words": dims.compulsory_words,
        })
    out = {"capacity_words": cap, "rows": rows}
    if args.json:
        print(json.dumps(out, indent=1))
        return out
    head = (f"{'chain':5} {'b':>3} {'M':>5} {'K':>4} {'L':>5} {'N':>4} {'fused':>10} "
            f"{'order':5} {'tiles (M,K,L,N)':18} {'alg1':>10} {'unfused':>10} {'ratio':>6} "
            f"{'DV*':>10} {'compuls.':>10}")
    print(f"capacity {cap} words; DV in words (all batches)")
    print(head)
    for r in rows:
        print(f"{r['chain']:5} {r['batch']:3} {r['M']:5} {r['K']:4} {r['L']:5} {r['N']:4} "
              f"{r['fused_dv_words']:10.0f} {r['fused_order']:5} "
              f"{str(tuple(r['fused_tiles'])):18} {r['algorithm1_dv_words']:10.0f} "
              f"{r['unfused_dv_words']:10.0f} {r['unfused_over_fused']:6.2f} "
              f"{r['closed_form_dv_words']:10.0f} {r['compulsory_words']:10d}")
    return out


if __name__ == "__main__":
    main()
