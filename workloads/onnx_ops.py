"""The ONNX ops `workloads.onnx_import` knows, by what becomes of them, and hints for others.

Layer ops become `Layer`s; fusible ops (elementwise, activations) may join a layer's epilogue;
skipped ops carry no MACs worth mapping. `HINTS` say how to re-export an op outside the lists.
"""

from __future__ import annotations

# Ops that become Layers, with the input positions of (data, weight, bias); None: no such input.
CONV_OPS = {"Conv": (0, 1, 2), "ConvInteger": (0, 1, None), "QLinearConv": (0, 3, 8)}
CONV_TRANSPOSE_OPS = {"ConvTranspose": (0, 1, 2)}
GEMM_OPS = {"Gemm": (0, 1, 2)}
MATMUL_OPS = {"MatMul": (0, 1, None), "MatMulInteger": (0, 1, None),
              "QLinearMatMul": (0, 3, None)}
LAYER_OPERANDS = {**CONV_OPS, **CONV_TRANSPOSE_OPS, **GEMM_OPS, **MATMUL_OPS}
LAYER_OPS = frozenset(LAYER_OPERANDS)

ELEMENTWISE_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift",
    "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Ceil", "Cos", "Cosh",
    "DequantizeLinear", "Div", "Equal", "Exp", "Floor", "Greater", "GreaterOrEqual", "IsInf",
    "IsNaN", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not",
    "Or", "Pow", "QuantizeLinear", "Reciprocal", "Round", "Sign", "Sin", "Sinh", "Sqrt", "Sub",
    "Sum", "Tan", "Where", "Xor",
})
ACTIVATION_OPS = frozenset({
    "Celu", "Clip", "Elu", "Erf", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "LeakyRelu",
    "LogSoftmax", "Mish", "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softmax", "Softplus",
    "Softsign", "Swish", "Tanh", "ThresholdedRelu",
})
POOLING_OPS = frozenset({
    "AveragePool", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "LpPool", "MaxPool",
    "MaxRoiPool", "MaxUnpool", "RoiAlign",
})
DATA_MOVEMENT_OPS = frozenset({
    "ArgMax", "ArgMin", "Cast", "CastLike", "CenterCropPad", "Compress", "Concat", "Constant",
    "ConstantOfShape", "CumSum", "DepthToSpace", "DynamicQuantizeLinear", "Expand", "EyeLike",
    "Flatten", "Gather", "GatherElements", "GatherND", "Identity", "NonMaxSuppression",
    "NonZero", "OneHot", "Pad", "Range", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Reshape", "Resize", "ReverseSequence", "ScatterElements", "ScatterND",
    "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "TopK", "Transpose",
    "Trilu", "Unique", "Unsqueeze", "Upsample",
})
NORMALIZATION_OPS = frozenset({
    "BatchNormalization", "GroupNormalization", "InstanceNormalization", "LRN",
    "LayerNormalization", "LpNormalization", "MeanVarianceNormalization", "RMSNormalization",
})
SKIPPED_OPS = POOLING_OPS | DATA_MOVEMENT_OPS | NORMALIZATION_OPS | {"Dropout"}
FUSIBLE_OPS = ELEMENTWISE_OPS | ACTIVATION_OPS
SUPPORTED_OPS = LAYER_OPS | FUSIBLE_OPS | SKIPPED_OPS

HINTS = {
    **dict.fromkeys(("LSTM", "GRU", "RNN"),
                    "unroll the recurrence at export (a fixed number of steps, as MatMul/Gemm "
                    "and elementwise ops)"),
    **dict.fromkeys(("Loop", "If", "Scan"),
                    "export with static control flow (e.g. a traced torch.onnx.export with "
                    "fixed shapes) so the body is unrolled into plain ops"),
    "Einsum": "export the contraction as MatMul/Transpose/Reshape ops",
}
