"""Pipelined training steps on 8 logical CPU devices equal the unpipelined
step (loss and updated weights), for GPipe, 1F1B and interleaved 1F1B, 2
and 4 stages x 2 and 4 microbatches, with tensor and data parallelism
inside the stages (and ZeRO sharded storage); the device lowering records
the trace that the shape-only lowering predicts."""

import dataclasses

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.core.dims import convert_to_shape
from mesh_tf import models
from mesh_tf.pipeline import (Pipeline, PipelineBatchError, PipelineTrainStep,
                              expected_boundary_bytes, stage_costs,
                              stage_impls, trace_pipeline)
from mesh_tf.pipeline.lowering import stage_groups
from mesh_tf.training import optimize, train_step_for_model

# Float32: the microbatches' gradients are summed in another order than
# the whole batch's.
ATOL, RTOL = 1e-6, 1e-5
LR = 0.5
MLP = models.MLPConfig(layers=8, batch=8)
LM = models.TransformerConfig(layers=4, batch=8)
MLP_RULES = "batch:data;d_ff:model"
LM_RULES = "batch:data;d_ff:model;heads:model;vocab:model"


def _baseline(config, rules):
  model = config.build()
  values = model.random_values()
  step = train_step_for_model(model, "data:2;model:4", rules,
                              mtf.logical_cpu_devices(8),
                              optimize.SgdOptimizer(LR))
  return values, float(step(**values)), step.variable_values()


@pytest.fixture(scope="module")
def mlp_baseline():
  return _baseline(MLP, MLP_RULES)


@pytest.fixture(scope="module")
def lm_baseline():
  return _baseline(LM, LM_RULES)


def _mesh(p, tensor_parallel):
  if p == 2:
    return "stage:2;data:2;model:2"
  return ("stage:4;data:1;model:2" if tensor_parallel
          else "stage:4;data:2;model:1")


def _check(step, baseline):
  values, loss, weights = baseline
  got = float(step(**values))
  assert got == pytest.approx(loss, rel=1e-6)
  new = step.variable_values()
  assert set(weights) <= set(new)
  for name, w in weights.items():
    np.testing.assert_allclose(new[name], w, atol=ATOL, rtol=RTOL,
                               err_msg=name)


def _check_trace(step, parts, pipe, mesh, rules, boundary, storage=None):
  """The device lowering's trace is the shape-only lowering's, and its
  sends are the boundary bytes predicted from the layout alone."""
  shape = trace_pipeline(parts, pipe, mesh, rules,
                         optimize.SgdOptimizer(LR), storage)
  assert step.trace.segments == shape.segments
  for ran, predicted in zip(step.trace.stages, shape.stages):
    assert ran.collectives == predicted.collectives
    assert ran.compute == predicted.compute
    assert dict(ran.variables) == dict(predicted.variables)
  costs = stage_costs(pipe, shape)
  expected = expected_boundary_bytes(pipe, boundary, "float32", mesh, rules)
  assert tuple(c.sent_bytes_per_microbatch for c in costs) == expected
  # Received from the neighbours what they sent.
  assert sum(c.received_bytes_per_microbatch for c in costs) == sum(expected)
  m = pipe.microbatches
  for s, trace in enumerate(shape.stages):
    sends = [c for c in trace.collectives if c.kind == "send"
             and not c.op_name.startswith("pipeline/tied")]
    assert sum(c.bytes_per_device for c in sends) == m * expected[s]
    assert all(c.mesh_axes == ("stage",) and c.group_size == 2
               for c in sends)
  return costs


MLP_CASES = [(p, m, s, 1) for p in (2, 4) for m in (2, 4)
             for s in ("gpipe", "1f1b")] + [
                 (2, 2, "interleaved_1f1b", 2), (2, 4, "interleaved_1f1b", 2),
                 (4, 4, "interleaved_1f1b", 2)]


@pytest.mark.parametrize("p,m,schedule,v", MLP_CASES)
def test_mlp_pipeline_equals_unpipelined(mlp_baseline, p, m, schedule, v):
  parts = models.mlp_parts(MLP)
  pipe = Pipeline("stage", p, m, MLP.layers, chunks=v, schedule=schedule)
  mesh = _mesh(p, tensor_parallel=m == 2)
  step = PipelineTrainStep(parts, pipe, mesh, MLP_RULES,
                           mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR), eager=True)
  _check(step, mlp_baseline)
  _check_trace(step, parts, pipe, mesh, MLP_RULES,
               f"batch:{MLP.batch // m};d_model:{MLP.d_model}")


LM_CASES = [(2, 4, "1f1b", 1, None), (4, 2, "gpipe", 1, None),
            (2, 2, "interleaved_1f1b", 2, None), (2, 2, "1f1b", 1, 3),
            (2, 4, "interleaved_1f1b", 2, 2)]


@pytest.mark.parametrize("p,m,schedule,v,zero", LM_CASES)
def test_transformer_pipeline_equals_unpipelined(lm_baseline, p, m, schedule,
                                                 v, zero):
  parts = models.transformer_parts(LM)
  pipe = Pipeline("stage", p, m, LM.layers, chunks=v, schedule=schedule)
  mesh = _mesh(p, tensor_parallel=True)
  rules = LM_RULES + (";d_model_storage:data" if zero else "")
  step = PipelineTrainStep(parts, pipe, mesh, rules,
                           mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR), storage=zero,
                           eager=True)
  _check(step, lm_baseline)
  costs = _check_trace(
      step, parts, pipe, mesh, rules,
      f"batch:{LM.batch // m};length:{LM.length};d_model:{LM.d_model}", zero)
  # The tied embedding table's gradient crosses between the first and the
  # last stage once per step, each way.
  table = LM.vocab * LM.d_model * 4 // 2   # vocab split over model=2
  if zero:
    table //= 2   # its storage is sharded over data too
  assert costs[0].tied_bytes == costs[-1].tied_bytes == table
  assert all(c.tied_bytes == 0 for c in costs[1:-1])
  # The first stage holds the embedding: more activation per microbatch.
  assert costs[0].activation_bytes_per_microbatch > 0


def test_traced_function_step_equals_unpipelined():
  """The step as one tf.function (the default), with its per-stage
  control dependencies, gives the unpipelined step's results."""
  config = models.MLPConfig(layers=2, batch=8)
  parts = models.mlp_parts(config)
  pipe = Pipeline("stage", 2, 2, config.layers, schedule="1f1b")
  step = PipelineTrainStep(parts, pipe, "stage:2;data:2;model:2", MLP_RULES,
                           mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR))
  _check(step, _baseline(config, MLP_RULES))
  ops = step._function.get_concrete_function().graph.get_operations()
  assert any(op.control_inputs for op in ops)
  assert all(i.fuser is not None for i in step.impls)
  _check_trace(step, parts, pipe, "stage:2;data:2;model:2", MLP_RULES,
               f"batch:{config.batch // 2};d_model:{config.d_model}")


def test_stateful_optimizer_and_a_middle_stage_axis():
  """Optimizer state (slots, Adafactor's step count) lives on the stage
  that holds the variable; the stage axis may sit between other axes."""
  optimizer = optimize.AdafactorOptimizer(learning_rate=0.1)
  config = models.MLPConfig(layers=2, batch=8)
  model = config.build()
  values = model.random_values()
  base = train_step_for_model(model, "data:2;model:4", MLP_RULES,
                              mtf.logical_cpu_devices(8), optimizer)
  baseline = (values, float(base(**values)), base.variable_values())
  pipe = Pipeline("stage", 2, 2, config.layers, schedule="gpipe")
  step = PipelineTrainStep(models.mlp_parts(config), pipe,
                           "data:2;stage:2;model:2", MLP_RULES,
                           mtf.logical_cpu_devices(8), optimizer, eager=True)
  _check(step, baseline)


def test_recompute_inside_stages(lm_baseline):
  config = dataclasses.replace(LM, recompute=LM.layers)
  pipe = Pipeline("stage", 2, 2, LM.layers, schedule="1f1b")
  step = PipelineTrainStep(models.transformer_parts(config), pipe,
                           "stage:2;data:2;model:2", LM_RULES,
                           mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR), eager=True)
  _check(step, lm_baseline)


def test_stage_groups_follow_the_stage_coordinate():
  pipe = Pipeline("stage", 2, 2, 2)
  impl = mtf.ShapeMeshImpl("data:2;stage:2;model:2", "batch:data")
  assert stage_groups(impl, pipe) == ((0, 1, 4, 5), (2, 3, 6, 7))
  assert [i.shape for i in stage_impls(impl, pipe)] == [
      convert_to_shape("data:2;model:2")] * 2


def test_inputs_of_another_batch_raise():
  config = models.MLPConfig(layers=2, batch=8)
  step = PipelineTrainStep(config, Pipeline("stage", 2, 2, 2),
                           "stage:2;data:2;model:2", MLP_RULES,
                           mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR), eager=True)
  values = models.MLPConfig(layers=2, batch=6).build().random_values()
  with pytest.raises(PipelineBatchError, match=r"input inputs has shape "
                     r"\(6, 8\), but the step takes \(8, 8\): the whole batch"
                     r" of 8 rows, split into microbatches=2"):
    step(**values)
  with pytest.raises(mtf.MtfError, match=r"give every input by name"):
    step(inputs=values["inputs"])


@pytest.mark.parametrize("split", [(3, 5), (0, 8), (8, 0)])
def test_uneven_and_empty_stages(mlp_baseline, split):
  """An explicit split, even one that leaves a stage no repeated layers
  (its chunk only passes the activation on, or only runs the head)."""
  pipe = Pipeline("stage", 2, 2, MLP.layers, split=split)
  step = PipelineTrainStep(models.mlp_parts(MLP), pipe,
                           "stage:2;data:2;model:2", MLP_RULES,
                           mtf.logical_cpu_devices(8),
                           optimize.SgdOptimizer(LR), eager=True)
  _check(step, mlp_baseline)
