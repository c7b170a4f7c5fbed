"""ResNet-50, torchvision's v1.5 (stride on the bottleneck's 3x3 conv), 224x224 input.

Architecture: He et al., "Deep Residual Learning for Image Recognition" (2016), Table 1, with
the v1.5 change torchvision ships (``torchvision.models.resnet50``): the stride-2 sits on the
3x3 conv of each stage's first bottleneck, and on its 1x1 projection shortcut. Every conv is
bias-free and followed by BatchNorm, as in torchvision.

This reproduces DOSA's ``dataset/workloads/resnet50/layer_count.yaml`` (ucb-bar/dosa): 54
layers (53 convs + the FC), 24 unique, ~4.09 GMAC at batch 1.
"""

from __future__ import annotations

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "batch": Param(1, "images per inference", low=1, high=256),
}

# (blocks, bottleneck width, stride of the first block) for conv2_x .. conv5_x.
STAGES = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))
EXPANSION = 4


def _bottleneck(b: GraphBuilder, x: str, width: int, stride: int, name: str) -> str:
    in_channels = b.shape(x)[1]
    out_channels = width * EXPANSION
    y = b.conv_bn(x, width, 1, name=f"{name}.conv1")
    y = b.conv_bn(y, width, 3, stride=stride, pad=1, name=f"{name}.conv2")
    y = b.conv_bn(y, out_channels, 1, act=None, name=f"{name}.conv3")
    if stride != 1 or in_channels != out_channels:
        x = b.conv_bn(x, out_channels, 1, stride=stride, act=None, name=f"{name}.downsample")
    return b.relu(b.add(y, x, name=f"{name}.add"), name=f"{name}.relu")


def build(batch: int = 1) -> onnx.ModelProto:
    b = GraphBuilder("resnet50")
    x = b.input("image", (batch, 3, 224, 224))
    x = b.conv_bn(x, 64, 7, stride=2, pad=3, name="conv1")
    x = b.maxpool(x, 3, 2, pad=1, name="maxpool")
    for i, (blocks, width, stride) in enumerate(STAGES, start=1):
        for j in range(blocks):
            x = _bottleneck(b, x, width, stride if j == 0 else 1, name=f"layer{i}.{j}")
    x = b.flatten(b.gap(x, name="avgpool"), name="flatten")
    b.output(b.gemm(x, 1000, name="fc"))
    return b.build()
