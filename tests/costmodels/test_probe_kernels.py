"""The calibration's einsum probes time the kernels a lowered step runs for
the same equation and slice shapes (tf.matmul, or transposes around a
batched one), not tf.einsum."""

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
  assert "Einsum" not in types_ and "Einsum" not in step
  # Per product the same kernel ops as the step's (its transposes too).
  products = types_.count("MatMul") + types_.count("BatchMatMulV2")
  step_products = step.count("MatMul") + step.count("BatchMatMulV2")
  assert products >= 1 and step_products == 1
  for op in ("MatMul", "BatchMatMulV2", "Transpose"):
    assert types_.count(op) == products * step.count(op), (op, types_, step)
  probe.warm()
  assert probe.once() > 0


def test_tiny_product_probes_run_a_batch_of_one_as_a_plain_product():
  # As a step runs a product with no batch letter: MatMul, not BatchMatMul.
  devices = mtf.logical_cpu_devices(2)
  impl = PlacementMeshImpl("x:2", "", devices)
  one, four = probes.kernel_probes(impl, "float32", 4, lambda _: None,
                                   sizes=((1, 8, 16), (4, 8, 16)))
  assert one.sample.matrix == (1, 8, 16) and four.sample.matrix == (4, 8, 16)
  types_ = _op_types(one._fns[0])  # pylint: disable=protected-access
  assert "MatMul" in types_ and "BatchMatMulV2" not in types_
  types_ = _op_types(four._fns[0])  # pylint: disable=protected-access
  assert "BatchMatMulV2" in types_ and "MatMul" not in types_
