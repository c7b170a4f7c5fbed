"""`baco.networks.load_network`: ONNX files, zoo names and benchmark suite cases."""

import pytest

from baco.networks import load_network
from workloads.errors import WorkloadError
from workloads.suites import suite


def test_a_suite_case_is_a_network_name():
    net = load_network("bmm_chain/G10")
    assert net == next(n for n in suite("bmm_chain") if n.name == "G10")
    assert len(net.chains) == 1
    sampled = suite("gemm")[0]
    assert load_network(sampled.name) == sampled                  # "gemm/001"
    assert load_network("conv_chain/C8").name == "C8"


def test_an_unknown_case_names_the_suite_and_its_cases():
    with pytest.raises(WorkloadError, match=r"suite 'bmm_chain' has no case 'G13'.*G1, G2"):
        load_network("bmm_chain/G13")
    with pytest.raises(WorkloadError, match="unknown zoo model"):
        load_network("resnet51")
