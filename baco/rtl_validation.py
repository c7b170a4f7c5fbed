"""`baco validate rtl`: predicted vs measured Gemmini RTL cycles, for each predictor.

* ``analytic``: the exact analytical model on each row's ``arch.*`` hardware
  (`perfmodels.validate`);
* ``sim``: the simulator's RTL timing model (`accel.sim.rtl.simulate_rows`);
* ``hybrid``: the analytical model times the trained surrogate's residual (``--model PATH``,
  from `baco surrogate train`), on the hardware the surrogate was trained for; the residual is
  shrunk towards 0 where the surrogate's ensemble disagrees (`perfmodels.atformer.train.shrink`)
  and the product multiplied by the surrogate's MAPE calibration factor (reported as
  ``"calibration_scale"``; `perfmodels.atformer.train.mape_scale`).

``hardware`` (a preset name such as ``gemmini_default``, or a `HardwareConfig`) evaluates every
row on that hardware instead of its ``arch.*`` columns, for every predictor: in DOSA-format
rows from other collections the ``arch.*`` columns may describe Timeloop's minimal hardware for
the mapping while the RTL ran on Gemmini's default. The simulator takes the preset's array and
buffers (the lowering gets `accel.sim.rtl.LOWERING_ROOM` times them) and keeps its calibrated
DMA bus; the analytical model takes the whole preset.

No row aborts a validation. A row that cannot be read, built or evaluated is skipped and counted
under ``"skipped"`` by reason (`SKIP_REASONS`); ``"skipped_rows"`` lists each (its 0-based index
among the data rows, its file line, the reason and the error). The figures are over the rows
evaluated; `exit_status` is 1 when more than `MAX_SKIPPED_FRACTION` of the rows were skipped.
A file that is not a DOSA-format CSV (missing columns, not a CSV) is still a `ConfigError`.

Figures (`perfmodels.atformer.metrics.fidelity`): Pearson (linear and log), Spearman, MAPE,
pairwise accuracy and top-k recall within each layer. With ``held_out_fraction`` the rows of a
seeded fraction of the layers are also reported apart (``"held_out"``, ``"train"``): the split
`baco surrogate train` holds out with the same seed (drawn over every row whose layer can be
read, so skipped rows do not move it), so a hybrid is judged on unseen layers.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Any

import numpy as np

from accel.arch import HardwareConfig
from accel.dosa_csv import BUILD
from perfmodels.atformer import fidelity
from workloads.errors import BacoError, ConfigError, InfeasibleError, WorkloadError

__all__ = ["MAX_SKIPPED_FRACTION", "PREDICTORS", "SKIP_REASONS", "exit_status", "validate_rtl"]

PREDICTORS = ("analytic", "sim", "hybrid")

MALFORMED = "malformed row"
UNSUPPORTED = "unsupported layer"
MISMATCH = "mapping does not match the layer"
NO_FIT = "does not fit the hardware"
SIM_FAILED = "simulation failed"
NO_PREDICTION = "no prediction"
SKIP_REASONS = (MALFORMED, UNSUPPORTED, MISMATCH, NO_FIT, SIM_FAILED, NO_PREDICTION)
"""Why a row was skipped: a value that is not a number or a mapping that cannot be parsed; a
layer baco cannot build; mapping factors that do not multiply to the layer (or levels that are
not the template's); a program that does not fit the chip; any other simulator error; a
prediction that is not a positive finite number."""

MAX_SKIPPED_FRACTION = 0.10
"""`exit_status` is 1 when more than this fraction of the rows were skipped."""

_PROB = ("R", "S", "P", "Q", "C", "K", "N")
_PROB_OPTIONAL = ("Wstride", "Hstride", "Wdilation", "Hdilation")
_ARCH = ("arch.pe", "arch.mem1_depth", "arch.mem1_width", "arch.mem2_depth", "arch.mem2_width")
_CYCLES_KEYS = ("target.gemmini_cycle", "target.cycle")


def exit_status(report: dict[str, Any]) -> int:
    """0, or 1 when more than `MAX_SKIPPED_FRACTION` of the report's rows were skipped."""
    return 1 if report["skipped_fraction"] > MAX_SKIPPED_FRACTION else 0


def _hardware(hardware: str | HardwareConfig | None, predictor: str) -> HardwareConfig | None:
    if hardware is None or isinstance(hardware, HardwareConfig):
        hw = hardware
    else:
        hw = HardwareConfig.preset(str(hardware))
    if hw is None:
        return None
    if hw.template != "gemmini":
        raise ConfigError(f"validate rtl: --hardware {hw.name!r} is a {hw.template!r} design; "
                          "the RTL rows are Gemmini programs (pick a gemmini preset)")
    if predictor == "sim" and hw.pe_rows != hw.pe_cols:
        raise ConfigError(f"validate rtl: --hardware {hw.name!r} has a {hw.pe_rows}x"
                          f"{hw.pe_cols} array; the simulator needs a square one")
    return hw


def _read(path: str | os.PathLike, required: tuple[str, ...], limit: int | None
          ) -> list[dict[str, str]]:
    """The data rows (the first `limit`); a file that is not a DOSA-format CSV is an error."""
    from accel.dosa_csv import read_csv

    try:
        return [row for _, row in read_csv(path, required, limit)]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{path}: not a CSV file ({exc}); expected DOSA's dataset format "
                          "(see data/README.md in the project)") from None


@dataclasses.dataclass
class _Row:
    """What one CSV row became: its layer group (None if its layer cannot be read), measured
    cycles, the parsed point, and why it was skipped (None if it was not)."""

    index: int
    group_key: tuple | None = None
    measured: float = float("nan")
    point: Any = None
    reason: str | None = None
    detail: str = ""

    def skip(self, reason: str, exc: BaseException | str) -> None:
        self.reason = reason
        self.detail = " ".join(str(exc).split())


def _parse(raw: dict[str, str], index: int, source: str, cycles_key: str, predictor: str,
           hw: HardwareConfig | None, array_dim: int | str | None) -> _Row:
    """One row, stage by stage so that a failure has its reason (`SKIP_REASONS`)."""
    from accel.dosa_csv import integer, number, with_array
    from accel.mapping import Mapping
    from perfmodels.atformer import layer_key
    from perfmodels.validate import TimeloopRow, hardware_from_row, layer_from_row

    where = f"{source} row {index + 2}"
    out = _Row(index)
    try:
        for d in _PROB:
            integer(raw, f"prob.{d}", where)
        for key in _PROB_OPTIONAL:
            integer(raw, f"prob.{key}", where, 1)
        out.measured = number(raw, cycles_key, where, positive=True)
    except ConfigError as exc:
        out.skip(MALFORMED, exc)
        return out
    try:
        layer = layer_from_row(raw, where)
    except BacoError as exc:
        out.skip(UNSUPPORTED, exc)
        return out
    out.group_key = layer_key(layer)
    if predictor == "sim":  # the simulator's own reading of the row (`accel.sim.rtl`)
        from accel.sim import parse_row

        try:
            out.point = parse_row(raw, index, source, hw)
        except WorkloadError as exc:
            out.skip(UNSUPPORTED, exc)
        except InfeasibleError as exc:
            out.skip(MISMATCH, exc)
        except BacoError as exc:
            out.skip(MALFORMED, exc)
        return out
    try:
        mapping = Mapping.from_timeloop(raw.get("mapping.mapping", ""), stages=1)
        row_hw = hw if hw is not None else hardware_from_row(raw, where)
    except InfeasibleError as exc:
        out.skip(MISMATCH, exc)
        return out
    except BacoError as exc:
        out.skip(MALFORMED, exc)
        return out
    if hw is None and array_dim is not None:
        row_hw = with_array(row_hw, mapping, array_dim)
    try:
        mapping.check_structure(layer, row_hw)
    except BacoError as exc:
        out.skip(MISMATCH, f"{where}: {exc}")
        return out
    out.point = TimeloopRow(index=index, layer=layer, hw=row_hw,
                            mapping=mapping.with_stages(2), cycles=out.measured,
                            energy_uj=float("nan"))
    return out


def _sim_reason(exc: BaseException) -> str:
    if isinstance(exc, InfeasibleError):
        return NO_FIT
    if isinstance(exc, WorkloadError):
        return UNSUPPORTED
    return SIM_FAILED


def validate_rtl(path: str | os.PathLike, predictor: str = "sim", *, model: str | None = None,
                 hardware: str | HardwareConfig | None = None, limit: int | None = None,
                 held_out_fraction: float = 0.2, split_seed: int = 0,
                 progress: Any = None) -> dict[str, Any]:
    """Figures of `predictor` on an RTL CSV (see the module docstring)."""
    from perfmodels.atformer import load as load_surrogate
    from perfmodels.atformer import split_by_group

    if predictor not in PREDICTORS:
        raise ConfigError(f"validate rtl: --predictor must be one of {PREDICTORS}, got "
                          f"{predictor!r}")
    if predictor == "hybrid" and model is None:
        raise ConfigError("validate rtl: --predictor hybrid needs --model PATH (a folder "
                          "written by `baco surrogate train`)")
    if predictor != "hybrid" and model is not None:
        raise ConfigError("validate rtl: --model applies to --predictor hybrid only")
    hw = _hardware(hardware, predictor)
    surrogate = load_surrogate(model) if model is not None else None
    array_dim = (surrogate.info.get("array_dim") if surrogate is not None else None)

    source = str(path)
    try:
        with open(path, newline="", errors="replace") as handle:
            header = [c.strip() for c in handle.readline().split(",")]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    cycles_key = ("target.gemmini_cycle" if predictor == "sim"
                  else next((k for k in _CYCLES_KEYS if k in header), _CYCLES_KEYS[0]))
    required = (("mapping.mapping", cycles_key) + tuple(f"prob.{d}" for d in _PROB)
                + (() if hw is not None else _ARCH))
    raws = _read(path, required, limit)
    rows = []
    for i, raw in enumerate(raws):
        try:
            rows.append(_parse(raw, i, source, cycles_key, predictor, hw, array_dim))
        except Exception as exc:  # noqa: BLE001 - no row aborts a validation
            bad = _Row(i)
            bad.skip(MALFORMED, f"{type(exc).__name__}: {exc}")
            rows.append(bad)

    predicted = np.full(len(rows), np.nan)
    measured = np.array([r.measured for r in rows], np.float64)
    live = [r for r in rows if r.reason is None]
    extra: dict[str, Any] = {}
    if live and predictor == "sim":
        from accel.sim import simulate_rows

        failures: dict[int, Exception] = {}
        # Each row on the build it ran on (`accel.sim.rtl.generator_pe_dim`); a named
        # hardware gives the buffers only.
        cycles = simulate_rows([r.point for r in live], progress=progress, failures=failures)
        for pos, exc in failures.items():
            live[pos].skip(_sim_reason(exc), f"{source} row {live[pos].index + 2}: {exc}")
        predicted[[r.index for r in live]] = cycles
    elif live:
        from perfmodels.atformer import tokens_of

        points = [r.point for r in live]
        tok = tokens_of([p.layer for p in points], [p.hw for p in points],
                        [p.mapping for p in points])
        if surrogate is None:
            cycles = np.exp(np.asarray(tok.log_cycles, np.float64))
        else:
            cycles = surrogate.predict_tokens(tok)
            kept = surrogate.shrink_tokens(tok)
            extra["residual_kept"] = {"mean": float(np.mean(kept)),
                                      "min": float(np.min(kept)),
                                      "rows_below_half": int(np.sum(kept < 0.5)),
                                      "tau": (float(surrogate.stats.tau)
                                              if np.isfinite(surrogate.stats.tau) else None)}
            extra["calibration_scale"] = surrogate.scale
        predicted[[r.index for r in live]] = cycles
    for r in rows:
        if r.reason is None and not (np.isfinite(predicted[r.index]) and predicted[r.index] > 0):
            r.skip(NO_PREDICTION, f"{source} row {r.index + 2}: predicted {predicted[r.index]}")

    # Layer groups numbered in file order over every row whose layer could be read, as
    # `baco surrogate train` numbers them (`dataset_from_points`), so the split is the same.
    keys: dict[tuple, int] = {}
    group = np.array([keys.setdefault(r.group_key, len(keys)) if r.group_key is not None
                      else -1 for r in rows], np.int64)
    ok = np.array([r.reason is None for r in rows], bool)
    skipped: dict[str, int] = {}
    for r in rows:
        if r.reason is not None:
            skipped[r.reason] = skipped.get(r.reason, 0) + 1

    report: dict[str, Any] = {"file": source, "predictor": predictor,
                              "hardware": hw.name if hw is not None else "arch columns",
                              **_figures(predicted[ok], measured[ok], group[ok]),
                              "rows_total": len(rows), "skipped": skipped,
                              "skipped_fraction": (len(rows) - int(ok.sum())) / len(rows)}
    if hw is None and array_dim is not None:
        report["hardware"] = ("arch columns with each row's FireSim build's array"
                              if array_dim == BUILD
                              else f"arch columns with a {array_dim}x{array_dim} array")
    if model is not None:
        report["model"] = str(model)
    report.update(extra)
    has_group = group >= 0
    if held_out_fraction > 0 and len(np.unique(group[has_group])) >= 2:
        held = np.zeros(len(rows), bool)
        held[has_group] = split_by_group(group[has_group], held_out_fraction, split_seed)
        for name, mask in (("held_out", held & ok), ("train", ~held & has_group & ok)):
            if mask.sum() >= 2:
                report[name] = _figures(predicted[mask], measured[mask], group[mask])
        report["split"] = {"by": "layer", "fraction": held_out_fraction, "seed": split_seed}
    report["skipped_rows"] = [{"row": r.index, "line": r.index + 2, "reason": r.reason,
                               "error": r.detail} for r in rows if r.reason is not None]
    return report


def _figures(predicted: np.ndarray, measured: np.ndarray, group: np.ndarray) -> dict[str, Any]:
    """`fidelity`, or its keys as None when fewer than two rows were evaluated."""
    if len(predicted) >= 2:
        return fidelity(predicted, measured, group)
    return {"rows": int(len(predicted)), "pearson": None, "pearson_log": None,
            "spearman": None, "mape": None, "pairwise_accuracy": None, "top_k_recall": None,
            "k": 5}
