"""The search's answer is the brute-force optimum under costmodels.evaluate,
and its objective value is that evaluation."""

import math

import hypothesis
from hypothesis import strategies as st
import pytest

import autolayout
import costmodels
from tests.autolayout import graphs

MESHES = ["rows:2;cols:4", "x:2;y:2;z:2"]


def _check(graph, mesh, outputs, objective="time"):
  key = {"time": lambda r: r.step_time_s, "comm": lambda r: r.comm_time_s,
         "memory": lambda r: r.peak_memory_bytes}[objective]
  res = autolayout.auto_layout(graph, mesh, outputs, graphs.TOPOLOGY,
                               objective=objective, time_limit_s=30)
  assert res.status == "optimal" and res.gap == 0.0
  every = graphs.brute_force(graph, mesh, outputs, key=key)
  best = min(v for v, _, _ in every)
  mine = key(res.report)
  assert math.isclose(mine, best, rel_tol=1e-9, abs_tol=1e-15), (
      f"{objective}: solver {res.rules} gives {mine}, brute force "
      f"{min(every, key=lambda e: e[0])[:2]}")
  assert math.isclose(res.objective_value, mine, rel_tol=1e-12)
  # The program's own value (from its tables) equals the cost model's.
  t, c = autolayout.search.solve.table_values(
      autolayout.search.solve.build_problem(graph, mesh, outputs, graphs.TOPOLOGY),
      res.rules)
  assert math.isclose(t, res.report.step_time_s, rel_tol=1e-9)
  assert math.isclose(c, res.report.comm_time_s, rel_tol=1e-9, abs_tol=1e-18)
  return res, every


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("objective", ["time", "comm", "memory"])
def test_mlp_matches_brute_force(mesh, objective):
  g, outs = graphs.mlp()
  res, every = _check(g, mesh, outs, objective)
  assert len(every) >= 13


@pytest.mark.parametrize("mesh", MESHES)
def test_merged_lazy_sums_match_brute_force(mesh):
  g, outs = graphs.merged_sums()
  res, every = _check(g, mesh, outs)
  # Splitting k leaves the einsums pending: the add merges two of them into
  # one all-reduce (caused by the add), the exp forces the third.
  r = costmodels.evaluate(g, mesh, "k:" + mesh.split(":")[0],
                                 graphs.TOPOLOGY, outputs=outs)
  sums = [c for c in r.collectives if c.reduction == "SUM"]
  assert sorted(c.source_op.split("_")[0] for c in sums) == ["add", "einsum"]


@st.composite
def random_specs(draw):
  n = draw(st.integers(4, 6))
  sizes = draw(st.lists(st.sampled_from([4, 6, 8, 64, 512]), min_size=n,
                        max_size=n))
  kinds = st.sampled_from(["einsum", "einsum", "add", "mul", "exp", "sum",
                           "max"])
  steps = draw(st.lists(st.tuples(kinds, st.integers(0, 9),
                                  st.integers(0, 9),
                                  st.integers(1, 2**n - 1)),
                        min_size=3, max_size=8))
  return sizes, steps


@hypothesis.settings(max_examples=25, deadline=None, derandomize=True)
@hypothesis.given(random_specs(), st.sampled_from(MESHES),
                  st.sampled_from(["time", "time", "comm", "memory"]))
def test_random_graphs_match_brute_force(spec, mesh, objective):
  g, outs = graphs.build_random(spec)
  _check(g, mesh, outs, objective)


@hypothesis.settings(max_examples=10, deadline=None, derandomize=True)
@hypothesis.given(random_specs(), st.sampled_from(MESHES))
def test_random_training_graphs_match_brute_force(spec, mesh):
  g, outs = graphs.build_random_training(spec)
  _check(g, mesh, outs, "time")


def test_transformer_training_tables_equal_the_cost_model_on_many_layouts():
  """On the zoo Transformer's training step (forward, backward with merged
  pending sums, Adam update), the program's value of any layout equals
  costmodels.evaluate, and no sampled layout beats the solver's answer."""
  import random
  from mesh_tf.training import optimize
  from mesh_tf.gradients import gradients
  from mesh_tf.models.transformer import transformer_lm
  m = transformer_lm(layers=1, d_model=512, heads=8, d_kv=64, d_ff=2048,
                     vocab=4096, length=256, batch=32)
  grads = gradients([m.loss], m.graph.trainable_variables)
  optimize.AdamWeightDecayOptimizer(1e-4).apply_grads(
      grads, m.graph.trainable_variables)
  mesh = "x:2;y:2;z:2"
  problem = autolayout.search.solve.build_problem(m.graph, mesh, None,
                                           graphs.TOPOLOGY)
  res = autolayout.auto_layout(m.graph, mesh, None, graphs.TOPOLOGY)
  layouts = autolayout.all_layouts(m.graph, mesh)
  sample = random.Random(0).sample(layouts, 25)
  ops = {op.name: op for op in m.graph.operations}
  merged = 0
  for rules in sample:
    t, c = autolayout.search.solve.table_values(problem, rules)
    r = costmodels.evaluate(m.graph, mesh, rules, graphs.TOPOLOGY)
    merged += sum(getattr(ops[x.source_op], "kind", None) == "add"
                  for x in r.collectives if x.reduction == "SUM")
    assert math.isclose(t, r.step_time_s, rel_tol=1e-9), rules
    assert math.isclose(c, r.comm_time_s, rel_tol=1e-9, abs_tol=1e-18)
    assert res.step_time_s <= r.step_time_s * (1 + 1e-12)
  assert merged > 0  # some sampled layouts merge pending gradient sums


@pytest.mark.parametrize("overlap", [False, True])
def test_a_cost_per_collective_is_priced_alike_by_the_search(overlap):
  """A link's fixed cost per collective (``barrier_s``, as calibration
  fits it) enters the program's tables as it enters costmodels.evaluate:
  the solver's answer is still the brute-force optimum, its value the cost
  model's, and the cost moves the answer away from layouts of many small
  collectives."""
  topo = costmodels.get_topology(graphs.TOPOLOGY)
  slow = topo._replace(dims=tuple(
      d._replace(link=d.link._replace(barrier_s=2e-3)) for d in topo.dims))
  graph, outputs = graphs.training_mlp(batch=64, d_model=256, d_ff=1024)
  mesh = "rows:2;cols:4"
  res = graphs.assert_solver_matches_brute_force(graph, mesh, outputs,
                                                 "time", overlap, slow)
  plain = costmodels.evaluate(graph, mesh, res.rules, topo, outputs=outputs,
                              overlap=overlap)
  n = len(res.report.collectives)
  assert n == len(plain.collectives)
  assert res.report.total_comm_time_s == pytest.approx(
      plain.total_comm_time_s + n * 2e-3)
  t, _ = autolayout.search.solve.table_values(
      autolayout.search.solve.build_problem(graph, mesh, outputs, slow,
                                     overlap=overlap), res.rules)
  assert math.isclose(t, res.report.step_time_s, rel_tol=1e-9)
  # Without the cost the search picks a layout with more collectives.
  free = autolayout.auto_layout(graph, mesh, outputs, topo, overlap=overlap)
  assert len(free.report.collectives) > n
