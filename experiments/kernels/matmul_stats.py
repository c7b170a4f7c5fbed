"""Run the Fig. 6.7 matmul kernel on random int8 matrices (default 100 x 70 x 45) on the
interpreter and on the simulator, check both against numpy, and print the trace's statistics.

    /work/venv/bin/python experiments/kernels/matmul_stats.py [M K N] [--blocks BM BN BK]
"""
import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from matmul import matmul_kernel

import baco


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[100, 70, 45], help="M K N")
    parser.add_argument("--blocks", nargs=3, type=int, default=[32, 32, 32], help="BM BN BK")
    parser.add_argument("--hw", default="gemmini_default", help="hardware preset")
    args = parser.parse_args()
    m, k, n = args.sizes
    bm, bn, bk = args.blocks
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    want = a.astype(np.int32) @ b.astype(np.int32)
    grid = (baco.cdiv(m, bm) * baco.cdiv(n, bn),)
    consts = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk}
    outputs = {}
    for backend in ("interpreter", "sim"):
        c = np.zeros((m, n), np.int32)
        report = matmul_kernel[grid](a, b, c, m, n, k, k, 1, n, 1, n, 1, backend=backend,
                                     hw=args.hw, **consts)
        outputs[backend] = c
    print(f"matmul {m}x{k}x{n}, blocks {bm}x{bn}x{bk}, grid {grid}, hw {args.hw}")
    for backend, c in outputs.items():
        print(f"  {backend:11s} == numpy: {bool(np.array_equal(c, want))}")
    print(f"  interpreter == sim: {bool(np.array_equal(outputs['interpreter'], outputs['sim']))}")
    print(f"  trace: {len(report.trace)} instructions, {report.cycles} cycles, "
          f"{report.result.macs} MACs")
    for kind, count in report.instructions.items():
        print(f"    {kind:20s} {count}")
    util = report.result.utilization()
    print("  queue busy: " + ", ".join(f"{q} {100 * u:.1f}%" for q, u in util.items()))


if __name__ == "__main__":
    main()
