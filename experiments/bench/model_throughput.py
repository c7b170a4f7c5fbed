"""Throughput of the analytical model: exact evaluations/s and relaxed value-and-grad/s.

Both are measured on batches over ResNet-50's 24 unique layers on the Gemmini template
(`gemmini_default`), jitted and vmapped as the co-design loop and the validators call them:

* exact: random legal mappings (tiles fit the buffers, random loop orders and 1-2 stages),
  packed once into arrays; the figure times `perfmodels.analytic.evaluate_batch` on a batch;
* value_and_grad: random relaxed points (3 candidate loop orders per level, continuous stages,
  hardware inferred by the smooth ``min_hw``); the figure times `relax.edp_loss_and_grad`,
  counting one evaluation per (layer, mapping) in the batch.

Each figure is the median over repeats of batch / wall-clock seconds, after a warm-up call that
compiles. The machine is shared, so the JSON also gives the same figures per CPU-second of this
process (``*_per_cpu_s``, insensitive to other jobs) and the load average when the run began.
Prints one JSON object.

    /work/venv/bin/python experiments/bench/model_throughput.py [--exact-batch N] [--grad-batch N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import numpy as np
from _timing import time_repeats

import workloads
from accel.arch import HardwareConfig, stack_hw
from accel.mapping import Mapping
from perfmodels import relax
from perfmodels.analytic import evaluate_batch, stack_layers, stack_mappings


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact-batch", type=int, default=1 << 16)
    parser.add_argument("--grad-batch", type=int, default=1 << 14)
    parser.add_argument("--mappings-per-layer", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    load_avg = os.getloadavg()[0]
    hw = HardwareConfig.preset("gemmini_default")
    template = hw.template_spec
    net = workloads.load("resnet50")
    layers = list(net.layers)
    rng = np.random.default_rng(args.seed)

    # Exact: a pool of random legal mappings per layer, drawn into one batch.
    start = time.perf_counter()
    pool = [(layer, Mapping.random(layer, hw, rng))
            for layer in layers for _ in range(args.mappings_per_layer)]
    pick = rng.integers(len(pool), size=args.exact_batch)
    batch_layers = stack_layers([pool[i][0] for i in pick])
    batch_maps = stack_mappings([pool[i][1] for i in pick])
    batch_hw = stack_hw([hw] * args.exact_batch)
    pack_s = time.perf_counter() - start
    exact_times, exact_cpu = time_repeats(
        lambda: evaluate_batch(template, batch_layers, batch_hw, batch_maps), args.repeats)
    out = evaluate_batch(template, batch_layers, batch_hw, batch_maps)
    finite = bool(np.all(np.isfinite(np.asarray(out.cycles))))

    # Relaxed: value and gradient of the network EDP loss over a batch of layer instances.
    reps = -(-args.grad_batch // len(layers))
    grad_layers = (layers * reps)[:args.grad_batch]
    space = relax.RelaxSpace.create(hw, grad_layers, hw_mode="min_hw")
    theta = relax.init_random(jax.random.PRNGKey(args.seed), space)
    grad_times, grad_cpu = time_repeats(lambda: relax.edp_loss_and_grad(theta, space), args.repeats)
    value, grad = relax.edp_loss_and_grad(theta, space)
    grads_finite = all(bool(np.all(np.isfinite(np.asarray(g))))
                       for g in jax.tree_util.tree_leaves(grad))

    result = {
        "exact_evals_per_s": args.exact_batch / statistics.median(exact_times),
        "value_and_grad_per_s": args.grad_batch / statistics.median(grad_times),
        "exact_evals_per_cpu_s": args.exact_batch / statistics.median(exact_cpu),
        "value_and_grad_per_cpu_s": args.grad_batch / statistics.median(grad_cpu),
        "load_average_at_start": load_avg,
        "exact_batch": args.exact_batch,
        "grad_batch": args.grad_batch,
        "exact_batch_seconds_median": statistics.median(exact_times),
        "grad_batch_seconds_median": statistics.median(grad_times),
        "mapping_pool": len(pool),
        "pack_seconds": pack_s,
        "network": "resnet50",
        "unique_layers": len(layers),
        "hardware": "gemmini_default",
        "order_candidates": space.num_candidates,
        "outputs_finite": finite and bool(np.isfinite(float(value))) and grads_finite,
        "backend": jax.default_backend(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
