"""Shared helpers for the block-DSL tests: the example kernels under experiments/kernels."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

KERNELS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "kernels"


def load_kernel(module: str, name: str):
    """``name`` from ``experiments/kernels/<module>.py``."""
    spec = importlib.util.spec_from_file_location(f"kernels_{module}", KERNELS / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


@pytest.fixture(scope="session")
def kernel():
    """``kernel(module, name)``: a kernel from experiments/kernels."""
    return load_kernel
