"""The pipelined search on devices that share a host's cores
(costmodels.shared_cores): a waiting stage's cores go to the others, so the
bubble is no lower bound there; the search's pruning bound drops it and the
answer stays the brute-force optimum; a plan stores what the cores gain."""

import pytest

from autolayout.meshes import pipeline_search as ps
from autolayout.plans import pipelined
from autolayout.plans.decisions import load_plan
from autolayout.training.pipeline_price import (PipelineLayout,
                                                measure_stage,
                                                measuring_data, price_layout)
from costmodels.topology import gpu_cluster
from mesh_tf import models
from tests.autolayout.meshes.pipeline_brute import brute_best


def test_search_equals_brute_force_on_shared_cores():
  config = models.get_config("transformer_tiny", layers=4, batch=8,
                             d_model=32, d_ff=128, heads=4, d_kv=8,
                             vocab=256, length=16)
  topo = gpu_cluster("a100", nodes=2, gpus_per_node=2)
  topo = topo._replace(chip=topo.chip._replace(shared_compute_factor=4.0))
  space = dict(tensor=(1, 2), microbatch=(1, 2), recompute=("none",))
  got = ps.search_pipelines(config, topo, 2**40, **space)
  want = brute_best(config, topo, 2**40, **space)
  assert got.status == "optimal"
  assert got.best.layout == want[1].layout
  assert got.best.step_time_s == want[1].step_time_s
  # The bubble-formula bound is above some pipelined layouts' price here
  # (it would prune them); the shared-cores bound is below every one.
  below, works = 0, {}
  for lay in ps.layouts(config, topo, **space):
    if lay.stages == 1:
      continue
    key = (lay.model, lay.microbatch, lay.placement)
    if key not in works:
      works[key] = measure_stage(config, topo, lay.model,
                                 measuring_data(lay, topo), lay.microbatch,
                                 lay.recompute, lay.placement)
    work = works[key]
    t = price_layout(config, topo, lay, work).step_time_s
    assert ps._time_bound(work, config.layers, lay, config.batch,
                          4.0) <= t * (1 + 1e-9)
    below += ps._time_bound(work, config.layers, lay, config.batch) > t
  assert below > 0


def test_a_plan_on_shared_cores_stores_what_the_cores_gain(tmp_path):
  config = models.get_config("transformer_tiny", layers=4, batch=8)
  source = {"model": "transformer_tiny",
            "overrides": {"layers": 4, "batch": 8}, "train": True}
  topo = gpu_cluster("a100", nodes=1, gpus_per_node=8)
  shared = topo._replace(chip=topo.chip._replace(shared_compute_factor=4.0))
  lay = PipelineLayout(1, 4, 2)
  plain = pipelined.plan_of_price(price_layout(config, topo, lay), config,
                                  topo, "tiny", source)
  # A preset's plan: the terms it always had, nothing new.
  assert "core_sharing_s" not in plain.costs.pipeline_terms
  price = price_layout(config, shared, lay)
  plan = pipelined.plan_of_price(price, config, shared, "tiny", source)
  t = plan.costs.pipeline_terms
  assert t["core_sharing_s"] == pytest.approx(price.cost.core_sharing_s)
  # compute + sends + bubble - what the shared cores gain = the step.
  assert plan.costs.step_time_s == pytest.approx(
      plan.costs.compute_time_s + plan.costs.comm_time_s + t["bubble_s"]
      - t["core_sharing_s"], rel=1e-9)
  path = plan.save(str(tmp_path / "shared.json"))
  assert load_plan(path).costs == plan.costs
