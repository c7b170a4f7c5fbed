"""Throughput of the simulator: simulated MACs per second on ResNet-50's 3x3, 56x56, 64->64 layer.

The layer (R=S=3, P=Q=56, C=K=64, pads 1) is lowered by `accel.lower.lower` on the
``gemmini_default`` hardware with a weight-stationary mapping that keeps each weight block for
196 pixels (``L3[WIO] Q4 - L2[WI] P4 K4 K16X - L1[O] R3 S3 C4 C16X - L0[W] P14 Q14``), about
66k instructions. Random int8 inputs and weights are packed into the DRAM image; each repeat
runs `accel.sim.run` end to end (decoding, the functional + timing scan, reading back the
result) after a warm-up run that compiles, and the output is checked against numpy.

Figures (median over repeats):

* ``simulated_macs_per_s``: layer MACs / wall-clock seconds of one functional + timing run;
* ``ratio_to_numpy``: that throughput divided by numpy's on the same layer (the int32
  convolution plus epilogue of `accel.sim.reference.conv`), i.e. numpy seconds / simulator
  seconds: how much slower a cycle-annotated, instruction-by-instruction simulation is than
  computing the answer directly;
* ``timing_only_macs_per_s``: the same for a timing-only run (no data).

The machine is shared, so CPU-second figures (``*_per_cpu_s``, this process only) and the load
average are reported beside the wall-clock ones. Prints one JSON object.

    /work/venv/bin/python experiments/bench/sim_throughput.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from accel.arch import HardwareConfig
from accel.lower import lower
from accel.mapping import Mapping
from accel.sim import reference, run
from workloads.layer import Layer

MAPPING = "L3[WIO] Q4 - L2[WI] P4 K4 K16X - L1[O] R3 S3 C4 C16X - L0[W] P14 Q14"


def _timed(fn, repeats: int) -> tuple[list[float], list[float], object]:
    wall, cpu, out = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu, out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    load_avg = os.getloadavg()[0]

    hw = HardwareConfig.preset("gemmini_default")
    layer = Layer.conv2d(R=3, S=3, P=56, Q=56, C=64, K=64, pads=(1, 1, 1, 1), name="res2 3x3")
    mapping = Mapping.from_timeloop(MAPPING, stages=2)
    scale = 1 / 256
    low = lower(layer, mapping, hw, acc_scale=scale, check=False)
    lay = low.layout
    rng = np.random.default_rng(args.seed)
    x = rng.integers(-128, 128, lay["input"].shape).astype(np.int8)
    w = rng.integers(-128, 128, lay["weight"].shape).astype(np.int8)
    image = lay.pack(input=x, weight=w)
    initialized = np.ones(image.size, bool)
    out = lay["output"]
    initialized[out.offset_bytes:out.offset_bytes + out.nbytes] = False

    def simulate():
        return run(low.trace, hw, image, initialized=initialized)

    def simulate_timing():
        return run(low.trace, hw, None, functional=False)

    start = time.perf_counter()
    simulate()
    compile_s = time.perf_counter() - start
    simulate_timing()
    wall, cpu, result = _timed(simulate, args.repeats)
    t_wall, _, t_result = _timed(simulate_timing, args.repeats)

    def numpy_conv():
        return reference.conv(x, w[0], (1, 1), (1, 1, 1, 1), scale=scale)

    n_wall, n_cpu, want = _timed(numpy_conv, max(args.repeats, 3))
    got = lay.read(result.dram, "output")
    macs = layer.macs
    sim_s, sim_cpu = statistics.median(wall), statistics.median(cpu)
    np_s, np_cpu = statistics.median(n_wall), statistics.median(n_cpu)
    report = {
        "simulated_macs_per_s": macs / sim_s,
        "ratio_to_numpy": (macs / sim_s) / (macs / np_s),
        "timing_only_macs_per_s": macs / statistics.median(t_wall),
        "simulated_macs_per_cpu_s": macs / sim_cpu,
        "ratio_to_numpy_per_cpu_s": np_cpu / sim_cpu,
        "matches_numpy": bool(np.array_equal(got, want)),
        "layer": layer.config_str(),
        "macs": macs,
        "mapping": MAPPING,
        "hardware": "gemmini_default",
        "instructions": len(low.trace),
        "simulated_cycles": result.cycles,
        "timing_only_cycles": t_result.cycles,
        "sim_seconds": sim_s,
        "numpy_seconds": np_s,
        "first_run_seconds_with_compile": compile_s,
        "repeats": args.repeats,
        "load_average_at_start": load_avg,
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    report = main()
    sys.exit(0 if report["matches_numpy"] else 1)
