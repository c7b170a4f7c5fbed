"""The same last step for every search: its best few designs on the simulator, the best kept.

A search ranks designs by its own objective (BACO's model, the plain model the baselines
optimize), and the run then judges the one it returns on the simulator (`judge_result`). With
``final_pick: {mode: simulated}`` (`baco.config.FinalPickConfig`), every search ends the same
way instead: the ``top_k`` best distinct designs it kept by its own score (its result's
``candidates``, `baco.topk`) are judged by the same code the judge uses, and the one of
lowest simulated EDP is returned; the search's own best wins ties. Each unique layer newly
simulated costs a sample, as in ``sim_hybrid`` (`baco.result`), on top of the search's budget.
BACO with ``sim_hybrid`` already ends this way (`baco.sim_hybrid`), so its pick is only
recorded. A search of one candidate (``gemmini_default``) picks it without simulating.

Every result says how it was picked: ``extra["final_pick"]`` (``simulated`` or ``none``),
with ``final_pick_candidates`` (the designs compared) and, when simulated,
``final_pick_rank`` (the picked design's place by the search's own score, 0 its best) and
``final_pick_sim_edps`` (each candidate's simulated EDP, None where it could not be
simulated).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from accel.design import design_of
from baco.config import FinalPickConfig
from baco.fusion import fused_chains
from baco.profile import timed
from baco.progress import Progress
from baco.result import CodesignResult
from baco.yardsticks import Yardsticks, cache_key, yardsticks
from workloads.errors import InfeasibleError, TraceError, UnsupportedOpError

__all__ = ["final_pick", "judge_result"]


def judge_result(result: CodesignResult, sram_step_kb: float = 1.0,
                 area_budget_mm2: float | None = None,
                 progress: Callable[[int, int, str], None] | None = None) -> Yardsticks:
    """Any search's design on the three yardsticks (`baco.yardsticks`), by the same code for
    every method and within `area_budget_mm2`; simulated layers are cached, so a design judged
    twice is simulated once. ``progress(done, total, layer_name)`` follows the simulation
    (`baco.progress.Progress.layer`)."""
    design = design_of(result.hardware, [r.mapping for r in result.layers])
    layers = [r.layer for r in result.layers]
    return yardsticks(layers, [r.count for r in result.layers], design,
                      sram_step_kb=sram_step_kb, area_budget_mm2=area_budget_mm2,
                      fused=fused_chains(result.extra, layers), progress=progress)


def _recorded(result: CodesignResult, **facts: Any) -> CodesignResult:
    return dataclasses.replace(result, candidates=(), extra={**result.extra, **facts})


def final_pick(result: CodesignResult, settings: FinalPickConfig, *,
               sram_step_kb: float = 1.0, area_budget_mm2: float | None = None,
               progress: Progress | None = None, label: str | None = None) -> CodesignResult:
    """`result`'s pick by `settings` (see the module doc): the candidate of lowest simulated
    EDP, with the search's samples, history and the simulated layers' cost; a result already
    picked is returned as it is. `progress` shows each candidate's simulation as a phase,
    ``final pick LABEL i/k`` (`label`: default the result's method)."""
    if "final_pick" in result.extra:
        return result
    if settings.mode == "none":
        return _recorded(result, final_pick="none", final_pick_candidates=1)
    if "sim_hybrid" in result.extra:
        return _recorded(result, final_pick="simulated", final_pick_candidates=int(
            result.extra["sim_hybrid"].get("designs_simulated", 1)))
    candidates = result.candidates[:settings.top_k] or (result,)
    if len(candidates) == 1:
        return _recorded(result, final_pick="simulated", final_pick_candidates=1)
    edps: list[float | None] = []
    seen: set[tuple] = set()
    why = ""
    for i, cand in enumerate(candidates):
        layer = None
        if progress is not None:
            progress.phase(f"final pick {label or result.method} {i + 1}/{len(candidates)}",
                           len(cand.layers), unit="layers")
            layer = progress.layer
        try:
            with timed("final pick"):
                simulated = judge_result(cand, sram_step_kb, area_budget_mm2, progress=layer)
        except (InfeasibleError, UnsupportedOpError, TraceError) as exc:
            simulated, why = None, str(exc)
        else:
            why = simulated.unavailable.get("simulated", why)
            simulated = simulated.simulated
        edps.append(None if simulated is None or not math.isfinite(simulated.edp)
                    else simulated.edp)
        if simulated is not None:
            seen |= {cache_key(r.layer, r.mapping, cand.hardware, None) for r in cand.layers}
    samples = result.samples + len(seen)
    if all(e is None for e in edps):
        return _recorded(dataclasses.replace(result, samples=samples), final_pick="none",
                         final_pick_candidates=len(candidates),
                         final_pick_unavailable=why or "no candidate could be simulated")
    rank = min((i for i, e in enumerate(edps) if e is not None), key=lambda i: edps[i])
    picked = dataclasses.replace(candidates[rank], samples=samples, history=result.history)
    return _recorded(picked, final_pick="simulated", final_pick_candidates=len(candidates),
                     final_pick_rank=rank, final_pick_sim_edps=edps)
