"""Convolution and pooling ops: every layout (spatial dims split with halo
exchange) against TensorFlow's single-device kernels, and gradients
against ``tf.GradientTape``."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf import layers as L
from mesh_tf.gradients import gradients
from mesh_tf.ops import conv as C
from mesh_tf.ops import pool as P
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(0)
B, CI, CO = (mtf.Dimension("batch", 2), mtf.Dimension("ci", 4),
             mtf.Dimension("co", 4))
D, H, W = (mtf.Dimension("d", 4), mtf.Dimension("h", 8),
           mtf.Dimension("w", 4))


def _f(*shape):
  return RNG.randn(*shape).astype(np.float32)


def _fdims(*sizes):
  return [mtf.Dimension(f"f{i}", k) for i, k in enumerate(sizes)]


X2, W2 = _f(2, 8, 4, 4), _f(3, 2, 4, 4)   # 3x2 window: asymmetric SAME pads


def build_conv2d(mesh):
  x = mtf.import_tf_tensor(mesh, X2, mtf.Shape([B, H, W, CI]))
  w = mtf.import_tf_tensor(mesh, W2, mtf.Shape(_fdims(3, 2) + [CI, CO]))
  return C.conv2d(x, w)


def test_conv2d_same_matches_tf_under_every_layout():
  ref = lambda: tf.nn.conv2d(X2, W2, 1, "SAME").numpy()
  assert check_layouts(build_conv2d, [B, H, W, CI, CO], ref, limit=4,
                       rtol=1e-4, atol=1e-4) >= 15


def test_conv1d_and_conv3d_match_tf_with_split_spatial_dims():
  x1, w1 = _f(2, 8, 4), _f(5, 4, 4)
  x3, w3 = _f(2, 4, 8, 4, 4), _f(3, 3, 3, 4, 4)

  def build(mesh):
    a = C.conv1d(mtf.import_tf_tensor(mesh, x1, mtf.Shape([B, H, CI])),
                 mtf.import_tf_tensor(mesh, w1, mtf.Shape(_fdims(5)
                                                          + [CI, CO])))
    b = C.conv3d(mtf.import_tf_tensor(mesh, x3, mtf.Shape([B, D, H, W, CI])),
                 mtf.import_tf_tensor(mesh, w3, mtf.Shape(_fdims(3, 3, 3)
                                                          + [CI, CO])))
    return [a, b]

  def ref():
    return [tf.nn.conv1d(x1, w1, 1, "SAME").numpy(),
            tf.nn.conv3d(x3, w3, [1] * 5, "SAME").numpy()]
  check_layouts(build, [D, H, W, CO], ref, limit=3, rtol=1e-4, atol=1e-4,
                meshes=["x:2", "rows:2;cols:2", "x:4"])


def test_split_spatial_dims_exchange_halos_with_two_receives_each():
  _, trace = run(build_conv2d, "rows:2;cols:2", "h:rows;w:cols")
  recv = [(c.kind, c.mesh_axes, c.bytes_per_device) for c in
          trace.collectives]
  # Window 3 on h: one row from each side (2x1x2x4 floats); window 2 on w:
  # pads (0, 1), one column from the right of the h-extended block (2x6x1x4).
  assert recv == [("receive", ("rows",), 64), ("receive", ("rows",), 64),
                  ("receive", ("cols",), 192)]


def test_split_in_channels_leave_one_lazy_allreduce():
  _, trace = run(build_conv2d, "x:4", "ci:x")
  assert [c.kind for c in trace.collectives] == ["allreduce"]


def test_valid_and_strided_convs_match_tf_and_do_not_split_their_dims():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X2, mtf.Shape([B, H, W, CI]))
    w = mtf.import_tf_tensor(mesh, W2, mtf.Shape(_fdims(3, 2) + [CI, CO]))
    return [C.conv2d(x, w, padding="VALID"), C.conv2d(x, w, strides=2)]
  ref = lambda: [tf.nn.conv2d(X2, W2, 1, "VALID").numpy(),
                 tf.nn.conv2d(X2, W2, 2, "SAME").numpy()]
  check_layouts(build, [B, CO], ref, limit=3, rtol=1e-4, atol=1e-4,
                meshes=["x:2"])
  with pytest.raises(mtf.UnsplittableDimError, match="cannot split dim h=8"):
    run(build, "x:2", "h:x")


def test_halo_larger_than_block_is_a_layout_error():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X2, mtf.Shape([B, H, W, CI]))
    w = mtf.import_tf_tensor(mesh, _f(5, 1, 4, 4),
                             mtf.Shape(_fdims(5, 1) + [CI, CO]))
    return C.conv2d(x, w)
  with pytest.raises(mtf.LayoutError, match=r"blocks of 1.*halo 2"):
    run(build, "x:8", "h:x")


def test_filter_must_have_the_channel_and_spatial_dims():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.import_tf_tensor(mesh, X2, mtf.Shape([B, H, W, CI]))
  w = mtf.import_tf_tensor(mesh, _f(3, 4, 4), mtf.Shape(_fdims(3) + [CI, CO]))
  with pytest.raises(mtf.ShapeError, match="needs 2 spatial dims"):
    C.conv2d(x, w)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_matches_tf_and_needs_no_communication(kind):
  x3 = _f(2, 4, 8, 4, 4)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, x3, mtf.Shape([B, D, H, W, CI]))
    fn = P.max_pool3d if kind == "max" else P.avg_pool3d
    y2 = (P.max_pool2d if kind == "max" else P.avg_pool2d)(
        x, spatial_dims=["h", "w"])
    return [fn(x), y2]

  def ref():
    pool = tf.nn.max_pool if kind == "max" else tf.nn.avg_pool
    r2 = pool(x3.reshape(8, 8, 4, 4), 2, 2, "VALID").numpy()
    return [pool(x3, 2, 2, "VALID").numpy(), r2.reshape(2, 4, 4, 2, 4)]
  check_layouts(build, [D, H, CI], ref, limit=3,
                meshes=["x:2", "rows:2;cols:2"])
  _, trace = run(build, "rows:2;cols:2", "d:rows;h:cols")
  assert trace.collectives == []


def test_pooling_needs_spatial_dims_that_are_multiples_of_the_window():
  graph = mtf.Graph()
  x = mtf.import_tf_tensor(mtf.Mesh(graph, "mesh"), _f(2, 8, 4, 4),
                           mtf.Shape([B, H, W, CI]))
  with pytest.raises(mtf.ShapeError, match="h=8 of .* not a multiple of the "
                     "pooling window 3"):
    P.max_pool2d(x, ksize=3)


# --- gradients -----------------------------------------------------------------
R2 = _f(2, 8, 4, 4)


def test_conv_gradients_match_gradient_tape_with_split_spatial_dims():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X2, mtf.Shape([B, H, W, CI]))
    w = mtf.import_tf_tensor(mesh, W2, mtf.Shape(_fdims(3, 2) + [CI, CO]))
    r = mtf.import_tf_tensor(mesh, R2, mtf.Shape([B, H, W, CO]))
    loss = mtf.reduce_sum(C.conv2d(x, w) * r)
    return gradients([loss], [x, w])

  def ref():
    x, w = tf.constant(X2), tf.constant(W2)
    with tf.GradientTape() as tape:
      tape.watch([x, w])
      loss = tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME") * R2)
    return [g.numpy() for g in tape.gradient(loss, [x, w])]
  check_layouts(build, [B, H, W, CI, CO], ref, limit=3, rtol=1e-4,
                atol=1e-4, meshes=["x:2", "rows:2;cols:4"])


def test_conv1d_and_pool_gradients_match_gradient_tape():
  x1, w1 = _f(2, 8, 4), _f(4, 4, 4)
  r1 = _f(2, 4, 4)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, x1, mtf.Shape([B, H, CI]))
    w = mtf.import_tf_tensor(mesh, w1, mtf.Shape(_fdims(4) + [CI, CO]))
    r = mtf.import_tf_tensor(mesh, r1, mtf.Shape([B, mtf.Dimension("h", 4), CO]))
    y = P.max_pool1d(C.conv1d(x, w)) + P.avg_pool1d(C.conv1d(x, w * 0.5))
    return gradients([mtf.reduce_sum(y * r)], [x, w])

  def ref():
    x, w = tf.constant(x1), tf.constant(w1)
    with tf.GradientTape() as tape:
      tape.watch([x, w])
      y = (tf.nn.max_pool1d(tf.nn.conv1d(x, w, 1, "SAME"), 2, 2, "VALID")
           + tf.nn.avg_pool1d(tf.nn.conv1d(x, w * 0.5, 1, "SAME"), 2, 2,
                              "VALID"))
      loss = tf.reduce_sum(y * r1)
    return [g.numpy() for g in tape.gradient(loss, [x, w])]
  check_layouts(build, [B, H, CO], ref, limit=3, rtol=1e-4, atol=1e-4,
                meshes=["x:2", "rows:2;cols:2"])


def test_strided_conv_gradient_is_a_clear_error():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.import_tf_tensor(mesh, X2, mtf.Shape([B, H, W, CI]))
  w = mtf.import_tf_tensor(mesh, W2, mtf.Shape(_fdims(3, 2) + [CI, CO]))
  y = C.conv2d(x, w, strides=2)
  with pytest.raises(mtf.MtfError, match="strided convolutions"):
    gradients([mtf.reduce_sum(y)], [x])


# --- layers ---------------------------------------------------------------------
def test_conv3d_layer_with_bias_and_relu_matches_tf():
  x3 = _f(2, 4, 8, 4, 4)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, x3, mtf.Shape([B, D, H, W, CI]))
    return L.conv3d(x, CO, filter_size=3, activation="relu", name="c",
                    use_bias=True)  # Mesh TF's conv3d has no bias
  graph = mtf.Graph()
  build(mtf.Mesh(graph, "mesh"))
  k, b = [v.initial_value_numpy() for v in graph.all_variables]
  assert k.shape == (3, 3, 3, 4, 4) and b.shape == (4,)
  ref = lambda: tf.nn.relu(tf.nn.conv3d(x3, k, [1] * 5, "SAME") + b).numpy()
  check_layouts(build, [D, H, CO], ref, limit=3, rtol=1e-4, atol=1e-4,
                meshes=["rows:2;cols:4"])
