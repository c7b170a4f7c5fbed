"""U-Net, the original unpadded network on a 572x572 single-channel image.

Architecture: Ronneberger et al., "U-Net: Convolutional Networks for Biomedical Image
Segmentation" (MICCAI 2015), Fig. 1: per level two unpadded 3x3 convs + ReLU; 2x2 max-pool
down; 2x2 stride-2 up-convolutions (``ConvTranspose``) that halve the channels; the skip is
centre-cropped and concatenated; a final 1x1 conv to 2 classes at 388x388.

Node names follow DOSA's ``dataset/workloads/unet`` files (ucb-bar/dosa): ``0_0_conv`` ...
``8_2_conv``, the up-convs ``4_2_upconv`` ... ``7_2_upconv``. 23 layers, all distinct; DOSA's
``layer_count.yaml`` keys (R_S_P_Q_C_K_N_strides_dilations) are reproduced exactly, e.g.
``4_2_upconv`` = 2_2_56_56_1024_512 (the transposed conv as a stride-1 2x2 conv over its
zero-inserted input, see `workloads.layer`).
"""

from __future__ import annotations

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "batch": Param(1, "images per inference", low=1, high=64),
}

ENCODER_CHANNELS = (64, 128, 256, 512, 1024)


def _double_conv(b: GraphBuilder, x: str, channels: int, level: int) -> str:
    for j in range(2):
        x = b.relu(b.conv(x, channels, 3, name=f"{level}_{j}_conv"))
    return x


def build(batch: int = 1) -> onnx.ModelProto:
    b = GraphBuilder("unet")
    x = b.input("image", (batch, 1, 572, 572))
    skips = []
    for level, channels in enumerate(ENCODER_CHANNELS):
        x = _double_conv(b, x, channels, level)
        if level < len(ENCODER_CHANNELS) - 1:
            skips.append(x)
            x = b.maxpool(x, 2, 2)
    for level, channels in enumerate(reversed(ENCODER_CHANNELS[:-1]), start=5):
        x = b.conv_transpose(x, channels, 2, stride=2, name=f"{level - 1}_2_upconv")
        h, w = b.shape(x)[2:]
        skip = b.center_crop(skips.pop(), h, w)
        x = _double_conv(b, b.concat([skip, x], axis=1), channels, level)
    b.output(b.conv(x, 2, 1, name="8_2_conv"))
    return b.build()
