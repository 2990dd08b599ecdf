"""The padding the pipelined search chooses is the padding the lowering
applies: the plan's :class:`~mesh_tf.training.padding.Padding` runs on 8
logical CPU devices as the plan's pipeline, mesh and rules, equals the
unpadded single-device step, and sends, per stage, the price's boundary
activation once per priced microbatch, padded ones included."""

import numpy as np
import pytest

import mesh_tf as mtf
from autolayout.meshes import pipeline_search as ps
from costmodels.topology import gpu_cluster
from mesh_tf import models
from mesh_tf.pipeline import PipelineTrainStep, expected_boundary_bytes
from mesh_tf.training import optimize, train_step_for_model
from mesh_tf.training.padding import Padding


def test_the_searched_padding_is_the_lowered_padding():
  # 13 sequences on 8 chips: DP 4 with 3 padded sequences beats DP 1
  # (the largest data-parallel size that divides 13) with 6 chips idle.
  config = models.get_config("transformer_tiny", layers=4, batch=13,
                             d_model=64, d_ff=256, heads=4, d_kv=16,
                             vocab=256, length=64)
  topo = gpu_cluster("a100", nodes=2, gpus_per_node=4)
  best = ps.search_pipelines(config, topo, tensor=(1, 2), stages=(2,),
                             microbatch=(1,), recompute=("full",),
                             zero=(0,)).best
  lay = best.layout
  assert (lay.model, lay.stages, lay.data) == (1, 2, 4)
  assert best.padded_sequences == 3 and best.idle_chips == 0
  assert best.padding == lay.padding(config.batch) == Padding("batch", 13,
                                                               16)
  pipe = best.cost.pipeline
  assert pipe.microbatches == best.microbatches == 4

  model = config.build()
  values = model.random_values()
  ref = train_step_for_model(model, "data:1", "", mtf.logical_cpu_devices(1),
                             optimize.SgdOptimizer(0.5))
  loss, weights = float(ref(**values)), ref.variable_values()
  step = PipelineTrainStep(config.parts(), pipe, lay.mesh(), best.rules,
                           mtf.logical_cpu_devices(lay.chips),
                           optimize.SgdOptimizer(0.5), eager=True,
                           padding=best.padding)
  assert step.padding.rows == best.padded_sequences
  assert float(step(**values)) == pytest.approx(loss, rel=1e-6)
  got = step.variable_values()
  for name, w in weights.items():
    np.testing.assert_allclose(got[name], w, atol=1e-6, rtol=1e-5,
                               err_msg=name)
  # The lowering's boundary activation is the priced one, and every stage
  # sends it (and its gradient) once per priced microbatch.
  boundary = step.program.chunks[0].output
  assert ";".join(f"{d.name}:{d.size}" for d in boundary.shape.dims) == (
      best.work.boundary_shape)
  assert expected_boundary_bytes(pipe, best.work.boundary_shape,
                                 best.work.boundary_dtype, lay.mesh(),
                                 best.rules) == best.cost.sent_bytes
  ran = expected_boundary_bytes(pipe, best.work.boundary_shape,
                                boundary.dtype, lay.mesh(), best.rules)
  sends = [sum(c.bytes_per_device for c in t.collectives
               if c.kind == "send" and not c.op_name.startswith(
                   "pipeline/tied")) for t in step.trace.stages]
  assert sends == [best.microbatches * b for b in ran]
