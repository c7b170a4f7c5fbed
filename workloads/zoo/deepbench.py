"""DeepBench's convolution problems for its OCR and face-recognition applications.

Shapes: baidu-research/DeepBench ``code/kernels/conv_problems.h`` (commit e54214f), whose
tuples are ``(w, h, c, n, k, filter_w, filter_h, pad_w, pad_h, wstride, hstride)``. The same
nine shapes appear in its ``training_set`` (OCR with n=16, face with n=8) and its
``inference_server_set`` (n=1); ``split`` picks which.

Which entries belong to which application is not in the header: DeepBench keeps that column
in ``DeepBenchKernels_train.xlsx`` / ``_inference.xlsx`` (binary; not readable here). The
grouping used here is:

* OCR: the four 3x3 problems 480x48x1->16, 240x24x16->32, 120x12x32->64, 60x6x64->128 (the
  header's entries 9-12, a VGG-like stack on a 48-pixel-high text line);
* face: the five 3x3 problems 108x108x3->64 (stride 2), 54x54x64->64, 27x27x128->128,
  14x14x128->256, 7x7x256->512 (entries 13-17).

Evidence for that grouping: DeepBench's README "Convolution Results" table labels
``W = 54, H = 54, C = 64, N = 8, R = 3, S = 3, 64 filters`` as "Face Recognition"; the
benchmark list of the ISAAC GPU kernel generator comments the same entries ``//OCR`` and
``//Face Recognition [1]``; and a PyTorch conv benchmark script tags 480x48x1->16 "# OCR" and
108x108x3->64 "# Face Recognition" (both files found in a public code index; their repositories
could not be identified, so they corroborate rather than source the grouping). The problems
ISAAC calls "Face Recognition [2]" (224x224 7x7, 28x28 5x5 ...) are GoogLeNet shapes that
DeepBench's README labels "Computer Vision", so they are not included.

Each problem is an independent layer (count 1), fed by its own input.
"""

from __future__ import annotations

import onnx

from workloads.zoo.builder import GraphBuilder, Param

PARAMS = {
    "set": Param("ocr", "which application's problems", choices=("ocr", "face")),
    "split": Param("inference", "inference: n=1 (inference_server_set); train: n=16 (OCR) "
                   "or n=8 (face) (training_set)", choices=("inference", "train")),
}

# (w, h, c, k, filter_w, filter_h, pad_w, pad_h, wstride, hstride), conv_problems.h order.
PROBLEMS = {
    "ocr": ((480, 48, 1, 16, 3, 3, 1, 1, 1, 1),
            (240, 24, 16, 32, 3, 3, 1, 1, 1, 1),
            (120, 12, 32, 64, 3, 3, 1, 1, 1, 1),
            (60, 6, 64, 128, 3, 3, 1, 1, 1, 1)),
    "face": ((108, 108, 3, 64, 3, 3, 1, 1, 2, 2),
             (54, 54, 64, 64, 3, 3, 1, 1, 1, 1),
             (27, 27, 128, 128, 3, 3, 1, 1, 1, 1),
             (14, 14, 128, 256, 3, 3, 1, 1, 1, 1),
             (7, 7, 256, 512, 3, 3, 1, 1, 1, 1)),
}
# Batch n of these entries in training_set; inference_server_set has n=1 for all of them.
TRAIN_BATCH = {"ocr": 16, "face": 8}


def build(set: str = "ocr", split: str = "inference") -> onnx.ModelProto:  # noqa: A002
    n = TRAIN_BATCH[set] if split == "train" else 1
    b = GraphBuilder(f"deepbench_{set}")
    for i, (w, h, c, k, fw, fh, pw, ph, sw, sh) in enumerate(PROBLEMS[set]):
        name = f"{set}{i}_{w}x{h}x{c}_k{k}"
        x = b.input(f"{name}.input", (n, c, h, w))
        b.output(b.conv(x, k, (fh, fw), stride=(sh, sw), pad=(ph, pw), name=name))
    return b.build()
