"""The simulator against the chip: baco's programs run on a verilated Gemmini
(``data/gemmini_rtl_baco_programs.csv``) were wrong exactly where `find_races` says they race,
today's lowering emits residual-add programs that race nowhere and compute numpy's answer, and
the simulator times the programs as the chip did.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.dosa_csv import DATA_DIR
from accel.isa import Instruction, IsaParams, LocalAddr
from accel.lower import lower
from accel.lower.check import expected_output, random_inputs
from accel.sim import find_races, run
from accel.sim.decode import Op, decode
from accel.sim.rtl import metrics
from accel.sim.timing import dma_requests
from accel.trace import Trace
from baco.program_validation import read_programs, simulate_programs

PROGRAMS = DATA_DIR / "gemmini_rtl_baco_programs.csv"
HW = HardwareConfig.preset("gemmini_default")


@pytest.fixture(scope="module")
def programs():
    return read_programs(PROGRAMS)


def test_the_simulator_times_the_programs_as_the_chip(programs):
    """Fit once on these rows (`accel.sim.timing`): a guard that they stay met."""
    sim = simulate_programs(programs)
    rtl = np.array([p.rtl_cycles for p in programs])
    figures = metrics(sim, rtl)
    assert figures["mape"] <= 0.05 and np.max(np.abs(sim - rtl) / rtl) <= 0.15
    assert figures["spearman"] >= 0.99


def test_the_dma_asks_for_exactly_the_chips_memory_requests(programs):
    """Every program's TileLink reads and writes, as the chip counted them."""
    csv_rows = {r["id"]: r for r in csv.DictReader(open(PROGRAMS, newline=""))}
    for p in programs:
        decoded = decode(p.trace, IsaParams.from_hardware(p.hw), None, 0, p.hw.dataflow)
        op = decoded.column("op")
        counts = [int(dma_requests(decoded, p.timing, p.hw, op == kind).sum())
                  for kind in (Op.MVIN, Op.MVOUT)]
        want = [int(csv_rows[p.id]["tl_reads"]), int(csv_rows[p.id]["tl_writes"])]
        assert counts == want, p.id


def test_the_chip_was_wrong_exactly_where_the_trace_races(programs):
    wrong = {p.id for p in programs if not p.bit_exact}
    assert wrong, "the shared programs include the chip's wrong residual-add runs"
    flagged = {p.id for p in programs if find_races(p.trace, p.hw).racing}
    assert flagged == wrong
    assert all("add" in p.layer.epilogue for p in programs if p.id in flagged)


def _acc_mvin(dram: int, row: int, accumulate: bool) -> Instruction:
    return Instruction.mvin3(dram, LocalAddr.accumulator(row, accumulate=accumulate), 16, 16)


def _racing_trace(fenced: bool) -> Trace:
    """A compute accumulating into bank 0 and an mvin accumulating into bank 1 (row 512)."""
    body = [Instruction.config_ld(64, id=2), _acc_mvin(0, 0, False),
            Instruction.config_ld(16, id=0), Instruction.mvin(0, 0, 16, 16),
            Instruction.preload(0, LocalAddr.accumulator(0, accumulate=True), 16, 16, 16, 16),
            Instruction.compute_preloaded(0, LocalAddr.garbage(), 16, 16, 16, 16)]
    tail = [_acc_mvin(4096, 512, True)]
    return Trace(body + ([Instruction.fence()] if fenced else []) + tail)


def test_a_race_names_its_two_instructions_and_a_fence_orders_them():
    report = find_races(_racing_trace(fenced=False), HW)
    assert report.count == 1
    race = report.races[0]
    assert (race.first, race.second) == (5, 6)
    assert (race.first_mnemonic, race.second_mnemonic) == ("compute_preloaded", "mvin")
    assert "adder" in str(race) and "instruction 5" in str(race)
    assert not find_races(_racing_trace(fenced=True), HW).racing


def test_one_bank_never_races():
    trace = _racing_trace(fenced=False)
    same_bank = Trace(list(trace)[:-1] + [_acc_mvin(4096, 256, True)])
    assert not find_races(same_bank, HW).racing


@pytest.mark.parametrize("pid", ["8", "14"])
def test_relowered_residual_programs_do_not_race_and_match_numpy(programs, pid):
    p = next(p for p in programs if p.id == pid)
    assert find_races(p.trace, p.hw).racing
    low = lower(p.layer, p.mapping, HW, acc_scale=p.acc_scale)
    assert not find_races(low.trace, HW).racing
    assert not any(l.startswith("mvin") and "+accumulate" in l
                   for l in low.trace.to_text().splitlines())
    arrays, image, initialized = random_inputs(low, np.random.default_rng([0, int(pid)]))
    result = run(low.trace, HW, image, initialized=initialized)
    got = low.layout.read(result.dram, "output")
    np.testing.assert_array_equal(got, expected_output(low, arrays))


def test_validate_programs_reports_each_yardstick_and_the_races(tmp_path):
    import csv
    import json
    import shutil
    import subprocess
    import sys

    with open(PROGRAMS, newline="") as f:
        rows = list(csv.DictReader(f))
    keep = [r for r in rows if r["id"] in ("8", "26", "55")]
    sub = tmp_path / "few.csv"
    with open(sub, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(keep)
    (tmp_path / "few").mkdir()
    for r in keep:
        shutil.copy(PROGRAMS.with_suffix("") / f"{r['id']}.npz", tmp_path / "few")
    out = subprocess.run([sys.executable, "-m", "baco.cli", "validate", "programs", str(sub),
                          "--json"], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["programs"] == 3
    assert report["racing"] == ["8"] and report["bit_exact"] == {"8": False, "26": True,
                                                                  "55": True}
    for key in ("pearson", "spearman", "mape", "max_abs_rel_err"):
        assert np.isfinite(report[key])
    assert set(report["yardsticks"]) == {"simulated", "instruction_aware", "plain"}
    # The simulator runs the row's own trace on the row's chip.
    sim = [p["simulated_cycles"] for p in report["per_program"]]
    assert all(s > 0 for s in sim)

    (tmp_path / "few" / "26.npz").unlink()
    bad = subprocess.run([sys.executable, "-m", "baco.cli", "validate", "programs", str(sub)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "26.npz" in bad.stderr and "Traceback" not in bad.stderr
