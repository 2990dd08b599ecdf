"""The calibration's einsum probes time the kernel a lowered step runs for
the same equation and slice shapes (whatever that kernel is: tf.einsum in
a tf.function today, tf.matmul or transposes around a batched one if the
lowering makes those there)."""

import pytest
import tensorflow as tf

import mesh_tf as mtf
from costmodels.calibrate import probes
from costmodels.calibrate.timings import Sample
from mesh_tf.lowering.placement import PlacementMeshImpl


def _op_types(fn):
  """Op types of a tf.function's graph and of every function in it."""
  graph_def = fn.get_concrete_function().graph.as_graph_def()
  types_ = [n.op for n in graph_def.node]
  for f in graph_def.library.function:
    types_ += [n.op for n in f.node_def]
  return types_


def _step_op_types(eq, xs, ws):
  """Op types of the einsum of ``eq`` lowered into a tf.function on one
  device, as a step lowers it (``mtf.einsum`` on those shapes)."""
  ins, out = eq.split("->")
  sizes = {}
  for word, shape in zip(ins.split(","), (xs, ws)):
    sizes.update(zip(word, shape))

  def shape(word):
    return ";".join(f"{c}:{sizes[c]}" for c in word)
  devices = mtf.logical_cpu_devices(1)

  def build():
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    a = mtf.import_tf_tensor(mesh, tf.zeros(xs), shape(ins.split(",")[0]))
    b = mtf.import_tf_tensor(mesh, tf.zeros(ws), shape(ins.split(",")[1]))
    y = mtf.einsum([a, b], shape(out))
    lowering = mtf.Lowering(graph, {mesh: PlacementMeshImpl("x:1", "",
                                                            devices)})
    return lowering.export_to_tf_tensor(y)
  return _op_types(tf.function(build, autograph=False))


@pytest.mark.parametrize("pattern,eq,xs,ws", [
    ("matmul", "abc,cd->abd", (4, 8, 16), (16, 16)),
    ("matmul", "ac,ab->bc", (8, 16), (8, 4)),
    ("batched", "abcd,abde->abce", (2, 4, 8, 16), (2, 4, 16, 8)),
    ("transposed", "abcd,bed->abce", (2, 4, 8, 16), (4, 16, 16)),
    ("transposed", "abc,cde->adbe", (4, 8, 16), (16, 2, 8))])
def test_einsum_probes_time_the_kernel_a_step_runs(pattern, eq, xs, ws):
  devices = mtf.logical_cpu_devices(2)
  impl = PlacementMeshImpl("x:2", "", devices)
  probe = probes._einsum_probe(  # pylint: disable=protected-access
      impl, eq, Sample("matmul", "", 2, 0, 0.0, 0.0, "float32",
                       pattern=pattern), eq, xs, ws, 4, lambda _: None,
      reps=2)
  types_ = _op_types(probe._fns[0])  # pylint: disable=protected-access
  step = _step_op_types(eq, xs, ws)
  kinds = ("MatMul", "BatchMatMulV2", "Einsum")
  products = sum(types_.count(k) for k in kinds)
  assert products >= 1 and sum(step.count(k) for k in kinds) == 1
  # Per product the same kernel ops as the step's (its transposes too).
  for op in kinds + ("Transpose",):
    assert types_.count(op) == products * step.count(op), (op, types_, step)
  probe.warm()
  assert probe.once() > 0

