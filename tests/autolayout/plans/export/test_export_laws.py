"""Laws every export keeps, for any valid layout of the tiny Transformer:
slice shapes equal the lowering's, and the three formats say the same
thing (DTensor placements are the transpose of the PartitionSpec)."""

import hypothesis
from hypothesis import strategies as st

from mesh_tf.core.errors import LayoutError
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from autolayout.plans import export
from autolayout.plans import plan as plan_lib
from autolayout.plans.export import common
from tests.autolayout.plans.export import plans

_MODEL, _OUTPUTS = plans.tiny_model()
_DIMS = ["batch", "length", "d_model", "heads", "d_kv", "d_ff", "vocab",
         "memory_length"]


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(st.dictionaries(st.sampled_from(_DIMS),
                                  st.sampled_from(["data", "model"]),
                                  max_size=4))
def test_exports_agree_with_the_lowering_and_each_other(rules):
  try:
    plan = plan_lib.make_plan(_MODEL.graph, "data:2;model:4", rules,
                              "dgx-h100", outputs=_OUTPUTS,
                              name="transformer_tiny")
  except LayoutError:
    hypothesis.assume(False)
  impl = ShapeMeshImpl(plan.mesh_shape, plan.rules)
  jax, torch, dt = (export.to_jax(plan), export.to_torch(plan),
                    export.to_dtensor(plan))
  axes = plan.mesh_shape.dimension_names
  for e in plan.model.variables + plan.model.activations:
    assert common.slice_shape(plan, e) == list(
        impl.slice_shape(list(e.dims)))
  for name, rec in jax["params"].items():
    spec = rec["partition_spec"]
    for m, placement in enumerate(torch["params"][name]["placements"]):
      split = [i for i, a in enumerate(spec) if a == axes[m]]
      assert placement == ({"shard": split[0]} if split else
                           {"replicate": True})
    assert dt["params"][name]["sharding_specs"] == [
        a if a is not None else "unsharded" for a in spec]
