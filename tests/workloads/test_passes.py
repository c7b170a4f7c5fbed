"""Tests of the graph passes: each pass on its own, their numbers, and the pipeline."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from workloads import passes


def checked(result: passes.PassResult) -> passes.PassResult:
    """Every pass must leave a model the ONNX checker accepts."""
    onnx.checker.check_model(result.model)
    assert result.removed == sum(result.by_op.values())
    return result


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def run(model: onnx.ModelProto, **feeds: np.ndarray) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


def bn_stats(g, channels: int, prefix: str = "bn", rng=None):
    """Random but sane BN statistics as initializers: scale, B, mean, var (var > 0)."""
    rng = rng or np.random.default_rng(1)
    values = (rng.uniform(0.5, 2.0, channels), rng.standard_normal(channels),
              rng.standard_normal(channels), rng.uniform(0.1, 3.0, channels))
    return [g.const(f"{prefix}_{k}", v.astype(np.float32))
            for k, v in zip(("scale", "B", "mean", "var"), values)]


# ------------------------------------------------------------------------------ identities
def test_identity_is_removed_and_its_readers_read_its_input(builder):
    g = builder()
    x = g.input("x", [1, 4])
    t = g.node("Identity", [x], "t")
    g.node("Relu", [t], "y")
    g.output("y", 2)
    model = g.model()
    before = model.SerializeToString()
    result = checked(passes.eliminate_identities(model))
    assert (result.removed, result.by_op) == (1, {"Identity": 1})
    assert ops(result.model) == ["Relu"] and list(result.model.graph.node[0].input) == ["x"]
    assert model.SerializeToString() == before  # pure: the argument is untouched


def test_identity_into_a_graph_output_renames_its_producer(builder):
    g = builder()
    x = g.input("x", [1, 4])
    t = g.node("Relu", [x], "t")
    g.node("Identity", [t], "y")
    g.output("y", 2)
    result = checked(passes.eliminate_identities(g.model()))
    assert result.removed == 1
    assert [list(n.output) for n in result.model.graph.node] == [["y"]]
    assert [o.name for o in result.model.graph.output] == ["y"]


def test_identity_chain_into_a_graph_output_collapses(builder):
    g = builder()
    a = g.node("Relu", [g.input("x", [1, 4])])
    g.node("Identity", [g.node("Identity", [a])], "y")
    g.node("Neg", [a], "z")  # another reader of the renamed value
    g.output("y", 2)
    g.output("z", 2)
    result = checked(passes.eliminate_identities(g.model()))
    assert result.by_op == {"Identity": 2}
    assert [(n.op_type, list(n.input), list(n.output)) for n in result.model.graph.node] == [
        ("Relu", ["x"], ["y"]), ("Neg", ["y"], ["z"])]


def test_identity_from_graph_input_to_graph_output_stays(builder):
    g = builder()
    g.node("Identity", [g.input("x", [1, 4])], "y")
    g.output("y", 2)
    assert checked(passes.eliminate_identities(g.model())).removed == 0


def test_inference_dropout_is_removed_but_training_or_masked_dropout_stays(builder):
    g = builder(opset=13)
    x = g.input("x", [1, 4])
    a = g.node("Dropout", [x], "a", ratio=0.3)  # inference: an identity
    on = g.const("on", np.array(True))
    b = g.node("Dropout", [a, g.const("r", np.array(0.5, np.float32)), on], "b")  # training
    c, mask = g.node("Dropout", [b], ["c", "mask"])  # its mask is read below
    g.node("Add", [c, g.node("Cast", [mask], to=TensorProto.FLOAT)], "y")
    g.output("y", 2)
    result = checked(passes.eliminate_identities(g.model()))
    assert result.by_op == {"Dropout": 1}
    assert ops(result.model) == ["Dropout", "Dropout", "Cast", "Add"]
    assert result.model.graph.node[0].input[0] == "x"


# ------------------------------------------------------------------------------ dead code
def test_dead_branch_and_its_initializers_are_dropped(builder):
    g = builder()
    x = g.input("x", [1, 4])
    g.node("Relu", [x], "y")
    dead = g.node("Mul", [x, g.const("k", np.ones(4, np.float32))])
    g.node("Tanh", [g.node("Sigmoid", [dead])])
    g.input("unused", [3])
    g.output("y", 2)
    result = checked(passes.eliminate_dead_code(g.model()))
    assert result.by_op == {"Mul": 1, "Sigmoid": 1, "Tanh": 1}
    assert ops(result.model) == ["Relu"]
    assert not result.model.graph.initializer
    assert [i.name for i in result.model.graph.input] == ["x", "unused"]  # interface kept


def test_a_value_read_only_inside_a_subgraph_is_live(builder):
    g = builder()
    x = g.input("x", [1, 4])
    g.node("Relu", [x], "t")
    cond = g.node("ReduceMax", [g.node("Cast", [x], to=TensorProto.BOOL)], keepdims=0)
    out = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4])
    then = helper.make_graph([helper.make_node("Neg", ["t"], ["r"])], "then", [], [out])
    orelse = helper.make_graph([helper.make_node("Abs", ["t"], ["r"])], "else", [], [out])
    g.node("If", [cond], "y", then_branch=then, else_branch=orelse)
    g.output("y", 2)
    result = checked(passes.eliminate_dead_code(g.model()))
    assert result.removed == 0 and "Relu" in ops(result.model)


# ------------------------------------------------------------------------------ CSE
def test_duplicated_branch_is_merged_to_a_fixed_point(builder):
    g = builder()
    x = g.input("x", [1, 3, 8, 8])
    w = g.weight("w", [4, 3, 3, 3])
    a = g.node("Relu", [g.node("Conv", [x, w], pads=[1, 1, 1, 1])])
    b = g.node("Relu", [g.node("Conv", [x, w], pads=[1, 1, 1, 1])])
    g.node("Add", [a, b], "y")
    g.output("y")
    model = g.model()
    result = checked(passes.eliminate_common_subexpressions(model))
    assert (result.removed, result.by_op) == (2, {"Conv": 1, "Relu": 1})
    add = result.model.graph.node[-1]
    assert add.input[0] == add.input[1] == a
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(run(result.model, **feeds)[0], run(model, **feeds)[0])


def test_cse_renames_reads_inside_subgraphs(builder):
    g = builder()
    x = g.input("x", [1, 4])
    g.node("Relu", [x], "t1")
    g.node("Relu", [x], "t2")  # merged into t1, but the If's branch reads it
    cond = g.node("ReduceMax", [g.node("Cast", [x], to=TensorProto.BOOL)], keepdims=0)
    out = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4])
    then = helper.make_graph([helper.make_node("Neg", ["t2"], ["r"])], "then", [], [out])
    orelse = helper.make_graph([helper.make_node("Abs", ["t1"], ["r"])], "else", [], [out])
    g.node("If", [cond], "y", then_branch=then, else_branch=orelse)
    g.output("y", 2)
    result = checked(passes.eliminate_common_subexpressions(g.model()))
    assert result.by_op == {"Relu": 1}
    node = result.model.graph.node[-1]
    branch = next(a.g for a in node.attribute if a.name == "then_branch")
    assert list(branch.node[0].input) == ["t1"]


def test_cse_keeps_nodes_that_differ_or_are_random(builder):
    g = builder()
    x = g.input("x", [1, 3, 8, 8])
    w = g.weight("w", [4, 3, 3, 3])
    a = g.node("Conv", [x, w], pads=[1, 1, 1, 1])
    b = g.node("Conv", [x, w], pads=[1, 1, 1, 1], strides=[1, 1])  # other attributes
    r1 = g.node("RandomNormalLike", [a], seed=1.0)
    r2 = g.node("RandomNormalLike", [a], seed=1.0)
    g.node("Sum", [a, b, r1, r2], "y")
    g.output("y")
    assert checked(passes.eliminate_common_subexpressions(g.model())).removed == 0


def test_cse_merges_constants_but_keeps_duplicates_that_are_graph_outputs(builder):
    g = builder()
    x = g.input("x", [2, 6])
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [3, 4])
    s1 = g.node("Constant", [], value=shape)
    s2 = g.node("Constant", [], value=shape)
    g.node("Reshape", [x, s1], "y1")
    g.node("Reshape", [x, s2], "y2")  # same as y1 once the constants merge, but an output
    g.output("y1", 2)
    g.output("y2", 2)
    result = checked(passes.eliminate_common_subexpressions(g.model()))
    assert result.by_op == {"Constant": 1}
    assert ops(result.model) == ["Constant", "Reshape", "Reshape"]


def test_cse_merges_constants_whose_tensors_differ_only_in_name(builder):
    g = builder()
    x = g.input("x", [2, 6])
    s1 = g.node("Constant", [], value=helper.make_tensor("first", TensorProto.INT64, [2], [3, 4]))
    s2 = g.node("Constant", [], value=helper.make_tensor("second", TensorProto.INT64, [2], [3, 4]))
    s3 = g.node("Constant", [], value=helper.make_tensor("third", TensorProto.INT64, [2], [4, 3]))
    y = g.node("Add", [g.node("Reshape", [x, s1]), g.node("Reshape", [x, s2])])
    g.node("Add", [g.node("Transpose", [y], perm=[1, 0]), g.node("Reshape", [x, s3])], "z")
    g.output("z", 2)
    result = checked(passes.eliminate_common_subexpressions(g.model()))
    assert result.by_op == {"Constant": 1, "Reshape": 1}


# ------------------------------------------------------------------------------ BN folding
def conv2d_numpy(x, w, b, stride: int, pad: int, group: int) -> np.ndarray:
    """A direct grouped 2-D convolution, the reference for the folded numbers."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, _, _ = x.shape
    k, cg, r, s = w.shape
    win = sliding_window_view(x, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]
    p, q = win.shape[2:4]
    win = win.reshape(n, group, cg, p, q, r, s)
    y = np.einsum("ngcpqrs,gkcrs->ngkpq", win, w.reshape(group, k // group, cg, r, s))
    return y.reshape(n, k, p, q) + b[None, :, None, None]


@pytest.mark.parametrize("group,with_bias,stride", [(1, False, 1), (1, True, 2), (2, True, 1)])
def test_folded_conv_numbers_reproduce_conv_then_bn(builder, group, with_bias, stride):
    rng = np.random.default_rng(group + 2 * with_bias)
    x = rng.standard_normal((2, 4, 7, 7))
    w = rng.standard_normal((6, 4 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32) if with_bias else np.zeros(6, np.float32)
    g = builder()
    inputs = [g.input("x", [2, 4, 7, 7]), g.weight("w", w.shape, w)]
    inputs += [g.const("b", b)] if with_bias else []
    conv = g.node("Conv", inputs, group=group, pads=[1] * 4, strides=[stride] * 2)
    stats = bn_stats(g, 6, rng=rng)
    g.node("BatchNormalization", [conv, *stats], "y", epsilon=1e-3)
    g.output("y")
    result = checked(passes.fold_batchnorm(g.model()))
    assert (result.removed, result.by_op, ops(result.model)) == (1, {"Conv": 1}, ["Conv"])

    folded = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    node = result.model.graph.node[0]
    assert len(node.input) == 3 and node.output[0] == "y"
    scale, shift, mean, var = (numpy_helper.to_array(t).astype(np.float64)
                               for t in g.initializers[-4:])
    reference = conv2d_numpy(x, w.astype(np.float64), b.astype(np.float64), stride, 1, group)
    reference = ((reference - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3)
                 * scale[:, None, None] + shift[:, None, None])
    got = conv2d_numpy(x, folded[node.input[1]].astype(np.float64),
                       folded[node.input[2]].astype(np.float64), stride, 1, group)
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
    assert set(folded) == {node.input[1], node.input[2]}  # the old weights and stats are gone


@pytest.mark.parametrize("case", ["conv_transpose", "gemm", "gemm_no_c", "matmul"])
def test_folded_model_computes_what_the_original_did(builder, case):
    rng = np.random.default_rng(7)
    g = builder(seed=3)
    if case == "conv_transpose":
        x = g.input("x", [1, 4, 5, 5])
        # group=1: onnx.reference's ConvTranspose mis-slices grouped weights (see the test
        # below for the grouped numbers).
        out = g.node("ConvTranspose", [x, g.weight("w", [4, 3, 3, 3]), g.weight("b", [3])],
                     strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
        channels, feeds = 3, {"x": rng.standard_normal((1, 4, 5, 5)).astype(np.float32)}
    elif case.startswith("gemm"):
        x = g.input("x", [3, 5])
        extra = [] if case == "gemm_no_c" else [g.weight("c", [3, 4])]
        out = g.node("Gemm", [x, g.weight("w", [4, 5]), *extra], transB=1, alpha=0.5,
                     beta=2.0)
        channels, feeds = 4, {"x": rng.standard_normal((3, 5)).astype(np.float32)}
    else:
        x = g.input("x", [3, 5])
        out = g.node("MatMul", [x, g.weight("w", [5, 4])])
        channels, feeds = 4, {"x": rng.standard_normal((3, 5)).astype(np.float32)}
    g.node("BatchNormalization", [out, *bn_stats(g, channels, rng=rng)], "y")
    g.output("y", 4 if case == "conv_transpose" else 2)
    model = g.model()
    result = checked(passes.fold_batchnorm(model))
    expected_op = {"conv_transpose": "ConvTranspose", "matmul": "MatMul"}.get(case, "Gemm")
    assert result.by_op == {expected_op: 1}
    assert "BatchNormalization" not in ops(result.model)
    np.testing.assert_allclose(run(result.model, **feeds)[0], run(model, **feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_grouped_conv_transpose_scales_each_output_channel(builder):
    """ConvTranspose weights are (C_in, K/groups, ...): output channel g*K/groups + j of group
    g is column j of the rows of that group, which is what must be scaled."""
    g = builder()
    x = g.input("x", [1, 6, 4, 4])
    w = np.random.default_rng(0).standard_normal((6, 2, 3, 3)).astype(np.float32)
    out = g.node("ConvTranspose", [x, g.weight("w", w.shape, w)], group=3)
    scale = np.arange(1, 7, dtype=np.float32)
    stats = [g.const("scale", scale), g.const("B", np.zeros(6, np.float32)),
             g.const("mean", np.zeros(6, np.float32)), g.const("var", np.ones(6, np.float32))]
    g.node("BatchNormalization", [out, *stats], "y", epsilon=0.0)
    g.output("y")
    result = checked(passes.fold_batchnorm(g.model()))
    node = result.model.graph.node[0]
    folded = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    expected = w.copy()
    for c in range(6):
        for j in range(2):
            expected[c, j] *= scale[(c // 2) * 2 + j]
    np.testing.assert_allclose(folded[node.input[1]], expected, rtol=1e-6)


def test_structural_fold_when_weights_are_graph_inputs(builder):
    g = builder(weights="inputs")
    x = g.input("x", [1, 3, 8, 8])
    conv = g.node("Conv", [x, g.weight("w", [16, 3, 3, 3])], pads=[1, 1, 1, 1])
    stats = [g.weight(f"bn_{k}", [16]) for k in ("scale", "B", "mean", "var")]
    g.node("BatchNormalization", [conv, *stats], "y")
    g.output("y")
    result = checked(passes.fold_batchnorm(g.model()))
    assert result.by_op == {"Conv": 1} and ops(result.model) == ["Conv"]
    node = result.model.graph.node[0]
    assert list(node.input[:2]) == ["x", "w"] and list(node.output) == ["y"]
    bias = next(i for i in result.model.graph.input if i.name == node.input[2])
    assert [d.dim_value for d in bias.type.tensor_type.shape.dim] == [16]
    assert not result.model.graph.initializer  # nothing allocated


def test_bn_does_not_fold_when_it_cannot(builder):
    g = builder()
    x = g.input("x", [1, 3, 8, 8])
    w = g.weight("w", [4, 3, 1, 1])
    # (a) the conv output has a second reader
    shared = g.node("Conv", [x, w])
    a = g.node("BatchNormalization", [shared, *bn_stats(g, 4, "a")])
    a = g.node("Add", [a, shared])
    # (b) constant weights but BN statistics from graph inputs: numbers cannot be folded
    stats = [g.input(f"s{k}", [4]) for k in range(4)]
    b = g.node("BatchNormalization", [g.node("Conv", [x, w]), *stats])
    # (c) training mode
    c = g.node("BatchNormalization", [g.node("Conv", [x, w]), *bn_stats(g, 4, "c")],
               training_mode=1)
    # (d) MatMul whose output is 3-D: axis 1 is not its output channel
    m = g.node("MatMul", [g.input("m", [2, 4, 5]), g.weight("mw", [5, 4])])
    d = g.node("BatchNormalization", [m, *bn_stats(g, 4, "d")])
    g.node("Sum", [a, b, c], "y")
    g.output("y")
    g.node("Identity", [d], "z")
    g.output("z", 3)
    model = g.model()
    model = onnx.shape_inference.infer_shapes(model)  # the MatMul rule needs ranks
    assert checked(passes.fold_batchnorm(model)).removed == 0


def test_chained_bns_and_constant_node_statistics_fold_and_leave_no_dead_code(builder):
    g = builder()
    x = g.input("x", [1, 2, 4, 4])
    conv = g.node("Conv", [x, g.weight("w", [3, 2, 1, 1])])
    consts = [g.node("Constant", [], value=numpy_helper.from_array(
        np.full(3, v, np.float32), f"k{v}")) for v in (2.0, 0.5, 0.25, 4.0)]
    first = g.node("BatchNormalization", [conv, *consts])
    g.node("BatchNormalization", [first, *bn_stats(g, 3)], "y")
    g.output("y")
    model = g.model()
    folded, removed, by_op = passes.run_passes(model)
    onnx.checker.check_model(folded)
    assert ops(folded) == ["Conv"] and by_op == {"Conv": 2}
    assert removed == {"eliminate_identities": 0, "eliminate_dead_code": 4,
                       "eliminate_common_subexpressions": 0, "fold_batchnorm": 2}
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)}
    np.testing.assert_allclose(run(folded, **feeds)[0], run(model, **feeds)[0], rtol=1e-5,
                               atol=1e-5)


def test_fold_reads_external_data_from_base_dir(builder, tmp_path):
    g = builder()
    x = g.input("x", [1, 2, 4, 4])
    conv = g.node("Conv", [x, g.weight("w", [3, 2, 3, 3])], pads=[1, 1, 1, 1])
    g.node("BatchNormalization", [conv, *bn_stats(g, 3)], "y")
    g.output("y")
    model = g.model()
    path = tmp_path / "ext.onnx"
    stored = onnx.ModelProto()
    stored.CopyFrom(model)  # onnx.save moves the tensors of what it saves out to the file
    onnx.save(stored, path, save_as_external_data=True, location="ext.bin", size_threshold=0)
    lazy = onnx.load(path, load_external_data=False)  # tensors have no data yet
    result = passes.fold_batchnorm(lazy, base_dir=str(tmp_path))
    assert result.by_op == {"Conv": 1}
    onnx.external_data_helper.load_external_data_for_model(result.model, str(tmp_path))
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)}
    np.testing.assert_allclose(run(result.model, **feeds)[0], run(model, **feeds)[0],
                               rtol=1e-5, atol=1e-5)


# `builder` is a class, not a stateful fixture, so sharing it across examples is safe.
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(1, 3), groups=st.sampled_from([1, 2]), channels=st.integers(1, 3),
       eps=st.sampled_from([1e-5, 1e-2]), seed=st.integers(0, 2**16))
def test_conv_fold_is_exact_for_random_shapes(builder, k, groups, channels, eps, seed):
    """Property: conv+BN and the folded conv agree, whatever the kernel, groups and stats."""
    rng = np.random.default_rng(seed)
    c_in, c_out = 2 * groups, channels * groups
    g = builder(seed=seed)
    x = g.input("x", [1, c_in, 5, 5])
    conv = g.node("Conv", [x, g.weight("w", [c_out, c_in // groups, k, k])], group=groups)
    g.node("BatchNormalization", [conv, *bn_stats(g, c_out, rng=rng)], "y", epsilon=eps)
    g.output("y")
    model = g.model()
    result = passes.fold_batchnorm(model)
    assert result.removed == 1
    feeds = {"x": rng.standard_normal((1, c_in, 5, 5)).astype(np.float32)}
    np.testing.assert_allclose(run(result.model, **feeds)[0], run(model, **feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_run_passes_reports_every_pass_in_pipeline_order(builder):
    g = builder()
    x = g.input("x", [1, 4])
    t = g.node("Identity", [x])
    a, b = g.node("Relu", [t]), g.node("Relu", [t])
    g.node("Sigmoid", [x])  # dead
    g.node("Add", [a, b], "y")
    g.output("y", 2)
    model, removed, folded = passes.run_passes(g.model())
    assert list(removed) == ["eliminate_identities", "eliminate_dead_code",
                             "eliminate_common_subexpressions", "fold_batchnorm"]
    assert list(removed.values()) == [1, 1, 1, 0] and folded == {}
    assert ops(model) == ["Relu", "Add"]
