"""MobileNetV2, width multiplier 1.0, 224x224 input; depthwise convs as grouped convs.

Architecture: Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks"
(CVPR 2018), Table 2, as ``torchvision.models.mobilenet_v2`` builds it: a 3x3 stride-2 stem
to 32 channels, 17 inverted-residual blocks given by (expansion t, channels c, repeats n,
stride s), a 1x1 conv to 1280, global average pooling and a 1000-way FC. Convs are bias-free
with BatchNorm and ReLU6; the projection conv of each block is linear (no activation); the
depthwise conv has ``group`` = channels. The first block (t=1) has no expansion conv.

53 layers (52 convs + FC); ~0.30 GMAC at batch 1 (the paper's 300M multiply-adds).
"""

from __future__ import annotations

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "batch": Param(1, "images per inference", low=1, high=256),
}

# (t, c, n, s) rows of Table 2.
INVERTED_RESIDUALS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _block(b: GraphBuilder, x: str, t: int, c: int, stride: int, name: str) -> str:
    in_channels = b.shape(x)[1]
    hidden = in_channels * t
    y = x
    if t != 1:
        y = b.conv_bn(y, hidden, 1, act="relu6", name=f"{name}.expand")
    y = b.conv_bn(y, hidden, 3, stride=stride, pad=1, groups=hidden, act="relu6",
                  name=f"{name}.depthwise")
    y = b.conv_bn(y, c, 1, act=None, name=f"{name}.project")
    if stride == 1 and in_channels == c:
        y = b.add(y, x, name=f"{name}.add")
    return y


def build(batch: int = 1) -> onnx.ModelProto:
    b = GraphBuilder("mobilenet_v2")
    x = b.input("image", (batch, 3, 224, 224))
    x = b.conv_bn(x, 32, 3, stride=2, pad=1, act="relu6", name="features.0")
    index = 1
    for t, c, n, s in INVERTED_RESIDUALS:
        for i in range(n):
            x = _block(b, x, t, c, s if i == 0 else 1, name=f"features.{index}")
            index += 1
    x = b.conv_bn(x, 1280, 1, act="relu6", name=f"features.{index}")
    x = b.flatten(b.gap(x, name="avgpool"), name="flatten")
    b.output(b.gemm(x, 1000, name="classifier"))
    return b.build()
