"""Exactness against the lowering for every model of the zoo (tiny configs):
predicted collectives, variable slices, tensor slices and FLOPs equal what
the real lowering on 8 logical CPU devices does."""

import pytest

import costmodels as cm
import mesh_tf as mtf
from mesh_tf import models
from tests.costmodels.test_evaluate import assert_prediction_matches_lowering

TINY = sorted(n for n in models.list_models() if n.endswith("_tiny"))

# (mesh, layout) pairs per model: data, model and spatial parallelism.
LAYOUTS = {
    "transformer_tiny": [
        ("rows:2;cols:4", "batch:rows;heads:cols;d_ff:cols;vocab:cols"),
        ("rows:2;cols:4", "length:rows;d_kv:cols"),
    ],
    "mlp_tiny": [
        ("rows:2;cols:4", "batch:rows;d_ff:cols"),
        ("rows:2;cols:4", "d_model:cols;classes:rows"),
    ],
    "moe_tiny": [
        ("rows:2;cols:4", "batch:rows;experts:cols"),
        ("rows:2;cols:4", "heads:cols;d_ff:cols;batch:rows"),
    ],
    "conv3d_tiny": [
        ("rows:2;cols:4", "batch:rows;depth:cols"),
        ("rows:2;cols:4", "height:rows;width:cols"),
        ("x:8", "channels:x"),
    ],
}


def _default_layouts(model):
  # A model added to the zoo later: data parallelism and its widest dim.
  sizes = {d.name: d.size for t in model.graph.tensors for d in t.shape}
  widest = max((n for n in sizes if n != "batch"), key=lambda n: sizes[n])
  return [("rows:2;cols:4", "batch:rows"), ("x:8", f"{widest}:x")]


def _check(model, mesh_shape, layout):
  """True if checked; False if the cost model and the lowering both reject
  the layout (with the same error type)."""
  topology = "dgx-h100" if mesh_shape == "x:8" else "tpu-v5e-2x4"
  outputs = [model.loss] + list(model.outputs.values())
  try:
    cm.evaluate(model.graph, mesh_shape, layout, topology, outputs=outputs)
  except mtf.LayoutError as e:
    n = mtf.convert_to_shape(mesh_shape).size
    impl = mtf.PlacementMeshImpl(mesh_shape, layout,
                                 mtf.logical_cpu_devices(n))
    with pytest.raises(type(e)):
      mtf.Lowering(model.graph, {model.mesh: impl},
                   feeds=model.random_feeds())
    return False
  assert_prediction_matches_lowering(model.graph, model.mesh, mesh_shape,
                                     layout, outputs, topology,
                                     feeds=model.random_feeds())
  return True


def test_the_zoo_has_tiny_models():
  assert {"transformer_tiny", "mlp_tiny", "moe_tiny",
          "conv3d_tiny"} <= set(TINY)


@pytest.mark.parametrize("name", TINY)
def test_zoo_model_prediction_equals_the_lowering(name):
  model = models.build_model(name)
  layouts = LAYOUTS.get(name) or _default_layouts(model)
  checked = [_check(model, m, l) for m, l in layouts]
  assert any(checked), f"no layout of {layouts} is valid for {name}"


def test_zoo_training_step_prediction_equals_the_lowering():
  from mesh_tf.gradients import gradients
  from mesh_tf.training.optimize import MomentumOptimizer
  model = models.build_model("mlp_tiny")
  variables = list(model.graph.trainable_variables)
  grads = gradients([model.loss], [v.outputs[0] for v in variables])
  MomentumOptimizer(0.1, 0.9).apply_grads(grads, variables)
  report, impl = assert_prediction_matches_lowering(
      model.graph, model.mesh, "rows:2;cols:4", "batch:rows;d_ff:cols",
      [model.loss], "tpu-v5e-2x4", feeds=model.random_feeds())
  # Gradients of the d_ff-split weights are summed over the batch axis.
  assert any(c.mesh_axes == ("rows",) and c.kind == "allreduce"
             for c in report.collectives)
  assert report.memory_by_category["optimizer"] > 0
