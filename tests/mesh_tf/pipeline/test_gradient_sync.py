"""Issue 45: a pipelined step reduces each weight gradient over the data
axis ONCE per step, whatever the microbatch count, as the pipelined cost
model prices it (:func:`costmodels.stage_work.price_sync`: the sync once per
step for ZeRO 0 and 1): also under ZeRO 1 (the accumulated sum is reduce-scattered
onto the storage shard once) and with bfloat16 compute of float32 masters
(the widening cast of the gradient keeps the sum pending; it is reduced in
bfloat16, the bytes the cost model measures)."""

import dataclasses

import numpy as np
import pytest

import mesh_tf as mtf
from autolayout.training.pipeline_price import (PipelineLayout,
                                                measure_stage, price_layout)
from costmodels.topology import gpu_cluster
from mesh_tf import models
from mesh_tf.pipeline import (Pipeline, PipelineTrainStep, stage_costs,
                              trace_pipeline)
from mesh_tf.pipeline.schedule import BACKWARD
from mesh_tf.training import optimize, train_step_for_model

MESH = "stage:2;data:2;model:2"
RULES = "batch:data;d_ff:model;heads:model;vocab:model"
LR = 0.5


def _config(dtype):
  return models.TransformerConfig(layers=2, batch=8, param_dtype=dtype)


def _step(m, zero, dtype):
  rules = RULES + (";d_model_storage:data" if zero else "")
  pipe = Pipeline("stage", 2, m, 2, schedule="1f1b")
  return PipelineTrainStep(models.transformer_parts(_config(dtype)), pipe,
                           MESH, rules, mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR), storage=zero,
                           eager=True)


def _data_sums(records):
  return [c for c in records if c.kind in ("allreduce", "reduce_scatter")
          and "data" in c.mesh_axes]


@pytest.fixture(scope="module")
def runs():
  out = {}
  values = _config(None).build().random_values()
  for dtype in (None, "bfloat16"):
    model = _config(dtype).build()
    base = train_step_for_model(model, "data:2;model:4", RULES,
                                mtf.logical_cpu_devices(8),
                                optimize.SgdOptimizer(LR))
    out[("base", dtype)] = (float(base(**values)), base.variable_values())
  for zero, dtype in ((None, None), (1, None), (None, "bfloat16")):
    for m in (2, 4):
      step = _step(m, zero, dtype)
      out[(zero, dtype, m)] = (step, float(step(**values)),
                               step.variable_values())
  return out


@pytest.mark.parametrize("zero,dtype", [(1, None), (None, "bfloat16")])
def test_one_gradient_reduction_per_step(runs, zero, dtype):
  by_m = {}
  for m in (2, 4):
    step, loss, weights = runs[(zero, dtype, m)]
    base_loss, base_w = runs[("base", dtype)]
    # Float32 equals the unpipelined step as the other pipeline tests
    # require; bfloat16 rounds differently (the microbatches' partial sums
    # are added in float32 before the one reduction).
    tol = 1e-6 if dtype is None else 2e-2
    assert loss == pytest.approx(base_loss, rel=tol)
    for name, w in base_w.items():
      np.testing.assert_allclose(weights[name], w, atol=tol,
                                 rtol=10 * tol, err_msg=name)
    program = step.program
    for s in range(len(step.trace.stages)):
      grads = {n for u in program.updates if u.stage == s
               for n in u.grad_inputs}
      in_update = [c for seg in step.trace.segments
                   if seg.stage == s and seg.step == "update"
                   for c in _data_sums(seg.collectives)]
      # One all-reduce per gradient, in the update, none per microbatch
      # in the backward steps.
      assert len(in_update) == len(grads)
      # ZeRO 1 reduce-scatters the gradients onto their shards (every
      # variable here has d_model, which data=2 divides), as price_sync
      # prices it.
      kinds = {c.kind for c in in_update}
      assert kinds == ({"reduce_scatter"} if zero else {"allreduce"})
      assert not [c for seg in step.trace.segments
                  if seg.stage == s and seg.step not in ("setup", "update",
                                                         "tied")
                  and seg.step.phase == BACKWARD
                  for c in _data_sums(seg.collectives)]
    costs = stage_costs(step.program.pipeline, step.trace)
    by_m[m] = [c.step_collective_bytes for c in costs]
  # What a step reduces once does not grow with the microbatches.
  assert by_m[2] == by_m[4]


def test_bfloat16_gradients_are_reduced_in_bfloat16(runs):
  """The one reduction moves the compute dtype's bytes: half the float32
  step's, the bytes the cost model's trace reduces."""
  def update_bytes(step):
    return sum(c.bytes_per_device for seg in step.trace.segments
               if seg.step == "update" for c in _data_sums(seg.collectives))
  assert (2 * update_bytes(runs[(None, "bfloat16", 2)][0])
          == update_bytes(runs[(None, None, 2)][0]))


@pytest.mark.parametrize("zero", [0, 1])
def test_each_layer_reduces_the_priced_bytes_once_per_step(zero):
  """The pipelined cost model's sync (``measure_stage``'s
  ``layer_sync_bytes``, repriced by ``price_sync`` once per step: an
  all-reduce under ZeRO 0, a reduce-scatter of the sharded part under
  ZeRO 1) is what the lowering of a bfloat16 plan of 4 microbatches
  reduces per layer, all of it in the update."""
  config = models.get_config("transformer_tiny", layers=4, batch=8,
                             d_model=32, d_ff=128, heads=4, d_kv=8,
                             vocab=256, length=16)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  lay = PipelineLayout(1, 2, 2, 1, 1, "full", "inner", zero=zero)
  work = measure_stage(config, topo, 1, 2)
  price = price_layout(config, topo, lay, work)
  assert price.cost.pipeline.microbatches == 4
  lowered = dataclasses.replace(config, param_dtype="bfloat16",
                                recompute=config.layers)
  trace = trace_pipeline(lowered.parts(), price.cost.pipeline, lay.mesh(),
                         price.rules + (";d_model_storage:data" if zero
                                        else ""),
                         optimize.SgdOptimizer(0.1), storage=zero or None)
  per_layer = {}
  for seg in trace.segments:
    for c in _data_sums(seg.collectives):
      layer = (c.source_op or "").split("/")[0]
      if layer.startswith("layer_"):
        assert seg.step == "update"
        key = (c.kind, layer)
        per_layer[key] = per_layer.get(key, 0) + c.bytes_per_device
  kind = "reduce_scatter" if zero else "allreduce"
  synced = (work.sharded_part(work.layer_sync_bytes, lay.data) if zero
            else work.layer_sync_bytes)
  assert per_layer == {(kind, f"layer_{i}"): synced
                       for i in range(config.layers)}
