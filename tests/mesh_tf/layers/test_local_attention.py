"""Local attention layers of Mesh TensorFlow vs. NumPy windowed attention,
with the batch, heads and blocks (length) dims split."""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import layers as L
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(3)
B, H, K, D = (mtf.Dimension("batch", 2), mtf.Dimension("heads", 2),
              mtf.Dimension("d_kv", 4), mtf.Dimension("d_model", 8))
MESHES = ["x:2", "rows:2;cols:2", "rows:2;cols:4"]   # 2, 4, 8 devices


def variable_values(build):
  graph = mtf.Graph()
  build(mtf.Mesh(graph, "mesh"))
  return {v.name: v.initial_value_numpy().astype(np.float64)
          for v in graph.all_variables}


def np_attend(q, k, v, visible):
  """q [..., l, c], k/v [..., m, c], visible [l, m] (broadcast): softmax
  over the visible memory positions only."""
  logits = np.einsum("...lc,...mc->...lm", q, k)
  logits = np.where(visible, logits, -np.inf)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  return np.einsum("...lm,...mc->...lc", w, v)


def np_self_attention(x, wq, wk, wv, wo, visible):
  """x [b, l, d], weights [h, d, k], visible [l, l]."""
  q, k, v = (np.einsum("bld,hdk->bhlk", x, w) for w in (wq, wk, wv))
  return np.einsum("bhlk,hdk->bld", np_attend(q, k, v, visible), wo)


def window_visible(length, window):
  p = np.arange(length)
  return (p[None, :] <= p[:, None]) & (p[None, :] > p[:, None] - window)


@pytest.mark.parametrize("window,per_split", [(3, 4), (6, 4), (4, None)])
def test_masked_local_attention_1d_matches_numpy(window, per_split):
  xv = RNG.randn(2, 16, 8).astype(np.float32)
  kv = []

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "batch:2;length:16;d_model:8")
    out = L.masked_local_attention_1d(x, K, H, True, window,   # 0.1.21 order
                                      length_per_split=per_split,
                                      return_kv=kv, name="local")
    assert out.shape == x.shape
    return out
  w = variable_values(build)
  assert [t.shape for t in kv[-2:]] == [
      mtf.convert_to_shape("batch:2;heads:2;length:16;d_kv:4")] * 2
  wq, wk, wv, wo = w["local/qkvo"]
  ref = np_self_attention(xv.astype(np.float64), wq, wk, wv, wo,
                          window_visible(16, window))
  blocks = 16 // (per_split or 16)
  check_layouts(build, [B, H, mtf.Dimension("length", blocks)],
                lambda: ref, meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)


def test_masked_local_attention_1d_errors():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, "batch:2;length:16;d_model:8")
  with pytest.raises(mtf.ShapeError, match="window_size=0 must be at least"):
    L.masked_local_attention_1d(x, K, H, window_size=0)
  with pytest.raises(mtf.ShapeError, match="length_per_split=5 must divide"):
    L.masked_local_attention_1d(x, K, H, window_size=2, length_per_split=5)


def spatial_visible(nb, w, mask_right):
  """[L, L] visibility of 1-d spatial-block attention over L = nb * w."""
  p = np.arange(nb * w)
  qb, mbk = p[:, None] // w, p[None, :] // w
  if mask_right:
    return (mbk >= qb - 1) & (p[None, :] <= p[:, None])
  return np.abs(mbk - qb) <= 1


@pytest.mark.parametrize("mask_right", [False, True])
def test_local_self_attention_spatial_blocks_matches_numpy(mask_right):
  xv = RNG.randn(2, 4, 3, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "batch:2;num_w_blocks:4;w:3;d_model:8")
    return L.local_self_attention_spatial_blocks(x, K, H,
                                                 mask_right=mask_right,
                                                 name="sb")
  w = variable_values(build)
  wq, wk, wv, wo = w["sb/qkvo"]
  flat = xv.reshape(2, 12, 8).astype(np.float64)
  ref = np_self_attention(flat, wq, wk, wv, wo,
                          spatial_visible(4, 3, mask_right)).reshape(xv.shape)
  check_layouts(build, [B, H, mtf.Dimension("num_w_blocks", 4)],
                lambda: ref, meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask_right", [False, True])
def test_local_2d_self_attention_spatial_blocks_matches_numpy(mask_right):
  nh, nw, h, wd = 2, 4, 2, 2
  xv = RNG.randn(1, nh, nw, h, wd, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(
        mesh, xv, f"batch:1;num_h_blocks:{nh};num_w_blocks:{nw};h:{h};w:{wd};"
        "d_model:8")
    return L.local_2d_self_attention_spatial_blocks(x, K, H,
                                                    mask_right=mask_right,
                                                    name="sb2")
  w = variable_values(build)
  wq, wk, wv, wo = w["sb2/qkvo"]
  # Pixels in raster order of the whole (nh*h) x (nw*wd) image.
  img = xv.transpose(0, 1, 3, 2, 4, 5).reshape(1, nh * h * nw * wd, 8)
  rows, cols = np.divmod(np.arange(nh * h * nw * wd), nw * wd)
  br, bc = rows // h, cols // wd
  dr, dc = br[None, :] - br[:, None], bc[None, :] - bc[:, None]
  if mask_right:
    past = (rows[None, :] < rows[:, None]) | (
        (rows[None, :] == rows[:, None]) & (cols[None, :] <= cols[:, None]))
    visible = (dr >= -1) & (dr <= 0) & (dc >= -1) & (dc <= 0) & past
  else:
    visible = (np.abs(dr) <= 1) & (np.abs(dc) <= 1)
  ref = np_self_attention(img.astype(np.float64), wq, wk, wv, wo, visible)
  ref = ref.reshape(1, nh, h, nw, wd, 8).transpose(0, 1, 3, 2, 4, 5)
  check_layouts(build, [H, mtf.Dimension("num_h_blocks", nh),
                        mtf.Dimension("num_w_blocks", nw)],
                lambda: ref, meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)


def test_attention_bias_local_blocks():
  def build(mesh):
    b = mtf.Dimension("block", 3)
    m = mtf.Dimension("memory", 3)
    one = L.attention_bias_local_block(mesh, b, m)
    two = L.attention_bias_local_2d_block(
        mesh, mtf.Dimension("h", 2), mtf.Dimension("w", 2),
        mtf.Dimension("mh", 2), mtf.Dimension("mw", 2))
    assert one.shape == mtf.convert_to_shape("block:3;memory:6")
    assert two.shape == mtf.convert_to_shape("h:2;w:2;mh:4;mw:4")
    return [one, two]
  (one, two), _ = run(build, "all:1", "")
  q, m = np.arange(3)[:, None] + 3, np.arange(6)[None, :]
  np.testing.assert_array_equal(one, np.where(m > q, L.MASK_BIAS, 0.0))
  qi, qj = np.meshgrid(np.arange(2) + 2, np.arange(2) + 2, indexing="ij")
  mi, mj = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
  future = (mi[None, None] > qi[..., None, None]) | (
      (mi[None, None] == qi[..., None, None])
      & (mj[None, None] > qj[..., None, None]))
  np.testing.assert_array_equal(two, np.where(future, L.MASK_BIAS, 0.0))


def test_local_halo_exchanges_pad_without_a_blocks_dim():
  kv = RNG.randn(2, 3, 4).astype(np.float32)

  def build(mesh):
    k = mtf.import_tf_tensor(mesh, kv, "nb:2;w:3;c:4")
    w = k.shape.get_dim_by_name("w")
    both = L.local_1d_halo_exchange(k, k, k.shape.get_dim_by_name("nb"), w,
                                    mask_right=False)
    left = L.local_1d_halo_exchange(k, k, None, w, mask_right=True)
    k2, _ = L.local_2d_halo_exchange(k, k, None, w, None,
                                     k.shape.get_dim_by_name("c"), True)
    return [both[0], left[1], k2]
  (both, left, k2), _ = run(build, "x:2", "nb:x")
  z = np.zeros((3, 4), np.float32)
  np.testing.assert_array_equal(both[0], np.concatenate([z, kv[0], kv[1]]))
  np.testing.assert_array_equal(both[1], np.concatenate([kv[0], kv[1], z]))
  np.testing.assert_array_equal(left, np.concatenate(
      [np.zeros((2, 3, 4), np.float32), kv], 1))
  assert k2.shape == (2, 6, 8)


def tf_self_attention_grad(x, weights, visible):
  """d sum(y^2) / dx of np_self_attention, by tf.GradientTape."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  xt = tf.constant(x)
  wq, wk, wv, wo = (tf.constant(w) for w in weights)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    q, k, v = (tf.einsum("bld,hdk->bhlk", xt, w) for w in (wq, wk, wv))
    logits = tf.einsum("bhlk,bhmk->bhlm", q, k)
    logits = tf.where(tf.constant(visible), logits, -1e30)
    o = tf.einsum("bhlm,bhmk->bhlk", tf.nn.softmax(logits, -1), v)
    y = tf.einsum("bhlk,hdk->bld", o, wo)
    loss = tf.reduce_sum(y * y)
  return tape.gradient(loss, xt).numpy()


def test_masked_local_attention_1d_gradient_matches_tf_with_split_length():
  xv = RNG.randn(2, 16, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "batch:2;length:16;d_model:8")
    y = L.masked_local_attention_1d(x, K, H, window_size=6,
                                    length_per_split=4, name="local")
    return mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]
  w = variable_values(build)
  ref = tf_self_attention_grad(xv.astype(np.float64), list(w["local/qkvo"]),
                               window_visible(16, 6))
  check_layouts(build, [B, H, mtf.Dimension("length", 4)], lambda: ref,
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-4)


def test_local_2d_attention_gradient_matches_tf_with_split_blocks():
  xv = RNG.randn(1, 2, 2, 2, 2, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(
        mesh, xv, "batch:1;num_h_blocks:2;num_w_blocks:2;h:2;w:2;d_model:8")
    y = L.local_2d_self_attention_spatial_blocks(x, K, H, mask_right=True,
                                                 name="sb2")
    return mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]
  w = variable_values(build)
  img = xv.transpose(0, 1, 3, 2, 4, 5).reshape(1, 16, 8)
  rows, cols = np.divmod(np.arange(16), 4)
  br, bc = rows // 2, cols // 2
  dr, dc = br[None, :] - br[:, None], bc[None, :] - bc[:, None]
  past = (rows[None, :] < rows[:, None]) | (
      (rows[None, :] == rows[:, None]) & (cols[None, :] <= cols[:, None]))
  visible = (dr >= -1) & (dr <= 0) & (dc >= -1) & (dc <= 0) & past
  g = tf_self_attention_grad(img.astype(np.float64), list(w["sb2/qkvo"]),
                             visible)
  ref = g.reshape(1, 2, 2, 2, 2, 8).transpose(0, 1, 3, 2, 4, 5)
  check_layouts(build, [H, mtf.Dimension("num_h_blocks", 2),
                        mtf.Dimension("num_w_blocks", 2)], lambda: ref,
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-4)
