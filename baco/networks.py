"""One entry point for every way a user names a network: a file, a zoo name, a suite case."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import workloads
from workloads.errors import WorkloadError


def load_network(source: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None
                 ) -> workloads.Network:
    """Load a network from an ONNX file path, a zoo name (``resnet50``, ``bert:seq=512``) or a
    benchmark suite's case (``SUITE/CASE``: ``bmm_chain/G10``, ``gemm/001``).

    A source ending in ``.onnx``, or naming an existing file, is read with
    `workloads.from_onnx`; ``SUITE/CASE`` with a known suite is that case of
    `workloads.suite` (seed 0, the whole suite); anything else is looked up in the zoo.

    >>> load_network("resnet50").total_layers
    54
    >>> [layer.name for layer in load_network("bmm_chain/G10").layers]
    ['G10/gemm1', 'G10/gemm2']
    """
    text = os.fspath(source)
    if text.endswith(".onnx") or os.path.isfile(text):
        return workloads.from_onnx(text, input_shapes=input_shapes)
    if input_shapes:
        raise WorkloadError(
            f"--input-shape applies to ONNX files only; {text!r} is a zoo name "
            "(pass zoo parameters as NAME:key=value instead, e.g. bert:seq=512)")
    suite_name, slash, case = text.partition("/")
    if slash and suite_name in workloads.suite_names():
        cases = workloads.suite(suite_name, full=True)
        for net in cases:
            if net.name in (case, text):
                return net
        raise WorkloadError(f"suite {suite_name!r} has no case {case!r}; its cases: "
                            f"{', '.join(n.name for n in cases[:12])}"
                            f"{', ...' if len(cases) > 12 else ''}")
    return workloads.load(text)
