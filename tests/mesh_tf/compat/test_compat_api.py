"""Mesh TensorFlow's Lowering and variables API: master variables and their
copies, the session hooks, variable-scope names, VariableDType, per-slice
assign functions and read_variable -- under several layouts."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from tests.layout_harness import check_layouts

V1 = tf.compat.v1
LAYOUTS = [("rows:2;cols:4", "a:rows;b:cols"), ("x:8", "a:x"), ("x:8", ""),
           ("rows:2;cols:2", "b:rows")]


def _graph_with_update(init_seed=3):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", "a:8;b:4",
                       initializer=V1.random_normal_initializer(seed=init_seed))
  step = mtf.get_variable(mesh, "count", "", dtype=tf.int32, initializer=0,
                          trainable=False)
  updates = [mtf.assign_add(w, mtf.ones(mesh, "a:8;b:4") * 2.0),
             mtf.assign_add(step, mtf.ones(mesh, "", dtype="int32"))]
  return graph, mesh, w, updates


def _impl(mesh_shape, layout):
  n = mtf.convert_to_shape(mesh_shape).size
  return mtf.PlacementMeshImpl(mesh_shape, layout,
                               ["/cpu:%d" % i for i in range(n)])


def _session(tf_graph):
  return V1.Session(graph=tf_graph,
                    config=V1.ConfigProto(device_count={"CPU": 8}))


@pytest.mark.parametrize("mesh_shape,layout", LAYOUTS)
def test_masters_fill_slices_and_take_them_back(mesh_shape, layout):
  graph, mesh, w, updates = _graph_with_update()
  tf_graph = tf.Graph()
  with tf_graph.as_default():
    impl = _impl(mesh_shape, layout)
    lowering = mtf.Lowering(graph, {mesh: impl})
    hook = mtf.MtfRestoreHook(lowering)
    listener = mtf.MtfCheckpointSaverListener(lowering)
    # The Saver sees whole variables under their mtf names, not slices.
    assert sorted(v.op.name for v in V1.global_variables()) == ["count", "w"]
    assert [v.op.name for v in V1.trainable_variables()] == ["w"]
    assert len(V1.local_variables()) == 2 * impl.size
    w_full = lowering.export_to_tf_tensor(w)
    update = V1.group([lowering.lowered_operation(u) for u in updates])
    master = [v for v in V1.global_variables() if v.op.name == "w"][0]
    init = [V1.global_variables_initializer(),
            V1.local_variables_initializer()]
  with _session(tf_graph) as sess:
    sess.run(init)
    hook.after_create_session(sess, None)
    w0 = sess.run(master)
    np.testing.assert_array_equal(sess.run(w_full), w0)
    sess.run(update)
    np.testing.assert_array_equal(sess.run(master), w0)  # not yet copied
    listener.before_save(sess, 1)
    np.testing.assert_allclose(sess.run(master), w0 + 2.0, rtol=1e-6)
  assert isinstance(hook, V1.train.SessionRunHook)
  assert isinstance(listener, V1.train.CheckpointSaverListener)


def test_saver_checkpoint_restores_under_another_layout(tmp_path):
  values = []
  for (mesh_shape, layout), save in ((LAYOUTS[0], True), (LAYOUTS[3], False)):
    graph, mesh, w, updates = _graph_with_update(init_seed=None if save
                                                 else 99)
    tf_graph = tf.Graph()
    with tf_graph.as_default():
      lowering = mtf.Lowering(graph, {mesh: _impl(mesh_shape, layout)})
      to_slices = lowering.copy_masters_to_slices()
      to_masters = lowering.copy_slices_to_masters()
      update = V1.group([lowering.lowered_operation(u) for u in updates])
      w_full = lowering.export_to_tf_tensor(w)
      saver = V1.train.Saver(V1.global_variables())
      init = V1.global_variables_initializer()
    with _session(tf_graph) as sess:
      if save:
        sess.run(init)
        sess.run(to_slices)
        sess.run(update)
        sess.run(to_masters)
        saver.save(sess, str(tmp_path / "ckpt"))
      else:
        saver.restore(sess, str(tmp_path / "ckpt"))
        sess.run(to_slices)
      values.append(sess.run(w_full))
  np.testing.assert_array_equal(values[0], values[1])


def test_masters_work_eagerly_and_not_in_a_tf_function():
  graph, mesh, w, _ = _graph_with_update()
  lowering = mtf.Lowering(graph, {mesh: _impl("x:2", "a:x")})
  impl = lowering.mesh_impl(w)
  slices = impl.variables["w"].slices
  for s in slices:
    s.assign(tf.zeros_like(s))
  assert lowering.copy_masters_to_slices() is None  # ran at once, eagerly
  full = lowering.export_to_tf_tensor(w).numpy()
  master = lowering._masters.masters[w.operation]  # pylint: disable=protected-access
  np.testing.assert_array_equal(full, master.numpy())
  assert np.any(full != 0)

  @tf.function(autograph=False)
  def in_function():
    inner = mtf.lower(graph, {mesh: _impl("x:2", "a:x")})
    inner.copy_masters_to_slices()
  with pytest.raises(mtf.MtfError, match="not to a tf.function"):
    in_function()


def test_variable_scopes_name_variables_and_layers():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.ones(mesh, "b:2;d:4")
  with V1.variable_scope("encoder"):
    mtf.get_variable(mesh, "w", "d:4")
    with V1.variable_scope("layer_0"):
      mtf.layers.dense(x, mtf.Dimension("h", 3), name="q")
      mtf.layers.dense_relu_dense(x, mtf.Dimension("f", 6))
  mtf.get_variable(mesh, "w", "d:4")
  assert [v.name for v in graph.all_variables] == [
      "encoder/w", "encoder/layer_0/q/kernel", "encoder/layer_0/q/bias",
      "encoder/layer_0/dense_relu_dense/wi/kernel",
      "encoder/layer_0/dense_relu_dense/wo/kernel", "w"]


def test_variable_dtype():
  d = mtf.VariableDType(tf.float32, activation_dtype=tf.bfloat16)
  assert (d.master_dtype, d.slice_dtype, d.activation_dtype) == (
      "float32", "float32", "bfloat16")
  assert d == mtf.VariableDType("float32", "float32", "bfloat16")
  assert hash(d) == hash(mtf.VariableDType("float32", None, "bfloat16"))
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  v = mtf.get_variable(mesh, "v", "a:4", dtype=d)
  assert v.dtype == "bfloat16" and graph.all_variables[0].dtype == "float32"
  u = mtf.get_variable(mesh, "u", "a:4",
                       dtype=mtf.VariableDType("float32", "float16"))
  # The variable on the devices is the master (float32 updates stay exact);
  # the float16 slice is the compute copy the model reads (see
  # mesh_tf.core.dtypes.VariableDType).
  assert u.dtype == "float16" and graph.all_variables[1].dtype == "float32"


@pytest.mark.parametrize("mesh_shape,layout", LAYOUTS)
def test_assign_functions(mesh_shape, layout):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  start = np.arange(32, dtype=np.float32).reshape(8, 4) - 16
  vs = [mtf.get_variable(mesh, f"v{i}", "a:8;b:4", initializer=start)
        for i in range(4)]
  x = mtf.import_tf_tensor(mesh, np.full((8, 4), 3.0, np.float32), "a:8;b:4")
  mtf.assign(vs[0], x, assign_fn=mtf.assign_slice)
  mtf.assign_add(vs[1], x, assign_fn=mtf.assign_add_slice)
  mtf.assign(vs[2], x, assign_fn=mtf.assign_sub_slice)

  def keep_max(variable, slice_var, val):
    assert variable is vs[3].operation
    return slice_var.assign(tf.maximum(slice_var, val), read_value=False)
  mtf.assign(vs[3], x, assign_fn=keep_max)
  impl = _impl(mesh_shape, layout)
  mtf.Lowering(graph, {mesh: impl})
  got = [impl.export_to_tf_tensor(impl.variables[f"v{i}"].value(),
                                  vs[i].shape).numpy() for i in range(4)]
  for g, want in zip(got, [np.full((8, 4), 3.0), start + 3, start - 3,
                           np.maximum(start, 3)]):
    np.testing.assert_array_equal(g, want)
  # The shape-only backend lowers the same graph (no slices to write).
  mtf.Lowering(graph, {mesh: mtf.ShapeMeshImpl(mesh_shape, layout)})


def test_read_variable_and_its_gradient():
  w0 = np.linspace(-1, 1, 32).reshape(8, 4).astype(np.float32)
  xv = np.linspace(0, 3, 32).reshape(8, 4).astype(np.float32)

  def build(mesh):
    w = mtf.get_variable(mesh, "w", "a:8;b:4", initializer=w0)
    r = mtf.read_variable(w)
    assert isinstance(r.operation, mtf.ReadVariable)
    x = mtf.import_tf_tensor(mesh, xv, "a:8;b:4")
    loss = mtf.reduce_sum(r * r * x)
    return [r, mtf.gradients([loss], [w])[0]]
  check_layouts(build, ["a:8", "b:4"], reference=lambda: [w0, 2 * w0 * xv])
  with pytest.raises(mtf.MtfError, match="expects an mtf Variable"):
    mtf.read_variable(mtf.ones(mtf.Mesh(mtf.Graph(), "m"), "a:2"))


def test_a_random_tf_initializer_gives_every_replica_the_same_value():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", "a:8;b:4",
                       initializer=tf.random_normal_initializer())
  impl = mtf.PlacementMeshImpl("rows:2;cols:4", "a:cols",
                               mtf.logical_cpu_devices(8))
  mtf.Lowering(graph, {mesh: impl})
  slices = [s.numpy() for s in impl.variables["w"].slices]
  for p in range(8):  # rows replicate: p and p + 4 hold the same slice
    np.testing.assert_array_equal(slices[p], slices[p % 4])
  assert not np.array_equal(slices[0], slices[1])
  del w


def test_a_lowered_operation_also_serves_as_one_op():
  graph, mesh, w, updates = _graph_with_update()
  tf_graph = tf.Graph()
  with tf_graph.as_default():
    impl = _impl("x:8", "a:x")
    lowering = mtf.Lowering(graph, {mesh: impl})
    ops = lowering.lowered_operation(updates[0])
    assert len(list(ops)) == 8  # one assign per slice
    with tf.control_dependencies([ops]):  # Mesh TF code passes it as an op
      # Fresh reads of the slices, made after the assigns.
      after = impl.export_to_tf_tensor(impl.variables["w"].value(), w.shape)
    before = lowering.export_to_tf_tensor(w)
    init = V1.global_variables_initializer()
  with _session(tf_graph) as sess:
    sess.run(init)
    sess.run(lowering.copy_masters_to_slices())
    w0 = sess.run(before)
    np.testing.assert_allclose(sess.run(after), w0 + 2.0, rtol=1e-6)


def test_scalar_summary_joins_the_graph_summaries():
  from tensorflow.core.framework import summary_pb2  # pylint: disable=import-outside-toplevel
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, np.arange(8, dtype=np.float32), "a:8")
  op = mtf.scalar_summary("total", mtf.reduce_sum(x))
  with pytest.raises(mtf.ShapeError, match="reduce it to a scalar"):
    mtf.scalar_summary("bad", x)
  tf_graph = tf.Graph()
  with tf_graph.as_default():
    lowering = mtf.Lowering(graph, {mesh: _impl("x:8", "a:x")})
    assert len(lowering.lowered_operation(op)) == 1
    merged = V1.summary.merge_all()
  with _session(tf_graph) as sess:
    summary = summary_pb2.Summary.FromString(sess.run(merged))
  assert [(v.tag, v.simple_value) for v in summary.value] == [("total", 28.0)]
  mtf.Lowering(graph, {mesh: mtf.ShapeMeshImpl("x:8", "a:x")})
