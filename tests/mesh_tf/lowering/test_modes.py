"""One lowered graph runs in TF2 eager mode, inside ``tf.function`` (traced
once, then fast) and in ``tf.compat.v1`` graph mode, with the same numbers.

The model is a tiny training step: ``y = sum_b relu(x @ w)``, then
``w -= lr * x^T relu(x @ w)`` and ``step += 1``.
"""

import time

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf

B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 4), mtf.Dimension("n", 8)
LR = 0.01
_rng = np.random.RandomState(0)
XS = [_rng.randn(8, 4).astype(np.float32) for _ in range(3)]
W0 = (_rng.randn(4, 8) * 0.5).astype(np.float32)
LAYOUTS = [("rows:2;cols:4", "b:rows;k:cols"), ("x:8", "n:x"),
           ("rows:2;cols:2", "b:cols;n:rows")]


def _model():
  """The graph, and the tensors/ops a step needs."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([B, K]), name="x",
                           dtype="float32")
  # A NumPy initial value keeps the v1 graph small; the random initializers'
  # layout invariance is tested in test_variables.py.
  w = mtf.get_variable(mesh, "w", mtf.Shape([K, N]), initializer=W0)
  step = mtf.get_variable(mesh, "step", "", dtype="int32", initializer=0,
                          trainable=False)
  h = mtf.relu(mtf.einsum([x, w], mtf.Shape([B, N])))
  y = mtf.reduce_sum(h, reduced_dim=B)
  updates = [mtf.assign_sub(w, mtf.einsum([x, h], mtf.Shape([K, N])) * LR),
             mtf.assign_add(step, mtf.ones(mesh, "", dtype="int32"))]
  return graph, mesh, x, w, y, updates


def _numpy_reference(w0):
  w, ys = w0.astype(np.float64), []
  for xv in XS:
    h = np.maximum(xv @ w, 0)
    ys.append(h.sum(0))
    w = w - LR * xv.T @ h
  return ys, w


def _impl(mesh_shape, layout):
  n = mtf.convert_to_shape(mesh_shape).size
  return mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))


def _variable_value(impl, name, shape):
  return impl.export_to_tf_tensor(impl.variables[name].value(), shape)


def run_eager(mesh_shape, layout):
  graph, mesh, x, w, y, _ = _model()
  impl = _impl(mesh_shape, layout)
  ys = []
  for xv in XS:
    lowering = mtf.Lowering(graph, {mesh: impl}, feeds={x: xv})
    ys.append(lowering.export_to_tf_tensor(y).numpy())
  return ys, _variable_value(impl, "w", w.shape).numpy(), int(
      _variable_value(impl, "step", mtf.Shape([])).numpy())


def run_tf_function(mesh_shape, layout):
  """Runs the steps in a tf.function; returns values, final state and the
  Python trace count after each call, and each call's wall time."""
  graph, mesh, x, w, y, _ = _model()
  impl = _impl(mesh_shape, layout)
  traces = []

  @tf.function(input_signature=[tf.TensorSpec([8, 4], tf.float32)])
  def train_step(xv):
    traces.append(1)
    lowering = mtf.Lowering(graph, {mesh: impl}, feeds={x: xv})
    return lowering.export_to_tf_tensor(y)
  ys, times, counts = [], [], []
  for xv in XS:
    t0 = time.perf_counter()
    ys.append(train_step(tf.constant(xv)).numpy())
    times.append(time.perf_counter() - t0)
    counts.append(len(traces))
  return (ys, _variable_value(impl, "w", w.shape).numpy(),
          int(_variable_value(impl, "step", mtf.Shape([])).numpy()),
          counts, times)


def run_v1_graph(mesh_shape, layout):
  graph, mesh, x, w, y, updates = _model()
  tf_graph = tf.Graph()
  with tf_graph.as_default():
    impl = _impl(mesh_shape, layout)
    xv_ph = tf.compat.v1.placeholder(tf.float32, [8, 4])
    lowering = mtf.Lowering(graph, {mesh: impl}, feeds={x: xv_ph})
    y_t = lowering.export_to_tf_tensor(y)
    update_ops = [o for u in updates for o in lowering.lowered_operation(u)]
    w_t = _variable_value(impl, "w", w.shape)
    step_t = _variable_value(impl, "step", mtf.Shape([]))
    # Mesh TF's order: the masters exist once Lowering returns, so this
    # initializer covers them; the slices are local, filled from them.
    init = tf.compat.v1.global_variables_initializer()
    copy = lowering.copy_masters_to_slices()
    assert len(tf.compat.v1.global_variables()) == 2
    assert len(tf.compat.v1.local_variables()) == 2 * impl.size
  with tf.compat.v1.Session(graph=tf_graph) as sess:
    sess.run(init)
    sess.run(copy)
    w0 = sess.run(w_t)
    ys = []
    for xv in XS:
      yv, _ = sess.run([y_t, update_ops], feed_dict={xv_ph: xv})
      ys.append(yv)
    return ys, sess.run(w_t), int(sess.run(step_t)), w0


@pytest.mark.parametrize("mesh_shape,layout", LAYOUTS)
def test_eager_tf_function_and_v1_graph_agree(mesh_shape, layout):
  _, _, _, w, _, _ = _model()
  w0 = w.operation.initial_value_numpy()
  ref_ys, ref_w = _numpy_reference(w0)

  e_ys, e_w, e_step = run_eager(mesh_shape, layout)
  f_ys, f_w, f_step, traces, times = run_tf_function(mesh_shape, layout)
  g_ys, g_w, g_step, g_w0 = run_v1_graph(mesh_shape, layout)

  np.testing.assert_allclose(g_w0, w0, rtol=1e-6)  # same initial value
  for ys in (e_ys, f_ys, g_ys):
    for got, ref in zip(ys, ref_ys):
      np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  for got in (e_w, f_w, g_w):
    np.testing.assert_allclose(got, ref_w, rtol=1e-4, atol=1e-5)
  # The three modes compute the same thing, to float32 rounding.
  for a, b in zip(e_ys, f_ys):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  for a, b in zip(e_ys, g_ys):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  assert e_step == f_step == g_step == len(XS)
  # All tracing happens in the first call; the later calls run the concrete
  # function without re-lowering, so they are faster than the first.  (TF
  # traces a function that creates variables twice in its first call: once
  # to create them, once without; see the next test for the steady state.)
  assert traces[0] in (1, 2) and traces[1:] == [traces[0]] * (len(XS) - 1)
  assert min(times[1:]) < times[0]


def test_tf_function_creates_variables_once_and_keeps_them():
  graph, mesh, x, _, y, _ = _model()
  impl = _impl("rows:2;cols:4", "b:rows;k:cols")
  traces = []

  def step(xv):
    traces.append(1)
    return mtf.Lowering(graph, {mesh: impl},
                        feeds={x: xv}).export_to_tf_tensor(y)
  first = tf.function(step)
  first(tf.constant(XS[0]))
  slices = list(impl.variables["w"].slices)
  assert all(isinstance(s, tf.Variable) for s in slices)
  n_first = len(traces)
  # A second function on the same backend finds the variables made: it
  # traces exactly once, however often it is called.
  second = tf.function(step)
  for xv in XS:
    second(tf.constant(xv))
  assert len(traces) == n_first + 1
  assert second.experimental_get_tracing_count() == 1
  assert impl.variables["w"].slices == slices  # the same tf.Variables
  assert int(_variable_value(impl, "step", mtf.Shape([]))) == 1 + len(XS)


def test_depend_orders_an_update_before_a_read_in_v1_graph_mode():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  c = mtf.get_variable(mesh, "c", mtf.Shape([B]), initializer=0.0)
  bump = mtf.assign_add(c, mtf.ones(mesh, mtf.Shape([B])))
  marker = mtf.depend(mtf.ones(mesh, mtf.Shape([K])), [bump])
  tf_graph = tf.Graph()
  with tf_graph.as_default():
    impl = _impl("x:8", "b:x")
    lowering = mtf.Lowering(graph, {mesh: impl})
    marker_t = lowering.export_to_tf_tensor(marker)
    c_t = _variable_value(impl, "c", c.shape)
    init = [tf.compat.v1.global_variables_initializer(),
            tf.compat.v1.local_variables_initializer()]
  with tf.compat.v1.Session(graph=tf_graph) as sess:
    sess.run(init)
    for i in range(1, 4):
      np.testing.assert_array_equal(sess.run(marker_t), np.ones(4))
      # Fetching only the marker ran the update it depends on.
      np.testing.assert_array_equal(sess.run(c_t), np.full(8, float(i)))
