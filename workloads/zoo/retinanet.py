"""RetinaNet's FPN and heads on P3-P7, exactly as DOSA's ``dataset/workloads/retinanet``.

Source: the 27 layer files of ucb-bar/dosa ``dataset/workloads/retinanet`` (commit d3f101c),
read layer by layer: ``layers.yaml`` (the order), ``layer_count.yaml`` (22 unique shapes) and
each ``<name>.yaml`` (e.g. ``p6.yaml``: R=S=3, P=Q=4, C=2048, K=256, stride 2). DOSA leaves the
ResNet-50 backbone out, so the backbone's C3/C4/C5 feature maps of a 224x224 image
(512x28x28, 1024x14x14, 2048x7x7) are this graph's inputs.

Per pyramid level l = 3..7 DOSA has five convs, all with N=1 and "same" padding:

* ``pl_1``: 1x1 -> 256 (the FPN lateral on C3/C4/C5; on P6/P7 a 1x1 256->256);
* ``pl_2``: 3x3 256->256 (the FPN output smoothing conv);
* ``pl_head_layer``: 3x3 256->256 (a single head conv, shared by both outputs);
* ``pl_classification_out``: 3x3 256->720 (9 anchors x 80 classes);
* ``pl_regression_out``: 3x3 256->36 (9 anchors x 4 box deltas);

plus ``p6`` (3x3 stride 2 on C5, 2048->256, 7->4) and ``p7`` (3x3 stride 2 on ReLU(P6),
256->256, 4->2). ``pl_2`` and ``pl_head_layer`` have one shape, hence 27 layers / 22 unique.
DOSA's head is thus one conv deep, not torchvision's four convs per subnet; we follow DOSA.
What the layer files do not say, and we chose as in the standard FPN: the top-down path adds
each lateral to the 2x nearest-upsampled coarser lateral (elementwise, no MACs); the head
output is a sigmoid for classes. Each level gets its own head weight inputs here (RetinaNet
shares them across levels; sharing would change no loop nest, since P differs per level).
"""

from __future__ import annotations

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "batch": Param(1, "images per inference", low=1, high=64),
}

FPN_CHANNELS = 256
ANCHORS = 9
CLASSES = 80
# Backbone feature maps of a 224x224 image: (name, channels, size).
BACKBONE = (("C3", 512, 28), ("C4", 1024, 14), ("C5", 2048, 7))


def _head(b: GraphBuilder, x: str, level: int) -> None:
    h = b.relu(b.conv(x, FPN_CHANNELS, 3, pad=1, name=f"p{level}_head_layer"))
    b.output(b.sigmoid(b.conv(h, ANCHORS * CLASSES, 3, pad=1,
                              name=f"p{level}_classification_out")))
    b.output(b.conv(h, ANCHORS * 4, 3, pad=1, name=f"p{level}_regression_out"))


def build(batch: int = 1) -> onnx.ModelProto:
    b = GraphBuilder("retinanet")
    c3, c4, c5 = (b.input(name, (batch, c, s, s)) for name, c, s in BACKBONE)
    # FPN top-down: laterals (pl_1) plus the upsampled coarser lateral.
    p5_1 = b.conv(c5, FPN_CHANNELS, 1, name="p5_1")
    p4_1 = b.add(b.conv(c4, FPN_CHANNELS, 1, name="p4_1"), b.upsample(p5_1, 2))
    p3_1 = b.add(b.conv(c3, FPN_CHANNELS, 1, name="p3_1"), b.upsample(p4_1, 2))
    levels = {3: p3_1, 4: p4_1, 5: p5_1}
    for level in (3, 4, 5):
        p = b.conv(levels[level], FPN_CHANNELS, 3, pad=1, name=f"p{level}_2")
        _head(b, p, level)
    p6 = b.conv(c5, FPN_CHANNELS, 3, stride=2, pad=1, name="p6")
    p7 = b.conv(b.relu(p6), FPN_CHANNELS, 3, stride=2, pad=1, name="p7")
    for level, x in ((6, p6), (7, p7)):
        x = b.conv(x, FPN_CHANNELS, 1, name=f"p{level}_1")
        x = b.conv(x, FPN_CHANNELS, 3, pad=1, name=f"p{level}_2")
        _head(b, x, level)
    return b.build()
