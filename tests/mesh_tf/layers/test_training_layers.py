"""Mesh TF's training helpers in mtf.layers: unit scaling, activation-
gradient clipping, the reversible block, annealed dropout, correlation --
against NumPy or their plain forms, under several layouts."""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import layers as L
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(11)
MESHES = ["x:2", "rows:2;cols:2", "rows:2;cols:4"]   # 2, 4, 8 devices


def test_us_einsum_divides_by_the_reduced_sizes():
  xv, wv = RNG.randn(4, 16).astype(np.float32), RNG.randn(16, 6).astype(
      np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:4;d:16")
    w = mtf.import_tf_tensor(mesh, wv, "d:16;h:6")
    out = mtf.convert_to_shape("b:4;h:6")
    on = L.unit_scaling_convention(True)
    return [L.us_einsum([x, w], out), L.us_einsum([x, w], out,
                                                  unit_scaling=on)]
  ref = xv @ wv
  check_layouts(build, ["b:4", "d:16", "h:6"], lambda: [ref, ref / 4.0],
                meshes=MESHES, limit=6, rtol=1e-4, atol=1e-4)
  assert L.unit_scaling_convention() is False


@pytest.mark.parametrize("clip", [None, 0.5, 100.0])
def test_clip_activation_gradient_clips_by_rms_in_the_backward_pass(clip):
  xv = RNG.randn(4, 8).astype(np.float32)
  cv = (RNG.randn(4, 8) * 3).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:4;d:8")
    c = mtf.import_tf_tensor(mesh, cv, "b:4;d:8")
    y = L.clip_activation_gradient(x * 2.0, clip_rms_norm=clip)
    return [y, mtf.gradients([mtf.reduce_sum(y * c)], [x])[0]]
  g = cv.astype(np.float64)
  if clip:
    g = g / max(1.0, np.sqrt((g ** 2).mean()) / clip)
  check_layouts(build, ["b:4", "d:8"], lambda: [2 * xv, 2 * g],
                meshes=MESHES, limit=6, rtol=1e-5, atol=1e-5)


def test_summary_for_clip_activation_gradient_records_scalars():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  t = mtf.ones(mesh, "b:4;d:8")
  ops = L.summary_for_clip_activation_gradient(t, "act",
                                               mtf.convert_to_shape("b:4"))
  assert [op.summary_name for op in ops] == [
      "mean/", "max/", "rms_mean/act", "rms_max/act", "rms_var/act"]


def _revnet(mesh, xv, recompute, made=None, backward_from=None):
  """A 3-block reversible net; returns [y, dloss/dx, dloss/dparams...].

  ``made`` collects the tensors the blocks' ``f`` made in the forward pass;
  ``backward_from`` gets the graph's op count before the backward pass.
  """
  graph = mesh.graph
  x = mtf.import_tf_tensor(mesh, xv, "batch:4;d:8")

  def make_f(i):
    def f(t):
      start = len(graph.operations)
      out = L.dense(t, mtf.Dimension("d", 8), activation="tanh",
                    name=f"f{i}")
      if made is not None:
        made.extend(u for op in graph.operations[start:]
                    if not isinstance(op, mtf.Variable) for u in op.outputs)
      return out
    return f
  x1, x1b, x2, x2b = x, None, x, None
  for i in range(3):
    x1, x1b, x2, x2b = L.reversible_half_residual_and_swap(
        x1, x1b, x2, x2b, make_f(i), recompute_grads=recompute)
  y = (x1 + x2) * 0.5
  loss = mtf.reduce_sum(y * y)
  params = [v.outputs[0] for v in graph.trainable_variables]
  if backward_from is not None:
    backward_from.append(len(graph.operations))
  return [y] + mtf.gradients([loss], [x] + params)


def test_reversible_block_gradients_equal_plain_autodiff():
  xv = RNG.randn(4, 8).astype(np.float32)
  plain, _ = run(lambda m: _revnet(m, xv, False), "all:1", "")
  assert len(plain) == 1 + 1 + 6   # y, dx, 3 x (kernel, bias)
  check_layouts(lambda m: _revnet(m, xv, True), ["batch:4", "d:8"],
                lambda: plain, meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("recompute", [True, False])
def test_reversible_backward_pass_reads_no_activation_of_f(recompute):
  graph = mtf.Graph()
  made, start = [], []
  _revnet(mtf.Mesh(graph, "m"), RNG.randn(4, 8).astype(np.float32),
          recompute, made, start)
  forward = set(made)
  reads = [op.name for op in graph.operations[start[0]:]
           if any(t in forward for t in op.inputs)]
  if recompute:
    assert not reads
  else:
    assert reads   # plain autodiff keeps the insides of f alive


@pytest.mark.parametrize("step,keep", [(0, 0.5), (50, 0.75), (150, 1.0),
                                       (-20, 0.5)])
def test_annealed_dropout_rate_follows_the_step(step, keep):
  def build(mesh):
    x = mtf.ones(mesh, "b:64;d:64")
    s = mtf.constant(mesh, step, dtype="int32") if step == 50 else step
    return L.annealed_dropout(x, True, 0, 100, init_rate=0.5, step=s,
                              seed=3)
  (y,), _ = run(build, "x:2", "b:x")
  kept = np.unique(y[y > 0])
  np.testing.assert_allclose(kept, [1 / keep] * len(kept), rtol=1e-6)
  assert abs((y > 0).mean() - keep) < 0.03
  check_layouts(build, ["b:64", "d:64"], meshes=["x:2", "rows:2;cols:2"],
                limit=3, exact=True)


def test_annealed_dropout_reads_the_tf_global_step_in_a_graph():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  with tf.Graph().as_default():
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    y = L.annealed_dropout(mtf.ones(mesh, "b:64;d:64"), True, 0, 100,
                           init_rate=0.5)
    impl = mtf.PlacementMeshImpl("x:2", "b:x", mtf.logical_cpu_devices(2))
    out = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(y)
    step = tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(step.assign(50))
      value = sess.run(out)
  np.testing.assert_allclose(np.unique(value), [0.0, 1 / 0.75], rtol=1e-6)


def test_annealed_dropout_errors_and_inference():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, "b:4")
  assert L.annealed_dropout(x, False, 0, 10, init_rate=0.1) is x
  with pytest.raises(mtf.MtfError, match="init_rate=None must be in"):
    L.annealed_dropout(x, True, 0, 10, step=1)
  with pytest.raises(mtf.MtfError, match="end_step=0 must be after"):
    L.annealed_dropout(x, True, 5, 0, init_rate=0.1, step=1)
  with pytest.raises(mtf.MtfError, match="no global step"):
    L.annealed_dropout(x, True, 0, 10, init_rate=0.1)


def test_corr_matches_numpy():
  xv = RNG.randn(32, 3).astype(np.float32)
  xv[:, 2] += xv[:, 0]

  def build(mesh):
    return L.corr(mtf.import_tf_tensor(mesh, xv, "n:32;c:3"), "c")
  check_layouts(build, ["n:32"], lambda: np.corrcoef(xv.T), meshes=MESHES,
                rtol=1e-4, atol=1e-5)


def test_get_dense_kernel_weights():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.ones(mesh, "b:2;d:16")
  w = L.get_dense_kernel_weights(x, mtf.Dimension("h", 32), x.shape.dims[-1:],
                                 None, None, name="k")
  assert w.shape == mtf.convert_to_shape("d:16;h:32")
  (var,) = graph.all_variables
  assert var.name == "k/kernel"
  assert abs(var.initial_value_numpy().std() - 16 ** -0.5) < 0.03


def test_sigmoid_cross_entropy_with_logits_matches_tf():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  lv = (RNG.randn(4, 6) * 30).astype(np.float32)
  zv = RNG.rand(6, 4).astype(np.float32)

  def build(mesh):
    lg = mtf.import_tf_tensor(mesh, lv, "b:4;c:6")
    z = mtf.import_tf_tensor(mesh, zv, "c:6;b:4")
    loss = L.sigmoid_cross_entropy_with_logits(lg, z)
    return [loss, mtf.gradients([mtf.reduce_sum(loss)], [lg])[0]]
  lt = tf.constant(lv)
  with tf.GradientTape() as tape:
    tape.watch(lt)
    ref = tf.nn.sigmoid_cross_entropy_with_logits(labels=zv.T, logits=lt)
    total = tf.reduce_sum(ref)
  grad = tape.gradient(total, lt)
  check_layouts(build, ["b:4", "c:6"], lambda: [ref.numpy(), grad.numpy()],
                meshes=MESHES, limit=4, rtol=1e-5, atol=1e-5)
  mesh = mtf.Mesh(mtf.Graph(), "m")
  with pytest.raises(mtf.ShapeError, match="need the same dims"):
    L.sigmoid_cross_entropy_with_logits(mtf.ones(mesh, "b:4;c:6"),
                                        mtf.ones(mesh, "b:4"))
