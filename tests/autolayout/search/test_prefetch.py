"""The search prices parameter prefetch exactly: on a small ZeRO-3 training
graph its program gives every layout the cost model's exposed step time,
its answer is the brute-force optimum, and prefetch moves the answer the
way the cost model says."""

import math

import pytest

import autolayout
import costmodels
from tests.autolayout import graphs


@pytest.mark.parametrize("mesh, topology", [
    ("rows:2;cols:4", "dgx-h100"), ("node:2;gpu:8", "h100x8-nodes2")])
def test_program_values_every_layout_like_the_cost_model(mesh, topology):
  topo = costmodels.get_topology(topology)
  g, outs = graphs.training_mlp(stage=3)
  problem = autolayout.search.solve.build_problem(g, mesh, outs, topo)
  spec = problem.form.overlap
  assert spec.num_prefetch > 0 and spec.num_buckets > 0
  prefetched = 0
  for rules in autolayout.search.assignments.all_layouts(g, mesh):
    r = costmodels.evaluate(g, mesh, rules, topo, outputs=outs)
    t, c = autolayout.search.solve.table_values(problem, rules)
    assert math.isclose(t, r.step_time_s, rel_tol=1e-9), rules
    assert math.isclose(c, r.comm_time_s, rel_tol=1e-9, abs_tol=1e-18)
    prefetched += any(a.prefetch_s > a.exposed_prefetch_s
                      for a in r.overlap.by_axis)
  assert prefetched > 2


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("objective", ["time", "comm"])
def test_zero3_graph_matches_brute_force(overlap, objective):
  g, outs = graphs.training_mlp(stage=3)
  mesh = "rows:2;cols:4"
  graphs.assert_solver_matches_brute_force(g, mesh, outs, objective,
                                           overlap)


def test_prefetch_makes_the_search_shard_storage():
  # At this size the gathers hide under the forward pass and the
  # reduce-scatters under the backward pass: sharding the storage over
  # the data axis is faster than plain data parallelism, and the search
  # says so; without overlap it keeps the storage whole.
  g, outs = graphs.training_mlp(batch=4096, stage=3)
  mesh = "rows:2;cols:4"
  on = autolayout.auto_layout(g, mesh, outs, "dgx-h100")
  off = autolayout.auto_layout(g, mesh, outs, "dgx-h100", overlap=False)
  assert on.rules.as_dict().get("d_model_storage") == "rows"
  assert "d_model_storage" not in off.rules.as_dict()
  assert on.report.hidden_comm_time_s > 0
  # The CLI's JSON record splits each axis's overlappable communication.
  from autolayout.cli import output
  rec = output.layout_record(on.report, on)["overlap_by_axis_s"]["rows"]
  assert rec["prefetch_time_s"] > rec["exposed_prefetch_time_s"] >= 0.0
  assert rec["sync_time_s"] >= rec["exposed_sync_time_s"] >= 0.0
  off_with = costmodels.evaluate(g, mesh, off.rules, "dgx-h100",
                                 outputs=outs)
  assert on.step_time_s < off_with.step_time_s
