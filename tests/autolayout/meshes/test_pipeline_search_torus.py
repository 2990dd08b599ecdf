"""The pipelined layout search on TPU tori: stages along the torus's major
dims, tensor parallelism on its minor ICI dims, boundary sends priced on
the ICI link (or the data-centre network between pods), and brute force
equals the search."""

import pytest

from autolayout.meshes import pipeline_search as ps
from autolayout.training.pipeline_price import (PipelineLayout, box_sizes,
                                                price_layout,
                                                sub_topology)
from costmodels.pipeline import boundary_time
from costmodels.topology import get_topology, map_mesh, tpu_slice
from costmodels.topology.presets import tpu_pods
from mesh_tf import models
from tests.autolayout.meshes.pipeline_brute import brute_best
from mesh_tf.core.errors import MtfError


def _tiny(layers=4, batch=8, heads=4):
  return models.get_config("transformer_tiny", layers=layers, batch=batch,
                           d_model=32, d_ff=128, heads=heads, d_kv=8,
                           vocab=256, length=16)


def test_boxes_of_a_torus():
  topo = get_topology("tpu-v4-8x8x8")
  assert box_sizes(topo, 128) == [2, 8, 8]
  assert box_sizes(topo, 16) == [1, 2, 8]
  assert box_sizes(topo, 512) == [8, 8, 8]
  assert box_sizes(topo, 12) is None and box_sizes(topo, 1024) is None
  # A dim taken in part loses its wraparound; a whole one keeps it.
  sub = sub_topology(topo, 128)
  assert [d.size for d in sub.dims] == [2, 8, 8]
  assert [d.wraparound for d in sub.dims] == [False, True, True]
  with pytest.raises(MtfError, match="do not fill a box of its torus"):
    sub_topology(topo, 12)
  # Tensor degrees: heads' divisors that fill a box of the minor dims
  # (8, and 8 x a divisor of the next 8), none that a dim cuts unevenly.
  cfg = models.get_config("gpt3_175b")
  assert ps.tensor_degrees(cfg, topo) == (1, 2, 4, 8, 16, 32)
  assert ps.placements_of(topo) == ("inner", "data-outer")


@pytest.mark.parametrize("budget_mib", [None, 0.6])
def test_search_equals_brute_force_on_a_tpu_slice(budget_mib):
  config = _tiny(batch=8)
  topo = tpu_slice("v4", (4, 4, 4))
  budget = 2**40 if budget_mib is None else int(budget_mib * 2**20)
  space = dict(tensor=(1, 2, 4), microbatch=(1, 2), recompute=("full",))
  got = ps.search_pipelines(config, topo, budget, **space)
  want = brute_best(config, topo, budget, **space)
  assert got.status == "optimal"
  assert got.best.layout == want[1].layout
  assert got.best.step_time_s == want[1].step_time_s
  lays = ps.layouts(config, topo, **space)
  assert {x.stages for x in lays} >= {1, 2, 4}
  assert {x.placement for x in lays} == {"inner", "data-outer"}
  assert set(got.by_placement) == {"inner", "data-outer"}
  assert all(x.stages > 1 and x.data > 1 for x in lays
             if x.placement == "data-outer")


def test_stage_boundary_is_priced_on_the_ici_link():
  config = _tiny(batch=16)
  topo = tpu_slice("v4", (4, 4, 4))
  lay = PipelineLayout(1, 4, 16)   # stages along x, data on y and z
  r = price_layout(config, topo, lay)
  mapping = map_mesh(sub_topology(topo, lay.chips), lay.mesh())
  stage = mapping["stage"]
  assert stage.link_kind == "ici" and stage.structure == "ring"
  link = mapping.link_params(("stage",))[0]
  assert link.bandwidth_bytes_per_s == topo.chip.link.bandwidth_bytes_per_s
  sends = max(round(s / r.work.boundary_bytes) for s in r.cost.sent_bytes)
  assert r.cost.boundary_s == pytest.approx(
      sends * boundary_time(r.work.boundary_bytes, link), rel=1e-12)
  # Stages over half the slice (a sub-block of x, idle chips) are priced
  # too, on a line of ICI links.
  half = price_layout(config, topo, PipelineLayout(1, 2, 16))
  assert half.idle_chips == 32 and half.cost.boundary_s > 0


def test_stages_across_pods_cross_the_data_centre_network():
  config = _tiny(batch=16)
  pods = tpu_pods("v4", 2, (4, 4, 4))
  lay = PipelineLayout(2, 2, 32)
  mapping = map_mesh(sub_topology(pods, lay.chips), lay.mesh())
  assert mapping["stage"].link_kind == "dcn"
  inside = price_layout(config, tpu_slice("v4", (8, 4, 4)), lay)
  across = price_layout(config, pods, lay)
  assert across.cost.boundary_s > inside.cost.boundary_s
  # With the data axis outermost the stages stay on ICI inside a pod and
  # the data axis crosses the pods.
  outer = lay._replace(placement="data-outer")
  assert outer.mesh() == "data:32;stage:2;model:2"
  mapping = map_mesh(sub_topology(pods, lay.chips), outer.mesh())
  assert mapping["stage"].link_kind == "ici"
  assert "dcn" in mapping["data"].link_kind
  r = price_layout(config, pods, outer)
  assert r.cost.boundary_s < across.cost.boundary_s


def test_a_large_model_on_a_large_tpu_slice_gets_a_pipelined_plan():
  config = models.get_config("gpt3_175b")
  topo = get_topology("tpu-v4-8x8x8")
  r = ps.search_pipelines(config, topo, tensor=(8,), microbatch=(1,),
                          recompute=("full",))
  best = r.best
  assert r.status == "optimal" and best.layout.stages > 1
  assert best.peak_memory_bytes <= 32 * 2**30
  assert best.layout.chips + best.idle_chips == 512
  assert ps.pipelining_applies(config, topo)
  assert not ps.pipelining_applies(config, get_topology("tpu-v4-4x4x2"))


def test_a_hint_over_the_memory_bound_is_still_priced():
  config = _tiny(layers=8, batch=16)
  topo = tpu_slice("v4", (4, 4, 4))
  hint = PipelineLayout(1, 1, 16)   # every layer's state on each chip
  space = dict(tensor=(1,), microbatch=(1,), recompute=("full",),
               zero=(0,))
  full = price_layout(config, topo, hint)
  budget = full.peak_memory_bytes // 2
  r = ps.search_pipelines(config, topo, budget, hint=hint, **space)
  assert r.hint is not None and r.hint.layout == hint
  assert r.hint.peak_memory_bytes > budget >= r.best.peak_memory_bytes
  assert r.best.layout.stages > 1
