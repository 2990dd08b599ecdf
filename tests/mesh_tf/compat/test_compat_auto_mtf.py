"""mtf.auto_mtf.layout_optimizer and mtf.auto_mtf.scheduler: the original's
public API over mesh-tf's CP-SAT program, memory cost model and graph view
(the wheel's own tests run in test_original_suite.py)."""

import math

import pytest

import mesh_tf as mtf
from costmodels import memory
from mesh_tf.auto_mtf import (graph_interface, layout_optimizer,
                              memory_estimator, scheduler)


def _einsum_graph():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x1 = mtf.zeros(mesh, "a:10,b:5")
  x2 = mtf.zeros(mesh, "b:5,c:20")
  y = mtf.einsum([x1, x2], "a:10,c:20")
  return graph, y


def _optimizer(graph, mesh_shape, outputs=()):
  return layout_optimizer.LayoutOptimizer(
      memory_estimator.MemoryEstimator(graph, mesh_shape, outputs),
      time_limit_s=20)


def test_evaluate_layout_is_the_cost_models_peak_memory():
  graph, y = _einsum_graph()
  opt = _optimizer(graph, "m1:4,m2:2", [y])
  peak, _, _ = memory.peak_memory(graph, "m1:4;m2:2", "a:m2;c:m1",
                                  outputs=[y])
  assert opt.evaluate_layout("a:m2;c:m1") == peak
  assert opt.evaluate_layout("") > peak
  # a:10 cannot be split 4 ways: mesh-tf cannot lay it out.
  assert opt.evaluate_layout("a:m1") == math.inf


def test_solve_honours_the_originals_splittability():
  graph, _ = _einsum_graph()
  mesh = graph.operations[0].outputs[0].mesh
  x = mtf.zeros(mesh, "c:20,d:8")
  mtf.UnstackOperation(x, mtf.Dimension("c", 20))
  # mesh-tf's lowering could split c; the original's unstack cannot.
  assert "c:" not in _optimizer(graph, "m1:4,m2:2").solve()


def test_unknown_scheduler_is_a_typed_error():
  graph, _ = _einsum_graph()
  est = memory_estimator.MemoryEstimator(graph, "m1:4")
  with pytest.raises(mtf.MtfError, match="scheduler_alg='FAST'"):
    layout_optimizer.LayoutOptimizer(est, "FAST")
  with pytest.raises(mtf.MtfError, match="'NAIVE' or 'LIST'"):
    scheduler.minimize_peak_memory(
        graph_interface.GraphInterface(graph), "FAST")


def test_list_schedule_runs_each_op_once_after_its_inputs():
  graph, y = _einsum_graph()
  mtf.reduce_sum(y * 2.0, output_shape="c:20")
  view = graph_interface.GraphInterface(graph)
  order = scheduler.minimize_peak_memory(view, "LIST")
  assert sorted(order) == list(range(len(graph.operations)))
  position = {graph.operations[i].name: k for k, i in enumerate(order)}
  for op in graph.operations:
    for t in op.inputs:
      assert position[t.operation.name] < position[op.name]
