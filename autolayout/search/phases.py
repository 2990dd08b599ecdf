"""Solving one CP-SAT program: the objective phases run lexicographically
(:func:`solve_phases`, each a short, explicit CP-SAT run with its time
limit, workers and seed), and the rules a solution's :math:`x` values
spell (:func:`rules_of`)."""

import time
from typing import NamedTuple

from ortools.sat.python import cp_model

from mesh_tf.core.layout import LayoutRules
from autolayout.errors import (InfeasibleLayoutError, SolverError,
                               TimeLimitError, check_import_order)
from autolayout.search import first_guess

__all__ = ["PhaseResult", "phase_order", "rules_of", "solve_phases"]

# Programs with more variables than this are presolved by CP-SAT.
PRESOLVE_MIN_VARIABLES = 5000


class PhaseResult(NamedTuple):
  """The solution and statistics of :func:`solve_phases`."""
  x: dict                  # DimAxis -> 0/1
  status: str              # "optimal" or "feasible"
  value: float             # first-phase objective, in objective units
  bound: float
  solve_time_s: float
  extra: dict = {}         # name -> value of the ``extra`` variables asked


class _ProgressCallback(cp_model.CpSolverSolutionCallback):
  """Reports each improving solution of the first phase:
  ``progress(best, bound, elapsed_s)``, objective values in solver units."""

  def __init__(self, progress):
    super().__init__()
    self._progress = progress

  def on_solution_callback(self):
    # Objective coefficients are >= 0, so a negative bound means 0.
    self._progress(self.objective_value, max(0.0, self.best_objective_bound),
                   self.wall_time)


def solve_phases(form, phases, time_limit_s, num_workers, seed,
                 solver_params=None, progress=None, hint=None, *, extra=None,
                 complete_hint=False):
  """Minimises ``phases`` (objective names, or "tie") lexicographically.

  Each phase after the first keeps the earlier optima fixed.  The first
  phase decides the status; later phases only run while the earlier ones
  were proven optimal.

  ``solver_params`` sets further CP-SAT parameters by name (e.g.
  ``{"stop_after_first_solution": True}``).  ``progress(best, bound,
  elapsed_s)``, if given, is called for every improving solution of the
  first phase (objective values in the solver's integer units).
  ``hint`` (``{DimAxis: 0/1}``) replaces the replicated layout as CP-SAT's
  first guess (see :mod:`autolayout.plans.hint`).  ``extra`` (``{name:
  variable}``): further variables whose final values to return.
  ``complete_hint``: hint every variable (:func:`first_guess.set_hint`),
  which CP-SAT then takes as its first solution instead of repairing it.

  Raises:
    InfeasibleLayoutError: (without details) if the first phase is
      infeasible; the caller adds them.
    SolverError: if no solution is found in time or the model is invalid.
  """
  check_import_order()
  model, v = form.model, form.vars
  solver = cp_model.CpSolver()
  solver.parameters.num_workers = int(num_workers)
  solver.parameters.random_seed = int(seed)
  # The programs are small (variables do not grow with depth); on them
  # CP-SAT's presolve costs more than it saves: 0.45 -> 0.21 s (hand-written
  # 8-layer LM), 1.30 -> 0.80 s (2x2x2 mesh), same optima.
  solver.parameters.cp_model_presolve = (
      len(model.proto.variables) > PRESOLVE_MIN_VARIABLES)
  for k, val in (solver_params or {}).items():
    setattr(solver.parameters, k, val)
  exprs = []
  for p in phases:
    if p == "tie":
      for group in form.tie_break:
        exprs.append(cp_model.LinearExpr.weighted_sum(
            [v.x[k] for k in group], [2**i for i in range(len(group))]))
    else:
      exprs.append(form.objectives[p])
  # The replicated layout is a valid first solution whenever memory allows;
  # a previous plan (``hint``) is usually closer to the optimum.
  first_guess.set_hint(form, hint, complete_hint)
  start, first, x, values = time.perf_counter(), None, None, {}
  for i, expr in enumerate(exprs):
    left = time_limit_s - (time.perf_counter() - start)
    if left <= 0:
      break
    solver.parameters.max_time_in_seconds = left
    model.minimize(expr)
    if i == 0 and progress is not None:
      status = solver.solve(model, _ProgressCallback(progress))
    else:
      status = solver.solve(model)
    if i == 0:
      if status == cp_model.INFEASIBLE:
        raise InfeasibleLayoutError("infeasible")
      if status == cp_model.MODEL_INVALID:
        raise SolverError(f"CP-SAT rejected the model: "
                          f"{model.validate()}")
      if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise TimeLimitError(
            f"CP-SAT found no layout within {time_limit_s:g} s "
            f"({solver.status_name(status)}); raise the time limit")
      # Every objective coefficient is >= 0, so 0 is a valid bound.
      first = (("optimal" if status == cp_model.OPTIMAL else "feasible"),
               solver.objective_value, max(0.0, solver.best_objective_bound))
    elif status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
      break
    x = {k: int(solver.value(var)) for k, var in v.x.items()}
    values = {k: int(solver.value(var)) for k, var in (extra or {}).items()}
    if status != cp_model.OPTIMAL:
      break
    model.add(expr == int(round(solver.objective_value)))
    first_guess.set_hint(form, x, complete_hint,
                         solver.response_proto.solution)
  return PhaseResult(x, first[0], first[1], first[2],
                     time.perf_counter() - start, values)


def rules_of(x):
  """LayoutRules from the values of :math:`x`."""
  return LayoutRules([(k.dim, k.axis) for k, val in x.items() if val])


def phase_order(objective, extra=()):
  """The phases of a query: its objective (and what it ties on), the
  extra tie-break objectives, then the fixed rule order."""
  first = {"time": ["time"], "comm": ["comm", "time"],
           "memory": ["memory", "time"]}[objective]
  return first + [p for p in extra if p not in first] + ["tie"]


