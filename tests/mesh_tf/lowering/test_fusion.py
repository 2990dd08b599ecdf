"""Fused slicewise segments (mesh_tf.lowering.fusion): same results as
unfused lowering, functions shared between identical layers, kernels keyed
by what they compute, and unkeyable kernels run unfused."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf import models, training
from mesh_tf.training import optimize
from mesh_tf.lowering import fusion, tf_private
from mesh_tf.lowering.mesh_impl import LaidOutTensor
from mesh_tf.lowering.placement import PlacementMeshImpl

LAYOUT = "batch:rows;heads:cols;d_ff:cols;vocab:cols"


# --- kernel_key ----------------------------------------------------------------
def _adder(c):
  return lambda t: t + c


def test_kernel_key_names_code_and_closure_values():
  key = fusion.kernel_key
  assert key(_adder(1)) == key(_adder(1))
  assert key(_adder(1)) != key(_adder(2))
  assert key(_adder(1)) != key(_adder(True))  # bool is not int
  assert key(_adder(0.0)) != key(_adder(-0.0))  # equal, but not the same
  assert key(_adder((1, [2, 3]))) == key(_adder((1, [2, 3])))
  shape = mtf.convert_to_shape
  assert key(_adder(shape("a:2;b:3"))) == key(_adder(shape("a:2;b:3")))
  assert key(_adder(shape("a:2;b:3"))) != key(_adder(shape("a:2;b:4")))
  assert key(_adder(np.float32(2))) != key(_adder(np.float64(2)))
  assert key(_adder(_adder(1))) == key(_adder(_adder(1)))
  assert key(_adder(_adder(1))) != key(_adder(_adder(2)))
  assert key(_adder(tf.float32)) != key(_adder(tf.int32))
  assert key(lambda t: t + 1) != key(lambda t: t + 1)  # two code objects


@pytest.mark.parametrize("value", [tf.constant(1.0), object(),
                                   np.zeros(10000)])
def test_kernel_key_refuses_what_it_cannot_name(value):
  with pytest.raises(fusion.Uncacheable):
    fusion.kernel_key(_adder(value))


# --- lowering with and without fusion ------------------------------------------
def _run_kernels(fuse, make_kernels):
  """Runs ``make_kernels(impl, x)`` in a tf.function on 8 devices; returns
  the slices of each result and the impl."""
  impl = PlacementMeshImpl("rows:2;cols:4", "", mtf.logical_cpu_devices(8),
                           fuse=fuse)

  @tf.function(autograph=False)
  def f(v):
    x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
    return [tf.stack(y.tensor_list) for y in make_kernels(impl, x)]
  return [r.numpy() for r in f(tf.constant([1.0, 2.0, 3.0]))], impl


def test_kernels_made_in_a_loop_see_their_own_loop_variable():
  def make(impl, x):
    # Late binding is the point: each kernel must see its own i.
    return [impl.slicewise(lambda t: t * i, x, slice_shape=(3,))  # noqa: B023
            for i in range(4)]
  fused, impl = _run_kernels(True, make)
  unfused, _ = _run_kernels(False, make)
  for a, b in zip(fused, unfused):
    np.testing.assert_array_equal(a, b)
  assert impl.fuser.stats["deferred"] == 4
  assert impl.fuser.stats["unfused"] == 0


def test_a_kernel_closing_over_a_tf_tensor_runs_unfused_and_right():
  def make(impl, x):
    c = tf.constant([10.0, 20.0, 30.0])
    y = impl.slicewise(lambda t: t * 2.0, x, slice_shape=(3,))
    return [impl.slicewise(lambda t: t + c, y, slice_shape=(3,))]
  fused, impl = _run_kernels(True, make)
  want = 2 * (np.array([1.0, 2, 3]) + np.arange(8)[:, None]) + [10, 20, 30]
  np.testing.assert_allclose(fused[0], want)
  assert impl.fuser.stats["unfused"] == 1
  assert impl.fuser.stats["deferred"] == 1


def test_control_flow_kernel_uses_the_default_executor():
  def make(impl, x):
    return [impl.slicewise(
        lambda t: tf.cond(tf.reduce_sum(t) > 10.0, lambda: t * 0.0,
                          lambda: t), x, slice_shape=(3,))]
  fused, impl = _run_kernels(True, make)
  unfused, _ = _run_kernels(False, make)
  np.testing.assert_array_equal(fused[0], unfused[0])
  executors = {e for _, e in impl.fuser._functions.values()}  # pylint: disable=protected-access
  assert executors == {""}


def test_pending_kernels_stay_in_their_own_graph():
  impl = PlacementMeshImpl("x:8", "", mtf.logical_cpu_devices(8))

  @tf.function(autograph=False)
  def first(v):
    x = LaidOutTensor((3,), "float32", [v] * 8)
    impl.slicewise(lambda t: t * 3.0, x, slice_shape=(3,))  # never read
    return v

  @tf.function(autograph=False)
  def second(v):
    x = LaidOutTensor((3,), "float32", [v] * 8)
    y = impl.slicewise(lambda t: t + 1.0, x, slice_shape=(3,))
    return tf.add_n(y.tensor_list)
  v = tf.constant([1.0, 2.0, 3.0])
  first(v)
  np.testing.assert_allclose(second(v).numpy(), 8 * (v.numpy() + 1))


def test_step_call_options_are_restored():
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  before = context.context().function_call_options
  with pytest.raises(RuntimeError):
    with fusion.step_call_options():
      assert context.context().function_call_options is not before
      raise RuntimeError("boom")
  assert context.context().function_call_options is before


# --- a Transformer step ----------------------------------------------------------
def _lm(layers):
  return models.transformer_lm(layers=layers, d_model=16, heads=4, d_kv=4,
                               d_ff=32, vocab=32, length=8, batch=8)


def _step(layers, fuse):
  model = _lm(layers)
  impl = PlacementMeshImpl("rows:2;cols:4", LAYOUT,
                           mtf.logical_cpu_devices(8), fuse=fuse)
  return model, training.TrainStep(model.graph, model.mesh, model.loss,
                                   dict(model.inputs), impl,
                                   optimize.SgdOptimizer(0.5))


def test_fused_training_steps_equal_unfused_ones():
  values = _lm(2).random_values(seed=1)
  runs = {}
  for fuse in (True, False):
    _, step = _step(2, fuse)
    losses = [float(step(**values)) for _ in range(3)]
    runs[fuse] = (losses, step.variable_values())
  np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-6)
  assert runs[True][0][-1] < runs[True][0][0]
  for name, value in runs[False][1].items():
    np.testing.assert_allclose(runs[True][1][name], value, rtol=1e-5,
                               atol=1e-7, err_msg=name)


def test_layers_share_functions_and_the_step_graph_shrinks():
  stats, ops = {}, {}
  for layers in (2, 4):
    _, step = _step(layers, True)
    ops[layers] = len(step.concrete_function().graph.get_operations())
    stats[layers] = dict(step.mesh_impl.fuser.stats)
  # Two more identical layers add segments but trace no new function.
  assert stats[4]["functions"] == stats[2]["functions"]
  assert stats[4]["segments"] > stats[2]["segments"]
  assert stats[4]["unfused"] == 0
  _, unfused = _step(4, False)
  unfused_ops = len(unfused.concrete_function().graph.get_operations())
  assert ops[4] < 0.5 * unfused_ops


def test_tf_functions_are_keyed_by_identity_and_kept():
  assert fusion.kernel_key(_adder(tf.nn.relu)) == fusion.kernel_key(
      _adder(tf.nn.relu))
  assert fusion.kernel_key(_adder(tf.nn.relu)) != fusion.kernel_key(
      _adder(tf.nn.sigmoid))
  assert fusion._snapshot(tf.nn.relu) is tf.nn.relu  # pylint: disable=protected-access


def test_a_kernel_with_an_unbound_closure_fails_as_it_does_unfused():
  def make(impl, x):
    def kernel(t):
      return t * later
    y = impl.slicewise(kernel, x, slice_shape=(3,))
    later = 2.0  # bound too late: a bug in the kernel, in either mode
    return [y]
  for fuse in (True, False):
    with pytest.raises(NameError, match="later"):
      _run_kernels(fuse, make)


def test_fusion_still_works_if_tf_private_function_api_moves(monkeypatch):
  def moved(*args, **kwargs):
    raise AttributeError("moved")
  # The private route lives in tf_private now (one home for private TF).
  monkeypatch.setattr(tf_private, "_private_uninlined_copy", moved)

  def make(impl, x):
    return [impl.slicewise(lambda t: t * 2.0 + 1.0, x, slice_shape=(3,))]
  fused, impl = _run_kernels(True, make)
  np.testing.assert_allclose(
      fused[0], 2 * (np.array([1.0, 2, 3]) + np.arange(8)[:, None]) + 1)
  assert impl.fuser.stats["functions"] == 1


def test_a_one_op_segment_runs_directly_not_as_a_call():
  impl = PlacementMeshImpl("x:8", "", mtf.logical_cpu_devices(8))

  @tf.function(autograph=False)
  def f(v):
    x = LaidOutTensor((3,), "float32", [v] * 8)
    one = impl.slicewise(lambda t: t * 2.0, x, slice_shape=(3,))
    total_one = tf.add_n(one.tensor_list)  # flushes a one-op segment
    many = impl.slicewise(lambda t: tf.nn.relu(t - 1.0) * 2.0, one,
                          slice_shape=(3,))
    return total_one, tf.add_n(many.tensor_list)
  concrete = f.get_concrete_function(tf.TensorSpec([3], tf.float32))
  types_ = [op.type for op in concrete.graph.get_operations()]
  assert types_.count("Mul") == 8  # run directly on each device
  assert types_.count("PartitionedCall") == 8  # the three-op segment
  one, many = f(tf.constant([1.0, 2.0, 3.0]))
  np.testing.assert_allclose(one.numpy(), 8 * np.array([2.0, 4.0, 6.0]))
  np.testing.assert_allclose(many.numpy(), 8 * np.array([2.0, 6.0, 10.0]))


def test_v1_graph_with_an_unknown_shape_placeholder():
  impl = PlacementMeshImpl("x:8", "", mtf.logical_cpu_devices(8))
  with tf.Graph().as_default() as g:
    v = tf.compat.v1.placeholder(tf.float32, shape=None)
    x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
    y = impl.slicewise(lambda t: tf.nn.relu(t - 2.0) * 3.0, x,
                       slice_shape=(3,))
    total = tf.add_n(y.tensor_list)
    # A call of a fused function of the graph's own library (see
    # test_session_graph_functions_do_not_start_the_eager_runtime).
    assert set(_fused_defs(g)) & {op.type for op in g.get_operations()}
    with tf.compat.v1.Session(graph=g) as sess:
      got = sess.run(total, {v: np.array([1.0, 2.0, 3.0], np.float32)})
  want = sum(np.maximum(np.array([1.0, 2, 3]) + p - 2.0, 0) * 3
             for p in range(8))
  np.testing.assert_allclose(got, want)


def _fused_defs(graph):
  """The fused FunctionDefs in ``graph``'s library, by name."""
  library = graph.as_graph_def().library.function
  return {f.signature.name: f for f in library if "_fused" in
          f.signature.name}


def test_session_graphs_and_tf_functions_let_tf_inline_fused_calls():
  # A plain tf.Graph is optimised once as a whole before its first run, so
  # its calls may be inlined (the step runs as unfused); a tf.function's
  # too (TrainStep calls it with grappler reduced to its dependency
  # optimizer, so inlining costs its first call little and saves a call
  # per segment and device every step).
  impl = PlacementMeshImpl("x:8", "", mtf.logical_cpu_devices(8))

  def segment(v):
    x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
    y = impl.slicewise(lambda t: tf.nn.relu(t - 2.0) * 3.0, x,
                       slice_shape=(3,))
    return tf.add_n(y.tensor_list)
  with tf.Graph().as_default() as g:
    v = tf.compat.v1.placeholder(tf.float32, shape=[3])
    total = segment(v)
    defs = _fused_defs(g)
    with tf.compat.v1.Session(graph=g) as sess:
      got = sess.run(total, {v: np.array([1.0, 2.0, 3.0], np.float32)})
  assert defs and all(not f.attr["_noinline"].b for f in defs.values())
  assert all(name.endswith("_fused_inline") for name in defs)

  concrete = tf.function(segment, autograph=False).get_concrete_function(
      tf.TensorSpec([3], tf.float32))
  inner = _fused_defs(concrete.graph)
  assert inner and all(not f.attr["_noinline"].b for f in inner.values())
  assert all(name.endswith("_fused_inline") for name in inner)
  np.testing.assert_allclose(concrete(tf.constant([1.0, 2.0, 3.0])).numpy(),
                             got)


def test_a_session_graph_inlines_only_up_to_its_budget(monkeypatch):
  # Inlined ops make a Session's first run longer, so past the budget the
  # calls stay uninlined (same results).
  monkeypatch.setattr(fusion.SlicewiseFuser, "MAX_INLINED_OPS_PER_GRAPH", 1)
  impl = PlacementMeshImpl("x:8", "", mtf.logical_cpu_devices(8))
  with tf.Graph().as_default() as g:
    v = tf.compat.v1.placeholder(tf.float32, shape=[3])
    x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
    y = impl.slicewise(lambda t: tf.nn.relu(t - 2.0) * 3.0, x,
                       slice_shape=(3,))
    first = tf.add_n(y.tensor_list)  # flushes: inlined (budget not used)
    z = impl.slicewise(lambda t: tf.nn.relu(t + 1.0) * 2.0, y,
                       slice_shape=(3,))
    second = tf.add_n(z.tensor_list)  # over budget: not inlined
    defs = _fused_defs(g)
    with tf.compat.v1.Session(graph=g) as sess:
      a, b = sess.run([first, second],
                      {v: np.array([1.0, 2.0, 3.0], np.float32)})
  assert sorted(f.attr["_noinline"].b for f in defs.values()) == [False, True]
  ys = [np.maximum(np.array([1.0, 2, 3]) + p - 2.0, 0) * 3 for p in range(8)]
  np.testing.assert_allclose(a, sum(ys))
  np.testing.assert_allclose(b, sum(np.maximum(y + 1.0, 0) * 2 for y in ys))


_FRESH_PROCESS = """
import mesh_tf as mtf
import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.python.eager import context
from mesh_tf.lowering.laid_out import LaidOutTensor
tf.disable_v2_behavior()
impl = mtf.placement_mesh_impl.PlacementMeshImpl(
    "x:8", "", ["/cpu:%d" % i for i in range(8)])
v = tf.placeholder(tf.float32, shape=[3])
x = LaidOutTensor((3,), "float32", [v + float(p) for p in range(8)])
y = impl.slicewise(lambda t: tf.nn.relu(t - 2.0) * 3.0, x, slice_shape=(3,))
total = tf.add_n(y.tensor_list)
assert impl.fuser.stats["segments"] == 1
print("eager started before the Session:", context.context()._initialized)
config = tf.ConfigProto(device_count={"CPU": 8},
                        intra_op_parallelism_threads=1)
with tf.Session(config=config) as sess:
  print(sess.run(total, {v: np.array([1.0, 2.0, 3.0], np.float32)}).tolist())
"""


def test_session_graph_functions_do_not_start_the_eager_runtime():
  # The eager runtime, once started, has made TF's process-wide intra-op
  # pool (one thread per core) and the Session's ConfigProto can no longer
  # size it; only a fresh process can show it was not started.
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  proc = subprocess.run([sys.executable, "-c", _FRESH_PROCESS],
                        capture_output=True, text=True, env=env, timeout=300,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.splitlines()
  assert "eager started before the Session: False" in lines
  want = sum(np.maximum(np.array([1.0, 2, 3]) + p - 2.0, 0) * 3
             for p in range(8))
  np.testing.assert_allclose(eval(lines[-1]), want)  # pylint: disable=eval-used
