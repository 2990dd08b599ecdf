"""mtf.layers' first-wave layers (conv1d/2d/3d, dense, dense_relu_dense,
layer_norm) and the transposed convolutions (conv2d/3d_transpose and their
``_with_blocks`` forms, kernels ``[f..., out, in]``) take Mesh TF 0.1.21's parameters, in its order, and make its
variables: the signatures and variables below were recorded from the
original; each call's values equal a TF/NumPy reference under several
layouts; and where mesh_tensorflow is installed, the original run on the
same calls and weights gives the same variables and outputs."""

import importlib.util
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from tests.layout_harness import check_layouts
from tests.mesh_tf.compat import layer_cases as LC

# The original's parameters (inspect.signature of mesh_tensorflow 0.1.21).
ORIGINAL_SIGNATURES = {
    "conv1d": ["x", "output_dim", "filter_size", "stride"],  # + **kw_args
    "conv2d": ["x", "output_dim", "filter_size", "strides", "padding",
               "filter_initializer", "variable_dtype", "name"],
    "conv3d": ["x", "output_dim", "filter_size", "strides", "padding",
               "filter_initializer", "variable_dtype", "name"],
    "conv2d_transpose": ["x", "output_dim", "filter_size", "strides",
                         "padding", "filter_initializer", "variable_dtype",
                         "name"],
    "conv3d_transpose": ["x", "output_dim", "filter_size", "strides",
                         "padding", "filter_initializer", "variable_dtype",
                         "name"],
    "dense": ["x", "new_dims", "reduced_dims", "expert_dims", "use_bias",
              "activation", "master_dtype", "slice_dtype", "variable_dtype",
              "kernel_initializer", "kernel_weights", "name"],
    "dense_relu_dense": ["x", "hidden_channels", "is_training", "dropout",
                         "dropout_broadcast_dims", "master_dtype",
                         "slice_dtype", "name"],
    "layer_norm": ["x", "dim", "epsilon", "name"],
}
# conv1d's **kw_args go to the original's conv2d.
CONV1D_KEYWORDS = ["padding", "filter_initializer", "variable_dtype", "name"]

# Output shape and variables [(name, shape)] of each case on 0.1.21.
RECORDED = {
    "conv1d_positional": ("batch:2,w:3,o:5",
                          [("conv2d/kernel", "fh:1,fw:3,c:4,o:5")]),
    "conv1d_valid": ("batch:2,w:4,o:5", [("c1/kernel", "fh:1,fw:3,c:4,o:5")]),
    "conv2d_positional": ("batch:2,h:3,w:5,o:5",
                          [("c2/kernel", "fh:3,fw:2,c:4,o:5")]),
    "conv2d_strided": ("batch:2,h:5,w:3,o:5",
                       [("conv2d/kernel", "fh:3,fw:3,c:4,o:5")]),
    "conv3d_positional": ("batch:2,d:3,h:5,w:6,o:5",
                          [("conv3d/kernel", "fd:3,fh:1,fw:2,c:4,o:5")]),
    "conv2d_transpose_default": (
        "batch:2,h:10,w:12,o:5",
        [("conv2d_transpose/kernel", "fh:2,fw:2,o:5,c:4")]),
    "conv2d_transpose_overlapping": ("batch:2,h:10,w:12,o:5",
                                     [("tt/kernel", "fh:3,fw:3,o:5,c:4")]),
    "conv3d_transpose_positional": (
        "batch:2,d:6,h:10,w:12,o:5",
        [("conv3d_transpose/kernel", "fd:2,fh:2,fw:2,o:5,c:4")]),
    "conv2d_transpose_blocks": (
        "batch:2,hb:2,wb:1,h:6,w:6,o:5",
        [("conv2d_transpose/kernel", "fh:2,fw:2,o:5,c:4")]),
    "conv3d_transpose_blocks": (
        "batch:2,db:2,hb:1,d:4,h:4,w:6,o:5",
        [("t3/kernel", "fd:2,fh:2,fw:2,o:5,c:4")]),
    "dense_positional": ("batch:2,w:6,o:5",
                         [("d/kernel", "c:4,o:5"), ("d/bias", "o:5")]),
    "dense_kernel_weights": ("batch:2,w:6,o:5",
                             [("kw", "c:4,o:5"), ("dense/bias", "o:5")]),
    "dense_variable_dtype": ("batch:2,w:6,o:5", [("vd/kernel", "c:4,o:5")]),
    "dense_bfloat16_slices": ("batch:2,w:6,o:5", [("bf/kernel", "c:4,o:5")]),
    "dense_experts": ("batch:2,e:3,w:6,o:5",
                      [("ex/kernel", "e:3,c:4,o:5"), ("ex/bias", "e:3,o:5")]),
    "dense_relu_dense_positional": ("batch:2,w:6,c:4",
                                    [("ffn/wi/kernel", "c:4,ff:7"),
                                     ("ffn/wo/kernel", "ff:7,c:4")]),
    "layer_norm_positional": ("batch:2,w:6,c:4",
                              [("ln/layer_norm/layer_norm_scale", "c:4"),
                               ("ln/layer_norm/layer_norm_bias", "c:4")]),
    "layer_norm_default_name": (
        "batch:2,w:6,c:4",
        [("layer_prepostprocess/layer_norm/layer_norm_scale", "c:4"),
         ("layer_prepostprocess/layer_norm/layer_norm_bias", "c:4")]),
}


def _shape_text(shape):
  return ",".join(f"{d.name}:{d.size}" for d in shape.dims)


def _imp(mesh, value, dims):
  return mtf.import_tf_tensor(mesh, value, mtf.Shape(dims))


def _build(case):
  return lambda mesh: LC.CASES[case](mtf, mesh, _imp, lambda v: v, tf)


def _variables(case):
  graph = mtf.Graph()
  y = _build(case)(mtf.Mesh(graph, "mesh"))
  return y, {v.name: v.initial_value_numpy() for v in graph.all_variables}


def _ln(x, eps):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)


def _per_block(xb, n, fn):
  """``fn`` of every block of ``xb`` ``[b, blocks x n, spatial x n, c]``
  on its own (windows as large as the stride need no halo)."""
  lead, tail = xb.shape[:1 + n], xb.shape[1 + n:]
  y = fn(xb.reshape((-1,) + tail))
  return y.reshape(lead + y.shape[1:])


def _transposed(x, k, s):
  """TF's SAME transposed convolution of ``x`` by ``k`` [..., out, in]."""
  n = x.ndim - 2
  out = [x.shape[0]] + [d * s for d in x.shape[1:-1]] + [k.shape[-2]]
  fn = tf.nn.conv2d_transpose if n == 2 else tf.nn.conv3d_transpose
  return fn(x, k, out, s, "SAME").numpy()


def _reference(case, w):
  """The case's output from its inputs and weights ``w`` (by name)."""
  conv = lambda x, k, s, p: tf.nn.convolution(x, k, s, p).numpy()
  relu = lambda v: np.maximum(v, 0)
  return {
      "conv1d_positional": lambda: conv(LC.X3, LC.K1[0], 2, "SAME"),
      "conv1d_valid": lambda: conv(LC.X3, LC.K1[0], 1, "VALID"),
      "conv2d_positional": lambda: conv(LC.X4, LC.K2, 1, "VALID"),
      "conv2d_strided": lambda: conv(LC.X4, LC.K2B, [1, 2], "SAME"),
      "conv3d_positional": lambda: conv(LC.X5, LC.K3, 1, "SAME"),
      "conv2d_transpose_default": lambda: _transposed(LC.X4, LC.KT2, 2),
      "conv2d_transpose_overlapping": lambda: _transposed(LC.X4, LC.KT2B, 2),
      "conv3d_transpose_positional": lambda: _transposed(LC.X5, LC.KT3, 2),
      "conv2d_transpose_blocks": lambda: _per_block(
          LC.XB, 2, lambda x: _transposed(x, LC.KT2, 2)),
      "conv3d_transpose_blocks": lambda: _per_block(
          LC.XB3, 2, lambda x: _transposed(x, LC.KT3, 2)),
      "dense_positional": lambda: relu(LC.X3 @ LC.W),
      "dense_kernel_weights": lambda: LC.X3 @ LC.W,
      "dense_variable_dtype": lambda: LC.X3 @ LC.W,
      "dense_bfloat16_slices": lambda: LC.X3 @ tf.cast(
          tf.cast(LC.W, tf.bfloat16), tf.float32).numpy(),
      "dense_experts": lambda: np.einsum("bewc,eco->bewo", LC.XE, LC.WE),
      "dense_relu_dense_positional": lambda: (
          relu(LC.X3 @ w["ffn/wi/kernel"]) @ w["ffn/wo/kernel"]),
      "layer_norm_positional": lambda: _ln(LC.X3, 1e-3),
      "layer_norm_default_name": lambda: _ln(LC.X3 * 3.0 + 1.0, 1e-6),
  }[case]()


# Dims the layouts split (a spatial dim only where the conv allows it).
SPLIT = {"conv1d_positional": ["batch:2", "c:4"],
         "conv1d_valid": ["batch:2", "c:4"],
         "conv2d_positional": ["batch:2", "c:4"],
         "conv2d_strided": ["batch:2", "c:4"],
         "conv3d_positional": ["batch:2", "c:4", "w:6"],
         # Every dim of a transposed convolution whose windows do not
         # overlap splits; overlapping ones halo-exchange a split spatial dim.
         "conv2d_transpose_default": ["batch:2", "w:6", "c:4"],
         "conv2d_transpose_overlapping": ["batch:2", "w:6", "c:4"],
         "conv3d_transpose_positional": ["batch:2", "d:3", "w:6", "c:4"],
         "conv2d_transpose_blocks": ["batch:2", "hb:2", "c:4"],
         "conv3d_transpose_blocks": ["batch:2", "db:2", "c:4"],
         "dense_relu_dense_positional": ["batch:2", "w:6", "c:4"],
         "layer_norm_positional": ["batch:2", "w:6", "c:4"]}


@pytest.mark.parametrize("name", sorted(ORIGINAL_SIGNATURES))
def test_signature_is_the_originals_with_keyword_only_extras(name):
  params = inspect.signature(getattr(mtf.layers, name)).parameters.values()
  positional = [p.name for p in params
                if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
  assert positional == ORIGINAL_SIGNATURES[name]
  assert all(p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                        inspect.Parameter.KEYWORD_ONLY) for p in params)
  if name == "conv1d":
    keywords = {p.name for p in params
                if p.kind == inspect.Parameter.KEYWORD_ONLY}
    assert set(CONV1D_KEYWORDS) <= keywords


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_variables_and_output_shape_are_the_originals(case):
  graph = mtf.Graph()
  y = _build(case)(mtf.Mesh(graph, "mesh"))
  shape, variables = RECORDED[case]
  assert _shape_text(y.shape) == shape
  assert [(v.name, _shape_text(v.shape)) for v in graph.all_variables] == (
      variables)


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_values_equal_the_reference_under_layouts(case):
  _, w = _variables(case)
  meshes = ["x:2", "rows:2;cols:2"] if case in SPLIT else []
  if "transpose" in case:  # 1, 2, 4 and 8 devices
    meshes = meshes + ["rows:2;cols:4"]
  check_layouts(_build(case), SPLIT.get(case, ["batch:2"]),
                lambda: _reference(case, w), meshes=meshes, limit=4,
                rtol=1e-4, atol=1e-4)


def test_dense_relu_dense_drops_out_only_when_training():
  def build(training):
    def fn(mesh):
      x = _imp(mesh, np.ones((2, 6, 4), np.float32),
               [mtf.Dimension("batch", 2), mtf.Dimension("w", 6),
                mtf.Dimension("c", 4)])
      h = mtf.layers.dense_relu_dense(x, mtf.Dimension("ff", 64), training,
                                      0.5, ["batch"])
      return h
    return fn
  from tests.layout_harness import run
  (trained,), _ = run(build(True), "all:1", "")
  (plain,), _ = run(build(False), "all:1", "")
  assert not np.allclose(trained, plain)
  # The mask is shared along the broadcast dim (batch): equal inputs give
  # equal rows.
  np.testing.assert_allclose(trained[0], trained[1], rtol=1e-6)


def test_dense_kernel_weights_must_have_the_kernels_dims():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.zeros(mesh, "b:2;c:4")
  bad = mtf.zeros(mesh, "c:4;p:3")
  with pytest.raises(mtf.ShapeError, match="kernel_weights .* needs the dims"):
    mtf.layers.dense(x, mtf.Dimension("o", 5), kernel_weights=bad)


def test_a_value_initializer_of_another_shape_is_named():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.zeros(mesh, "b:2;w:6;c:4")
  with pytest.raises(mtf.ShapeError, match=r"conv2d/kernel: initial value of "
                     r"shape \(3, 4, 5\)"):
    mtf.layers.conv1d(x, mtf.Dimension("o", 5), filter_initializer=LC.K1[0])


@pytest.mark.skipif(importlib.util.find_spec("mesh_tensorflow") is None,
                    reason="mesh_tensorflow 0.1.21 is not installed")
def test_the_original_makes_the_same_variables_and_outputs():
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  proc = subprocess.run(
      [sys.executable, os.path.join(os.path.dirname(__file__),
                                    "run_original_layers.py")],
      capture_output=True, text=True, timeout=300, env=env, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  original = json.loads(proc.stdout.strip().splitlines()[-1])
  # The ported example's variables are the original's: its checkpoints
  # have the same names and shapes.
  from tests.mesh_tf.compat.run_original_layers import example_variables
  assert original.pop("port_example") == example_variables(original=False)
  assert sorted(original) == sorted(RECORDED)
  for case, got in original.items():
    text = lambda dims: ",".join(f"{n}:{s}" for n, s in dims)
    assert (text(got["shape"]), [(n, text(d)) for n, d, _ in
                                 got["variables"]]) == RECORDED[case], case
    y, ours = _variables(case)
    theirs = {n: np.asarray(v) for n, _, v in got["variables"]}
    if case == "dense_relu_dense_positional":
      # Random default weights: each side equals the formula on its own.
      np.testing.assert_allclose(got["value"], _reference(case, theirs),
                                 rtol=1e-4, atol=1e-4)
      continue
    # The weights the cases give are equal (the original's slices, read
    # here, are stored in bfloat16 where the case asks for it).
    tol = 1e-2 if case == "dense_bfloat16_slices" else 1e-6
    for n, v in theirs.items():
      np.testing.assert_allclose(ours[n], v, rtol=tol, atol=tol, err_msg=case)
    from tests.layout_harness import run
    (value,), _ = run(_build(case), "all:1", "")
    np.testing.assert_allclose(value, got["value"], rtol=1e-4, atol=1e-4,
                               err_msg=case)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_a_stride_that_does_not_divide_sizes_the_output_as_tf(padding):
  # h=5 with stride 2: TF gives ceil(5 / 2) = 3 (SAME) and ceil(3 / 2) = 2
  # (VALID); 0.1.21 declared 2 and 1.
  def build(mesh):
    x = _imp(mesh, LC.X4, [mtf.Dimension("batch", 2), mtf.Dimension("h", 5),
                           mtf.Dimension("w", 6), mtf.Dimension("c", 4)])
    return mtf.layers.conv2d(x, mtf.Dimension("o", 5), (3, 3), (2, 2),
                             padding, LC.K2B)
  ref = tf.nn.convolution(LC.X4, LC.K2B, 2, padding).numpy()
  check_layouts(build, ["batch:2", "c:4"], lambda: ref, meshes=["x:2"],
                rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,window", [(2, (3, 2)), (3, (2, 2, 2))])
def test_transposed_kernels_default_to_glorot_uniform_as_the_original(
    n, window):
  # TF's default for a [window..., out, in] kernel: uniform in
  # +-sqrt(6 / (prod(window) * (in + out))), the original's too.
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.zeros(mesh, "b:2;d:3;h:4;w:4;c:16"[(4 if n == 2 else 0):])
  layer = mtf.layers.conv2d_transpose if n == 2 else (
      mtf.layers.conv3d_transpose)
  layer(x, mtf.Dimension("o", 24), window, 2)
  (kernel,) = graph.all_variables
  assert kernel.name == f"conv{n}d_transpose/kernel"
  assert kernel.shape.dimension_names[-2:] == ["o", "c"]
  w = kernel.initial_value_numpy()
  limit = np.sqrt(6.0 / (np.prod(window) * (16 + 24)))
  assert np.abs(w).max() <= limit
  np.testing.assert_allclose(w.std(), limit / np.sqrt(3), rtol=0.1)


def test_a_dim_named_like_a_transposed_window_dim_is_named():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.zeros(mesh, "b:2;fh:3;w:4;c:5")
  with pytest.raises(mtf.ShapeError, match="has a dim named 'fh'"):
    mtf.layers.conv2d_transpose(x, mtf.Dimension("o", 5))
  with pytest.raises(mtf.ShapeError, match="output dim c=5 is already"):
    mtf.layers.conv2d_transpose(mtf.zeros(mesh, "b:2;h:3;w:4;c:5"),
                                mtf.Dimension("c", 5))


@pytest.mark.parametrize("kernel,window", [(LC.KT2, (2, 2)),
                                           (LC.KT2B, (3, 3))])
def test_the_layers_kernel_is_the_ops_filter(kernel, window):
  # One layout end to end: the layer's [fh, fw, out, in] kernel is the
  # filter of the ops-level conv2d_transpose (Conv2dTransposeOperation).
  def build(mesh):
    x = _imp(mesh, LC.X4, [mtf.Dimension("batch", 2), mtf.Dimension("h", 5),
                           mtf.Dimension("w", 6), mtf.Dimension("c", 4)])
    layer = mtf.layers.conv2d_transpose(x, mtf.Dimension("o", 5), window,
                                        2, "SAME", kernel)
    (w,) = mesh.graph.all_variables
    return [layer, mtf.conv2d_transpose(x, w.outputs[0], [1, 2, 2, 1],
                                        "SAME")]
  from tests.layout_harness import run
  (layer, op), _ = run(build, "all:1", "")
  np.testing.assert_allclose(layer, op, rtol=1e-4, atol=1e-4)
