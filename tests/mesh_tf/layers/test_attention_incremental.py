"""Decoding-step attention layers equal their full-sequence forms step by
step, memory-compressed attention matches NumPy, and the attention weights
of Mesh TF have its shapes and scales -- under several layouts."""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import layers as L
from tests.layout_harness import check_layouts, run
from tests.mesh_tf.layers.test_local_attention import (np_attend,
                                                       np_self_attention,
                                                       variable_values,
                                                       window_visible)

RNG = np.random.RandomState(5)
B, H, K, D = (mtf.Dimension("batch", 2), mtf.Dimension("heads", 2),
              mtf.Dimension("d_kv", 4), mtf.Dimension("d_model", 8))
MESHES = ["x:2", "rows:2;cols:2", "rows:2;cols:4"]   # 2, 4, 8 devices
XV = RNG.randn(2, 6, 8).astype(np.float32)


def _steps(mesh, fn, cache_len):
  """Runs ``fn(x_t, k, v, t)`` over the 6 positions of XV from zero caches;
  returns the outputs stacked on ``length``."""
  k = v = mtf.zeros(mesh, mtf.Shape([B, H, mtf.Dimension("memory_length",
                                                         cache_len), K]))
  ys = []
  for t in range(XV.shape[1]):
    xt = mtf.import_tf_tensor(mesh, XV[:, t], mtf.Shape([B, D]))
    step = mtf.constant(mesh, t, dtype="int32") if t % 2 else t
    y, k, v = fn(xt, k, v, step)
    assert k.shape.dims[-2].size == cache_len
    ys.append(y)
  return mtf.stack(ys, "length", axis=1)


def test_self_attention_incremental_equals_causal_multihead_attention():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, "batch:2;length:6;d_model:8")
    bias = L.attention_mask_autoregressive(mtf.range(mesh, x.shape[1]))
    full = L.multihead_attention(x, None, bias, K, H, name="att")
    steps = _steps(mesh, lambda xt, k, v, t: (
        L.multihead_self_attention_incremental(xt, k, v, t, "float32",
                                               "float32", name="att")), 6)
    assert len(mesh.graph.all_variables) == 4   # the steps reuse att/*
    return [full, steps]
  w = variable_values(build)

  def ref():
    q, k, v = (np.einsum("bld,dhk->bhlk", XV, w[f"att/{n}"]) for n in "qkv")
    o = np_attend(q, k, v, window_visible(6, 6))
    y = np.einsum("bhlk,hkd->bld", o, w["att/o"])
    return [y, y]
  check_layouts(build, [B, H, K], ref, meshes=MESHES, limit=6, rtol=1e-4,
                atol=1e-5)


@pytest.mark.parametrize("window", [3, 8])
def test_local_attention_incremental_equals_masked_local_attention(window):
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, "batch:2;length:6;d_model:8")
    full = L.masked_local_attention_1d(x, K, H, window_size=window)
    steps = _steps(mesh, L.masked_local_attention_1d_incremental, window)
    assert len(mesh.graph.all_variables) == 1   # one shared qkvo
    return [full, steps]
  w = variable_values(build)
  wq, wk, wv, wo = w["masked_local_attention_1d/qkvo"]
  ref = np_self_attention(XV.astype(np.float64), wq, wk, wv, wo,
                          window_visible(6, window))
  check_layouts(build, [B, H], lambda: [ref, ref], meshes=MESHES, limit=4,
                rtol=1e-4, atol=1e-5)


def test_encdec_attention_incremental_matches_numpy():
  mem = RNG.randn(2, 5, 8).astype(np.float32)
  pad = np.zeros((2, 5), np.float32)
  pad[1, 3:] = L.MASK_BIAS

  def build(mesh):
    wq, wk, wv, wo = L.multihead_attention_params(mesh, H, D, K, "float32",
                                                  name="ed")
    m = mtf.import_tf_tensor(mesh, mem, "batch:2;memory_length:5;d_model:8")
    kv_shape = mtf.convert_to_shape("batch:2;heads:2;memory_length:5;d_kv:4")
    k = mtf.einsum([m, wk], output_shape=kv_shape)
    v = mtf.einsum([m, wv], output_shape=kv_shape)
    mask = mtf.import_tf_tensor(mesh, pad, "batch:2;memory_length:5")
    x = mtf.import_tf_tensor(mesh, XV[:, 0], mtf.Shape([B, D]))
    return L.multihead_encdec_attention_incremental(x, wq, wo, k, v, mask)
  w = variable_values(build)

  def ref():
    q = np.einsum("bd,hdk->bhk", XV[:, 0], w["ed/q"])[:, :, None]
    k, v = (np.einsum("bmd,hdk->bhmk", mem, w[f"ed/{n}"]) for n in "kv")
    visible = (pad == 0)[:, None, None, :]
    o = np_attend(q, k, v, visible)[:, :, 0]
    return np.einsum("bhk,hdk->bd", o, w["ed/o"])
  check_layouts(build, [B, H, K], ref, meshes=MESHES, limit=6, rtol=1e-4,
                atol=1e-5)


@pytest.mark.parametrize("mask_right", [False, True])
def test_memory_compressed_attention_matches_numpy(mask_right):
  xv = RNG.randn(2, 8, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "batch:2;length:8;d_model:8")
    return L.multihead_self_attention_memory_compressed(
        x, mask_right, 2, K, H, name="mc")
  w = variable_values(build)
  wq, wk, wv, wo = w["mc/qkvo"]

  def ref():
    x = xv.astype(np.float64)
    memory = x.reshape(2, 4, 2, 8).mean(2)
    q = np.einsum("bld,hdk->bhlk", x, wq)
    k, v = (np.einsum("bmd,hdk->bhmk", memory, t) for t in (wk, wv))
    logits = np.einsum("bhlk,bhmk->bhlm", q, k)
    if mask_right:
      last = np.arange(4) * 2 + 1
      logits = np.where(last[None, :] > np.arange(8)[:, None], -np.inf,
                        logits)
    # The extra zero logit: one more term exp(0) in the normaliser.
    top = np.maximum(logits.max(-1, keepdims=True), 0.0)
    e = np.exp(logits - top)
    wts = e / (e.sum(-1, keepdims=True) + np.exp(-top))
    o = np.einsum("bhlm,bhmk->bhlk", wts, v)
    return np.einsum("bhlk,hdk->bld", o, wo)
  check_layouts(build, [B, H, mtf.Dimension("length", 4)], ref,
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)


def test_compress_mean_and_its_errors():
  xv = RNG.randn(2, 6).astype(np.float32)

  def build(mesh):
    return L.compress_mean(mtf.import_tf_tensor(mesh, xv, "b:2;l:6"), "l", 3)
  (got,), _ = run(build, "x:2", "l:x")
  np.testing.assert_allclose(got, xv.reshape(2, 2, 3).mean(-1), rtol=1e-6)
  mesh = mtf.Mesh(mtf.Graph(), "m")
  with pytest.raises(mtf.ShapeError, match="compression_factor=4 must divide"):
    L.compress_mean(mtf.ones(mesh, "b:2;l:6"), "l", 4)


def test_attention_params_shapes_scales_and_reuse():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  io, kv, heads = (mtf.Dimension("d_model", 64), mtf.Dimension("d_kv", 16),
                   mtf.Dimension("heads", 8))
  sep = L.multihead_attention_params(mesh, heads, io, kv, "float32", name="a")
  comb = L.multihead_attention_vars(mesh, heads, io, kv, "float32", None,
                                    None, name="b")
  for t in sep + comb:
    assert t.shape == mtf.Shape([heads, io, kv])
  values = {v.name: v.initial_value_numpy() for v in graph.all_variables}
  assert sorted(values) == ["a/k", "a/o", "a/q", "a/v", "b/qkvo"]
  want = [64 ** -0.5 * 16 ** -0.25] * 2 + [64 ** -0.5, (64 * 8) ** -0.5]
  got = [values[f"a/{n}"].std() for n in "qkvo"]
  np.testing.assert_allclose(got, want, rtol=0.05)
  np.testing.assert_allclose(values["b/qkvo"].std(axis=(1, 2, 3)), want,
                             rtol=0.05)
  again = L.multihead_attention_vars(mesh, heads, io, kv, "float32", None,
                                     None, name="b", reuse=True)
  assert len(graph.all_variables) == 5 and again[0].shape == sep[0].shape
  with pytest.raises(mtf.ShapeError, match="is reused with shape"):
    L.multihead_attention_vars(mesh, heads, kv, io, "float32", None, None,
                               name="b", reuse=True)

  # The stacked initializer gives every layout the same slices.
  def build(m):
    return L.multihead_attention_vars(m, mtf.Dimension("heads", 2),
                                      mtf.Dimension("d_model", 8),
                                      mtf.Dimension("d_kv", 4), "float32",
                                      None, None, name="c")
  ref = variable_values(build)["c/qkvo"]
  check_layouts(build, [mtf.Dimension("qkvo", 4), mtf.Dimension("heads", 2)],
                lambda: list(ref), meshes=["x:2", "rows:2;cols:2"], limit=4)


def test_incremental_cache_errors():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, "batch:2;d_model:8")
  k = mtf.zeros(mesh, "batch:2;heads:2;memory_length:4;d_kv:4")
  with pytest.raises(mtf.ShapeError, match="must both be"):
    L.multihead_self_attention_incremental(x, k, mtf.zeros(mesh, "a:2"), 0)
  with pytest.raises(mtf.ShapeError, match="batch dims"):
    L.masked_local_attention_1d_incremental(
        mtf.ones(mesh, "beam:2;d_model:8"), k, k, 0)
  with pytest.raises(mtf.ShapeError, match="must be a scalar"):
    L.multihead_self_attention_incremental(x, k, k, mtf.zeros(mesh, "a:2"))


def test_memory_compressed_attention_is_priceable():
  import costmodels  # pylint: disable=import-outside-toplevel
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.zeros(mesh, "batch:8;length:64;d_model:32")
  y = L.multihead_self_attention_memory_compressed(x, True, 4, K, H)
  loss = mtf.reduce_sum(y * y)
  grads = mtf.gradients([loss], [v.outputs[0]
                                 for v in graph.trainable_variables])
  report = costmodels.evaluate(graph, "data:2;model:4",
                               "batch:data;length:model", "tpu-v4-2x2x2",
                               outputs=[loss] + grads)
  assert report.compute_time_s > 0
