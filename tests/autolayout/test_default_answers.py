"""The default question (no mesh given) never loses to the obvious plans: on
every topology preset, the default solve of the quick-start model (the
transformer family; one layer, so that the suite stays fast), training and
forward, is no slower than the best row of ``mtf-layout mesh`` and than
plain data parallelism over the whole slice."""

import math

import pytest

import autolayout
import costmodels
from autolayout.cli.models import load_model
from autolayout.meshes.mesh_search import DEFAULT_MAX_AXES, mesh_factorizations

# The quick start is ``mtf-layout solve -m transformer -t tpu-v5e-16x16``;
# batch 1024 makes plain data parallelism valid on every preset.
QUICK = {"layers": 1, "batch": 1024}


@pytest.fixture(scope="module", params=[True, False], ids=["train",
                                                            "forward"])
def quick_start(request):
  return load_model("transformer", QUICK, request.param)


@pytest.mark.parametrize("topology", costmodels.list_topologies())
def test_default_solve_beats_the_mesh_ranking_and_data_parallelism(
    quick_start, topology):
  topo = costmodels.get_topology(topology)
  graph, outputs = quick_start.graph, quick_start.outputs
  # No budget: the claim is about speed on every preset, and this batch
  # does not fit the HBM of the smallest chips under any layout.
  r = autolayout.auto_layout(graph, None, outputs, topo, memory_budget=None)
  # It tried every mesh shape `mtf-layout mesh` ranks (same axis count),
  # and returned the best of them.
  fits = []
  for m in mesh_factorizations(topo.num_chips, DEFAULT_MAX_AXES):
    try:
      costmodels.map_mesh(topo, m)
      fits.append(m)
    except costmodels.TopologyError:
      pass
  solved = [t for _, s, t in r.meshes_tried if t is not None]
  assert len(solved) == len(fits)
  assert r.step_time_s == min(solved)
  # Plain data parallelism over the whole slice, on its one-axis mesh.
  n = topo.num_chips
  dp = costmodels.evaluate(graph, f"x:{n}", "batch:x", topo,
                           outputs=outputs)
  assert r.step_time_s <= dp.step_time_s * (1 + 1e-12)
  # Axes are named after the physical dims they lie on, never by a role
  # the layout may contradict ("batch" on "model").
  assert r.mesh_shape == autolayout.meshes.mesh_search.physical_axis_names(
      topo, r.mesh_shape)
  assert not {"data", "model"} & set(r.mesh_shape.dimension_names)


@pytest.mark.parametrize("topology", ["tpu-v5e-16x16", "h100x8-nodes4"])
def test_default_solve_equals_the_best_row_of_the_mesh_command(topology):
  model = load_model("transformer", QUICK)
  ranked, table = autolayout.auto_mesh_and_layout(
      model.graph, costmodels.get_topology(topology).num_chips,
      model.outputs, topology, max_axes=DEFAULT_MAX_AXES)
  r = autolayout.auto_layout(model.graph, None, model.outputs, topology)
  assert math.isclose(r.step_time_s, ranked[0].step_time_s, rel_tol=1e-12)
  assert r.rules.as_dict().keys() == ranked[0].rules.as_dict().keys()
