"""Throughput of the ATFormer surrogate and the hybrid model: predictions per second, as JSON.

Points are the rows of ``data/gemmini_rtl_train.csv`` (real layers and mappings;
the file is tiled to fill a batch), or, if it is absent, random relaxed points of ResNet-50.
Two figures, each the median over repeats of batch / wall-clock seconds after a compiling
warm-up:

* ``network``: the ATFormer forward pass alone on precomputed tokens, as
  `Surrogate.predict_tokens` runs it (`perfmodels.atformer.train.predict_compact`: masked
  tokens dropped, exactly), jitted, batched;
* ``hybrid``: features + analytical model + network from packed (layer, hardware, mapping)
  arrays, i.e. what the co-design loop and `baco validate rtl --predictor hybrid` pay per point.

The model is ``--model PATH`` (a checkpoint) or an untrained one of ``--width`` (default: the
seed's 512; the throughput does not depend on the weights). The machine is shared: the JSON gives
the load average when the run began and the figures per CPU-second of this process too.

    /work/venv/bin/python experiments/bench/surrogate_throughput.py [--width 32] [--batch 8192]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys

import jax
import numpy as np
from _timing import time_repeats

from accel.arch import stack_hw
from accel.dosa_csv import RTL_CSV
from perfmodels.analytic import fast_jit, stack_layers, stack_mappings
from perfmodels.atformer import train as atf
from perfmodels.atformer.features import NUM_FEATURES, Tokens, num_tokens, tokens
from perfmodels.atformer.model import ModelConfig
from perfmodels.validate import read_rows




@functools.partial(fast_jit, static_argnums=(0, 1))
def _hybrid_batch(config, template, params, stats, layers, hwps, maps):
    tok = jax.vmap(lambda l, h, m: tokens(template, l, h, m)[0])(layers, hwps, maps)
    return atf.predict_log(config, params, stats, tok)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="surrogate checkpoint folder")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", default=str(RTL_CSV))
    args = parser.parse_args(argv)
    load_avg = os.getloadavg()[0]

    if args.model:
        surrogate = atf.load(args.model)
    else:
        cfg = atf.TrainConfig(model=ModelConfig(width=args.width, heads=args.heads,
                                                layers=args.layers, mlp_width=args.width))
        params = atf.init_params(cfg.model, jax.random.PRNGKey(0), 1, 4)
        stats = atf.Stats(np.zeros(NUM_FEATURES, np.float32), np.ones(NUM_FEATURES, np.float32),
                          np.float32(0.0))
        surrogate = atf.Surrogate(cfg, params, stats)
    model = surrogate.config.model

    rows = read_rows(args.data, strict=False)
    reps = -(-args.batch // len(rows))
    rows = (rows * reps)[:args.batch]
    template = rows[0].hw.template_spec
    layers = stack_layers([r.layer for r in rows])
    hwps = stack_hw([r.hw for r in rows])
    maps = stack_mappings([r.mapping for r in rows])
    tok = jax.vmap(lambda l, h, m: tokens(template, l, h, m)[0])(layers, hwps, maps)
    tok = Tokens(*(jax.device_put(np.asarray(a)) for a in tok))

    k = atf.active_tokens(tok.weight)
    net = fast_jit(functools.partial(atf.predict_compact, model, k))
    results = {}
    for name, fn in (
            ("network", lambda: net(surrogate.params, surrogate.stats, tok)),
            ("hybrid", lambda: _hybrid_batch(model, template, surrogate.params, surrogate.stats,
                                             layers, hwps, maps))):
        wall, cpu = time_repeats(fn, args.repeats)
        results[f"{name}_predictions_per_s"] = args.batch / statistics.median(wall)
        results[f"{name}_predictions_per_cpu_s"] = args.batch / statistics.median(cpu)
    members = int(jax.tree_util.tree_leaves(surrogate.params)[0].shape[0])
    out = {"benchmark": "surrogate_throughput", "batch": args.batch, "repeats": args.repeats,
           "model": model.to_dict(), "ensemble": members, "tokens": num_tokens(template),
           "network_tokens_kept": k,
           "checkpoint": args.model, "load_average_1min": load_avg,
           "devices": [str(d) for d in jax.devices()], **results}
    json.dump(out, sys.stdout)
    print()
    return out


if __name__ == "__main__":
    main()
