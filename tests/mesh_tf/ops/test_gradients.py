"""Gradients vs tf.GradientTape on the single-device reference, and under
split layouts on 8 logical CPU devices."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf.gradients import (GradientError, custom_gradient,
                               gradient_function, gradients, recompute_grad,
                               register_gradient)
from tests.layout_harness import check_layouts, run

B, D, K = mtf.Dimension("b", 4), mtf.Dimension("d", 8), mtf.Dimension("k", 4)
RNG = np.random.RandomState(0)
XV = (RNG.rand(4, 8) + 0.5).astype(np.float32)   # positive, for log/sqrt
YV = (RNG.rand(8) + 0.5).astype(np.float32)
ZV = RNG.randn(4, 8).astype(np.float32)          # signed
GV = RNG.randn(4, 8).astype(np.float32)          # output gradient
WV = RNG.randn(8, 4).astype(np.float32)


def _mtf_grads(fn, values, shapes, gv, mesh_shape="all:1", layout=""):
  """Gradients of fn(*inputs) (weighted by gv) w.r.t. every input."""
  def build(mesh):
    xs = [mtf.import_tf_tensor(mesh, v, s) for v, s in zip(values, shapes)]
    y = fn(*xs)
    g = None if gv is None else mtf.import_tf_tensor(mesh, gv, y.shape)
    return gradients([y], xs, [g])
  vals, _ = run(build, mesh_shape, layout)
  return vals


def _tape_grads(fn, values, gv):
  xs = [tf.constant(v) for v in values]
  with tf.GradientTape() as tape:
    tape.watch(xs)
    y = fn(*xs)
  return [g.numpy() for g in tape.gradient(y, xs, output_gradients=gv)]


UNARY = [
    ("abs", mtf.abs, tf.abs, ZV),
    ("negative", mtf.negative, tf.negative, ZV),
    ("identity", mtf.identity, tf.identity, ZV),
    ("square", mtf.square, tf.square, ZV),
    ("sqrt", mtf.sqrt, tf.sqrt, XV),
    ("rsqrt", mtf.rsqrt, tf.math.rsqrt, XV),
    ("reciprocal", mtf.reciprocal, tf.math.reciprocal, XV),
    ("exp", mtf.exp, tf.exp, ZV),
    ("log", mtf.log, tf.math.log, XV),
    ("sin", mtf.sin, tf.sin, ZV),
    ("cos", mtf.cos, tf.cos, ZV),
    ("tanh", mtf.tanh, tf.tanh, ZV),
    ("sigmoid", mtf.sigmoid, tf.sigmoid, ZV),
    ("relu", mtf.relu, tf.nn.relu, ZV),
    ("elu", mtf.elu, tf.nn.elu, ZV),
    ("selu", mtf.selu, tf.nn.selu, ZV),
    ("softplus", mtf.softplus, tf.nn.softplus, ZV),
    ("swish", mtf.swish, lambda x: x * tf.sigmoid(x), ZV),
    ("gelu", mtf.gelu, lambda x: tf.nn.gelu(x, approximate=True), ZV),
    ("leaky_relu", lambda x: mtf.leaky_relu(x, 0.3),
     lambda x: tf.nn.leaky_relu(x, 0.3), ZV),
    ("cast", lambda x: mtf.cast(mtf.cast(x, "float64"), "float32"),
     lambda x: tf.cast(tf.cast(x, tf.float64), tf.float32), ZV),
]


@pytest.mark.parametrize("name,mfn,tfn,xv", UNARY, ids=[u[0] for u in UNARY])
def test_unary_gradient_matches_tape(name, mfn, tfn, xv):
  (got,) = _mtf_grads(mfn, [xv], [mtf.Shape([B, D])], GV)
  (want,) = _tape_grads(tfn, [xv], GV)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


BINARY = [
    ("add", mtf.add, tf.add),
    ("subtract", mtf.subtract, tf.subtract),
    ("multiply", mtf.multiply, tf.multiply),
    ("divide", mtf.divide, tf.divide),
    ("maximum", mtf.maximum, tf.maximum),
    ("minimum", mtf.minimum, tf.minimum),
    ("pow", mtf.pow, tf.pow),
]


@pytest.mark.parametrize("name,mfn,tfn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_gradient_broadcasts_by_name(name, mfn, tfn):
  # y has only dim d, so its gradient sums over b; x gets a transposed view.
  got = _mtf_grads(mfn, [XV, YV], [mtf.Shape([B, D]), mtf.Shape([D])], GV)
  want = _tape_grads(tfn, [XV, YV[None, :]], GV)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[1], want[1][0], rtol=1e-5, atol=1e-5)


SCALAR = [
    ("x+2", lambda x: x + 2.0),
    ("2-x", lambda x: 2.0 - x),
    ("x-2", lambda x: x - 2.0),
    ("3*x", lambda x: 3.0 * x),
    ("2/x", lambda x: 2.0 / x),
    ("x/2", lambda x: x / 2.0),
    ("x**3", lambda x: mtf.pow(x, 3.0) if isinstance(x, mtf.Tensor)
     else tf.pow(x, 3.0)),
    ("max(x,0.8)", lambda x: mtf.maximum(x, 0.8) if isinstance(x, mtf.Tensor)
     else tf.maximum(x, 0.8)),
]


@pytest.mark.parametrize("name,fn", SCALAR, ids=[s[0] for s in SCALAR])
def test_gradient_with_python_scalar_operand(name, fn):
  (got,) = _mtf_grads(fn, [XV], [mtf.Shape([B, D])], GV)
  (want,) = _tape_grads(fn, [XV], GV)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_gradient_of_transposed_broadcast_operand():
  xv_t = np.ascontiguousarray(XV.T)
  got = _mtf_grads(lambda a, b: a * b + a,
                   [ZV, xv_t], [mtf.Shape([B, D]), mtf.Shape([D, B])], GV)
  want = _tape_grads(lambda a, b: a * tf.transpose(b) + a, [ZV, xv_t], GV)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_where_gradient():
  def mfn(x, z):
    return mtf.where(mtf.greater(z, 0.0), x, z * 2.0)
  got = _mtf_grads(mfn, [XV, ZV], [mtf.Shape([B, D])] * 2, GV)
  want = _tape_grads(lambda x, z: tf.where(z > 0, x, z * 2.0), [XV, ZV], GV)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-6)


def test_einsum_gradients():
  vv = RNG.randn(4).astype(np.float32)
  shapes = [mtf.Shape([B, D]), mtf.Shape([D, K]), mtf.Shape([K])]

  def mfn(x, w, v):
    # three operands, a dim (k) contracted away, b kept
    return mtf.einsum([x, w, v], output_shape=mtf.Shape([B]))
  got = _mtf_grads(mfn, [ZV, WV, vv], shapes, GV[:, 0])
  want = _tape_grads(lambda x, w, v: tf.einsum("bd,dk,k->b", x, w, v),
                     [ZV, WV, vv], GV[:, 0])
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_einsum_gradient_broadcasts_dims_summed_in_one_operand():
  def mfn(x, w):
    return mtf.einsum([x, w], output_shape=mtf.Shape([K]))  # b only in x
  got = _mtf_grads(mfn, [ZV, WV], [mtf.Shape([B, D]), mtf.Shape([D, K])],
                   GV[0, :4])
  want = _tape_grads(lambda x, w: tf.einsum("bd,dk->k", x, w), [ZV, WV],
                     GV[0, :4])
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_reduction_gradients():
  tied = ZV.copy()
  tied[:, 3] = tied.max(axis=1)  # a tie per row: TF splits the gradient
  shape = [mtf.Shape([B, D])]
  cases = [
      (lambda x: mtf.reduce_sum(x, reduced_dim=D),
       lambda x: tf.reduce_sum(x, 1), ZV, GV[:, 0]),
      (lambda x: mtf.reduce_mean(x, output_shape=mtf.Shape([D])),
       lambda x: tf.reduce_mean(x, 0), ZV, GV[0]),
      (lambda x: mtf.reduce_max(x, reduced_dim=D),
       lambda x: tf.reduce_max(x, 1), tied, GV[:, 0]),
      (lambda x: mtf.reduce_min(x, reduced_dim=B),
       lambda x: tf.reduce_min(x, 0), ZV, GV[0]),
      (lambda x: mtf.reduce_logsumexp(x, D),
       lambda x: tf.reduce_logsumexp(x, 1), ZV, GV[:, 0]),
      (lambda x: mtf.softmax(x, D), lambda x: tf.nn.softmax(x, 1), ZV, GV),
      (lambda x: mtf.log_softmax(x, D), lambda x: tf.nn.log_softmax(x, 1),
       ZV, GV),
      (lambda x: mtf.reduce_sum(x), tf.reduce_sum, ZV, None),
  ]
  for mfn, tfn, xv, gv in cases:
    (got,) = _mtf_grads(mfn, [xv], shape, gv)
    (want,) = _tape_grads(tfn, [xv], gv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gather_top_k_cumsum_gradients():
  vocab = mtf.Dimension("d", 8)
  ids = np.array([[1, 7, 1, 0], [3, 3, 2, 5]], np.int32)
  pos = mtf.Dimension("b", 4)
  row = mtf.Dimension("r", 2)

  def build(mesh):
    w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([vocab, K]))
    z = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([pos, vocab]))
    i = mtf.import_tf_tensor(mesh, ids, mtf.Shape([row, pos]))
    e = mtf.gather(w, i, vocab)  # [r, b, k]
    vals, _ = mtf.top_k(z, vocab, mtf.Dimension("top", 3))
    top1, _ = mtf.top_1(z, vocab)
    c = mtf.cumsum(z, vocab) * z + mtf.cumsum(z, pos, exclusive=True)
    loss = (mtf.reduce_sum(mtf.square(e)) + mtf.reduce_sum(vals * vals)
            + mtf.reduce_sum(top1 * 3.0) + mtf.reduce_sum(c * c))
    return gradients([loss], [w, z])
  got, _ = run(build, "all:1", "")
  w, z = tf.constant(WV), tf.constant(ZV)
  with tf.GradientTape() as tape:
    tape.watch([w, z])
    e = tf.gather(w, ids)
    vals, _ = tf.math.top_k(z, 3)
    c = tf.cumsum(z, 1) * z + tf.cumsum(z, 0, exclusive=True)
    loss = (tf.reduce_sum(e * e) + tf.reduce_sum(vals * vals)
            + tf.reduce_sum(tf.reduce_max(z, 1) * 3.0) + tf.reduce_sum(c * c))
  want = tape.gradient(loss, [w, z])
  for g, wnt in zip(got, want):
    np.testing.assert_allclose(g, tf.convert_to_tensor(wnt).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_dropout_gradient_is_the_scaled_mask():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
    (gx,) = gradients([mtf.reduce_sum(mtf.dropout(x, rate=0.5, seed=3))], [x])
    return [gx, mtf.dropout(mtf.ones(mesh, x.shape), rate=0.5, seed=3)]
  (gx, mask), _ = run(build, "rows:2;cols:4", "b:rows;d:cols")
  np.testing.assert_array_equal(gx, mask)
  assert set(np.unique(mask)) == {0.0, 2.0}


def test_sign_and_comparisons_have_no_gradient():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
  y = mtf.sign(x) + mtf.cast(mtf.greater(x, 0.0), "float32")
  assert gradients([y], [x]) == [None]


def test_stop_gradient_depend_and_unconnected():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
    u = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
    y = mtf.depend(x * x, [u]) + mtf.stop_gradient(x) * x
    gx, gu = gradients([mtf.reduce_sum(y)], [x, u])
    assert gu is None
    return gx
  (got,), _ = run(build, "all:1", "")
  np.testing.assert_allclose(got, 3 * XV, rtol=1e-6)


def test_unused_gradient_ops_are_pruned():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  c = mtf.import_tf_tensor(mesh, YV, mtf.Shape([D]))
  loss = mtf.reduce_sum(mtf.exp(x * c) / c)
  n = len(graph.operations)
  gradients([loss], [x])
  # ones, broadcast, divide-grad, exp-grad, multiply-grad: nothing for c.
  new = graph.operations[n:]
  assert len(new) == 5, new
  assert not any("grad1" in op.name for op in new), new


def test_custom_gradient_uses_grad_fn():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
    y = custom_gradient(
        lambda t: mtf.square(t),
        lambda op, dys: [dys[0] * 10.0],  # deliberately not 2x
        [x])
    return [y] + gradients([mtf.reduce_sum(y)], [x])
  (y, gx), _ = run(build, "all:1", "")
  np.testing.assert_allclose(y, ZV ** 2, rtol=1e-6)
  np.testing.assert_allclose(gx, np.full_like(ZV, 10.0))


def test_recompute_grad_matches_plain_gradient_and_rebuilds_ops():
  def block(x):
    w = mtf.get_variable(x.mesh, "w", mtf.Shape([D, K]),
                         initializer=WV)
    return mtf.reduce_sum(mtf.tanh(mtf.einsum([x, w], reduced_dims=[D])))

  def build(recompute):
    def b(mesh):
      x = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
      y = recompute_grad(block, [x]) if recompute else block(x)
      w = mesh.graph.trainable_variables[0]
      out = gradients([y], [x, w.outputs[0]])
      if recompute:
        assert any(op.name.endswith("_recompute")
                   for op in mesh.graph.operations)
      return out
    return b
  plain, _ = run(build(False), "all:1", "")
  again, _ = run(build(True), "rows:2;cols:4", "b:rows;k:cols")
  for p, a in zip(plain, again):
    np.testing.assert_allclose(a, p, rtol=1e-5, atol=1e-6)


def test_op_without_gradient_raises_naming_it():
  class Opaque(mtf.Operation):
    def __init__(self, x):
      super().__init__([x], name="opaque")
      self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  y = Opaque(x).outputs[0]
  with pytest.raises(GradientError, match=r"opaque \(Opaque\).*no gradient"):
    gradients([mtf.reduce_sum(y)], [x])


def test_registered_gradient_and_bad_shape_error():
  class Twice(mtf.Operation):
    def __init__(self, x):
      super().__init__([x], name="twice")
      self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

  @register_gradient(Twice)
  def _bad(op, grad_ys):
    return [mtf.reduce_sum(grad_ys[0], reduced_dim=B)]

  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  y = Twice(x).outputs[0]
  assert gradient_function(y.operation) is _bad
  with pytest.raises(GradientError, match=r"gradient of import.*has shape"):
    gradients([mtf.reduce_sum(y)], [x])


# --- split layouts on up to 8 devices -------------------------------------------
def _mlp_grads(mesh):
  x = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
  w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([D, K]))
  v = mtf.import_tf_tensor(mesh, YV[:4], mtf.Shape([K]))
  h = mtf.relu(mtf.einsum([x, w], reduced_dims=[D]) + v)   # [b, k]
  logits = mtf.einsum([h, w], output_shape=mtf.Shape([B, D]))
  lse = mtf.reduce_logsumexp(logits, D)
  loss = mtf.reduce_mean(lse - mtf.reduce_max(logits, reduced_dim=D) * 0.5)
  loss += mtf.reduce_sum(mtf.square(h) / v) * 0.01
  return gradients([loss], [x, w, v])


def _mlp_reference():
  x, w, v = tf.constant(ZV), tf.constant(WV), tf.constant(YV[:4])
  with tf.GradientTape() as tape:
    tape.watch([x, w, v])
    h = tf.nn.relu(x @ w + v)
    logits = h @ tf.transpose(w)
    loss = tf.reduce_mean(tf.reduce_logsumexp(logits, 1)
                          - tf.reduce_max(logits, 1) * 0.5)
    loss += tf.reduce_sum(h * h / v) * 0.01
  return [g.numpy() for g in tape.gradient(loss, [x, w, v])]


def test_gradients_match_under_every_split_layout():
  n = check_layouts(_mlp_grads, [B, D, K], _mlp_reference,
                    meshes=["rows:2;cols:4", "x:8"], limit=10, rtol=1e-4,
                    atol=1e-5)
  assert n >= 10


def test_split_reduced_dim_gradient_records_allreduce():
  # d split: the gradient of the x-only dim b's broadcast operand needs none,
  # but the gradient of v (dim k) sums over b, which is split over rows.
  _, trace = run(_mlp_grads, "rows:2;cols:4", "b:rows;d:cols")
  kinds = {(c.kind, c.mesh_axes) for c in trace.collectives}
  assert ("allreduce", ("rows",)) in kinds
  assert ("allreduce", ("cols",)) in kinds


# --- layout ops: reshape, transpose, broadcast, slicing, shift --------------------
P, Q = mtf.Dimension("p", 2), mtf.Dimension("q", 4)


def _layout_ops_grads(mesh):
  x = mtf.import_tf_tensor(mesh, ZV, mtf.Shape([B, D]))
  y = mtf.import_tf_tensor(mesh, YV, mtf.Shape([D]))
  r = mtf.reshape(x * y, mtf.Shape([B, P, Q]))
  pieces = [
      mtf.transpose(r, mtf.Shape([Q, B, P])) * 3.0,
      mtf.broadcast(y, mtf.Shape([B, D])) * x,
  ]
  s1, s2 = mtf.split(mtf.concat([x, x * 2.0], "d"), "d", [4, 12])
  pieces += [s1, s2 * s2]
  u1, u2 = mtf.unstack(mtf.stack([x, x * x], "s", axis=1), "s")
  pieces += [u1 * 2.0, u2]
  pieces += [mtf.slice(x, 2, 4, "d"), mtf.pad(x, [1, 3], "d") * 1.5,
             mtf.shift(x, 1, B, wrap=False) * x,
             mtf.shift(x, -3, D, wrap=True)]
  loss = mtf.add_n([mtf.reduce_sum(mtf.square(t)) for t in pieces])
  return gradients([loss], [x, y])


def _layout_ops_reference():
  x, y = tf.constant(ZV), tf.constant(YV)
  with tf.GradientTape() as tape:
    tape.watch([x, y])
    r = tf.reshape(x * y, [4, 2, 4])
    pieces = [tf.transpose(r, [2, 0, 1]) * 3.0, tf.broadcast_to(y, [4, 8]) * x]
    s1, s2 = tf.split(tf.concat([x, x * 2.0], 1), [4, 12], 1)
    pieces += [s1, s2 * s2]
    u1, u2 = tf.unstack(tf.stack([x, x * x], 1), axis=1)
    pieces += [u1 * 2.0, u2]
    shifted = tf.concat([tf.zeros([1, 8]), x[:-1]], 0)
    pieces += [x[:, 2:6], tf.pad(x, [[0, 0], [1, 3]]) * 1.5, shifted * x,
               tf.roll(x, -3, axis=1)]
    loss = tf.add_n([tf.reduce_sum(tf.square(t)) for t in pieces])
  return [g.numpy() for g in tape.gradient(loss, [x, y])]


def test_layout_op_gradients_match_tape_under_split_layouts():
  n = check_layouts(_layout_ops_grads, [B, D, P, Q], _layout_ops_reference,
                    meshes=["rows:2;cols:4"], limit=5, rtol=1e-5, atol=1e-4)
  assert n >= 5
