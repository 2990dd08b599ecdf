"""Each constraint family of the CP-SAT program (autolayout.search.formulation) on
its own, with the real solver: a tiny literal space or table, one family
added, and a case it must allow next to one it must forbid."""

import math

import pytest
from ortools.sat.python import cp_model

import mesh_tf as mtf
from autolayout.search import assignments, formulation
from autolayout.search.formulation import DimAxis, Table, TableChoice


def _space(mesh="x:2;y:2"):
  """Dims a=4, b=4 (sharing tensor t) and c=4 (alone) on ``mesh``."""
  g = mtf.Graph()
  m = mtf.Mesh(g, "m")
  t = mtf.get_variable(m, "t", "a:4,b:4")
  u = mtf.get_variable(m, "u", "c:4")
  mtf.reduce_sum(t), mtf.reduce_sum(u)
  return g, assignments.dim_space(g, mesh)


def _status(model, objective=None):
  if objective is not None:
    model.minimize(objective)
  solver = cp_model.CpSolver()
  solver.parameters.num_workers = 1
  solver.parameters.random_seed = 0
  solver.parameters.max_time_in_seconds = 10.0
  status = solver.solve(model)
  return solver.status_name(status), solver


def _fix(model, v, pairs, value=1):
  for d, a in pairs:
    model.add(v.x[DimAxis(d, a)] == value)


# --- x and constraint 1: one axis per dim --------------------------------
def test_dim_axis_vars_exist_only_for_allowed_pairs():
  g, space = _space("x:2;y:3")  # 4 % 3 != 0: no dim may take y
  model, v = cp_model.CpModel(), formulation.Variables()
  formulation.add_dim_axis_vars(model, v, space)
  assert set(v.x) == {DimAxis(d, "x") for d in ("a", "b", "c")}


def test_a_dim_takes_at_most_one_axis():
  _, space = _space()
  model, v = cp_model.CpModel(), formulation.Variables()
  formulation.add_dim_axis_vars(model, v, space)
  _fix(model, v, [("a", "x")])
  assert _status(model)[0] == "OPTIMAL"
  _fix(model, v, [("a", "y")])
  assert _status(model)[0] == "INFEASIBLE"


# --- constraint 2: an axis splits at most one dim of a tensor -------------
@pytest.mark.parametrize("pair,expected", [
    (("a", "b"), "INFEASIBLE"),   # both dims of t on x
    (("a", "c"), "OPTIMAL"),      # a and c never share a tensor
])
def test_an_axis_splits_one_dim_per_tensor(pair, expected):
  g, space = _space()
  model, v = cp_model.CpModel(), formulation.Variables()
  formulation.add_dim_axis_vars(model, v, space)
  formulation.add_tensor_axis_constraints(model, v, g, space)
  _fix(model, v, [(pair[0], "x"), (pair[1], "x")])
  assert _status(model)[0] == expected


# --- y and constraints 3, 4: tables agree with the global rules -----------
def _table_model(choices, costs=None):
  _, space = _space()
  model, v = cp_model.CpModel(), formulation.Variables()
  formulation.add_dim_axis_vars(model, v, space)
  costs = costs or [0.0] * len(choices)
  table = Table(("a", "b"), tuple(choices), tuple(costs), tuple(costs))
  formulation.add_table_vars(model, v, [table])
  return model, v, table


def test_table_choice_follows_the_rules():
  model, v, table = _table_model([(None, None), ("x", "y"), ("y", None)])
  _fix(model, v, [("a", "x"), ("b", "y")])
  status, solver = _status(model)
  assert status == "OPTIMAL"
  chosen = [k.assignment for k, y in v.y.items() if solver.value(y)]
  assert chosen == [("x", "y")]


def test_rules_no_table_choice_allows_are_infeasible():
  # The table drops (x, None) (say its lowering is invalid): a:x alone,
  # with b replicated, has no row.
  model, v, _ = _table_model([(None, None), ("x", "y"), ("y", None)])
  _fix(model, v, [("a", "x")])
  _fix(model, v, [("b", "x"), ("b", "y")], value=0)
  assert _status(model)[0] == "INFEASIBLE"


def test_an_axis_no_choice_uses_is_forbidden_for_that_dim():
  model, v, _ = _table_model([(None, None), ("x", None)])
  _fix(model, v, [("a", "y")])
  assert _status(model)[0] == "INFEASIBLE"


# --- the time objective ---------------------------------------------------
def test_time_objective_picks_the_cheapest_choice_in_seconds():
  choices = [(None, None), ("x", None), ("x", "y")]
  model, v, table = _table_model(choices, costs=[3e-3, 1e-3, 2e-3])
  expr, unit = formulation.time_objective(v, [table], "time")
  status, solver = _status(model, expr)
  assert status == "OPTIMAL"
  assert math.isclose(solver.objective_value * unit, 1e-3, rel_tol=1e-9)
  assert solver.value(v.y[TableChoice(("a", "b"), ("x", None))]) == 1
  # The unit maps the largest possible total to about 1e12 units.
  assert math.isclose(3e-3 / unit, formulation.TIME_UNITS_TOTAL,
                      rel_tol=1e-9)


# --- constraint 5: memory per step ----------------------------------------
def _memory_model(budget, with_peak):
  choices = [(None, None), ("x", None), ("x", "y")]
  model, v, table = _table_model(choices)
  host = {("a",): ("a", "b"), ("a", "b"): ("a", "b")}
  # Step 0: 400 bytes of tensors over (a, b), 100 over (a).  Bytes per
  # device divide by the axes of the scope's split dims.
  steps = [{("a", "b"): {(None, None): 400, ("x", None): 200,
                         ("x", "y"): 100, (None, "x"): 200, (None, "y"): 200,
                         ("y", None): 200, ("y", "x"): 100},
            ("a",): {(None,): 100, ("x",): 50, ("y",): 50}}]
  peak = formulation.add_memory_constraints(model, v, steps, host, budget,
                                            with_peak)
  return model, v, peak


@pytest.mark.parametrize("budget,expected", [
    (150, "OPTIMAL"),     # (x, y): 100 + 50
    (149, "INFEASIBLE"),  # no choice is that small
])
def test_every_step_stays_within_the_budget(budget, expected):
  model, v, peak = _memory_model(budget, with_peak=False)
  assert peak is None
  assert _status(model)[0] == expected


def test_peak_variable_is_the_smallest_reachable_peak():
  model, v, peak = _memory_model(None, with_peak=True)
  status, solver = _status(model, peak)
  assert status == "OPTIMAL" and solver.objective_value == 150
  model, v, peak = _memory_model(149, with_peak=True)
  assert _status(model, peak)[0] == "INFEASIBLE"


def test_no_budget_and_no_peak_adds_nothing():
  model, v, peak = _memory_model(None, with_peak=False)
  assert peak is None and v.peak is None
  assert len(model.proto.constraints) == len(_table_model(
      [(None, None), ("x", None), ("x", "y")])[0].proto.constraints)


# --- scope tables and the tie break ---------------------------------------
def test_host_scopes_map_each_scope_into_its_smallest_maximal_scope():
  host = formulation.host_scopes([("a",), ("a", "b"), ("b", "c"), ("b",)])
  assert host == {("a",): ("a", "b"), ("a", "b"): ("a", "b"),
                  ("b", "c"): ("b", "c"), ("b",): ("a", "b")}


def test_tie_break_groups_cover_every_x_once_in_order():
  _, space = _space("x:2;y:2")
  model, v = cp_model.CpModel(), formulation.Variables()
  formulation.add_dim_axis_vars(model, v, space)
  groups = formulation.tie_break_groups(v, chunk=4)
  flat = [k for grp in groups for k in grp]
  assert flat == sorted(v.x) and [len(grp) for grp in groups] == [4, 2]
