"""VGG-16 (configuration "D"), 224x224 input: 13 3x3 convs and 3 fully connected layers.

Architecture: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (ICLR 2015), Table 1 column D, as ``torchvision.models.vgg16`` builds it (3x3
convs with padding 1 and bias, ReLU, 2x2 max-pool after each block, FC 25088-4096-4096-1000).
torchvision's AdaptiveAvgPool2d((7, 7)) is the identity at 224x224 and is left out.

DOSA lists vgg16 as 16 layers / 12 unique (dosa-gemmini-isa.md §A.10); ~15.5 GMAC at batch 1.
"""

from __future__ import annotations

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "batch": Param(1, "images per inference", low=1, high=256),
}

# Output channels of each conv, "M" for a 2x2 stride-2 max-pool (Table 1, column D).
CONFIG_D = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
            512, 512, 512, "M", 512, 512, 512, "M")


def build(batch: int = 1) -> onnx.ModelProto:
    b = GraphBuilder("vgg16")
    x = b.input("image", (batch, 3, 224, 224))
    conv = 0
    for item in CONFIG_D:
        if item == "M":
            x = b.maxpool(x, 2, 2)
        else:
            x = b.relu(b.conv(x, item, 3, pad=1, name=f"features.conv{conv}"))
            conv += 1
    x = b.flatten(x, name="flatten")
    x = b.relu(b.gemm(x, 4096, name="classifier.fc1"))
    x = b.relu(b.gemm(x, 4096, name="classifier.fc2"))
    b.output(b.gemm(x, 1000, name="classifier.fc3"))
    return b.build()
