"""One entry point for every way a user names a network: a file, a zoo name, a suite case."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import workloads
from workloads.errors import WorkloadError


def load_network(source: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None
                 ) -> workloads.Network:
    """Load a network from an ONNX file path or a zoo name (``resnet50``, ``bert:seq=512``).

    A source ending in ``.onnx``, or naming an existing file, is read with
    `workloads.from_onnx`; anything else is looked up in the zoo.

    >>> load_network("resnet50").total_layers
    54
    """
    text = os.fspath(source)
    if text.endswith(".onnx") or os.path.isfile(text):
        return workloads.from_onnx(text, input_shapes=input_shapes)
    if input_shapes:
        raise WorkloadError(
            f"--input-shape applies to ONNX files only; {text!r} is a zoo name "
            "(pass zoo parameters as NAME:key=value instead, e.g. bert:seq=512)")
    return workloads.load(text)
