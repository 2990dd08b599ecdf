"""Parameter all-gathers of sharded weights prefetched under earlier compute
(costmodels.prefetch), and the gradient tails (bf16 casts, ZeRO scatters)
counted as syncs: literal schedules, the trace still equal to the lowering,
exposed + hidden == total per axis, and the direction of the effect."""

import math

import pytest

import costmodels as cm
from costmodels import overlap, prefetch
from mesh_tf import models
from mesh_tf.training import optimize, storage
from mesh_tf.gradients import gradients
from tests.costmodels.test_evaluate import (
    assert_overlap_adds_up, assert_prediction_matches_lowering)

ZERO3_RULES = "batch:rows;d_ff:cols;d_model_storage:rows"


def _train(model, stage=0):
  storage.shard_storage(model.graph, stage)
  variables = list(model.graph.trainable_variables)
  grads = gradients([model.loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(0.1).apply_grads(grads, variables)
  return model


def _sync_only_step(report):
  """The step time with gradient syncs hidden but no prefetch."""
  so = overlap.overlap(report.op_costs,
                       overlap.gradient_buckets(report.graph),
                       report.mapping)
  return report.compute_time_s + so.exposed_comm_s


@pytest.mark.parametrize("gather, window, eta, expected", [
    ([1.0], [0.0], 1.0, 1.0),                  # nothing before it
    ([1.0, 3.0], [0.0, 2.0], 1.0, 2.0),        # the second is late by 1 s
    ([1.0, 3.0], [0.0, 9.0], 1.0, 1.0),        # only the first waits
    ([1.0, 3.0], [0.0, 2.0], 0.5, 3.0),        # half as efficient
    ([0.0, 2.0, 2.0], [5.0, 1.0, 0.0], 1.0, 0.0),  # fetched far ahead
    ([2.0], [3.0], 0.0, 2.0),                  # no overlap at all
])
def test_exposed_prefetch_time_on_literal_schedules(gather, window, eta,
                                                    expected):
  assert prefetch.exposed_prefetch_time(gather, window, eta) == (
      pytest.approx(expected))


def test_sync_capacity_taken_by_gathers_due_in_the_backward_pass():
  free = overlap.exposed_sync_time([2.0], [0.0, 3.0], 1.0)
  taken = overlap.exposed_sync_time([2.0], [0.0, 3.0], 1.0, [0.0, 2.0])
  assert (free, taken) == (0.0, 1.0)
  # Never more than the syncs themselves.
  assert overlap.exposed_sync_time([2.0], [0.0, 3.0], 1.0, [0.0, 9.0]) == 2.0


def test_buckets_follow_the_gathers_first_readers():
  model = _train(models.build_model("transformer_tiny"), stage=3)
  g = model.graph
  pf = prefetch.prefetch_buckets(g, max_buckets=8)
  gathers = [op.name for op in g.operations
             if type(op).__name__ == "StorageGatherOperation"]
  # Stage 3 gathers in forward and again in backward.
  assert any(n.endswith("_backward") for n in gathers)
  assert set(pf.bucket_of) == set(gathers)
  assert pf.num_buckets == 8
  assert list(pf.deadlines) == sorted(pf.deadlines)
  order = sorted(gathers, key=lambda n: pf.need[n])
  assert [pf.bucket_of[n] for n in order] == sorted(pf.bucket_of.values())
  for n in gathers:
    assert pf.deadlines[pf.bucket_of[n]] <= pf.need[n]
  assert prefetch.prefetch_buckets(
      _train(models.build_model("transformer_tiny")).graph).num_buckets == 0


@pytest.mark.parametrize("kw", [{}, {"batch": 64, "length": 64}])
def test_zero3_trace_equals_lowering_and_time_adds_up(kw):
  model = _train(models.build_model("transformer_tiny", **kw), stage=3)
  outputs = [model.loss]
  report, _ = assert_prediction_matches_lowering(
      model.graph, model.mesh, "rows:2;cols:4", ZERO3_RULES, outputs,
      "tpu-v5e-2x4", feeds=model.random_feeds())
  rows = {a.axis: a for a in report.overlap.by_axis}["rows"]
  assert rows.prefetch_s > 0 and rows.sync_s > 0
  assert rows.hidden_s > 0
  assert_overlap_adds_up(report)
  for a in report.overlap.by_axis:
    assert 0.0 <= a.exposed_prefetch_s <= a.prefetch_s * (1 + 1e-12)
    assert 0.0 <= a.exposed_sync_s <= a.sync_s * (1 + 1e-12)
  # The report's axes view carries the same split.
  axes = report.to_dataframe("axes")
  assert axes.loc["rows", "prefetch_time_s"] == rows.prefetch_s
  assert axes.loc["rows", "exposed_prefetch_time_s"] == rows.exposed_prefetch_s
  assert axes.loc["rows", "sync_time_s"] == rows.sync_s
  assert math.isclose(axes["comm_time_s"].sum() + axes[
      "hidden_comm_time_s"].sum(), axes["total_comm_time_s"].sum(),
                      rel_tol=1e-12)
  full = cm.evaluate(model.graph, "rows:2;cols:4", ZERO3_RULES,
                     "tpu-v5e-2x4", outputs=outputs, overlap=False)
  assert full.step_time_s == math.fsum(c.time_s for c in full.op_costs)
  assert full.hidden_comm_time_s == 0.0
  assert report.step_time_s < _sync_only_step(report) < full.step_time_s


@pytest.mark.parametrize("stage, param_dtype", [
    (0, "bfloat16"), (1, None), (2, None), (3, None), (3, "bfloat16")])
def test_gradient_tails_are_syncs(stage, param_dtype):
  # A bf16 gradient is cast to its float32 master, and ZeRO moves it onto
  # the storage layout: the sum the backward pass left pending is reduced
  # there (in the compute dtype), and it overlaps like any gradient sync.
  kw = {"batch": 64, "length": 64}
  if param_dtype:
    kw["param_dtype"] = param_dtype
  model = _train(models.build_model("transformer_tiny", **kw), stage)
  rules = "batch:rows;d_model_storage:rows" if stage else "batch:rows"
  report = cm.evaluate(model.graph, "rows:2;cols:4", rules, "tpu-v5e-2x4",
                       outputs=[model.loss])
  b = overlap.gradient_buckets(model.graph)
  syncs = [c for c in report.op_costs if overlap.is_gradient_sync(c, b)]
  kinds = {c.kind for c in syncs}
  # (A bf16 embedding read by two casts is gathered in float32 and its
  # contributions all-reduced in bf16 before the add, as lowered.)
  assert kinds == ({"reduce_scatter"} if stage >= 2 else {"allreduce"}) or (
      param_dtype and kinds == {"reduce_scatter", "allreduce"})
  assert all(c.mesh_axes == ("rows",) for c in syncs)
  # Every reduction over the data axis but the loss's is a sync (bf16
  # reduces each use's contribution to a weight before the cast adds them).
  pf = prefetch.prefetch_buckets(model.graph)
  rest = [c for c in report.op_costs if c.category == "comm"
          and c not in syncs and not prefetch.is_prefetch(c, pf)]
  assert [c.source_op for c in rest] == ["loss"]
  assert len(syncs) >= len(model.graph.trainable_variables)
  if param_dtype:
    # In bf16 the reduction moves bf16 bytes: half of float32's.
    fp32 = _train(models.build_model("transformer_tiny", batch=64,
                                     length=64), stage)
    r32 = cm.evaluate(fp32.graph, "rows:2;cols:4", rules, "tpu-v5e-2x4",
                      outputs=[fp32.loss])
    b32 = overlap.gradient_buckets(fp32.graph)
    big32 = max(c.bytes_per_device for c in r32.op_costs
                if overlap.is_gradient_sync(c, b32))
    assert 2 * max(c.bytes_per_device for c in syncs) == big32
  assert {a.axis: a for a in report.overlap.by_axis}["rows"].hidden_s > 0


def test_prefetch_ranks_zero3_above_plain_data_parallelism():
  # With its gathers hidden under the forward pass and its reduce-scatters
  # under the backward pass, ZeRO 3 over the data axis moves the traffic
  # of one all-reduce off the critical path in two overlapped halves: it
  # ranks above plain data parallelism, whose single all-reduce waits for
  # the backward pass; without prefetch it ranks below.
  model = _train(models.build_model("transformer_tiny", batch=64,
                                    length=64), stage=3)
  args = (model.graph, "rows:2;cols:4")
  zero3 = cm.evaluate(*args, ZERO3_RULES, "tpu-v5e-2x4",
                      outputs=[model.loss])
  plain = cm.evaluate(*args, "batch:rows;d_ff:cols", "tpu-v5e-2x4",
                      outputs=[model.loss])
  assert zero3.step_time_s < plain.step_time_s
  assert _sync_only_step(zero3) > _sync_only_step(plain)
  # The gathers' link time is data: with no overlap on the links nothing
  # is hidden, and the two rank as without overlap.
  topo = cm.get_topology("tpu-v5e-2x4")
  none = topo._replace(dims=tuple(
      d._replace(link=d.link._replace(overlap_efficiency=0.0))
      for d in topo.dims))
  z0 = cm.evaluate(*args, ZERO3_RULES, none, outputs=[model.loss])
  assert z0.hidden_comm_time_s == 0.0
  assert math.isclose(z0.step_time_s, cm.evaluate(
      *args, ZERO3_RULES, topo, outputs=[model.loss],
      overlap=False).step_time_s, rel_tol=1e-12)
