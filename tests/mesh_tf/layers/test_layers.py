"""mtf.layers: each layer under many layouts vs. a NumPy reference.

References use the variables' layout-invariant initial values
(``Variable.initial_value_numpy``), so they need no TensorFlow.
"""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import layers as L
from mesh_tf.gradients import gradients
from tests.layout_harness import check_layouts, run

B, N, M = mtf.Dimension("batch", 4), mtf.Dimension("length", 4), \
    mtf.Dimension("d_model", 8)
F, V = mtf.Dimension("d_ff", 8), mtf.Dimension("vocab", 8)
H, K = mtf.Dimension("heads", 2), mtf.Dimension("d_kv", 4)
RNG = np.random.RandomState(0)
X = RNG.randn(4, 4, 8).astype(np.float32)
IDS = RNG.randint(0, 8, size=(4, 4)).astype(np.int32)
FEW = dict(limit=3, meshes=["x:2", "rows:2;cols:4"])


def variable_values(build):
  """Initial values of the variables of ``build``'s graph, by name."""
  graph = mtf.Graph()
  build(mtf.Mesh(graph, "mesh"))
  return {v.name: v.initial_value_numpy().astype(np.float64)
          for v in graph.all_variables}


def _x(mesh, value=X, shape=(B, N, M)):
  return mtf.import_tf_tensor(mesh, value, mtf.Shape(list(shape)))


def np_layer_norm(x, scale, bias, eps=1e-6):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * scale + bias


def np_softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


# --- dense --------------------------------------------------------------------
def test_dense_matches_numpy_under_every_layout():
  def build(mesh):
    return L.dense(_x(mesh), F, activation="relu", name="fc")
  w = variable_values(build)

  def ref():
    return np.maximum(X @ w["fc/kernel"] + w["fc/bias"], 0)
  assert check_layouts(build, [B, M, F], ref, limit=3) >= 10


def test_dense_with_expert_dims_and_two_reduced_dims():
  e = mtf.Dimension("experts", 2)
  xv = RNG.randn(2, 4, 4, 8).astype(np.float32)

  def build(mesh):
    x = _x(mesh, xv, (e, B, N, M))
    return L.dense(x, F, reduced_dims=[N, M], expert_dims=[e], name="fc")
  w = variable_values(build)

  def ref():
    return (np.einsum("ebnm,enmf->ebf", xv, w["fc/kernel"])
            + w["fc/bias"][:, None, :])
  check_layouts(build, [e, B, F], ref, **FEW)


def test_dense_variables_get_unique_scopes():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = _x(mesh)
  L.dense(x, F)
  L.dense(x, F)
  names = [v.name for v in graph.all_variables]
  assert names == ["dense/kernel", "dense/bias", "dense_1/kernel",
                   "dense_1/bias"]


def test_dense_rejects_an_output_dim_already_in_the_input():
  graph = mtf.Graph()
  x = _x(mtf.Mesh(graph, "mesh"))
  with pytest.raises(mtf.ShapeError, match="new dim length=4 is already"):
    L.dense(x, N)


def test_dense_rejects_reduced_dims_not_in_the_input():
  graph = mtf.Graph()
  x = _x(mtf.Mesh(graph, "mesh"))
  with pytest.raises(mtf.ShapeError, match="dim vocab=8 is not a dim of"):
    L.dense(x, F, reduced_dims=[V])


def test_unknown_activation_names_the_choices():
  with pytest.raises(mtf.ShapeError, match="unknown activation 'relu6'"):
    L.get_activation("relu6")


# --- normalisation ------------------------------------------------------------
def test_layer_norm_matches_numpy_with_split_d_model():
  def build(mesh):
    return L.layer_norm(_x(mesh) * 3.0 + 1.0, M, name="ln")
  w = variable_values(build)
  ref = lambda: np_layer_norm(X * 3.0 + 1.0, w["ln/layer_norm/layer_norm_scale"],
                              w["ln/layer_norm/layer_norm_bias"])
  check_layouts(build, [B, M], ref, limit=4, rtol=1e-4, atol=1e-4)


def test_rms_norm_matches_numpy_with_split_d_model():
  def build(mesh):
    return L.rms_norm(_x(mesh), M, name="rms")
  w = variable_values(build)

  def ref():
    return X / np.sqrt((X.astype(np.float64) ** 2).mean(-1, keepdims=True)
                       + 1e-6) * w["rms/scale"]
  check_layouts(build, [N, M], ref, limit=4, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rms", [False, True])
def test_norm_gradients_match_gradient_tape_with_split_d_model(rms):
  r = RNG.randn(4, 4, 8).astype(np.float32)
  xv = X * 2.0 + 0.5

  def build(mesh):
    x = _x(mesh, xv)
    y = L.rms_norm(x, M, name="n") if rms else L.layer_norm(x, M, name="n")
    loss = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, r, x.shape))
    variables = [v.outputs[0] for v in mesh.graph.trainable_variables]
    return gradients([loss], [x] + variables)

  def ref():
    import tensorflow as tf
    x = tf.constant(xv)
    scale = tf.constant(RNG_SCALE)
    bias = tf.constant(RNG_BIAS)
    with tf.GradientTape() as tape:
      tape.watch([x, scale, bias])
      if rms:
        y = x * tf.math.rsqrt(tf.reduce_mean(x * x, -1, keepdims=True)
                              + 1e-6) * scale
      else:
        mu, var = tf.nn.moments(x, [-1], keepdims=True)
        y = (x - mu) * tf.math.rsqrt(var + 1e-6) * scale + bias
      loss = tf.reduce_sum(y * r)
    grads = tape.gradient(loss, [x, scale] + ([] if rms else [bias]))
    return [g.numpy() for g in grads]
  check_layouts(build, [B, M], ref, limit=3, rtol=1e-4, atol=1e-4,
                meshes=["x:2", "rows:2;cols:4"])


RNG_SCALE = np.ones(8, np.float32)   # the initializers' values
RNG_BIAS = np.zeros(8, np.float32)


def test_fused_softmax_and_its_gradient_match_tf_with_split_dim():
  xv = RNG.randn(4, 8).astype(np.float32) * 3
  r = RNG.randn(4, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([B, V]))
    y = L.softmax(x, V)
    loss = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, r, x.shape))
    return [y] + gradients([loss], [x])

  def ref():
    import tensorflow as tf
    x = tf.constant(xv)
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.nn.softmax(x)
      loss = tf.reduce_sum(y * r)
    return [y.numpy(), tape.gradient(loss, x).numpy()]
  check_layouts(build, [B, V], ref, limit=3, rtol=1e-4, atol=1e-5,
                meshes=["x:2", "rows:2;cols:4"])
  _, trace = run(build, "x:2", "vocab:x")
  assert [c.reduction for c in trace.collectives] == ["MAX", "SUM", "SUM"]


# --- embedding, feed-forward, dropout ----------------------------------------
def test_embedding_matches_numpy_with_split_vocab():
  def build(mesh):
    ids = mtf.import_tf_tensor(mesh, IDS, mtf.Shape([B, N]))
    return L.embedding(ids, V, M, name="emb")
  w = variable_values(build)
  check_layouts(build, [B, V, M], lambda: w["emb/weights"][IDS], limit=3,
                meshes=["x:2", "rows:2;cols:4", "x:8"])


def test_dense_relu_dense_matches_numpy():
  def build(mesh):
    return L.dense_relu_dense(_x(mesh), F, name="ffn")
  w = variable_values(build)

  def ref():
    return np.maximum(X @ w["ffn/wi/kernel"], 0) @ w["ffn/wo/kernel"]
  assert [n for n in w] == ["ffn/wi/kernel", "ffn/wo/kernel"]
  check_layouts(build, [B, M, F], ref, rtol=1e-4, atol=1e-5, **FEW)


def test_dropout_is_layout_invariant_and_drops_about_rate():
  xv = np.ones((4, 4, 8), np.float32)

  def build(mesh):
    return L.dropout(_x(mesh, xv), rate=0.5, seed=3)
  check_layouts(build, [B, N, M], limit=3, meshes=["x:2", "x:8"])
  (y,), _ = run(build, "all:1", "")
  assert set(np.unique(y)) <= {0.0, 2.0}
  assert 0.25 < (y == 0).mean() < 0.75


def test_dropout_is_identity_at_rate_zero_or_inference():
  graph = mtf.Graph()
  x = _x(mtf.Mesh(graph, "mesh"))
  assert L.dropout(x, 0.0) is x
  assert L.dropout(x, 0.5, is_training=False) is x


# --- losses ------------------------------------------------------------------
def np_cross_entropy(logits, onehot, z_loss=0.0):
  m = logits.max(-1, keepdims=True)
  lse = (np.log(np.exp(logits - m).sum(-1, keepdims=True)) + m)[..., 0]
  return lse - (logits * onehot).sum(-1) + z_loss * lse ** 2


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_softmax_cross_entropy_int_targets_with_split_vocab(z_loss):
  logits = RNG.randn(4, 4, 8).astype(np.float32) * 3

  def build(mesh):
    lg = mtf.import_tf_tensor(mesh, logits, mtf.Shape([B, N, V]))
    tg = mtf.import_tf_tensor(mesh, IDS, mtf.Shape([B, N]))
    return L.softmax_cross_entropy_with_logits(lg, tg, V, z_loss=z_loss)
  ref = lambda: np_cross_entropy(logits, np.eye(8)[IDS], z_loss)
  check_layouts(build, [B, V], ref, limit=4, rtol=1e-4, atol=1e-5)


def test_softmax_cross_entropy_distribution_targets():
  logits = RNG.randn(4, 8).astype(np.float32)
  dist = np_softmax(RNG.randn(4, 8)).astype(np.float32)

  def build(mesh):
    lg = mtf.import_tf_tensor(mesh, logits, mtf.Shape([B, V]))
    tg = mtf.import_tf_tensor(mesh, dist, mtf.Shape([B, V]))
    return L.softmax_cross_entropy_with_logits(lg, tg, V)
  check_layouts(build, [B, V], lambda: np_cross_entropy(logits, dist),
                **FEW)


def test_softmax_cross_entropy_rejects_float_targets_without_vocab():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  lg = mtf.import_tf_tensor(mesh, np.zeros((4, 8), np.float32),
                            mtf.Shape([B, V]))
  tg = mtf.import_tf_tensor(mesh, np.zeros((4,), np.float32),
                            mtf.Shape([B]))
  with pytest.raises(mtf.ShapeError, match="has no dim vocab=8 and is not"):
    L.softmax_cross_entropy_with_logits(lg, tg, V)


# --- attention ---------------------------------------------------------------
def np_attention(x, w, prefix, bias):
  q = np.einsum("bnm,mhk->bhnk", x, w[f"{prefix}/q"])
  k = np.einsum("bnm,mhk->bhnk", x, w[f"{prefix}/k"])
  v = np.einsum("bnm,mhk->bhnk", x, w[f"{prefix}/v"])
  logits = np.einsum("bhnk,bhsk->bhns", q, k) + bias
  o = np.einsum("bhns,bhsk->bnhk", np_softmax(logits), v)
  return np.einsum("bnhk,hkm->bnm", o, w[f"{prefix}/o"])


def test_multihead_attention_causal_and_padding_masks_match_numpy():
  ids = IDS.copy()
  ids[1, 2:] = 0   # padding at the end of one example
  ids[2, :] = np.arange(1, 5)

  def build(mesh):
    x = _x(mesh)
    tokens = mtf.import_tf_tensor(mesh, ids, mtf.Shape([B, N]))
    pos = mtf.range(mesh, N, dtype="int32")
    bias = (L.attention_mask_autoregressive(pos)
            + L.attention_mask_ignore_padding(tokens, pad_id=0))
    return L.multihead_attention(x, None, bias, K, H, name="att")
  w = variable_values(build)

  def ref():
    causal = np.triu(np.full((4, 4), L.MASK_BIAS), 1)
    pad = np.where(ids == 0, L.MASK_BIAS, 0.0)[:, None, None, :]
    return np_attention(X.astype(np.float64), w, "att", causal + pad)
  check_layouts(build, [B, H, K, M], ref, limit=3, rtol=1e-4, atol=1e-5,
                meshes=["x:2", "rows:2;cols:4"])


def test_attention_with_split_heads_allreduces_once_after_output():
  def build(mesh):
    return L.multihead_attention(_x(mesh), None, None, K, H, name="att")
  _, trace = run(build, "rows:2;cols:2", "batch:rows;heads:cols")
  assert [(c.source_op, c.kind, c.mesh_axes)
          for c in trace.collectives] == [
              ("att/o_proj", "allreduce", ("cols",))]


def test_attention_rejects_memory_without_a_distinct_length_dim():
  graph = mtf.Graph()
  x = _x(mtf.Mesh(graph, "mesh"))
  with pytest.raises(mtf.ShapeError, match="renamed"):
    L.multihead_attention(x, x, None, K, H)


# --- mixture of experts ------------------------------------------------------
XM = RNG.randn(4, 8, 8).astype(np.float32)
E = mtf.Dimension("experts", 4)
NM = mtf.Dimension("length", 8)


def np_moe(x, w, cap, loss_coef=1e-2):
  """Top-2 gating with per-(batch, expert) capacity, written with loops."""
  b_, n_, _ = x.shape
  e_ = w["moe/gate"].shape[1]
  gates = np_softmax(x @ w["moe/gate"])
  y = np.zeros_like(x)
  mask1 = np.eye(e_)[gates.argmax(-1)]
  loss = (mask1.mean(1) * gates.mean(1)).mean() * e_ * e_ * loss_coef
  for b in range(b_):
    g = gates[b]
    i1 = g.argmax(-1)
    g2 = g * (1 - np.eye(e_)[i1])
    i2 = g2.argmax(-1)
    v1, v2 = g[np.arange(n_), i1], g2[np.arange(n_), i2]
    d = v1 + v2 + 1e-9
    count = np.zeros(e_, int)
    assigned = []
    for t in range(n_):
      if count[i1[t]] < cap:
        assigned.append((t, i1[t], v1[t] / d[t]))
      count[i1[t]] += 1
    count = np.minimum(count, cap)
    for t in range(n_):
      if count[i2[t]] < cap:
        assigned.append((t, i2[t], v2[t] / d[t]))
      count[i2[t]] += 1
    for t, e, gate in assigned:
      h = np.maximum(x[b, t] @ w["moe/wi"][e], 0)
      y[b, t] += gate * (h @ w["moe/wo"][e])
  return y, loss


def build_moe(mesh):
  x = mtf.import_tf_tensor(mesh, XM, mtf.Shape([B, NM, M]))
  return list(L.moe(x, F, E, capacity_factor=1.0, name="moe"))


def test_moe_matches_a_loop_reference_under_layouts():
  w = variable_values(build_moe)
  cap = L.expert_capacity(8, 4, 1.0)
  assert cap == 2  # small enough that some tokens overflow

  def ref():
    return np_moe(XM.astype(np.float64), w, cap)
  check_layouts(build_moe, [B, E, F, M], ref, limit=3, rtol=1e-4,
                atol=1e-5, meshes=["x:2", "rows:2;cols:2"])


def test_moe_dispatch_lowers_to_alltoall_when_batch_and_experts_share_axis():
  base, _ = run(build_moe, "all:1", "")
  vals, trace = run(build_moe, "x:4", "batch:x;experts:x")
  for v, b in zip(vals, base):
    np.testing.assert_allclose(v, b, rtol=1e-5, atol=1e-6)
  kinds = [c.kind for c in trace.collectives]
  assert kinds.count("alltoall") == 2  # dispatch and return
  assert "allconcat" not in kinds
  # Each processor holds the weights of its own experts only.
  assert trace.variables["moe/wi"] == 4 * 8 * 8 * 4 // 4


def test_moe_rejects_inputs_that_are_not_3d():
  graph = mtf.Graph()
  x = mtf.import_tf_tensor(mtf.Mesh(graph, "mesh"), np.zeros((4, 8), "f"),
                           mtf.Shape([B, M]))
  with pytest.raises(mtf.ShapeError, match=r"must be \[batch, length"):
    L.moe(x, F, E)
