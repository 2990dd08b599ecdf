"""evaluate() against the real lowering on 8 logical CPU devices, the
additive step time, the report views, and sanity checks with numbers."""

import collections
import math
import time

import pytest

import costmodels as cm
import mesh_tf as mtf
from costmodels import memory
from mesh_tf.core import dtypes
from tests.costmodels import graphs


def build(fn, **kw):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "mesh")
  outputs = fn(mesh, **kw)
  return g, mesh, outputs


def lower_for_real(graph, mesh, mesh_shape, layout, outputs, feeds=None):
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  lowering = mtf.Lowering(graph, {mesh: impl}, feeds=feeds)
  for t in outputs:
    lowering.laid_out(t)
  return impl, lowering


def _slice_bytes(laid):
  inner = getattr(laid, "laid_out_input", laid)   # a pending lazy sum
  shapes = {tuple(int(d) for d in t.shape) for t in inner.tensor_list}
  assert shapes == {tuple(laid.slice_shape)}
  return math.prod(laid.slice_shape) * dtypes.size_of(laid.dtype)


def assert_overlap_adds_up(report):
  """Per axis exposed + hidden = total and the exposed time is the axis's
  communication; hidden time slows compute by (1 - eta); the step is
  compute + exposed communication + that interference."""
  for a in report.overlap.by_axis:
    assert math.isclose(a.exposed_s + a.hidden_s, a.total_s,
                        rel_tol=1e-12, abs_tol=1e-18), a
    assert report.comm_time_by_axis[a.axis] == a.exposed_s
    assert math.isclose(a.interference_s,
                        (1 - a.efficiency) * (a.hidden_s - a.sync_wait_s),
                        rel_tol=1e-12, abs_tol=1e-18), a
  assert math.isclose(report.comm_time_s + report.hidden_comm_time_s,
                      report.total_comm_time_s, rel_tol=1e-12)
  assert report.interference_time_s > 0
  assert math.isclose(report.step_time_s,
                      report.compute_time_s + report.comm_time_s
                      + report.interference_time_s, rel_tol=1e-12)


def assert_prediction_matches_lowering(graph, mesh, mesh_shape, layout,
                                       outputs, topology, feeds=None):
  """Collectives, variable slices, tensor slices and FLOPs all agree."""
  report = cm.evaluate(graph, mesh_shape, layout, topology, outputs=outputs)
  impl, lowering = lower_for_real(graph, mesh, mesh_shape, layout, outputs,
                                  feeds)
  what = f"{mesh_shape!r} {layout!r}"
  predicted = collections.Counter(
      (c.kind, c.mesh_axes, c.group_size, c.bytes_per_device, c.reduction)
      for c in report.collectives)
  actual = collections.Counter(c.key() for c in impl.trace.collectives)
  assert predicted == actual, what
  # Per-device variable bytes equal the tf.Variable slices created.
  assert set(report.variable_bytes_per_device) == set(impl.variables), what
  for name, v in impl.variables.items():
    for s in v.slices:
      nbytes = s.shape.num_elements() * s.dtype.size
      assert nbytes == report.variable_bytes_per_device[name], (what, name)
  # Every tensor's predicted slice bytes equal the real slices' bytes.
  for t in graph.tensors:
    assert memory.tensor_bytes_per_device(t, mesh_shape, layout) == (
        _slice_bytes(lowering.tensors[t])), (what, t.name)
  assert report.flops_per_device == impl.trace.total_flops_per_device, what
  assert math.isclose(report.step_time_s,
                      report.compute_time_s + report.comm_time_s
                      + report.interference_time_s)
  return report, impl


CASES = {
    "mlp": (graphs.mlp, {}, [
        ("rows:2;cols:4", ""),
        ("rows:2;cols:4", "batch:rows;d_ff:cols"),
        ("rows:2;cols:4", "d_model:cols;d_ff:rows"),
        ("x:8", "batch:x"),
    ]),
    "attention": (graphs.attention, {}, [
        ("rows:2;cols:4", "batch:rows;memory:cols"),
        ("rows:2;cols:4", "heads:rows;d_model:cols"),
    ]),
    "einsum_chain": (graphs.einsum_chain, {}, [
        ("rows:2;cols:4", "j:cols"),
        ("rows:2;cols:4", "k:cols;i:rows"),
        ("x:8", "i:x"),
    ]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_prediction_equals_the_real_lowering(name):
  fn, kw, layouts = CASES[name]
  g, mesh, outputs = build(fn, **kw)
  kinds = set()
  for mesh_shape, layout in layouts:
    topology = "dgx-h100" if mesh_shape == "x:8" else "tpu-v5e-2x4"
    report, impl = assert_prediction_matches_lowering(
        g, mesh, mesh_shape, layout, outputs, topology)
    kinds.update(c.kind for c in impl.trace.collectives)
  assert "allreduce" in kinds     # the cases do communicate


def test_training_step_prediction_equals_the_real_lowering():
  from mesh_tf.gradients import gradients
  from mesh_tf.training.optimize import AdamWeightDecayOptimizer
  g, mesh, (loss,) = build(graphs.attention)
  variables = list(g.trainable_variables)
  grads = gradients([loss], [v.outputs[0] for v in variables])
  AdamWeightDecayOptimizer(learning_rate=0.01).apply_grads(grads, variables)
  report, _ = assert_prediction_matches_lowering(
      g, mesh, "rows:2;cols:4", "batch:rows;d_ff:cols;d_kv:cols", [loss],
      "tpu-v5e-2x4")
  assert report.memory_by_category["optimizer"] > 0   # Adam's slots


def _trained_mlp():
  from mesh_tf.gradients import gradients
  from mesh_tf.training.optimize import SgdOptimizer
  g, mesh, (loss,) = build(graphs.mlp, batch=16, d_model=32, d_ff=64)
  variables = list(g.trainable_variables)
  grads = gradients([loss], [v.outputs[0] for v in variables])
  SgdOptimizer(0.1).apply_grads(grads, variables)
  return g, mesh, loss


def test_data_parallel_costs_one_gradient_allreduce_per_parameter():
  g, mesh, loss = _trained_mlp()
  r = cm.evaluate(g, "data:8", "batch:data", "dgx-h100", outputs=[loss])
  param_bytes = {v.name: v.shape.size * 4 for v in g.trainable_variables}
  assert param_bytes == {"w1": 32 * 64 * 4, "w2": 64 * 32 * 4}
  big = [c for c in r.collectives if c.bytes_per_device > 4]
  # Exactly one SUM all-reduce over 'data' of each full weight gradient...
  assert sorted(c.bytes_per_device for c in big) == sorted(
      param_bytes.values())
  assert all(c.kind == "allreduce" and c.mesh_axes == ("data",)
             and c.reduction == "SUM" for c in big)
  assert {c.source_op for c in big} == {"einsum_grad1", "einsum_1_grad1"}
  # ... besides the scalar loss, which is summed over the batch too.
  assert [c.bytes_per_device for c in r.collectives
          if c.bytes_per_device <= 4] == [4]
  # Each costs a ring all-reduce over 8 GPUs on NVLink (450 GB/s, 1 us).
  for c in r.collectives:
    assert c.time_s == cm.allreduce_time(c.bytes_per_device, 8, 450e9, 1e-6,
                                         "switch")
  # Every collective's time (the gradient syncs partly hide under the
  # backward pass: exposed + hidden is that total).
  assert r.total_comm_time_s == pytest.approx(
      2 * 7e-6 * 3 + 2 * 7 / 8 * (8192 + 8192 + 4) / 450e9, rel=1e-12)
  assert r.total_comm_time_by_axis == {
      "data": pytest.approx(r.total_comm_time_s)}
  assert r.comm_time_s + r.hidden_comm_time_s == pytest.approx(
      r.total_comm_time_s, rel=1e-12)
  assert r.comm_time_by_axis == {"data": pytest.approx(r.comm_time_s)}


def test_splitting_d_ff_halves_the_layer_weight_bytes():
  g, mesh, loss = _trained_mlp()
  rep = cm.evaluate(g, "data:4;model:2", "batch:data", "tpu-v5e-2x4")
  split = cm.evaluate(g, "data:4;model:2", "batch:data;d_ff:model",
                      "tpu-v5e-2x4")
  assert rep.variable_bytes_per_device == {"w1": 8192, "w2": 8192}
  assert split.variable_bytes_per_device == {"w1": 4096, "w2": 4096}
  assert rep.memory_by_category["params"] == 16384
  assert split.memory_by_category["params"] == 8192
  # The hidden activations [batch/4, d_ff/2] halve too.
  h = next(op.outputs[0] for op in g.operations if op.name == "relu")
  assert rep.memory.tensor_bytes[h] == 4 * 64 * 4
  assert split.memory.tensor_bytes[h] == 4 * 32 * 4


def test_step_time_is_exactly_the_sum_of_op_costs():
  g, mesh, outputs = build(graphs.attention, layers=2, heads=4)
  r = cm.evaluate(g, "data:2;model:4", "batch:data;heads:model;d_ff:model",
                  "tpu-v5e-2x4")
  trace = cm.trace_graph(g, "data:2;model:4",
                         "batch:data;heads:model;d_ff:model")
  costs = cm.op_costs(trace, r.mapping)
  assert costs == r.op_costs
  assert r.step_time_s == math.fsum(c.time_s for c in costs)
  assert r.compute_time_s == math.fsum(c.time_s for c in costs
                                       if c.category == "compute")
  assert r.comm_time_s == math.fsum(c.time_s for c in r.collectives) > 0
  for c in costs:
    if c.category == "compute":
      assert c.time_s == max(c.flops_per_device / 197e12,
                             c.bytes_per_device / 819e9)
    else:
      assert c.time_s == cm.collective_time(
          (c.kind, c.mesh_axes, c.group_size, c.bytes_per_device), r.mapping)
      assert math.isclose(sum(t for _, t in c.time_by_axis), c.time_s)
  assert math.isclose(sum(r.comm_time_by_axis.values()), r.comm_time_s)
  assert set(r.comm_time_by_axis) == {"data", "model"}
  # The memory peak is the max over the schedule's live sets.
  order = memory.schedule(g, None)
  sets = memory.live_sets(g, order)
  assert r.peak_memory_bytes == max(
      sum(r.memory.tensor_bytes[t] for t in s) for s in sets)
  assert r.peak_memory_bytes == sum(r.memory_by_category.values())


def test_dataframe_views():
  g, mesh, outputs = build(graphs.attention)
  r = cm.evaluate(g, "data:2;model:4", "batch:data;d_ff:model", "dgx-h100")
  ops = r.to_dataframe("ops")
  assert ops["time_s"].sum() == pytest.approx(r.step_time_s)
  assert ops["flops_per_device"].sum() == r.flops_per_device
  axes = r.to_dataframe("axes")
  assert list(axes.index) == ["data", "model"]
  assert axes.loc["model", "link"] == "nvlink"
  assert axes["comm_time_s"].sum() == pytest.approx(r.comm_time_s)
  mem = r.to_dataframe("memory")
  assert mem.loc["total", "bytes_per_device"] == r.peak_memory_bytes
  coll = r.to_dataframe("collectives")
  assert len(coll) == len(r.collectives) > 0
  assert coll["time_s"].sum() == pytest.approx(r.comm_time_s)
  var = r.to_dataframe("variables")
  assert var["bytes_per_device"].sum() == r.memory_by_category["params"]
  with pytest.raises(mtf.MtfError, match="unknown CostReport view 'x'"):
    r.to_dataframe("x")
  assert "peak memory" in r.summary() and "CostReport(" in repr(r)


def test_axis_spanning_nodes_pays_for_infiniband():
  # 8 MiB partial sums: bandwidth, not latency, dominates.
  g, mesh, outputs = build(graphs.mlp, batch=512, d_model=4096, d_ff=64)
  within = cm.evaluate(g, "a:2;b:8", "d_ff:b", "h100x8-nodes2")
  across = cm.evaluate(g, "b:2;a:8", "d_ff:b", "h100x8-nodes2")
  assert [c.mesh_axes for c in within.collectives] == [("b",)] * len(
      across.collectives)
  assert within.mapping["b"].link_kind == "nvlink"
  assert across.mapping["b"].link_kind == "infiniband"
  assert across.comm_time_s > 3 * within.comm_time_s


def test_errors_name_the_problem():
  g, mesh, outputs = build(graphs.mlp)
  with pytest.raises(cm.TopologyError, match="has 8 processors but topology"):
    cm.evaluate(g, "x:8", "", "h100x8-nodes2")
  with pytest.raises(mtf.IndivisibleDimError, match="d_model=8.*x=3"):
    cm.evaluate(g, "x:3;y:2;z:1", "d_model:x",
                cm.gpu_cluster("h100", nodes=1, gpus_per_node=6))
  with pytest.raises(mtf.UnknownNameError, match="mesh axis 'q'"):
    cm.evaluate(g, "x:8", "d_ff:q", "dgx-h100")


def test_evaluating_a_deep_graph_is_fast_and_tf_free():
  # 36 layers: over 600 ops with the softmax one fused op per layer.
  g, mesh, outputs = build(graphs.attention, batch=16, length=16, memory=16,
                           d_model=64, heads=8, d_kv=16, layers=36,
                           zeros=True)
  start = time.perf_counter()
  r = cm.evaluate(g, "data:16;model:8", "batch:data;heads:model;d_ff:model",
                  "h200x8-nodes16")
  elapsed = time.perf_counter() - start
  assert len(g.operations) > 600 and r.step_time_s > 0
  assert elapsed < 10, elapsed


def test_costing_does_not_import_tensorflow():
  import subprocess
  import sys
  code = (
      "import sys, costmodels as cm, mesh_tf as mtf\n"
      "from tests.costmodels import graphs\n"
      "g = mtf.Graph(); mesh = mtf.Mesh(g, 'm')\n"
      "graphs.attention(mesh)\n"
      "r = cm.evaluate(g, 'data:2;model:4', 'batch:data;d_ff:model', "
      "'dgx-h100')\n"
      "assert r.step_time_s > 0\n"
      "assert 'tensorflow' not in sys.modules, 'TF was imported'\n")
  root = __file__.rsplit("/tests/", 1)[0]
  subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
