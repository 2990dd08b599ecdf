"""mtf.utils.BalancedVariablePlacer and mtf.auto_mtf (backed by CP-SAT)."""

import itertools

import pytest
import tensorflow as tf

import costmodels
import mesh_tf as mtf


def test_balanced_variable_placer_fills_the_least_loaded_device():
  placer = mtf.utils.BalancedVariablePlacer(["/cpu:0", "/cpu:1"],
                                            init_usage=[0, 100])
  graph = tf.Graph()
  with graph.as_default(), tf.compat.v1.device(placer):
    a = tf.compat.v1.get_variable("a", [64], tf.float32)       # 256 B
    b = tf.compat.v1.get_variable("b", [10], tf.float32)       # 40 B
    c = tf.compat.v1.get_variable("c", [8], tf.float64)        # 64 B
    d = tf.compat.v1.get_variable("d", [2], tf.float32)
    other = tf.constant(1.0)
  assert [v.device for v in (a, b, c, d)] == [
      "/cpu:0", "/cpu:1", "/cpu:1", "/cpu:1"]
  assert other.device == ""
  assert placer.usage == (256, 100 + 40 + 64 + 8)
  with pytest.raises(mtf.MtfError, match="2 entries for 1 devices"):
    mtf.utils.BalancedVariablePlacer(["/cpu:0"], [0, 0])
  with mtf.utils.outside_all_rewrites():
    pass


def _mlp():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.ones(mesh, "batch:64;d_model:32")
  h = mtf.relu(mtf.layers.dense(x, mtf.Dimension("d_ff", 256), name="wi"))
  y = mtf.layers.dense(h, mtf.Dimension("d_model", 32), name="wo")
  loss = mtf.reduce_mean(mtf.square(y))
  grads = mtf.gradients([loss], [v.outputs[0]
                                 for v in graph.trainable_variables])
  mtf.optimize.SgdOptimizer(0.1).apply_grads(grads,
                                             graph.trainable_variables)
  return graph, loss


def _peak(graph, loss, mesh, rules):
  return costmodels.evaluate(graph, mesh, rules, "h100x4-nodes1",
                             outputs=[loss]).peak_memory_bytes


def test_auto_mtf_layout_minimises_peak_memory_by_default():
  graph, loss = _mlp()
  rules = mtf.auto_mtf.layout(graph, "mesh_0:4", [loss], time_limit_s=20)
  assert isinstance(rules, mtf.LayoutRules)
  best = _peak(graph, loss, "mesh_0:4", rules)
  for dim in ["", "batch", "d_ff", "d_model"]:  # every one-rule layout
    other = mtf.convert_to_layout_rules(f"{dim}:mesh_0" if dim else "")
    assert best <= _peak(graph, loss, "mesh_0:4", other)
  timed = mtf.auto_mtf.layout(graph, "mesh_0:4", [loss],
                              topology="tpu-v4-2x2x1", time_limit_s=20)
  assert timed == mtf.auto_layout(graph, "mesh_0:4", [loss],
                                  topology="tpu-v4-2x2x1",
                                  time_limit_s=20).rules


def test_auto_mtf_layout_and_mesh_shape():
  graph, loss = _mlp()
  rules, mesh = mtf.auto_mtf.layout_and_mesh_shape(
      graph, 4, [loss], max_mesh_shape_dimensions=2, time_limit_s=20)
  assert mesh.size == 4 and mesh.dimension_names[0] == "mesh_0"
  got = _peak(graph, loss, mesh, rules)
  for sizes in [(4,), (2, 2)]:
    shape = mtf.Shape([mtf.Dimension(f"mesh_{i}", s)
                       for i, s in enumerate(sizes)])
    r = mtf.auto_mtf.layout(graph, shape, [loss], time_limit_s=20)
    assert got <= _peak(graph, loss, shape, r)
  with pytest.raises(mtf.MtfError, match="num_processors >= 1"):
    mtf.auto_mtf.layout_and_mesh_shape(graph, 0)
  # Mesh TF's mesh shapes: sizes non-increasing.
  assert list(itertools.islice(mtf.auto_mtf.api._factorizations(8, 2), 10)) == [
      (8,), (4, 2)]
  assert mtf.auto_mtf.api._factorizations(8, 3) == [(8,), (4, 2), (2, 2, 2)]
