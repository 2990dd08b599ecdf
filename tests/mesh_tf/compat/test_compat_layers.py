"""Mesh TensorFlow behaviours of the layers: dense replacing a same-named
dim, conv1d with VALID padding, Mesh TF pooling names -- each against NumPy
under several layouts."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

MESHES = ["x:2", "rows:2;cols:4"]
RNG = np.random.RandomState(1)


def test_dense_output_dim_named_like_the_input_dim_replaces_it():
  xv = RNG.randn(4, 8).astype(np.float32)
  w0 = RNG.randn(8, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:4;d:8")
    y = mtf.layers.dense(x, mtf.Dimension("d", 8), kernel_initializer=w0,
                         use_bias=False, name="same")
    assert y.shape == mtf.convert_to_shape("b:4;d:8")
    kernel = mesh.graph.all_variables[0]
    assert kernel.shape == mtf.convert_to_shape("_d:8;d:8")
    return [y, mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]]
  y_ref = xv @ w0
  check_layouts(build, ["b:4", "d:8"], lambda: [y_ref, 2 * y_ref @ w0.T],
                meshes=MESHES, limit=8, rtol=1e-4, atol=1e-4)


def test_conv1d_valid_padding():
  xv = RNG.randn(2, 10, 4).astype(np.float32)
  w0 = RNG.randn(3, 4, 6).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;l:10;c:4")
    # The kernel is Mesh TF's height-1 2-d kernel [fh=1, fw=3, c, o].
    y = mtf.layers.conv1d(x, mtf.Dimension("o", 6), filter_size=3,
                          padding="VALID", filter_initializer=w0[None],
                          use_bias=False)
    return [y, mtf.gradients([mtf.reduce_sum(y)], [x])[0]]
  y_ref = sum(np.einsum("blc,co->blo", xv[:, k:k + 8], w0[k])
              for k in range(3))
  gx = np.zeros_like(xv)
  for k in range(3):
    gx[:, k:k + 8] += w0[k].sum(-1)
  check_layouts(build, ["b:2", "c:4", "o:6"], lambda: [y_ref, gx],
                meshes=MESHES, limit=8, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,fn", [("AVG_2D", np.mean), ("MAX_2D", np.max),
                                     ("avg", np.mean)])
def test_pooling_accepts_mesh_tf_names(kind, fn):
  xv = RNG.randn(2, 4, 6, 3).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;h:4;w:6;c:3")
    return mtf.PoolOperation(x, ["h", "w"], [2, 3], kind).outputs[0]
  ref = fn(xv.reshape(2, 2, 2, 2, 3, 3), axis=(2, 4))
  check_layouts(build, ["b:2", "c:3"], lambda: ref, meshes=["x:2"],
                rtol=1e-5)


def test_pooling_name_errors():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, "b:2;h:4;w:4;c:3")
  with pytest.raises(mtf.MtfError, match="AVG_3D.*pools 2 spatial dims; use "
                     "AVG_2D"):
    mtf.PoolOperation(x, ["h", "w"], [2, 2], "AVG_3D")
  with pytest.raises(mtf.MtfError, match="unknown pooling 'SUM_2D'"):
    mtf.PoolOperation(x, ["h", "w"], [2, 2], "SUM_2D")


def test_dot_product_attention_matches_numpy():
  q = RNG.randn(2, 4, 3, 8).astype(np.float32)   # batch, heads, length, d_k
  k = RNG.randn(2, 4, 5, 8).astype(np.float32)   # ..., memory_length, d_k
  v = RNG.randn(2, 4, 5, 6).astype(np.float32)   # ..., memory_length, d_v
  mask = np.where(RNG.rand(3, 5) < 0.3, -1e9, 0).astype(np.float32)
  mask[:, 0] = 0

  def build(mesh):
    tq = mtf.import_tf_tensor(mesh, q, "batch:2;heads:4;length:3;d_k:8")
    tk = mtf.import_tf_tensor(mesh, k, "batch:2;heads:4;memory_length:5;d_k:8")
    tv = mtf.import_tf_tensor(mesh, v, "batch:2;heads:4;memory_length:5;d_v:6")
    tm = mtf.import_tf_tensor(mesh, mask, "length:3;memory_length:5")
    out = mtf.layers.dot_product_attention(tq, tk, tv, tm)
    assert out.shape == mtf.convert_to_shape("batch:2;heads:4;length:3;d_v:6")
    return [out, mtf.gradients([mtf.reduce_sum(out)], [tv])[0]]
  logits = np.einsum("bhld,bhmd->bhlm", q, k) + mask
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  ref = np.einsum("bhlm,bhmv->bhlv", w, v)
  gv = np.broadcast_to(w.sum(2)[..., None], v.shape)
  check_layouts(build, ["batch:2", "heads:4", "d_k:8"], lambda: [ref, gv],
                meshes=MESHES, limit=8, rtol=1e-4, atol=1e-5)


def test_small_layers():
  xv = RNG.randn(4, 8).astype(np.float32)
  ids = np.array([[3, 0, 2, 0]], np.int32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "length:4;d:8")
    t = mtf.import_tf_tensor(mesh, ids, "b:1;length:4")
    glu = mtf.layers.dense_product(
        x, [x.shape.dims[-1]], mtf.Dimension("h", 6),
        activation_functions=["linear", "sigmoid"], use_bias=False,
        kernel_initializer=mtf.layers.VarianceScalingInitializer(2.0))
    jit = mtf.layers.multiplicative_jitter(x, epsilon=0.1, seed=4)
    return [mtf.layers.weights_nonzero(t),
            mtf.layers.rename_length_to_memory_length(x), glu, jit / x]
  (nz, renamed, glu, ratio), _ = run(build, "x:2", "d:x")
  np.testing.assert_array_equal(nz, [[1, 0, 1, 0]])
  np.testing.assert_array_equal(renamed, xv)
  assert glu.shape == (4, 6)
  assert ((ratio >= 0.9 - 1e-6) & (ratio < 1.1 + 1e-6)).all()
  assert len(np.unique(ratio.round(6))) > 1
  check_layouts(build, ["length:4", "d:8", "h:6"], meshes=MESHES, limit=6,
                rtol=1e-5, atol=1e-5)


def test_variance_scaling_initializer():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.ones(mesh, "b:2;d:256")
  mtf.layers.dense(x, mtf.Dimension("h", 512), use_bias=False, name="n",
                   kernel_initializer=mtf.layers.VarianceScalingInitializer(
                       2.0, "fan_in", "normal"))
  mtf.layers.dense(x, mtf.Dimension("h", 512), use_bias=False, name="u",
                   kernel_initializer=mtf.layers.VarianceScalingInitializer(
                       1.0, "fan_avg", "uniform"))
  normal, uniform = [v.initial_value_numpy() for v in graph.all_variables]
  # Mesh TF's normal is TF's truncated normal (cut at two sigmas, which
  # keeps 0.8796 of the stddev).
  sigma = np.sqrt(2.0 / 256)
  assert abs(normal.std() - 0.8796 * sigma) < 0.003
  assert np.abs(normal).max() <= 2 * sigma + 1e-6
  limit = np.sqrt(3.0 / 384)
  assert np.abs(uniform).max() <= limit and uniform.std() > 0.9 * limit / \
      np.sqrt(3)
  with pytest.raises(mtf.MtfError, match="unknown mode 'fan_max'"):
    mtf.layers.VarianceScalingInitializer(mode="fan_max")
  with pytest.raises(mtf.MtfError, match="unknown distribution"):
    mtf.layers.VarianceScalingInitializer(distribution="truncated_normal")


def test_batch_norm_trains_and_infers():
  xv = (RNG.randn(8, 3, 4) * 2 + 1).astype(np.float32)   # batch, h, c

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "batch:8;h:3;c:4")
    y, updates = mtf.layers.batch_norm(x, True, momentum=0.9, epsilon=1e-5,
                                       dims_idx_end=2)
    assert len(updates) == 2
    y_eval, none = mtf.layers.batch_norm(x, False, momentum=0.9,
                                         epsilon=1e-5, dims_idx_end=2)
    assert none == []
    return [y, y_eval, mtf.gradients([mtf.reduce_sum(y * x)], [x])[0]]
  mean, var = xv.mean((0, 1)), xv.var((0, 1))
  y_ref = (xv - mean) / np.sqrt(var + 1e-5)
  n = xv.shape[0] * xv.shape[1]
  # d/dx sum(y * x) for y = (x - m) / s, with m, s over (batch, h).
  xc = xv - mean
  s = np.sqrt(var + 1e-5)
  g = y_ref + xv / s - xv.mean((0, 1)) / s - xc * (xc * xv).sum((0, 1)) / (
      n * s ** 3)
  check_layouts(build, ["batch:8", "c:4"],
                lambda: [y_ref, xv / np.sqrt(1 + 1e-5), g], meshes=MESHES,
                limit=6, rtol=1e-4, atol=1e-4)


def test_batch_norm_updates_its_moving_averages():
  xv = RNG.randn(8, 4).astype(np.float32)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, xv, "batch:8;c:4")
  mtf.layers.batch_norm(x, True, momentum=0.75, name="bn")
  impl = mtf.PlacementMeshImpl("x:2", "batch:x", mtf.logical_cpu_devices(2))
  mtf.Lowering(graph, {mesh: impl})
  got = {n: impl.export_to_tf_tensor(impl.variables[n].value(),
                                     mtf.convert_to_shape("c:4")).numpy()
         for n in ("bn/moving_mean", "bn/moving_variance")}
  np.testing.assert_allclose(got["bn/moving_mean"], 0.25 * xv.mean(0),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got["bn/moving_variance"],
                             0.75 + 0.25 * xv.var(0), rtol=1e-5)
  with pytest.raises(mtf.ShapeError, match="select no dim"):
    mtf.layers.batch_norm(x, True, 0.9, dims_idx_start=1, dims_idx_end=1)


def test_attention_mask_same_segment():
  seg = np.array([[1, 1, 2, 2, 2]], np.int32)

  def build(mesh):
    s = mtf.import_tf_tensor(mesh, seg, "batch:1;length:5")
    return mtf.layers.attention_mask_same_segment(s)
  ref = np.where(seg[:, :, None] != seg[:, None, :], -1e9, 0.0)
  check_layouts(build, ["length:5"], lambda: ref, meshes=["x:2"])


def test_conv2d_transpose_matches_tf():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  xv = RNG.randn(2, 3, 4, 5).astype(np.float32)
  w0 = RNG.randn(2, 2, 5, 6).astype(np.float32)   # fh, fw, in, out
  # The kernel is TF's transposed filter [fh, fw, out, in], as in Mesh TF.
  wt = np.transpose(w0, (0, 1, 3, 2))

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;h:3;w:4;c:5")
    y = mtf.layers.conv2d_transpose(x, mtf.Dimension("o", 6),
                                    filter_initializer=wt)
    assert mesh.graph.all_variables[0].shape == mtf.convert_to_shape(
        "fh:2;fw:2;o:6;c:5")
    return [y, mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]]
  tf_w = tf.constant(wt)
  xt = tf.constant(xv)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    ref = tf.nn.conv2d_transpose(xt, tf_w, [2, 6, 8, 6], strides=2,
                                 padding="SAME")
    loss = tf.reduce_sum(ref * ref)
  gx = tape.gradient(loss, xt)
  check_layouts(build, ["b:2", "w:4", "o:6"],
                lambda: [ref.numpy(), gx.numpy()], meshes=MESHES, limit=6,
                rtol=1e-4, atol=1e-4)


def test_conv2d_transpose_with_overlapping_windows_matches_tf():
  # filter_size 3 over stride 2: windows overlap (TF's general case).
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rng = np.random.RandomState(3)
  xv = rng.randn(2, 3, 4, 5).astype(np.float32)
  w0 = rng.randn(3, 3, 5, 6).astype(np.float32)   # [fh, fw, in, out]

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;h:3;w:4;c:5")
    y = mtf.layers.conv2d_transpose(
        x, mtf.Dimension("o", 6), filter_size=3, strides=2,
        filter_initializer=np.transpose(w0, (0, 1, 3, 2)))
    return [y, mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]]
  xt = tf.constant(xv)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    ref = tf.nn.conv2d_transpose(xt, tf.constant(np.transpose(w0, (0, 1, 3, 2))),
                                 [2, 6, 8, 6], strides=2, padding="SAME")
    loss = tf.reduce_sum(ref * ref)
  gx = tape.gradient(loss, xt)
  check_layouts(build, ["b:2", "o:6"], lambda: [ref.numpy(), gx.numpy()],
                meshes=MESHES, limit=4, rtol=1e-4, atol=1e-4)
