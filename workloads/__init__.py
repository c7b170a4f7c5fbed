"""Workloads: networks and operators as the loop nests an accelerator maps.

>>> import workloads
>>> net = workloads.load("resnet50")
>>> net.unique_layers, net.total_layers
(24, 54)
"""

from workloads.errors import UnsupportedOpError
from workloads.errors import WorkloadError
from workloads.fusion import Chain
from workloads.fusion import OpNode
from workloads.fusion import find_chains
from workloads.fusion import op_class
from workloads.layer import DIMS
from workloads.layer import KINDS
from workloads.layer import Layer
from workloads.network import ImportSummary
from workloads.network import Network
from workloads.onnx_import import from_onnx
from workloads.onnx_import import layers_from_onnx
from workloads.onnx_import import parse_input_shapes
from workloads.suites import suite
from workloads.suites import suite_names
from workloads.zoo import load
from workloads.zoo import zoo_names

__all__ = [
    "Chain",
    "DIMS",
    "ImportSummary",
    "KINDS",
    "Layer",
    "Network",
    "OpNode",
    "UnsupportedOpError",
    "WorkloadError",
    "find_chains",
    "from_onnx",
    "layers_from_onnx",
    "parse_input_shapes",
    "load",
    "op_class",
    "suite",
    "suite_names",
    "zoo_names",
]
