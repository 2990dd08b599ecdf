"""Microbatching (issue 13 item 4): k microbatches accumulate to the whole
batch's step, per-microbatch work is priced k times, the accumulators count
as gradient memory, and the layout search prices the plan like the cost
model."""

import numpy as np
import pytest

import mesh_tf as mtf
import autolayout
import costmodels
from mesh_tf import models
from mesh_tf.training import optimize, storage
from mesh_tf.training.microbatch import MicrobatchPlan, microbatched_update
from mesh_tf.training import train_step_for_model

MESH, RULES = "data:4;model:2", "batch:data;d_ff:model;heads:model"
BATCH = 16
# Float32 tolerance of the whole-batch comparison: a microbatch sums its
# gradients over BATCH/k rows and the accumulator adds k of them, a
# different order of the same float32 additions.
ATOL = 1e-6


@pytest.fixture(scope="module")
def values():
  return models.build_model("transformer_tiny", batch=BATCH).random_values()


def _run(values, k, stage=0, recompute=0, param_dtype=None):
  model = models.build_model("transformer_tiny", batch=BATCH // k,
                             recompute=recompute, param_dtype=param_dtype)
  storage.shard_storage(model.graph, stage)
  rules = RULES + (";d_model_storage:data" if stage else "")
  step = train_step_for_model(model, MESH, rules, mtf.logical_cpu_devices(8),
                              optimize.SgdOptimizer(0.5), microbatches=k)
  loss = float(step(**values))
  report = costmodels.evaluate(model.graph, MESH, rules, "dgx-h100",
                               microbatches=step.plan)
  return loss, step, report


@pytest.fixture(scope="module")
def baseline(values):
  loss, step, report = _run(values, 1)
  return loss, step.variable_values(), report


def _counts(collectives, weight):
  out = {}
  for c in collectives:
    key = (c.kind, c.mesh_axes, c.bytes_per_device // weight(c))
    out[key] = out.get(key, 0) + weight(c)
  return out


@pytest.mark.parametrize("k,stage,recompute", [
    (2, 0, 0), (2, 3, 0), (4, 2, 0), (2, 3, 2), (4, 1, 1)])
def test_k_microbatches_equal_the_whole_batch(values, baseline, k, stage,
                                              recompute):
  base_loss, base_w, base_r = baseline
  loss, step, r = _run(values, k, stage, recompute)
  assert loss == pytest.approx(base_loss, rel=1e-6)
  for name, w in step.variable_values().items():
    if name in base_w:
      np.testing.assert_allclose(w, base_w[name], atol=ATOL, rtol=1e-5,
                                 err_msg=name)
  # The lowering ran exactly the collectives the cost model priced, each as
  # often as its repeats say (k times per microbatch, once per step).
  ran = _counts(step.mesh_impl.trace.collectives, lambda c: 1)
  priced = _counts(r.collectives, lambda c: c.repeats)
  assert ran == priced
  assert r.memory_by_category["gradients"] > 0   # the accumulators
  assert r.memory_by_category["activations"] < \
      base_r.memory_by_category["activations"]


def test_per_microbatch_work_is_priced_k_times():
  model = models.build_model("transformer_tiny", batch=4)
  upd = microbatched_update(model.graph, model.loss,
                            model.graph.trainable_variables,
                            optimize.SgdOptimizer(0.1), 3)
  plan = upd.plan
  assert plan.repeats(model.loss.operation.name) == 3
  assert all(plan.repeats(op.name) == 1 for op in upd.post)
  # The law is about the additive (no-overlap) step: with overlap, hidden
  # gradient syncs make the step time no longer a sum of op costs.
  r = costmodels.evaluate(model.graph, MESH, RULES, "dgx-h100",
                          microbatches=plan, overlap=False)
  once = costmodels.evaluate(model.graph, MESH, RULES, "dgx-h100",
                             overlap=False)
  per_micro = sum(c.time_s for c in once.op_costs
                  if plan.repeats(c.source_op) == 3)
  assert r.step_time_s == pytest.approx(once.step_time_s + 2 * per_micro)
  assert MicrobatchPlan().repeats("anything") == 1
  with pytest.raises(mtf.MtfError, match="microbatches=0"):
    microbatched_update(model.graph, model.loss,
                        model.graph.trainable_variables,
                        optimize.SgdOptimizer(0.1), 0)


def test_the_layout_search_prices_microbatches_like_the_cost_model():
  model = models.build_model("transformer_tiny", batch=4)
  storage.shard_storage(model.graph, 3)
  upd = microbatched_update(model.graph, model.loss,
                            model.graph.trainable_variables,
                            optimize.AdamWeightDecayOptimizer(1e-3), 4)
  search = autolayout.LayoutSearch(model.graph, microbatches=upd.plan)
  # validate() inside checks the program's value against costmodels.evaluate
  # with the same plan; a too-small budget forces the storage decision.
  free = search.solve(MESH, "dgx-h100")
  tight = search.solve(MESH, "dgx-h100",
                       memory_budget=free.report.peak_memory_bytes - 1)
  assert tight.report.peak_memory_bytes < free.report.peak_memory_bytes
  assert tight.report.step_time_s >= free.report.step_time_s


def _gradient_syncs(step):
  """``{accumulate op: [(kind, mesh axes, bytes), ...]}``: the
  collectives the step ran to reduce each gradient."""
  out = {}
  for c in step.mesh_impl.trace.collectives:
    src = c.source_op or c.op_name
    if src.endswith("/accumulate") and c.kind != "allsplit":
      out.setdefault(src, []).append(
          (c.kind, tuple(c.mesh_axes), c.bytes_per_device))
  return out


@pytest.mark.parametrize("param_dtype", [None, "bfloat16"])
def test_gradients_are_reduced_once_per_step(values, param_dtype):
  """The microbatched step sums each gradient's partial sums over its
  microbatches (through the bfloat16 casts, of both uses of the tied
  embedding too) and reduces it once per step, as a pipelined step does:
  one all-reduce per gradient, the same for 2 and 4 microbatches, and the
  cost model prices exactly the collectives the lowering ran."""
  stage = 0
  syncs = []
  for k in (2, 4):
    _, step, r = _run(values, k, stage, param_dtype=param_dtype)
    ran = _counts(step.mesh_impl.trace.collectives, lambda c: 1)
    priced = _counts(r.collectives, lambda c: c.repeats)
    assert ran == priced
    syncs.append(_gradient_syncs(step))
  two, four = syncs
  assert sorted(two) == sorted(f"{v.name}/accumulate" for v in step.variables)
  assert two == four
  for records in two.values():
    assert [(k, a) for k, a, _ in records] == [("allreduce", ("data",))]
