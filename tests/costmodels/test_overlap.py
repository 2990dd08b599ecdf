"""Gradient syncs hidden under the backward pass (costmodels.overlap): the
formula on literal cases, the trace still equal to the lowering, exposed +
hidden == total per axis, efficiency as data, and the GPT-3 ranking."""

import math

import pytest

import costmodels as cm
from costmodels import overlap
from mesh_tf import models
from mesh_tf.training import optimize
from mesh_tf.gradients import gradients
from tests.costmodels.test_evaluate import (
    assert_overlap_adds_up, assert_prediction_matches_lowering)


def _train(model):
  variables = list(model.graph.trainable_variables)
  grads = gradients([model.loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(0.1).apply_grads(grads, variables)
  return model


@pytest.mark.parametrize("sync, work, eta, expected", [
    ([1.0], [5.0, 2.0], 1.0, 0.0),            # hidden under 2 s of work
    ([3.0], [5.0, 2.0], 1.0, 1.0),            # 2 of 3 s hidden
    ([3.0], [5.0, 2.0], 0.5, 2.0),            # half as efficient
    ([0.0, 1.0], [9.0, 9.0, 0.5], 1.0, 0.5),  # the last bucket is exposed
    ([4.0, 1.0], [0.0, 1.0, 1.0], 1.0, 3.0),  # the queue backs up
    ([2.0], [0.0, 3.0], 0.0, 2.0),            # no overlap at all
])
def test_exposed_sync_time_on_literal_schedules(sync, work, eta, expected):
  assert overlap.exposed_sync_time(sync, work, eta) == pytest.approx(expected)


def test_buckets_follow_the_gradient_producers_in_graph_order():
  model = _train(models.build_model("transformer_tiny"))
  b = overlap.gradient_buckets(model.graph, max_buckets=4)
  assert b.num_buckets == 4
  assert list(b.releases) == sorted(b.releases)
  grads = [op.name for op in model.graph.operations
           if any(t.gradient_of is not None for t in op.outputs)]
  assert set(b.bucket_of) == set(grads)
  assert [b.bucket_of[n] for n in grads] == sorted(b.bucket_of[n]
                                                    for n in grads)
  assert overlap.gradient_buckets(
      models.build_model("transformer_tiny").graph).num_buckets == 0


def test_tiny_transformer_trace_equals_lowering_and_time_adds_up():
  model = _train(models.build_model("transformer_tiny"))
  outputs = [model.loss]
  report, _ = assert_prediction_matches_lowering(
      model.graph, model.mesh, "rows:2;cols:4", "batch:rows;d_ff:cols",
      outputs, "tpu-v5e-2x4", feeds=model.random_feeds())
  # Gradient syncs over 'rows' exist, and part of them is hidden.
  assert report.hidden_comm_time_s > 0
  assert report.hidden_comm_time_by_axis["rows"] > 0
  assert_overlap_adds_up(report)
  for a in report.overlap.by_axis:
    assert a.hidden_s <= a.sync_s * (1 + 1e-12)
  # The conservative figure exposes everything: the plain sum of records.
  full = cm.evaluate(model.graph, "rows:2;cols:4", "batch:rows;d_ff:cols",
                     "tpu-v5e-2x4", outputs=outputs, overlap=False)
  assert full.step_time_s == math.fsum(c.time_s for c in full.op_costs)
  assert full.hidden_comm_time_s == 0.0
  assert full.comm_time_s == full.total_comm_time_s == (
      report.total_comm_time_s)
  assert report.step_time_s < full.step_time_s
  # Tensor-parallel all-reduces over 'cols' are on the critical path.
  assert report.hidden_comm_time_by_axis["cols"] == 0.0
  assert "hidden" in report.summary()
  axes = report.to_dataframe("axes")
  assert axes.loc["rows", "hidden_comm_time_s"] > 0


def test_overlap_efficiency_is_link_data():
  model = _train(models.build_model("transformer_tiny", batch=64,
                                    length=64))
  topo = cm.get_topology("dgx-h100")
  args = (model.graph, "data:8", "batch:data")
  base = cm.evaluate(*args, topo)
  assert base.overlap.by_axis[0].efficiency == (
      overlap.DEFAULT_OVERLAP_EFFICIENCY["nvlink"])
  none = topo._replace(dims=tuple(
      d._replace(link=d.link._replace(overlap_efficiency=0.0))
      for d in topo.dims))
  r0 = cm.evaluate(*args, none)
  assert r0.hidden_comm_time_s == 0.0
  assert math.isclose(r0.step_time_s, cm.evaluate(
      *args, topo, overlap=False).step_time_s, rel_tol=1e-12)
  full = topo._replace(dims=tuple(
      d._replace(link=d.link._replace(overlap_efficiency=1.0))
      for d in topo.dims))
  assert cm.evaluate(*args, full).hidden_comm_time_s > (
      base.hidden_comm_time_s) > 0


def test_gpt3_tensor_parallelism_inside_the_node_ranks_above_across():
  # GPT-3 175B, the training step (SGD), on 128 nodes of 8 H100s: the same
  # plan (data parallelism over 128, Megatron tensor parallelism over 8)
  # with the tensor-parallel axis on NVLink ("data:128;model:8": the minor
  # axis takes the GPUs of a node) or across nodes ("model:8;data:128").
  model = _train(models.build_model("gpt3_175b"))
  rules = "batch:data;heads:model;d_ff:model;vocab:model"
  inside = cm.evaluate(model.graph, "data:128;model:8", rules,
                       "h100x8-nodes128")
  across = cm.evaluate(model.graph, "model:8;data:128", rules,
                       "h100x8-nodes128")
  assert inside.mapping["model"].link_kind == "nvlink"
  assert "infiniband" in across.mapping["model"].link_kind
  assert inside.step_time_s < 0.5 * across.step_time_s
  # Its gradient syncs over InfiniBand are largely hidden.
  assert inside.hidden_comm_time_by_axis["data"] > 0.3 * (
      inside.total_comm_time_by_axis["data"])


@pytest.mark.parametrize("eta", [0.0, 0.5])
def test_a_gradient_sync_does_not_wait_for_its_barrier(eta):
  """A link's barrier (calibrated: the group's members wait for each
  other) is paid by every collective the step waits for, and by none of
  its gradient syncs while overlap is on; with overlap off every collective
  pays it.  Whatever the efficiency: nothing waits for a sync's barrier."""
  barrier = 1e-3
  topo = cm.get_topology("tpu-v5e-2x4")
  def with_link(**kw):
    return topo._replace(dims=tuple(
        d._replace(link=d.link._replace(**kw)) for d in topo.dims))
  base, slow = (with_link(overlap_efficiency=eta),
                with_link(overlap_efficiency=eta, barrier_s=barrier))
  model = _train(models.build_model("transformer_tiny"))
  mesh, rules = "rows:2;cols:4", "batch:rows;d_ff:cols"
  buckets = overlap.gradient_buckets(model.graph)
  trace = cm.trace_graph(model.graph, mesh, rules, [model.loss])
  syncs = sum(buckets.record_bucket(c) is not None
              for c in trace.collectives)
  waited = len(trace.collectives) - syncs
  assert syncs > 0 and waited > 0
  for on in (True, False):
    a, b = (cm.evaluate(model.graph, mesh, rules, t, outputs=[model.loss],
                        overlap=on) for t in (base, slow))
    for x in b.overlap.by_axis:
      assert math.isclose(x.exposed_s + x.hidden_s, x.total_s,
                          rel_tol=1e-12)
      assert math.isclose(x.interference_s, (1 - x.efficiency) * (
          x.hidden_s - x.sync_wait_s), rel_tol=1e-12, abs_tol=1e-18)
    paid = len(trace.collectives) if not on else waited
    assert b.step_time_s - a.step_time_s == pytest.approx(paid * barrier,
                                                          rel=1e-6)
    # Every collective's barrier is in the total; a sync's is hidden.
    assert b.total_comm_time_s - a.total_comm_time_s == pytest.approx(
        len(trace.collectives) * barrier, rel=1e-6)
    assert b.hidden_comm_time_s - a.hidden_comm_time_s == pytest.approx(
        (syncs if on else 0) * barrier, abs=1e-12)
  # The barrier's part of each priced collective, on the axes that pay it.
  costs = cm.evaluate(model.graph, mesh, rules, slow,
                      outputs=[model.loss]).collectives
  for c in costs:
    assert math.fsum(t for _, t in c.wait_by_axis) == pytest.approx(barrier)
    assert {a for a, _ in c.wait_by_axis} <= set(c.mesh_axes)


def test_data_parallel_steps_wait_for_none_of_their_collectives():
  """What calibration counts as a model step's waited collectives
  (``Sample.blocking``): under data parallelism the loss's mean alone
  (every other all-reduce a gradient sync), under a hidden-dim split the
  activations' all-reduces, forward and backward."""
  from costmodels.calibrate import model_steps
  for rules, waited in (("batch:x", 1), ("d_ff:x", 4 + 4)):
    model = _train(models.mlp(**model_steps.MODEL_STEPS["mlp"]))
    trace = cm.trace_graph(model.graph, "x:8", rules, [model.loss])
    buckets = overlap.gradient_buckets(model.graph)
    got = sum(buckets.record_bucket(c) is None for c in trace.collectives)
    assert got == waited, rules
  assert len(trace.collectives) == waited  # d_ff:x has no gradient sync
