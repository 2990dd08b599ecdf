"""mtf.while_loop: results under every layout, accumulators, the trace of
a fixed-trip loop against the cost model, unknown trip counts, TF graph
modes, and errors."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import costmodels as cm
import mesh_tf as mtf
from tests.costmodels.test_evaluate import assert_prediction_matches_lowering
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(7)
XV = RNG.randn(4, 8).astype(np.float32)          # b:4, d:8
WV = (RNG.randn(8, 8) * 0.3).astype(np.float32)  # d:8, e:8
TRIPS = 3


def _loop(mesh, trips=TRIPS, **kwargs):
  """x <- tanh(x @ w) + 1 (x @ w contracts d: an all-reduce when d splits)."""
  i0 = mtf.constant(mesh, 0, dtype="int32")
  x0 = mtf.import_tf_tensor(mesh, XV, "b:4;d:8")
  w = mtf.import_tf_tensor(mesh, WV, "d:8;e:8")

  def body(i, x):
    y = mtf.einsum([x, w], output_shape="b:4;e:8")
    return [i + 1, mtf.rename_dimension(mtf.tanh(y), "e", "d") + 1.0]
  return mtf.while_loop(lambda i, x: mtf.less(i, trips), body, [i0, x0],
                        **kwargs)


def _np_loop(trips=TRIPS):
  x = XV
  for _ in range(trips):
    x = np.tanh(x @ WV) + 1.0
  return x


def test_loop_matches_numpy_under_every_layout():
  assert check_layouts(lambda mesh: _loop(mesh),
                       ["b:4", "d:8", "e:8"],
                       lambda: [np.int32(TRIPS), _np_loop()], limit=8) > 10


def test_a_static_counter_gives_the_trip_count_and_the_exact_trace():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  i, x = _loop(mesh)
  op = i.operation
  assert isinstance(op, mtf.WhileLoopOperation)
  assert op.trip_count == TRIPS and op.priced_iterations == TRIPS
  # The loop is one op of the graph; its sub-graphs stay inside it.
  assert op in g.operations and not set(op.body_operations) & set(
      g.operations)
  assert len(op.inputs) == 3   # i0, x0 and the captured w
  (_, v), trace = run(lambda mesh: _loop(mesh), "rows:2;cols:4",
                      "d:cols;b:rows")
  np.testing.assert_allclose(v, _np_loop(), rtol=1e-5)
  # One all-reduce of the b:2 x e:8 partial product over cols per trip.
  assert [(c.kind, c.mesh_axes, c.bytes_per_device, c.op_name)
          for c in trace.collectives] == [
              ("allreduce", ("cols",), 2 * 8 * 4, op.name)] * TRIPS


@pytest.mark.parametrize("layout", ["d:cols;b:rows", "e:cols", ""])
def test_cost_model_predicts_the_fixed_trip_loop(layout):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "mesh")
  outs = _loop(mesh)
  report, impl = assert_prediction_matches_lowering(
      g, mesh, "rows:2;cols:4", layout, outs, "dgx-h100")
  one = cm.evaluate(*_graph_with(1), "rows:2;cols:4", layout, "dgx-h100")
  if layout == "d:cols;b:rows":
    assert report.comm_time_s == pytest.approx(TRIPS * one.comm_time_s)
  assert report.flops_per_device > one.flops_per_device


def _graph_with(trips):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "mesh")
  _loop(mesh, trips)
  return (g,)


def test_an_unknown_trip_count_is_priced_as_one_trip_or_the_maximum():
  def build(mesh, **kw):
    x0 = mtf.import_tf_tensor(mesh, np.abs(XV), "b:4;d:8")
    w = mtf.import_tf_tensor(mesh, np.abs(WV), "d:8;e:8")
    cond = lambda x: mtf.less(mtf.reduce_sum(x), 1000.0)

    def body(x):
      y = mtf.einsum([x, w], output_shape="b:4;e:8")
      return [mtf.rename_dimension(y, "e", "d") + 1.0]
    return mtf.while_loop(cond, body, [x0], **kw)

  x = np.abs(XV)
  while x.sum() < 1000.0:
    x = x @ np.abs(WV) + 1.0
  (v,), trace = run(build, "x:2", "d:x")
  np.testing.assert_allclose(v, x, rtol=1e-5)
  g = mtf.Graph()
  op = build(mtf.Mesh(g, "m"))[0].operation
  assert op.trip_count is None and op.priced_iterations == 1
  kinds = collections.Counter(c.kind for c in trace.collectives)
  # cond: the sum over the split d, twice (before and after one trip);
  # body: the einsum's all-reduce once.
  assert kinds == {"allreduce": 3}
  (v,), trace = run(lambda m: build(m, maximum_iterations=2), "x:2", "d:x")
  y = np.abs(XV)
  for _ in range(2):
    y = y @ np.abs(WV) + 1.0
  np.testing.assert_allclose(v, y, rtol=1e-5)
  assert len(trace.collectives) == 3 * 1 + 2   # cond x3, body x2


def test_accumulators_sum_partial_sums_and_all_reduce_once():
  def build(mesh):
    i0 = mtf.constant(mesh, 0, dtype="int32")
    x = mtf.import_tf_tensor(mesh, XV, "b:4;d:8")

    def body(i):
      scale = mtf.cast(i, "float32") + 1.0
      # Summing out d leaves partial sums when d is split.
      part = mtf.reduce_sum(x * scale, reduced_dim=x.shape.dims[1])
      return [i + 1, part]
    return mtf.while_loop(lambda i: mtf.less(i, 4), body, [i0],
                          has_accumulators=True)
  ref = lambda: [np.int32(4), XV.sum(1) * (1 + 2 + 3 + 4)]
  check_layouts(build, ["b:4", "d:8"], ref, limit=6)
  _, trace = run(build, "x:8", "d:x")
  assert [(c.kind, c.source_op) for c in trace.collectives] == [
      ("allreduce", "while_loop")]   # once, after the loop


def test_gradients_inside_the_body_accumulate_over_microbatches():
  def build(mesh):
    w = mtf.get_variable(mesh, "w", "d:8;e:8", initializer=WV)
    xs = mtf.import_tf_tensor(mesh, XV, "b:4;d:8")
    i0 = mtf.constant(mesh, 0, dtype="int32")

    def body(i):
      mask = mtf.cast(mtf.equal(mtf.range(mesh, "b:4", "int32"), i),
                      "float32")
      y = mtf.einsum([xs, w, mask], output_shape="e:8")
      loss = mtf.reduce_sum(mtf.square(y))
      (dw,) = mtf.gradients([loss], [w])
      return [i + 1, dw]
    i, dw = mtf.while_loop(lambda i: mtf.less(i, 4), body, [i0],
                           has_accumulators=True)
    return [dw]
  ref = sum(2 * np.outer(XV[b], XV[b] @ WV) for b in range(4))
  check_layouts(build, ["d:8", "e:8"], lambda: [ref], rtol=1e-4, atol=1e-4,
                limit=6)


def test_no_gradient_through_the_loop():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  w = mtf.get_variable(mesh, "w", "d:8", initializer=1.0)
  (y,) = mtf.while_loop(lambda x: mtf.less(mtf.reduce_sum(x), 9.0),
                        lambda x: [x * 2.0], [w])
  with pytest.raises(mtf.MtfError, match="while loop.*has_accumulators"):
    mtf.gradients([mtf.reduce_sum(y)], [w])
  assert "gradients do not flow" in mtf.WhileLoopOperation.no_gradient_reason


def test_nested_loops_and_num_loop_vars():
  def build(mesh):
    i0 = mtf.constant(mesh, 0, dtype="int32")
    x0 = mtf.import_tf_tensor(mesh, XV, "b:4;d:8")

    def outer(i, x):
      j0 = mtf.constant(mesh, 0, dtype="int32")
      _, y = mtf.while_loop(lambda j, y: mtf.less(j, 2),
                            lambda j, y: [j + 1, y * 2.0], [j0, x])
      return [i + 1, y + 1.0]
    out = mtf.while_loop(lambda i, x: mtf.less(i, 3), outer, [i0, x0],
                         num_loop_vars=1)
    assert len(out) == 1
    full = mtf.while_loop(lambda i, x: mtf.less(i, 3), outer, [i0, x0])
    return [out[0], full[1]]
  x = XV
  for _ in range(3):
    x = x * 4.0 + 1.0
  check_layouts(build, ["b:4", "d:8"], lambda: [np.int32(3), x], limit=4)


def test_loop_lowers_inside_tf_function_and_v1_graph():
  def lowered(layout):
    g = mtf.Graph()
    mesh = mtf.Mesh(g, "mesh")
    outs = _loop(mesh)
    impl = mtf.PlacementMeshImpl("x:4", layout, mtf.logical_cpu_devices(4))
    low = mtf.Lowering(g, {mesh: impl})
    return low.export_to_tf_tensor(outs[1]), impl

  @tf.function
  def step():
    return lowered("d:x")[0]
  np.testing.assert_allclose(step().numpy(), _np_loop(), rtol=1e-5)
  with tf.Graph().as_default():
    y, _ = lowered("e:x")
    with tf.compat.v1.Session() as sess:
      np.testing.assert_allclose(sess.run(y), _np_loop(), rtol=1e-5)


def test_bad_loops_raise_typed_errors_and_leave_the_graph_clean():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.ones(mesh, "d:4")
  n = len(g.operations)
  with pytest.raises(mtf.ShapeError, match="scalar bool"):
    mtf.while_loop(lambda x: mtf.reduce_sum(x), lambda x: [x], [x])
  with pytest.raises(mtf.ShapeError, match="output 0 .*d=8"):
    mtf.while_loop(lambda x: mtf.less(mtf.reduce_sum(x), 3.0),
                   lambda x: [mtf.ones(mesh, "d:8")], [x])
  with pytest.raises(mtf.ShapeError, match="has_accumulators=True"):
    mtf.while_loop(lambda x: mtf.less(mtf.reduce_sum(x), 3.0),
                   lambda x: [x * 2.0, x], [x])
  with pytest.raises(mtf.MtfError, match="num_loop_vars=3"):
    mtf.while_loop(lambda x: mtf.less(mtf.reduce_sum(x), 3.0),
                   lambda x: [x], [x], num_loop_vars=3)
  with pytest.raises(mtf.MtfError, match="at least one loop variable"):
    mtf.while_loop(lambda: None, lambda: [], [])
  assert len(g.operations) == n
  assert all(r in g.operations for r in g.consumers_of(x))


_V1_SCRIPT = """
import numpy as np
import mesh_tf as mtf
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()   # TF v1 control flow
mtf.set_logical_cpu_devices(4)
x_v = np.arange(32, dtype=np.float32).reshape(4, 8) / 32.0
g = mtf.Graph()
mesh = mtf.Mesh(g, "mesh")
i0 = mtf.constant(mesh, 0, dtype="int32")
x0 = mtf.import_tf_tensor(mesh, x_v, "b:4;d:8")
w = mtf.import_tf_tensor(mesh, np.full((8, 8), 0.1, np.float32), "d:8;e:8")
def body(i, x):
  y = mtf.einsum([x, w], output_shape="b:4;e:8")
  return [i + 1, mtf.rename_dimension(mtf.tanh(y), "e", "d") + 1.0]
_, x = mtf.while_loop(lambda i, x: mtf.less(i, 3), body, [i0, x0])
y = x * 2.0
impl = mtf.PlacementMeshImpl("x:4", "d:x", mtf.logical_cpu_devices(4))
out = mtf.Lowering(g, {mesh: impl}).export_to_tf_tensor(y)
ref = x_v
for _ in range(3):
  ref = np.tanh(ref @ np.full((8, 8), 0.1)) + 1.0
with tf.compat.v1.Session() as sess:
  np.testing.assert_allclose(sess.run(out), 2.0 * ref, rtol=1e-5)
print("ok")
"""


def test_loop_lowers_under_tf_v1_control_flow():
  # v1 control flow must not see fused segments cross its while context;
  # disable_v2_behavior is process-wide, hence the subprocess.
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  r = subprocess.run([sys.executable, "-c", _V1_SCRIPT], capture_output=True,
                     text=True, timeout=600, check=False)
  assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
