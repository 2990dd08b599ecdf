"""Plans of the zoo's tiny Transformer that the export tests run in JAX,
PyTorch and TF DTensor (pure Python: no framework is imported here)."""

import os

import mesh_tf  # noqa: F401  (OR-Tools before any TensorFlow)
from mesh_tf import models
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from autolayout.plans import plan as plan_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

# Megatron-style: data parallel over `data`, heads and d_ff over `model`
# (four all-reduces over `model`, the loss mean over `data`); one that the
# solver picks under a 20000-byte budget (the vocab over `data`).
LAYOUTS = {
    "megatron": ("data:2;model:4", "batch:data;d_ff:model;heads:model",
                 "dgx-h100"),
    "vocab": ("data:2;model:4", "batch:model;d_ff:data;heads:data;vocab:data",
              "dgx-h100"),
    # Params cut over both mesh dims, in both orders (wi: [d_model, d_ff],
    # wo: [d_ff, d_model]): DTensor's placements are indexed by mesh dim.
    "2d": ("data:2;model:4", "d_model:data;d_ff:model;heads:model",
           "dgx-h100"),
    "small": ("data:2;model:2", "batch:data;d_ff:model;vocab:model",
              "tpu-v5e-2x2"),
    # Dims over both mesh axes (JAX's P(('data', 'model'))): plain data
    # parallelism over all 8 devices, and d_ff's weights cut 8 ways.
    "multi_dp": ("data:2;model:4", "batch:data+model", "dgx-h100"),
    "multi_ff": ("data:2;model:4", "d_ff:data+model;heads:model",
                 "dgx-h100"),
}


def tiny_model():
  m = models.build_model("transformer_tiny")
  return m, {"logits": m.outputs["logits"], "loss": m.loss}


def make(which):
  """The Plan of layout ``which`` (see LAYOUTS) on the tiny Transformer."""
  m, outputs = tiny_model()
  mesh, rules, topology = LAYOUTS[which]
  return plan_lib.make_plan(m.graph, mesh, rules, topology, outputs=outputs,
                            name="transformer_tiny")


def expected_slices(plan, which="variables"):
  """``{name: (slice shape, [slice begin per pnum])}`` from ShapeMeshImpl,
  the lowering's own layout math (independent of the exporters)."""
  impl = ShapeMeshImpl(plan.mesh_shape, plan.rules)
  out = {}
  for e in getattr(plan.model, which):
    shape = list(e.dims)
    out[e.name] = (list(impl.slice_shape(shape)),
                   [list(impl.slice_begin(shape, p))
                    for p in range(impl.size)])
  return out
