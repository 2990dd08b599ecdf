"""Each private TensorFlow API in mesh_tf.lowering.tf_private against its
public fallback: both routes give the same results."""

import numpy as np
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf.startup import import_order
from mesh_tf.lowering import tf_private
from mesh_tf.lowering.fusion import SlicewiseFuser
from mesh_tf.lowering.laid_out import LaidOutTensor
from mesh_tf.lowering.placement import PlacementMeshImpl


def _mtf_matmul(v):
  """An mtf graph lowered on 8 devices inside the caller's function."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  b, k = mtf.Dimension("b", 8), mtf.Dimension("k", 4)
  x = mtf.import_tf_tensor(mesh, v, mtf.Shape([b, k]), name="x")
  y = mtf.reduce_sum(mtf.einsum([x, x], output_shape=mtf.Shape([b])) * 2.0)
  impl = PlacementMeshImpl("rows:2;cols:4", "b:rows;k:cols",
                           mtf.logical_cpu_devices(8))
  return mtf.lower(graph, {mesh: impl}).export_to_tf_tensor(y)


def test_autograph_public_route_converts_mesh_tf_with_the_same_result(
    monkeypatch):
  from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  v = np.arange(32, dtype=np.float32).reshape(8, 4) / 10
  expected = 2 * float(np.sum(v * v))
  assert tf_private.skip_autograph("mesh_tf")  # the private route works
  def ours(r):
    return isinstance(r, config.DoNotConvert) and r.matches("mesh_tf")
  assert tf_private.skip_autograph("mesh_tf")
  assert sum(map(ours, config.CONVERSION_RULES)) == 1  # once, not per call
  without = tuple(r for r in config.CONVERSION_RULES if not ours(r))
  monkeypatch.setattr(config, "CONVERSION_RULES", without)
  assert tf_private.skip_autograph("mesh_tf", private=False) is False
  assert config.CONVERSION_RULES == without  # the public route adds nothing
  got = tf.function(_mtf_matmul, autograph=True)(tf.constant(v))
  np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)


def _segment_body(a, b):
  return [tf.nn.relu(a * 2.0 - b), tf.reduce_sum(a + b)]


def test_uninlined_function_public_route_gives_the_same_results():
  sig = [tf.TensorSpec([3], tf.float32)] * 2
  concrete = tf.function(_segment_body,
                         autograph=False).get_concrete_function(*sig)
  private = tf_private.uninlined_function(_segment_body, sig, concrete)
  public = tf_private.uninlined_function(_segment_body, sig, concrete,
                                         private=False)
  assert private.private and not public.private
  assert private.definition.attr["_nospecialize"].b
  assert public.definition.attr["_noinline"].b
  assert private.definition.signature.name.endswith("_fused")

  @tf.function(autograph=False)
  def both(a, b):
    return private.call(a, b) + public.call(a, b)
  a, b = tf.constant([1.0, -2.0, 3.0]), tf.constant([0.5, 0.5, 9.0])
  r = [t.numpy() for t in both(a, b)]
  np.testing.assert_allclose(r[0], r[2])
  np.testing.assert_allclose(r[1], r[3])
  np.testing.assert_allclose(r[0], np.maximum(2 * a.numpy() - b.numpy(), 0))
  names = {op.get_attr("f").name for op in
           both.get_concrete_function(a, b).graph.get_operations()
           if op.type in ("PartitionedCall", "StatefulPartitionedCall")}
  assert names == {private.definition.signature.name,
                   public.definition.signature.name}


def _fused_run(private_tf):
  impl = PlacementMeshImpl("rows:2;cols:4", "", mtf.logical_cpu_devices(8))
  impl.fuser = SlicewiseFuser(impl, private_tf=private_tf)

  @tf.function(autograph=False)
  def f(v):
    x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
    y = impl.slicewise(lambda t: tf.nn.relu(t - 2.0) * 3.0, x,
                       slice_shape=(3,))
    z = impl.slicewise(lambda t, u: t * u + 1.0, y, x, slice_shape=(3,))
    return tf.stack(z.tensor_list)
  return f(tf.constant([1.0, 2.0, 3.0])).numpy(), impl.fuser


def test_fuser_public_route_gives_the_same_results():
  private, fp = _fused_run(True)
  public, fq = _fused_run(False)
  np.testing.assert_array_equal(private, public)
  assert fp.stats["functions"] == fq.stats["functions"] == 1
  assert [fn.private for fn, _ in fp._functions.values()] == [True]  # pylint: disable=protected-access
  assert [fn.private for fn, _ in fq._functions.values()] == [False]  # pylint: disable=protected-access
  x = np.array([1.0, 2, 3]) + np.arange(8)[:, None]
  np.testing.assert_allclose(public, np.maximum(x - 2, 0) * 3 * x + 1)


def test_call_options_public_route_changes_nothing_and_gives_the_same():
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  fn = tf.function(lambda a: tf.reduce_sum(tf.square(a)), autograph=False)
  a = tf.constant([1.0, 2.0, 3.0])
  before = context.context().function_call_options
  options = tf_private.CallOptions()
  with options.scope(optimize=False):
    made = context.context().function_call_options
    assert made is not before
    assert made.config_proto_serialized != before.config_proto_serialized
    private = fn(a).numpy()
  with options.scope(optimize=False):  # built once, then looked up
    assert context.context().function_call_options is made
  assert context.context().function_call_options is before
  with tf_private.CallOptions(private=False).scope(optimize=False):
    assert context.context().function_call_options is before
    public = fn(a).numpy()
  assert private == public == 14.0


def _optimized_ops(optimize):
  """The op types TF runs for a fresh function called in a
  ``CallOptions().scope(optimize=...)``: a sum of squares computed twice,
  plus a constant expression."""
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

  @tf.function(autograph=False)
  def fn(a):
    twice = tf.reduce_sum(tf.square(a)) + tf.reduce_sum(tf.square(a))
    return twice + tf.reduce_sum(tf.range(4.0))
  ctx = context.context()
  ctx.enable_run_metadata()
  try:
    with tf_private.CallOptions().scope(optimize=optimize):
      value = float(fn(tf.constant([1.0, 2.0, 3.0])))
    metadata = ctx.export_run_metadata()
  finally:
    ctx.disable_run_metadata()
  assert value == 34.0
  return [n.op for f in metadata.function_graphs
          for g in f.partition_graphs for n in g.node]


def test_light_scope_merges_repeated_work_and_folds_constants():
  # What TrainStep's calls rely on (tf_private.LIGHT_PASSES): work that two
  # inlined segments repeat runs once, constant expressions are folded.
  off = _optimized_ops(False)
  assert off.count("Square") == 2 and "Range" in off
  light = _optimized_ops("light")
  assert light.count("Square") == 1 and "Range" not in light


def test_flat_caller_public_route_is_the_concrete_function_and_agrees():
  v = tf.Variable([1.0, 2.0])
  concrete = tf.function(lambda x: {"y": x * v}, autograph=False,
                         input_signature=[tf.TensorSpec([2], tf.float32)]
                         ).get_concrete_function()
  x = tf.constant([3.0, 4.0])
  private = tf_private.flat_caller(concrete)
  assert private is not concrete  # the private route works
  assert tf_private.flat_caller(concrete, private=False) is concrete
  np.testing.assert_array_equal(private(x)["y"], concrete(x)["y"])
  v.assign([5.0, 6.0])  # captured by reference, as a step's variables
  np.testing.assert_array_equal(private(x)["y"], [15.0, 24.0])


def test_training_step_on_public_routes_equals_private(monkeypatch):
  from mesh_tf import models, training  # pylint: disable=g-import-not-at-top
  from mesh_tf.training import optimize

  def losses(private_tf):
    model = models.transformer_lm(layers=1, d_model=16, heads=4, d_kv=4,
                                  d_ff=32, vocab=32, length=8, batch=8)
    step = training.train_step_for_model(
        model, "rows:2;cols:4", "batch:rows;heads:cols;d_ff:cols",
        mtf.logical_cpu_devices(8), optimize.SgdOptimizer(0.1))
    step.mesh_impl.fuser = SlicewiseFuser(step.mesh_impl,
                                          private_tf=private_tf)
    step._call_options = tf_private.CallOptions(private=private_tf)  # pylint: disable=protected-access
    values = model.random_values()
    return [float(step(**values)) for _ in range(3)]
  np.testing.assert_allclose(losses(False), losses(True), rtol=1e-6)


def test_import_order_rule_holds_in_this_process():
  # conftest imports CP-SAT before TensorFlow, as the rule asks.
  assert not import_order.tensorflow_loaded_first()
  assert import_order.import_cp_sat_first()
  assert import_order.import_tensorflow() is tf


def _session_run(private_tf, kernel=None):
  """A two-segment fused lowering in a plain tf.Graph, run by a Session;
  returns the result and the graph's fused call op types."""
  kernel = kernel or (lambda t: tf.nn.relu(t - 2.0) * 3.0)
  impl = PlacementMeshImpl("rows:2;cols:4", "", mtf.logical_cpu_devices(8))
  impl.fuser = SlicewiseFuser(impl, private_tf=private_tf)
  with tf.Graph().as_default() as g:
    v = tf.compat.v1.placeholder(tf.float32, shape=[3])
    x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
    y = impl.slicewise(kernel, x, slice_shape=(3,))
    z = impl.slicewise(lambda t, u: t * u + 1.0, y, x, slice_shape=(3,))
    total = tf.stack(z.tensor_list)
    assert total.shape == (8, 3)  # call outputs keep their static shapes
    library = {f.signature.name for f in g.as_graph_def().library.function}
    calls = sorted({op.type for op in g.get_operations()
                    if op.type in library or op.type.endswith("Call")})
    with tf.compat.v1.Session(graph=g) as sess:
      got = sess.run(total, {v: np.array([1.0, 2.0, 3.0], np.float32)})
  return got, calls, impl.fuser


def test_graph_function_public_route_gives_the_same_results():
  # Private: segments defined in the graph's own library (no eager
  # runtime); public: traced tf.functions called by PartitionedCall.
  private, private_calls, fp = _session_run(True)
  public, public_calls, fq = _session_run(False)
  np.testing.assert_array_equal(private, public)
  assert len(private_calls) == 1 and private_calls[0].endswith(
      "_fused_inline")
  assert public_calls == ["PartitionedCall"]
  assert [type(fn) for fn, _ in fp._functions.values()] == [  # pylint: disable=protected-access
      tf_private.GraphFunction]
  assert fq.stats["functions"] == fp.stats["functions"] == 1
  x = np.array([1.0, 2, 3]) + np.arange(8)[:, None]
  np.testing.assert_allclose(private, np.maximum(x - 2, 0) * 3 * x + 1)
  assert tf_private.graph_function(_segment_body, [], "s",
                                   private=False) is None


def test_graph_function_falls_back_when_tf_v1_functions_move(monkeypatch):
  from tensorflow.python.framework import function as v1_function  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  monkeypatch.delattr(v1_function, "_DefinedFunction")
  moved, calls, _ = _session_run(True)
  assert calls == ["PartitionedCall"]  # the tf.function route
  monkeypatch.undo()
  np.testing.assert_array_equal(moved, _session_run(True)[0])


def test_graph_function_with_control_flow_v2_in_its_body():
  # tf.cond in a TF2 graph makes branch functions: they join the graph too.
  def kernel(t):
    return tf.cond(tf.reduce_sum(t) > 10.0, lambda: t * 0.0, lambda: t)
  private, calls, _ = _session_run(True, kernel)
  public, _, _ = _session_run(False, kernel)
  np.testing.assert_array_equal(private, public)
  assert calls[0].endswith("_fused_inline")


def test_a_graph_function_joins_every_graph_it_is_called_in():
  # The fuser keeps functions per backend, not per graph: a second Session
  # graph lowered by the same backend gets the definition too.
  impl = PlacementMeshImpl("rows:2;cols:4", "", mtf.logical_cpu_devices(8))
  got = []
  for offset in (0.0, 5.0):
    with tf.Graph().as_default() as g:
      v = tf.compat.v1.placeholder(tf.float32, shape=[3])
      x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
      y = impl.slicewise(lambda t: tf.nn.relu(t - 2.0) * 3.0, x,
                         slice_shape=(3,))
      total = tf.add_n(y.tensor_list)
      with tf.compat.v1.Session(graph=g) as sess:
        got.append(sess.run(total, {v: np.array([1.0, 2.0, 3.0],
                                                np.float32) + offset}))
  assert impl.fuser.stats["functions"] == 1
  for offset, value in zip((0.0, 5.0), got):
    np.testing.assert_allclose(value, sum(
        np.maximum(np.array([1.0, 2, 3]) + offset + p - 2.0, 0) * 3
        for p in range(8)))
