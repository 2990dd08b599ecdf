"""ZeRO storage over several mesh axes: the storage dim split over
``data+model`` (all 8 devices) reduce-scatters and all-gathers over the
combined group, and gives the 1-device result."""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import models
from mesh_tf.training import optimize, storage
from mesh_tf.training import train_step_for_model


def _step(stage, mesh, rules):
  model = models.build_model("transformer_tiny")
  storage.shard_storage(model.graph, storage.StoragePlan(stage))
  n = mtf.convert_to_shape(mesh).size
  step = train_step_for_model(model, mesh, rules, mtf.logical_cpu_devices(n),
                              optimize.AdamWeightDecayOptimizer(1e-2))
  return step, float(step(**model.random_values()))


@pytest.mark.parametrize("stage", [1, 3])
def test_storage_over_both_axes_equals_one_device(stage):
  one, one_loss = _step(stage, "all:1", "")
  step, loss = _step(stage, "data:4;model:2",
                     "batch:data+model;d_model_storage:data+model")
  assert loss == pytest.approx(one_loss, rel=1e-5)
  # The stored weights really are cut 8 ways over the combined group.
  stored = {n: v for n, v in step.mesh_impl.variables.items()
            if "d_model_storage" in str(v.shape)}
  assert stored
  for v in stored.values():
    full = {d.name: d.size for d in v.shape}["d_model_storage"]
    i = v.shape.dimension_names.index("d_model_storage")
    assert v.slice_shape[i] * 8 == full
  kinds = {(c.kind, c.mesh_axes) for c in step.mesh_impl.trace.collectives}
  assert ("allconcat", ("data", "model")) in kinds
  ref = one.variable_values()
  for name, w in step.variable_values().items():
    np.testing.assert_allclose(w, ref[name], rtol=1e-3, atol=1e-5,
                               err_msg=name)
