"""The first solution handed to CP-SAT: a layout from local search over the
program's tables, completed to a value of every variable, is a solution of
the program, and no worse than the replicated layout."""

import pytest

from ortools.sat.python import cp_model

from autolayout.search import first_guess, solve
from autolayout.search.validate import table_values
from mesh_tf.core.layout import LayoutRules


def _problem(budget):
  g, outs = _tiny()
  search = solve.LayoutSearch(g, outs)
  return search.problem("x:2;y:4", "dgx-h100", memory_budget=budget)


def _tiny():
  import os  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))))
  from benchmarks import handwritten  # pylint: disable=g-import-not-at-top
  return handwritten.build(2, d_model=256, heads=4, d_kv=64, d_ff=1024,
                           vocab=4096, length=128, batch=64)


def _fixed_solution_is_feasible(form, values):
  model = form.model.clone()
  for i, val in values.items():
    var = model.get_int_var_from_proto_index(i)
    model.add(var == val)
  s = cp_model.CpSolver()
  s.parameters.num_workers = 1
  return s.solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


@pytest.mark.parametrize("budget", [None, 10**12])
def test_guess_is_a_complete_solution_no_worse_than_replicated(budget):
  p = _problem(budget)
  x = first_guess.local_search(p.form, p.space, "time", memory=None
                               if budget is None else
                               (p.memory_coefficients, budget))
  assert x is not None and set(x) == set(p.form.vars.x)
  values = first_guess.complete(p.form, x)
  # Every variable has a value: CP-SAT takes it as its first solution.
  assert len(values) == len(p.form.model.proto.variables)
  assert _fixed_solution_is_feasible(p.form, values)
  rules = solve.rules_of(x)
  assert table_values(p, rules)[0] <= table_values(
      p, LayoutRules([]))[0]
  assert any(x.values())


def test_guess_respects_banned_options():
  p = _problem(None)
  free = first_guess.local_search(p.form, p.space, "time")
  used = [k for k, v in free.items() if v]
  assert used
  banned = frozenset(used)
  x = first_guess.local_search(p.form, p.space, "time", banned=banned)
  assert not any(x[k] for k in banned)


def test_a_layout_the_tables_reject_completes_to_x_only():
  # Two dims of one tensor on the same axis: no table has that choice.
  p = _problem(None)
  clash = {k: int(k.dim in ("examples", "seq") and k.axis == "y")
           for k in p.form.vars.x}
  assert sum(clash.values()) == 2
  values = first_guess.complete(p.form, clash)
  assert len(values) == len(p.form.vars.x)
