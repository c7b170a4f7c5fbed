"""`baco simulate RESULTS.json`: run every layer of a co-designed result on the simulator.

Each unique layer is lowered with its mapping on the result's hardware (`accel.lower`), run on
`accel.sim` with random int8 inputs (seeded per layer), and, with ``check``, its output is
compared with numpy's (`accel.lower.check.expected_output`). The report gives, per layer, the
trace's size, the simulated cycles beside the model's latency, the energy of the run (counted
from the trace as the simulated yardstick counts it, `baco.yardsticks.simulated_run`), and
whether the output matched; the network's simulated latency, energy and EDP follow.
Epilogue ops the accelerator cannot fuse (a softmax, a division, a second add) run on the host
after the output is stored: they are listed per layer and not simulated. A result that fuses
GEMM chains (``codesign.fusion``) also runs each fused chain as one trace and checks its
output (`simulate_chains`), listed after the layers. A layer whose program
cannot be lowered or run is reported with the reason, never skipped.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from baco.fusion import fused_chains
from baco.profile import timed
from baco.result import CodesignResult
from workloads.errors import BacoError, ConfigError


@dataclasses.dataclass(frozen=True)
class LayerSimulation:
    """One layer's simulation: sizes, cycles, and the check's outcome."""

    index: int
    name: str
    config: str
    macs: int
    count: int = 1
    instructions: int = 0
    sim_cycles: int = 0
    model_cycles: float = 0.0
    energy_pj: float = 0.0
    host_ops: tuple[str, ...] = ()
    checked: bool = False
    mismatches: int = 0
    outputs: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.mismatches == 0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def load_result(path: str | pathlib.Path) -> CodesignResult:
    """A `CodesignResult` from a ``results.json`` written by `baco run` (or `to_json`)."""
    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return CodesignResult.from_json(text, where=str(path))


def simulate_result(result: CodesignResult, *, check: bool = True, seed: int = 0,
                    layers: Sequence[int] | None = None,
                    progress: Callable[[int, int, LayerSimulation], None] | None = None
                    ) -> list[LayerSimulation]:
    """Simulate the result's layers (all, or the indices in ``layers``) in order."""
    from accel.lower import expected_output, lower, random_inputs, split_epilogue

    picked = range(len(result.layers)) if layers is None else list(layers)
    for i in picked:
        if not 0 <= i < len(result.layers):
            raise ConfigError(f"layer index {i} out of range: the result has "
                              f"{len(result.layers)} layers (0-{len(result.layers) - 1})")
    hw = result.hardware
    out = []
    for n, i in enumerate(picked):
        entry = result.layers[i]
        layer = entry.layer
        base = LayerSimulation(index=i, name=layer.name or f"layer{i}",
                               config=layer.config_str(), macs=layer.macs, count=entry.count,
                               model_cycles=entry.latency_cycles)
        fused, host = split_epilogue(layer.epilogue)
        base = dataclasses.replace(base, host_ops=host)

        def lowered(layer=layer, entry=entry, fused=fused, i=i) -> tuple:
            low = lower(layer, entry.mapping, hw, epilogue=fused)
            return (low, *random_inputs(low, np.random.default_rng([seed, i])), "output",
                    expected_output)

        rec = _run_checked(base, lowered, hw, check)
        out.append(rec)
        if progress is not None:
            progress(n + 1, len(picked), rec)
    if layers is None:
        chains = simulate_chains(result, check=check, seed=seed)
        groups = fused_chains(result.extra, [r.layer for r in result.layers])
        for group in groups:     # the fused instances run in the chain, not alone
            for i in (group.first, group.second):
                out[i] = dataclasses.replace(out[i], count=out[i].count - group.instances)
        out.extend(chains)
    return out


def simulate_chains(result: CodesignResult, *, check: bool = True, seed: int = 0
                    ) -> list[LayerSimulation]:
    """Each fused chain of the result (`baco.fusion.fused_chains`) lowered to one trace with
    the tiles the search planned, run, and checked against numpy; indexed after the layers,
    its count the chain's instances."""
    from accel.lower import (
        check_scales,
        expected_chain_output,
        lower_gemm_chain,
        random_chain_inputs,
    )
    from baco.fusion import plan_chain_tiles

    hw = result.hardware
    out = []
    records = [e for e in result.extra.get("fusion", {}).get("chains", []) if e.get("fused")]
    groups = fused_chains(result.extra, [r.layer for r in result.layers])
    for g, (group, record) in enumerate(zip(groups, records)):
        first, second = group.layers
        index = len(result.layers) + g
        base = LayerSimulation(
            index=index, name=" -> ".join(group.names),
            config=f"{first.config_str()} -> {second.config_str()}",
            macs=first.macs + second.macs, count=group.instances,
            model_cycles=float(record.get("fused_cycles", 0.0)))

        def lowered(first=first, second=second, index=index, group=group) -> tuple:
            low = lower_gemm_chain(first, second, hw, plan_chain_tiles(first, second, hw),
                                   acc_scales=check_scales(first.C, second.C, group.softmax))
            return (low, *random_chain_inputs(low, np.random.default_rng([seed, index])), "E",
                    expected_chain_output)

        out.append(_run_checked(base, lowered, hw, check))
    return out


def _run_checked(base: LayerSimulation, lowered: Callable[[], tuple], hw: Any, check: bool
                 ) -> LayerSimulation:
    """``lowered()`` gives ``(low, arrays, image, initialized, output, expected)``: run
    ``low.trace`` on the simulator and, with ``check``, count the elements of the ``output``
    tensor that differ from ``expected(low, arrays)``; a `BacoError` becomes the error."""
    from accel.sim import run
    from baco.yardsticks import simulated_run

    try:
        with timed("lowering"):
            low, arrays, image, initialized, output, expected = lowered()
        with timed("simulation"):
            res = run(low.trace, hw, image, initialized=initialized)
        ran = simulated_run(res, low.alloc, len(low.trace), base.macs, hw, index=base.index,
                            name=base.name, count=float(base.count), host_ops=base.host_ops)
        rec = dataclasses.replace(base, instructions=len(low.trace), sim_cycles=res.cycles,
                                  energy_pj=ran.energy_pj)
        if check:
            got = low.layout.read(res.dram, output)
            want = expected(low, arrays)
            rec = dataclasses.replace(rec, checked=True, outputs=int(want.size),
                                      mismatches=int(np.sum(got != want)))
        return rec
    except BacoError as exc:
        return dataclasses.replace(base, error=" ".join(str(exc).split()))


def disagreement(records: Sequence[LayerSimulation]) -> dict[str, float | None]:
    """How far the search's own predictor (``model_cycles``, stored in results.json) is from
    the simulator, over the layers that ran: the network's latency both ways (each unique
    layer times its count) and the mean absolute percentage error over unique layers,
    ``|model - sim| / sim`` (None when no layer ran)."""
    ran = [r for r in records if r.error is None and r.sim_cycles > 0 and r.count > 0]
    if not ran:
        return {"sim_latency_cycles": None, "model_latency_cycles": None,
                "model_vs_sim_mape": None}
    return {"sim_latency_cycles": float(sum(r.count * r.sim_cycles for r in ran)),
            "model_latency_cycles": float(sum(r.count * r.model_cycles for r in ran)),
            "model_vs_sim_mape": float(np.mean([abs(r.model_cycles - r.sim_cycles)
                                                / r.sim_cycles for r in ran]))}


def simulated_totals(records: Sequence[LayerSimulation]) -> dict[str, float | None]:
    """The simulated network's energy and EDP (`perfmodels.score.network_totals`: each unique
    layer's run times its count, the simulated yardstick's sums); None when a layer failed."""
    from perfmodels.score import network_totals

    if not records or any(r.error is not None for r in records):
        return {"sim_energy_pj": None, "sim_edp": None}
    edp, _, energy_pj = network_totals([r.sim_cycles for r in records],
                                       [r.energy_pj for r in records],
                                       [r.count for r in records])
    return {"sim_energy_pj": float(energy_pj), "sim_edp": float(edp)}


def report(records: Sequence[LayerSimulation], source: str) -> dict[str, Any]:
    """The JSON report: per-layer records (``name``, ``sim_cycles``, ``energy_pj``,
    ``model_cycles``...), totals (``sim_energy_pj``, ``sim_edp``: `simulated_totals`), and the
    model's disagreement with the simulator (`disagreement`)."""
    return {"source": source, "layers": [r.to_dict() for r in records],
            "all_ok": all(r.ok for r in records),
            "checked": sum(r.checked for r in records),
            "failed": [r.index for r in records if not r.ok],
            "sim_cycles": sum(r.sim_cycles for r in records),
            "instructions": sum(r.instructions for r in records),
            **disagreement(records), **simulated_totals(records)}


def main_simulate(path: str, check: bool, seed: int, layers: Sequence[int] | None,
                  as_json: bool, quiet: bool) -> int:
    """The command: 0 when every layer ran (and matched numpy, with ``check``), else 1."""
    result = load_result(path)
    progress = None
    if not quiet:
        from rich.console import Console
        console = Console(stderr=True)

        def progress(done: int, total: int, rec: LayerSimulation) -> None:
            status = ("error" if rec.error else
                      f"{rec.mismatches} mismatches" if rec.mismatches else
                      "ok" if rec.checked else "ran")
            console.print(f"[{done}/{total}] {rec.name}: {rec.instructions} instructions, "
                          f"{rec.sim_cycles} cycles, {status}", highlight=False)

    records = simulate_result(result, check=check, seed=seed, layers=layers, progress=progress)
    doc = report(records, str(path))
    if as_json:
        print(json.dumps(doc))
    else:
        _print_table(records, check)
    return 0 if doc["all_ok"] else 1


def _print_table(records: Sequence[LayerSimulation], check: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="simulated layers")
    from workloads.network import format_macs

    for col in ("#", "layer", "count", "MACs", "instructions", "sim cycles", "energy pJ",
                "model cycles", "model/sim", "output"):
        table.add_column(col, justify="left" if col in ("layer", "output") else "right")
    for r in records:
        status = (f"error: {r.error}" if r.error else
                  f"{r.mismatches}/{r.outputs} differ" if r.mismatches else
                  "matches numpy" if r.checked else "not checked")
        if r.host_ops and not r.error:
            status += f" (on the host: {', '.join(r.host_ops)})"
        # A layer whose every instance runs in a fused chain has no cycles of its own to model.
        ratio = f"{r.model_cycles / r.sim_cycles:.2f}" if r.sim_cycles and r.count else "-"
        table.add_row(str(r.index), r.name, str(r.count), format_macs(r.macs),
                      str(r.instructions), str(r.sim_cycles), f"{r.energy_pj:.4g}",
                      f"{r.model_cycles:.0f}", ratio, status)
    Console(width=max(Console().width, 120)).print(table)
    bad = [r for r in records if not r.ok]
    total = sum(r.sim_cycles for r in records)
    verdict = "all layers match numpy" if check and not bad else (
        f"{len(bad)} layer(s) failed" if bad else "outputs not checked (use --check)")
    print(f"{len(records)} layers, {total} simulated cycles (one run of each unique layer); "
          f"{verdict}")
    gap = disagreement(records)
    totals = simulated_totals(records)
    if totals["sim_edp"] is not None:
        print(f"the network on the simulator (each layer times its count): latency "
              f"{gap['sim_latency_cycles']:.4g} cycles, energy {totals['sim_energy_pj']:.4g} pJ, "
              f"EDP {totals['sim_edp']:.4g} cycles*pJ")
    if gap["model_vs_sim_mape"] is not None:
        ratio = gap["model_latency_cycles"] / gap["sim_latency_cycles"]
        print(f"the search's model vs the simulator: network latency "
              f"{gap['model_latency_cycles']:.4g} vs {gap['sim_latency_cycles']:.4g} cycles "
              f"(model/sim {ratio:.2f}); per-layer MAPE {100 * gap['model_vs_sim_mape']:.1f}%")


__all__ = ["LayerSimulation", "load_result", "main_simulate", "report", "simulate_chains",
           "simulate_result", "simulated_totals"]
