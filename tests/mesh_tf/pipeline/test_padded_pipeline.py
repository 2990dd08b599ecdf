"""A padded batch in a pipelined step: the padded rows fill the last
microbatches, carry a zero mask, and the step equals the unpadded
single-device step (loss and updated weights) with tensor and data
parallelism inside the stages; the device trace is the shape-only trace,
its sends are the predicted boundary bytes of every (padded) microbatch,
and its collectives are those of the unpadded program at the padded
size (the padding costs what real rows cost)."""

import dataclasses

import numpy as np
import pytest

import mesh_tf as mtf
from tests.mesh_tf.training.padding_reference import reference_step
from mesh_tf import models
from mesh_tf.pipeline import (Pipeline, PipelineTrainStep,
                              expected_boundary_bytes, trace_pipeline)
from mesh_tf.training import optimize
from mesh_tf.training.padding import Padding, PaddingError, padding_for

LR = 0.5
LM_RULES = "batch:data;d_ff:model;heads:model;vocab:model"


def _reference(config):
  return reference_step(config, LR)


def _sends(trace):
  return [sum(c.bytes_per_device for c in t.collectives if c.kind == "send"
              and not c.op_name.startswith("pipeline/tied"))
          for t in trace.stages]


CASES = [
    # (config, mesh, rules, microbatches, schedule, chunks)
    (models.TransformerConfig(layers=4, batch=6), "stage:2;data:2;model:2",
     LM_RULES, 2, "1f1b", 1),
    (models.TransformerConfig(layers=4, batch=6), "stage:2;data:4;model:1",
     LM_RULES, 2, "interleaved_1f1b", 2),
    (models.MLPConfig(layers=4, batch=13), "stage:2;data:4;model:1",
     "batch:data", 2, "gpipe", 1),
]


@pytest.mark.parametrize("config,mesh,rules,m,schedule,v", CASES)
def test_padded_pipeline_equals_the_unpadded_step(config, mesh, rules, m,
                                                  schedule, v):
  values, loss, weights = _reference(config)
  stage_mesh = mesh.split(";", 1)[1]
  padding = padding_for("batch", config.batch, stage_mesh, rules, m)
  assert padding.rows > 0
  parts = config.parts()
  pipe = Pipeline("stage", 2, m, config.layers, chunks=v, schedule=schedule)
  optimizer = optimize.SgdOptimizer(LR)
  step = PipelineTrainStep(parts, pipe, mesh, rules,
                           mtf.logical_cpu_devices(8), optimizer,
                           eager=True, padding=padding)
  assert float(step(**values)) == pytest.approx(loss, rel=1e-6)
  got = step.variable_values()
  for name, w in weights.items():
    np.testing.assert_allclose(got[name], w, atol=1e-6, rtol=1e-5,
                               err_msg=name)
  # The device lowering records the shape-only lowering's trace.
  shape = trace_pipeline(parts, pipe, mesh, rules, optimizer,
                         padding=padding)
  for ran, predicted in zip(step.trace.stages, shape.stages):
    assert ran.collectives == predicted.collectives
  # Every microbatch, the padded ones too, sends the predicted bytes.
  boundary = step.program.chunks[0].output
  expected = expected_boundary_bytes(
      pipe, ";".join(f"{d.name}:{d.size}" for d in boundary.shape.dims),
      boundary.dtype, mesh, rules)
  assert _sends(step.trace) == [m * e for e in expected]
  # Padding costs what real rows cost: the collectives of the unpadded
  # program of padded_size rows.
  unpadded = trace_pipeline(dataclasses.replace(parts,
                                                batch=padding.padded_size),
                            pipe, mesh, rules, optimizer)
  # (the same records in the same order; the op that forces the loss's
  # all-reduce is the mask's rescaling instead of the mean)
  for a, b in zip(shape.stages, unpadded.stages):
    assert [c.key() for c in a.collectives] == [
        c.key() for c in b.collectives]


def test_a_padding_the_microbatches_do_not_split_raises():
  config = models.MLPConfig(layers=2, batch=13)
  pipe = Pipeline("stage", 2, 2, config.layers)
  with pytest.raises(PaddingError, match=r"batch=13 padded to batch=14 does "
                     r"not split over data=4 x microbatches=2 \(= 8\); pad "
                     r"it to batch=16"):
    PipelineTrainStep(config.parts(), pipe, "stage:2;data:4", "batch:data",
                      mtf.logical_cpu_devices(8), optimize.SgdOptimizer(LR),
                      padding=Padding("batch", 13, 14))
  with pytest.raises(PaddingError, match=r"pads batch=7 to 8, but the "
                     r"model's batch is 13"):
    trace_pipeline(config.parts(), pipe, "stage:2;data:4", "batch:data",
                   optimize.SgdOptimizer(LR), padding=Padding("batch", 7, 8))
