"""auto_layout's contract: statuses, budgets, errors, explain, determinism,
the Pareto front and the mesh-shape search."""

import math

import pytest

import autolayout
import mesh_tf as mtf
from mesh_tf.auto_mtf import door as auto
from tests.autolayout import graphs

MESH = "rows:2;cols:4"


def _mlp_res(**kw):
  g, outs = graphs.mlp()
  return g, outs, autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY,
                                         time_limit_s=30, **kw)


def test_result_fields_and_wrappers():
  g, outs, r = _mlp_res()
  assert r.status == "optimal" and r.gap == 0.0 and r.is_optimal
  assert math.isclose(r.best_bound, r.objective_value, rel_tol=1e-6)
  assert r.model_size["variables"] > 0 and r.model_size["tables"] >= 1
  assert r.solve_time_s > 0 and r.build_time_s > 0
  assert isinstance(r.rules, mtf.LayoutRules)
  assert "step" in str(r) and len(r.summary()) == 1
  r2 = auto.auto_layout(g, MESH, outs, topology=graphs.TOPOLOGY)
  assert r2.rules == r.rules


def test_same_input_same_answer_for_any_seed_and_workers():
  g, outs = graphs.merged_sums()
  answers = {str(autolayout.auto_layout(g, "x:2;y:2;z:2", outs,
                                        graphs.TOPOLOGY, seed=s,
                                        num_workers=w).rules)
             for s, w in [(0, 1), (1, 2), (7, 2)]}
  assert len(answers) == 1


def test_memory_budget_changes_the_answer_and_stays_exact():
  g, outs, fast = _mlp_res()
  budget = fast.peak_memory_bytes - 1
  lean = autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY,
                                memory_budget=budget)
  assert lean.rules != fast.rules
  assert lean.peak_memory_bytes <= budget
  assert lean.step_time_s > fast.step_time_s
  every = graphs.brute_force(g, MESH, outs)
  best = min(v for v, _, r in every if r.peak_memory_bytes <= budget)
  assert math.isclose(lean.step_time_s, best, rel_tol=1e-9)


def test_infeasible_budget_states_the_smallest_reachable_peak():
  g, outs = graphs.mlp()
  every = graphs.brute_force(g, MESH, outs)
  min_peak = min(r.peak_memory_bytes for _, _, r in every)
  with pytest.raises(autolayout.InfeasibleLayoutError) as e:
    autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY,
                           memory_budget=min_peak - 1)
  err = e.value
  assert isinstance(err, mtf.MtfError)
  assert err.min_peak_bytes == min_peak
  assert f"smallest peak any valid layout reaches is {min_peak} bytes" in str(
      err)
  assert err.dominating and ("w1" in str(err) or "w2" in str(err))
  assert "raise memory_budget" in str(err)
  ok = autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY,
                              memory_budget=min_peak)
  assert ok.peak_memory_bytes == min_peak


def test_unknown_objective_and_mesh_that_does_not_fit():
  g, outs = graphs.mlp()
  with pytest.raises(mtf.MtfError, match="unknown objective 'speed'"):
    autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY, objective="speed")
  with pytest.raises(mtf.MtfError):
    autolayout.auto_layout(g, "rows:2;cols:2", outs, graphs.TOPOLOGY)


def test_explain_compares_each_rule_with_its_alternatives():
  g, outs, r = _mlp_res()
  table = autolayout.explain(autolayout.LayoutSearch(g, outs), r.mesh_shape,
                             r.rules, graphs.TOPOLOGY, report=r.report)
  assert list(table["dim"]) == [d for d, _ in r.rules.pairs]
  assert len(table) >= 1
  every = graphs.brute_force(g, MESH, outs)
  for row in table.itertuples():
    assert row.without_step_time_s >= row.step_time_s * (1 - 1e-12)
    assert row.runner_up_axis != row.axis
    assert row.runner_up_step_time_s >= row.step_time_s * (1 - 1e-12)
    # The runner-up is the best layout that does not use this rule.
    best = min(v for v, rules, _ in every
               if f"{row.dim}:{row.axis}" not in rules.split(";"))
    assert math.isclose(row.runner_up_step_time_s, best, rel_tol=1e-9)


def test_pareto_front_trades_memory_for_time():
  g, outs = graphs.mlp()
  results, table = autolayout.pareto(g, MESH, outs, graphs.TOPOLOGY)
  assert len(results) >= 2 and len(table) == len(results)
  mems = [r.peak_memory_bytes for r in results]
  times = [r.step_time_s for r in results]
  assert mems == sorted(mems, reverse=True) and len(set(mems)) == len(mems)
  assert times == sorted(times)
  every = graphs.brute_force(g, MESH, outs)
  # Every point is optimal for its memory, and nothing dominates it.
  for r in results:
    for v, _, rep in every:
      assert not (rep.peak_memory_bytes <= r.peak_memory_bytes
                  and v < r.step_time_s * (1 - 1e-9))
  assert min(mems) == min(rep.peak_memory_bytes for _, _, rep in every)


def test_mesh_factorizations_are_not_only_powers_of_two():
  m64 = autolayout.mesh_factorizations(64)
  for s in ("x:8;y:8", "x:4;y:16", "x:2;y:4;z:8", "x:64"):
    assert s in m64
  assert "x:3;y:4" in autolayout.mesh_factorizations(12)
  assert autolayout.mesh_factorizations(8, 2) == ["x:8", "x:2;y:4", "x:4;y:2"]


def test_auto_mesh_and_layout_ranks_every_fitting_mesh():
  g, outs = graphs.mlp()
  results, table = auto.auto_mesh_and_layout(g, 8, outs,
                                             topology=graphs.TOPOLOGY,
                                             max_axes=3)
  times = [r.step_time_s for r in results]
  assert times == sorted(times)
  assert set(table["mesh"]) == set(autolayout.mesh_factorizations(8))
  for r in results:
    assert r.status == "optimal"
  # The best mesh is at least as good as the fixed 2x4 mesh.
  fixed = autolayout.auto_layout(g, "x:2;y:4", outs, graphs.TOPOLOGY)
  assert results[0].step_time_s <= fixed.step_time_s * (1 + 1e-12)


def test_stopped_early_returns_the_layout_found_with_its_gap():
  g, outs = graphs.mlp()
  # The layout with the least communication (replicated) as the hint:
  # the search's own first guess would already be the optimum here.
  quiet = autolayout.auto_layout(g, "x:2;y:2;z:2", outs, graphs.TOPOLOGY,
                                 objective="comm")
  assert quiet.report.comm_time_s == 0
  r = autolayout.auto_layout(
      g, "x:2;y:2;z:2", outs, graphs.TOPOLOGY, num_workers=1,
      solver_params={"stop_after_first_solution": True,
                     "cp_model_presolve": False}, hint=quiet.to_plan())
  best = autolayout.auto_layout(g, "x:2;y:2;z:2", outs, graphs.TOPOLOGY)
  # The first solution is the hinted layout, not yet proven.
  assert r.status == "feasible" and not r.is_optimal
  assert 0 <= r.best_bound <= r.objective_value
  assert 0 < r.gap <= 1
  assert r.step_time_s > best.step_time_s
  # Validated like any answer: the report is the cost model's.
  assert r.objective_value == r.report.step_time_s


def test_too_many_dims_priced_together_is_a_clear_error():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  ds = [mtf.Dimension(f"d{i}", 8) for i in range(10)]
  x = mtf.get_variable(mesh, "x", mtf.Shape(ds[:5]))
  y = mtf.get_variable(mesh, "y", mtf.Shape(ds[5:]))
  mtf.einsum([x, y], output_shape=mtf.Shape(ds))
  with pytest.raises(autolayout.AutoLayoutError, match="priced together"):
    autolayout.auto_layout(g, "x:2;y:2;z:2", None, graphs.TOPOLOGY)


def test_progress_reports_improving_solutions_in_objective_units():
  import mesh_tf as mtf
  from autolayout.search import solve as solve_lib
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "b:8,d:16")
  w = mtf.get_variable(mesh, "w", "d:16,f:32")
  y = mtf.reduce_sum(mtf.relu(mtf.einsum([x, w], reduced_dims=[
      mtf.Dimension("d", 16)])))
  seen = []
  r = solve_lib.auto_layout(g, "a:2;b:4", [y], topology="dgx-h100",
                            progress=lambda *a: seen.append(a))
  assert seen, "the solver reported no solution"
  best, bound, elapsed = seen[-1]
  assert elapsed >= 0 and bound <= best + 1e-12
  # The last improving solution is the optimum, in seconds.
  assert abs(best - r.objective_value) <= 1e-3 * r.objective_value
