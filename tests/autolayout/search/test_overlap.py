"""The search prices overlap exactly: on small training graphs its program
gives every layout the cost model's exposed step time, and its answer is
the brute-force optimum, with and without overlap."""

import math

import pytest

import autolayout
import costmodels
from tests.autolayout import graphs


@pytest.mark.parametrize("mesh, topology", [
    ("rows:2;cols:4", "dgx-h100"), ("node:2;gpu:8", "h100x8-nodes2")])
def test_program_values_every_layout_like_the_cost_model(mesh, topology):
  topo = costmodels.get_topology(topology)
  g, outs = graphs.training_mlp()
  problem = autolayout.search.solve.build_problem(g, mesh, outs, topo)
  assert problem.form.overlap is not None and problem.form.rounded_terms
  hidden = 0
  for rules in autolayout.search.assignments.all_layouts(g, mesh):
    r = costmodels.evaluate(g, mesh, rules, topo, outputs=outs)
    t, c = autolayout.search.solve.table_values(problem, rules)
    assert math.isclose(t, r.step_time_s, rel_tol=1e-9), rules
    assert math.isclose(c, r.comm_time_s, rel_tol=1e-9, abs_tol=1e-18)
    hidden += r.hidden_comm_time_s > 0
  assert hidden > 2


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("objective", ["time", "comm"])
def test_training_graph_matches_brute_force(overlap, objective):
  g, outs = graphs.training_mlp()
  mesh = "rows:2;cols:4"
  res = graphs.assert_solver_matches_brute_force(g, mesh, outs, objective,
                                                 overlap)
  assert (res.report.hidden_comm_time_s == 0.0) or overlap


def test_overlap_favours_data_parallelism():
  # Hiding the gradient syncs makes data parallelism cheaper; the answer
  # with overlap is never slower (by either model) than the conservative
  # answer evaluated with overlap.
  g, outs = graphs.training_mlp(batch=1024)
  mesh = "rows:2;cols:4"
  on = autolayout.auto_layout(g, mesh, outs, graphs.TOPOLOGY)
  off = autolayout.auto_layout(g, mesh, outs, graphs.TOPOLOGY,
                               overlap=False)
  off_with = costmodels.evaluate(g, mesh, off.rules, graphs.TOPOLOGY,
                                 outputs=outs)
  assert on.step_time_s <= off_with.step_time_s * (1 + 1e-12)
  assert on.step_time_s <= off.step_time_s * (1 + 1e-12)
