"""Methods an experiment compares: one search on one hardware, scored one way.

A `MethodSpec` names a row of the seed's tables (``label``: ``Gemmini-BACO``), the search that
produces it (``search``: ``baco`` for `baco.codesign`, or a baseline of `baco.run.baselines`:
``random``, ``bo``, ``dosa``, ``gemmini_default``, ``random_pruned``), the hardware (a preset:
fixed for ``gemmini_default``/``random_pruned``, the base -- template, DRAM bandwidth, word widths
-- for the searches that choose the hardware), the sample budget, and options (for ``baco``,
`baco.config.CodesignConfig` keys; for a baseline, its keyword arguments).

`score` judges every result as `baco run` does (`baco.yardsticks`): the main yardstick is, on a
Gemmini template, the design as DIM x DIM instructions run it (padding counted), on the other
templates (Eyeriss, NVDLA: no Gemmini instructions) the plain analytic model. The plain model's
figures are kept beside for every design, and the simulator's for every Gemmini design.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import pathlib
import time
from typing import Any

from workloads.errors import ConfigError, InfeasibleError, WorkloadError

SEARCHES = ("baco", "dosa", "random", "bo", "gemmini_default", "random_pruned")
AWARE_TEMPLATES = ("gemmini",)


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """One compared method (see the module doc)."""

    label: str
    search: str
    hardware: str = "gemmini_default"
    budget: int = 1000
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.search not in SEARCHES:
            import difflib
            close = difflib.get_close_matches(self.search, SEARCHES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"method {self.label!r}: unknown search {self.search!r}{hint} "
                              f"(known: {', '.join(SEARCHES)})")
        if self.budget < 1:
            raise ConfigError(f"method {self.label!r}: budget must be >= 1, got {self.budget}")
        from accel.arch import HardwareConfig
        if self.hardware not in HardwareConfig.preset_names():
            raise ConfigError(f"method {self.label!r}: unknown hardware {self.hardware!r} "
                              f"(presets: {', '.join(HardwareConfig.preset_names())})")


def check_methods(methods: list[MethodSpec], where: str, reference: str | None = None) -> None:
    """Labels unique, options valid, and ``reference`` (if given) one of the labels."""
    labels = [m.label for m in methods]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ConfigError(f"{where}: method label {dupes[0]!r} appears twice")
    if not methods:
        raise ConfigError(f"{where}: no methods")
    for m in methods:
        if m.search == "baco":
            codesign_config(m, seed=0, where=where)   # checks the options' keys and types
        else:
            _baseline_call(m, where)
    if reference is not None and reference not in labels:
        raise ConfigError(f"{where}: params.reference {reference!r} is not a method label")


def _baseline_call(method: MethodSpec, where: str = "method") -> tuple[Any, dict[str, Any]]:
    """The baseline function and its keyword arguments; option names checked."""
    from accel.arch import HardwareConfig
    from baco.run import baselines

    fn = baselines()[method.search]
    kwargs: dict[str, Any] = {"budget_samples": method.budget, "seed": 0}
    if "hardware" in inspect.signature(fn).parameters:
        kwargs["hardware"] = HardwareConfig.preset(method.hardware)
    kwargs.update(method.options)
    try:
        inspect.signature(fn).bind(None, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}: method {method.label!r} options: {exc}") from None
    return fn, kwargs


def codesign_config(method: MethodSpec, seed: int, where: str = "method") -> Any:
    """The `CodesignConfig` of a ``baco`` method: its options, budget and seed."""
    from baco.config import CodesignConfig

    data = {**method.options, "budget_samples": method.budget, "seed": seed}
    if isinstance(data.get("model"), str):          # a surrogate folder: relative to the project
        data["model"] = str(resolve_path(data["model"]))
    return CodesignConfig.from_dict(data, where=f"{where}: method {method.label!r} options")


def resolve_path(path: str) -> pathlib.Path:
    """`path`, relative paths taken from the project root (as the experiment files write
    them)."""
    from baco.reproduce.spec import PROJECT_ROOT
    p = pathlib.Path(path)
    return p if p.is_absolute() else PROJECT_ROOT / p


def run_method(method: MethodSpec, network: Any, seed: int, progress: bool = False,
               area_budget_mm2: float | None = None) -> Any:
    """Run `method` on `network` (a `workloads.Network`); the search's `CodesignResult`.

    `area_budget_mm2` holds the search to that area: ``codesign.area_budget_mm2`` for
    ``baco``, the ``area_budget_mm2`` keyword of a baseline (the fixed-hardware ones record
    whether their hardware is within it).

    Every search ends as in `baco run` (`baco.final_pick`, default settings): the simulator
    picks among its top designs; ``extra["final_pick"]`` says how.

    Raises:
      InfeasibleError: the search cannot handle this network (no valid mapping, or a layer
        its tiler does not take); the experiment records the case as infeasible.
    """
    from accel.arch import HardwareConfig
    from baco.config import FinalPickConfig
    from baco.final_pick import final_pick

    if method.search == "baco":
        from baco.codesign_loop import codesign
        config = codesign_config(method, seed)
        if area_budget_mm2 is not None:
            config = config.replace(area_budget_mm2=float(area_budget_mm2))
        call = lambda: codesign(network, config=config,
                                hardware=HardwareConfig.preset(method.hardware),
                                progress=progress)
    else:
        fn, kwargs = _baseline_call(method)
        kwargs["seed"] = seed
        if area_budget_mm2 is not None:
            if "area_budget_mm2" not in inspect.signature(fn).parameters:
                raise ConfigError(f"method {method.label!r}: search {method.search!r} takes no "
                                  "area budget")
            kwargs["area_budget_mm2"] = float(area_budget_mm2)
        call = lambda: fn(network, **kwargs)
    sram_step_kb = config.sram_step_kb if method.search == "baco" else 1.0
    try:
        return final_pick(call(), FinalPickConfig(), sram_step_kb=sram_step_kb,
                          area_budget_mm2=area_budget_mm2)
    except InfeasibleError:
        raise
    except (ConfigError, WorkloadError) as exc:   # about this network, the options were checked
        raise InfeasibleError(f"{method.label} cannot run {network.name}: {exc}") from None


def score(result: Any, network: Any, sram_step_kb: float = 1.0,
          area_budget_mm2: float | None = None) -> dict[str, Any]:
    """The comparable figures of a result (see the module doc), JSON-able: on the main
    yardstick (``cycles``, ``energy_pj``, ``edp``), the plain one (``*_plain``) and the
    simulated one (``*_sim``: the design's emitted programs on the simulator, None for
    templates it does not model), by `baco.yardsticks` as `baco run` judges them; with the
    area of the design's hardware (``area_mm2``) and of the hardware the main yardstick scored
    (``area_mm2_scored``: instruction-aware scoring may grow buffers, within
    `area_budget_mm2` if given)."""
    from accel.design import design_of
    from baco.yardsticks import yardsticks
    from perfmodels.energy import config_area_mm2

    layers, counts = list(network.layers), [float(c) for c in network.counts]
    design = design_of(result.hardware, [r.mapping for r in result.layers])
    judged = yardsticks(layers, counts, design, sram_step_kb=sram_step_kb,
                        area_budget_mm2=area_budget_mm2)
    plain, sim = judged.plain, judged.simulated
    aware = result.hardware.template in AWARE_TEMPLATES and judged.instruction_aware is not None
    main = judged.instruction_aware if aware else plain
    hw = main.hardware
    return {
        "area_mm2": config_area_mm2(result.hardware), "area_mm2_scored": config_area_mm2(hw),
        "scorer": "instruction_aware" if aware else "analytic",
        "cycles": main.latency_cycles, "energy_pj": main.energy_pj, "edp": main.edp,
        "cycles_plain": plain.latency_cycles, "energy_pj_plain": plain.energy_pj,
        "edp_plain": plain.edp,
        "cycles_sim": None if sim is None else sim.latency_cycles,
        "energy_pj_sim": None if sim is None else sim.energy_pj,
        "edp_sim": None if sim is None else sim.edp,
        "hardware": {"template": hw.template, "pe_rows": hw.pe_rows, "pe_cols": hw.pe_cols,
                     "sp_kb": hw.sp_kb, "acc_kb": hw.acc_kb, "name": hw.name},
    }


def method_case(method: MethodSpec, network: Any, seed: int, *, history: bool = False,
                layers: bool = False, area_budget_mm2: float | None = None) -> dict[str, Any]:
    """Run and score one method on one network (within `area_budget_mm2` if given): the JSON
    a case stores."""
    start = time.perf_counter()
    result = run_method(method, network, seed, area_budget_mm2=area_budget_mm2)
    search_seconds = time.perf_counter() - start
    out = score(result, network, area_budget_mm2=area_budget_mm2)
    out.update({"method": method.label, "search": method.search, "seed": seed,
                "samples": result.samples, "edp_as_reported": result.edp,
                "final_pick": result.extra.get("final_pick", "none"),
                "search_seconds": round(search_seconds, 3)})
    if history:
        kept = [h for h in result.history if math.isfinite(h.best_edp)]
        out["history"] = [[h.samples, h.best_edp] for h in kept]
        # wall-clock beside, in its own key: ``history`` stays a function of the parameters
        out["history_seconds"] = [[round(h.seconds, 3), h.best_edp] for h in kept]
    if layers:
        out["layers"] = [{"name": r.layer.name or r.layer.config_str(), "count": r.count,
                          "cycles": r.latency_cycles, "energy_pj": r.energy_pj}
                         for r in result.layers]
    out["summary"] = f"EDP {out['edp']:.4g} ({out['scorer']}), {result.samples} samples"
    return out


__all__ = [
    "SEARCHES",
    "MethodSpec",
    "check_methods",
    "codesign_config",
    "method_case",
    "run_method",
    "score",
]
