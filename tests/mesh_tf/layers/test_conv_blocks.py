"""Convolutions over images cut into blocks equal TF's convolutions of the
whole image (values and input gradients), with the blocks dims split;
general transposed convolutions and separable_conv1d against TF / NumPy."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf import layers as L
from tests.layout_harness import check_layouts

RNG = np.random.RandomState(7)
MESHES = ["x:2", "rows:2;cols:2", "rows:2;cols:4"]   # 2, 4, 8 devices


def to_image(xb):
  """[b, hb, wb, h, w, c] -> [b, hb*h, wb*w, c]."""
  b, hb, wb, h, w, c = xb.shape
  return xb.transpose(0, 1, 3, 2, 4, 5).reshape(b, hb * h, wb * w, c)


def to_blocks(img, hb, wb):
  b, hh, ww, c = img.shape
  return img.reshape(b, hb, hh // hb, wb, ww // wb, c).transpose(
      0, 1, 3, 2, 4, 5)


def tf_value_and_grad(fn, xv):
  """fn(x) and d sum(fn(x)^2) / dx."""
  xt = tf.constant(xv)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = fn(xt)
    loss = tf.reduce_sum(y * y)
  return y.numpy(), tape.gradient(loss, xt).numpy()


def with_grad(x, y):
  return [y, mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]]


@pytest.mark.parametrize("k", [3, 5])
def test_conv2d_with_blocks_equals_conv_of_the_whole_image(k):
  xv = RNG.randn(2, 2, 2, 3, 3, 2).astype(np.float32)
  w0 = RNG.randn(k, k, 2, 4).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;hb:2;wb:2;h:3;w:3;c:2")
    y = L.conv2d_with_blocks(x, mtf.Dimension("o", 4), (k, k),
                             h_blocks_dim="hb",
                             w_blocks_dim=x.shape.get_dim_by_name("wb"),
                             filter_initializer=w0)
    assert y.shape == mtf.convert_to_shape("b:2;hb:2;wb:2;h:3;w:3;o:4")
    return with_grad(x, y)
  y, gx = tf_value_and_grad(
      lambda t: tf.nn.conv2d(t, w0, 1, "SAME"), to_image(xv))
  ref = [to_blocks(y, 2, 2), to_blocks(gx, 2, 2)]
  check_layouts(build, ["b:2", "hb:2", "wb:2", "o:4"], lambda: ref,
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-4)


def test_conv2d_with_blocks_along_h_only_and_without_blocks():
  xv = RNG.randn(2, 3, 2, 5, 2).astype(np.float32)   # b, hb, h, w, c
  w0 = RNG.randn(3, 5, 2, 3).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;hb:3;h:2;w:5;c:2")
    blocked = L.conv2d_with_blocks(x, mtf.Dimension("o", 3), (3, 5),
                                   h_blocks_dim="hb", filter_initializer=w0)
    plain = L.conv2d_with_blocks(x, mtf.Dimension("o", 3), (3, 5),
                                 filter_initializer=w0)
    return [blocked, plain]
  img = xv.reshape(2, 6, 5, 2)
  whole = tf.nn.conv2d(img, w0, 1, "SAME").numpy().reshape(2, 3, 2, 5, 3)
  per_block = tf.nn.conv2d(xv.reshape(6, 2, 5, 2), w0, 1,
                           "SAME").numpy().reshape(2, 3, 2, 5, 3)
  check_layouts(build, ["b:2", "hb:3", "o:3"], lambda: [whole, per_block],
                meshes=["x:2", "x:8"], limit=6, rtol=1e-4, atol=1e-4)


def test_conv3d_with_blocks_equals_conv_of_the_whole_volume():
  xv = RNG.randn(1, 2, 2, 2, 2, 3, 2).astype(np.float32)  # b db hb d h w c
  w0 = RNG.randn(3, 3, 3, 2, 2).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:1;db:2;hb:2;d:2;h:2;w:3;c:2")
    y = L.conv3d_with_blocks(x, mtf.Dimension("o", 2), d_blocks_dim="db",
                             h_blocks_dim="hb", filter_initializer=w0)
    return with_grad(x, y)
  vol = xv.transpose(0, 1, 3, 2, 4, 5, 6).reshape(1, 4, 4, 3, 2)

  def blocks(v):
    return v.reshape(1, 2, 2, 2, 2, 3, -1).transpose(0, 1, 3, 2, 4, 5, 6)
  y, gx = tf_value_and_grad(lambda t: tf.nn.conv3d(
      t, w0, [1] * 5, "SAME"), vol)
  check_layouts(build, ["db:2", "hb:2", "o:2"],
                lambda: [blocks(y), blocks(gx)], meshes=MESHES, limit=6,
                rtol=1e-4, atol=1e-4)


def out_in(w0):
  """A random [fh, fw, in, out] kernel as TF's (and Mesh TF's) transposed
  filter [fh, fw, out, in], the layout of the transposed layers' kernel."""
  return np.transpose(w0, (0, 1, 3, 2))


def tf_transpose2d(w0, s, padding):
  wt = out_in(w0)

  def fn(t):
    b, h, w, _ = t.shape
    k = w0.shape[0]
    extra = 0 if padding == "SAME" else max(k - s, 0)
    return tf.nn.conv2d_transpose(t, wt, [b, h * s + extra, w * s + extra,
                                          w0.shape[-1]], s, padding)
  return fn


@pytest.mark.parametrize("k,padding", [(3, "SAME"), (4, "SAME"),
                                       (3, "VALID"), (1, "SAME")])
def test_general_conv2d_transpose_matches_tf(k, padding):
  xv = RNG.randn(2, 4, 3, 3).astype(np.float32)
  w0 = RNG.randn(k, k, 3, 2).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;h:4;w:3;c:3")
    y = L.conv2d_transpose_with_blocks(x, mtf.Dimension("o", 2), (k, k),
                                       padding=padding,
                                       filter_initializer=out_in(w0))
    return with_grad(x, y)
  y, gx = tf_value_and_grad(tf_transpose2d(w0, 2, padding), xv)
  dims = ["b:2", "o:2"] + (["h:4"] if padding == "SAME" else [])
  check_layouts(build, dims, lambda: [y, gx], meshes=MESHES, limit=6,
                rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_conv2d_transpose_with_blocks_equals_the_whole_image(k):
  xv = RNG.randn(1, 2, 2, 2, 3, 2).astype(np.float32)
  w0 = RNG.randn(k, k, 2, 3).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:1;hb:2;wb:2;h:2;w:3;c:2")
    y = L.conv2d_transpose_with_blocks(x, mtf.Dimension("o", 3), (k, k),
                                       h_blocks_dim="hb", w_blocks_dim="wb",
                                       filter_initializer=out_in(w0))
    assert y.shape == mtf.convert_to_shape("b:1;hb:2;wb:2;h:4;w:6;o:3")
    return with_grad(x, y)
  y, gx = tf_value_and_grad(tf_transpose2d(w0, 2, "SAME"), to_image(xv))
  check_layouts(build, ["hb:2", "wb:2", "o:3"],
                lambda: [to_blocks(y, 2, 2), to_blocks(gx, 2, 2)],
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-4)


def test_conv3d_transpose_with_blocks_equals_the_whole_volume():
  xv = RNG.randn(1, 2, 1, 2, 2, 2, 2).astype(np.float32)  # b db hb d h w c
  w0 = RNG.randn(3, 3, 3, 2, 2).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:1;db:2;hb:1;d:2;h:2;w:2;c:2")
    return L.conv3d_transpose_with_blocks(x, mtf.Dimension("o", 2), 3,
                                          d_blocks_dim="db",
                                          filter_initializer=np.transpose(
                                              w0, (0, 1, 2, 4, 3)))
  vol = xv.reshape(1, 4, 2, 2, 2)
  ref = tf.nn.conv3d_transpose(vol, np.transpose(w0, (0, 1, 2, 4, 3)),
                               [1, 8, 4, 4, 2], 2, "SAME").numpy()
  check_layouts(build, ["db:2", "o:2"],
                lambda: ref.reshape(1, 2, 1, 4, 4, 4, 2), meshes=MESHES,
                limit=4, rtol=1e-4, atol=1e-4)


def test_separable_conv1d_matches_numpy():
  xv = RNG.randn(2, 8, 4).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;length:8;c:4")
    return L.separable_conv1d(x, mtf.Dimension("o", 6), -2, 1, name="sep")
  graph = mtf.Graph()
  build(mtf.Mesh(graph, "m"))
  w = {v.name: v.initial_value_numpy().astype(np.float64)
       for v in graph.all_variables}

  def ref():
    x = xv.astype(np.float64)
    pad = np.pad(x, ((0, 0), (2, 1), (0, 0)))
    depth = sum(pad[:, 2 + r:10 + r] * w[f"sep/depthwise_dense_{r + 2}/kernel"]
                for r in range(-2, 2)) + w["sep/depthwise_dense_0/bias"]
    return depth @ w["sep/pointwise_dense/kernel"] + w[
        "sep/pointwise_dense/bias"]
  check_layouts(build, ["b:2", "length:8", "c:4", "o:6"], ref,
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)


def test_block_convolution_errors():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, "b:1;hb:2;wb:2;h:2;w:2;c:1")
  o = mtf.Dimension("o", 1)
  with pytest.raises(mtf.ShapeError, match=r"filter_size \[2, 2\] must be odd"):
    L.conv2d_with_blocks(x, o, (2, 2), h_blocks_dim="hb")
  with pytest.raises(mtf.ShapeError, match="'VALID' is not supported"):
    L.conv2d_with_blocks(x, o, padding="VALID", h_blocks_dim="hb")
  with pytest.raises(mtf.ShapeError, match="blocks dim zb is not a dim"):
    L.conv2d_with_blocks(x, o, h_blocks_dim="zb")
  with pytest.raises(mtf.ShapeError, match="'VALID' is not supported"):
    L.conv2d_transpose_with_blocks(x, o, 3, padding="VALID",
                                   h_blocks_dim="hb")
  with pytest.raises(mtf.ShapeError, match=r"window \[1, 0\] is empty"):
    L.separable_conv1d(mtf.ones(mesh, "l:4;c:2"), o, 1, 0)
