"""Solver-independent checks of a layout the search returns.

:func:`table_values` sums the program's own tables for a set of rules (no
solver); :func:`validate` re-checks every tensor layout, every op's
unsplittable dims and the memory budget, and that those table values equal
``costmodels.evaluate`` exactly.  A failure is a bug in the search.
"""

import collections
import math

import costmodels
from mesh_tf.core.errors import LayoutError
from autolayout.search import assignments, overlap_program
from autolayout.errors import SolverError


def table_values(problem, rules):
  """``(time_s, comm_s)`` the program's tables give ``rules`` (no solver):
  the exposed step and communication times, overlap included."""
  t = c = 0.0
  terms = collections.defaultdict(float)
  for tb in problem.form.tables:
    sigma = assignments.from_rules(tb.scope, rules)
    try:
      i = tb.choices.index(sigma)
    except ValueError:
      raise SolverError(f"rules {rules} give dims {tb.scope} the assignment "
                        f"{sigma}, which the program does not allow")
    t += tb.time_s[i]
    c += tb.comm_s[i]
    for k, col in tb.terms:
      terms[k] += col[i]
  spec = problem.form.overlap
  e = overlap_program.exposed_sync_value(spec, terms)
  return (t + overlap_program.exposed_sync_value(spec, terms, True), c + e)


def validate(problem, rules, memory_budget=None, objective=None, value=None):
  """Re-checks ``rules`` without the solver and returns its CostReport.

  Checks that every tensor's layout and every op's unsplittable dims are
  respected, that the peak memory is within ``memory_budget``, and that the
  program's own value of ``rules`` (summed from its tables) equals the cost
  model's step time and communication time, and its peak memory when
  ``objective == "memory"`` (then ``value`` is the solver's peak).

  Raises:
    SolverError: if any check fails (a bug in the search, not a user error).
  """
  g, mesh_shape = problem.graph, problem.mesh_shape
  try:
    for t in g.tensors:
      rules.tensor_layout(t.shape, mesh_shape, t.name)
    split = set(rules.as_dict())
    for op in g.operations:
      bad = split & set(op.lowering_unsplittable_dims)
      if bad:
        raise SolverError(f"rules {rules} split {sorted(bad)}, which "
                          f"{op.name} cannot split")
  except LayoutError as e:
    raise SolverError(f"the solver returned invalid rules {rules}: {e}")
  report = costmodels.evaluate(g, mesh_shape, rules, problem.topology,
                               outputs=list(problem.outputs),
                               microbatches=problem.microbatches,
                               overlap=problem.overlap,
                               liveness=problem.liveness,
                               **({} if problem.memory_reserve_fraction is None
                                  else {"memory_reserve_fraction":
                                        problem.memory_reserve_fraction}))
  t, c = table_values(problem, rules)
  for name, mine, theirs in (("step time", t, report.step_time_s),
                             ("communication time", c, report.comm_time_s)):
    if not math.isclose(mine, theirs, rel_tol=1e-9, abs_tol=1e-18):
      raise SolverError(
          f"the program values rules {rules} at {name} {mine!r} s but "
          f"costmodels.evaluate says {theirs!r} s on {mesh_shape}")
  peak = _modelled_peak(problem, rules, report)
  if memory_budget is not None and peak > memory_budget:
    raise SolverError(f"rules {rules} peak at {peak} "
                      f"bytes per device, over the budget {memory_budget}")
  if objective == "memory" and value is not None and int(round(value)) != \
      peak:
    raise SolverError(f"the program's peak {value} differs from the cost "
                      f"model's {peak} for rules {rules}")
  return report


def _modelled_peak(problem, rules, report):
  """The peak the program models: the cost model's, except on a chip whose
  devices do not run in lockstep, where the program leaves out the
  gradients held for their syncs (:mod:`costmodels.sync_hold`) and the
  schedule's own peak is checked."""
  if costmodels.get_topology(problem.topology).chip.devices_in_lockstep:
    return report.peak_memory_bytes
  live = problem.liveness or costmodels.memory.liveness(
      problem.graph, list(problem.outputs))
  return costmodels.memory.memory_profile(
      problem.graph, problem.mesh_shape, rules, liveness_plan=live).peak_bytes


def rounding_slack(form):
  """How far, in objective units, a Formulation's integer objective may
  lie from the cost model's value: half a unit per rounded coefficient
  (one per table, one per rounded overlap term), plus one."""
  return 0.5 * (len(form.tables) + form.rounded_terms) + 1


def check_agreement(solver_value, unit, value, problem, what):
  """Raises SolverError unless the solver's integer objective
  ``solver_value`` (in units of ``unit`` seconds) equals the cost model's
  ``value`` seconds up to the rounding of :func:`rounding_slack`
  (``what`` names the answer in the message)."""
  tol = unit * rounding_slack(problem.form)
  if abs(solver_value * unit - value) > tol:
    raise SolverError(
        f"the solver's objective {solver_value} x {unit!r} s differs from "
        f"the cost model's {value!r} s for {what} by more than rounding")


def bound_and_gap(phase_result, unit, value):
  """``(bound in objective units * unit, relative gap)`` of a solve: a
  proven optimum's bound is its value (integer scaling may leave it a
  rounding error above the cost model's), and its gap 0."""
  pr = phase_result
  bound = pr.bound * unit
  if pr.status == "optimal":
    return min(bound, value), 0.0
  return bound, max(0.0, (pr.value - pr.bound) / pr.value if pr.value
                    else 0.0)

