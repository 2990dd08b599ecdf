"""One query answered: :func:`solve_spec` builds the program of a
:class:`autolayout.spec.SearchSpec` from a search's state, solves its
phases, re-checks the answer with the cost model and returns the named
:class:`~autolayout.search.result.LayoutResult`."""

import dataclasses
import time

from autolayout import arguments
from autolayout.errors import InfeasibleLayoutError, check_import_order
from autolayout.search import first_guess, formulation, infeasible
from autolayout.search.phases import phase_order, rules_of, solve_phases
from autolayout.search.result import LayoutResult, ModelSize
from autolayout.search.validate import bound_and_gap, check_agreement, validate

__all__ = ["model_size", "solve_spec"]

# Seconds per op that costmodels.evaluate takes to re-check an answer (25-100
# us measured here); the solver stops that much before the time limit.
CHECK_S_PER_OP = 120e-6


def model_size(problem):
  """The :class:`ModelSize` of ``problem``'s CP-SAT program."""
  proto = problem.form.model.proto
  return ModelSize(
      variables=len(proto.variables), constraints=len(proto.constraints),
      tables=len(problem.form.tables),
      table_choices=sum(len(tb.choices) for tb in problem.form.tables),
      memory_steps=problem.form.memory_steps)


def solve_spec(search, spec, *, progress=None, hint=None, exclude=()):
  """The optimal layout of ``search``'s graph for ``spec`` (a
  :class:`autolayout.spec.SearchSpec` with a mesh, built at the caller's
  edge): the body of :meth:`LayoutSearch.solve`.  ``progress``, ``hint``
  and ``exclude`` are as :func:`auto_layout`'s and
  :meth:`LayoutSearch.solve`'s."""
  check_import_order()
  if spec.objective == "latency":
    # The latency of a one-token decoding graph (mesh_tf.models.decoding)
    # is its predicted step time: solve "time", report it as latency.
    result = solve_spec(search, dataclasses.replace(spec, objective="time"),
                        progress=progress, hint=hint, exclude=exclude)
    return dataclasses.replace(result, objective="latency")
  # The edge (autolayout.spec.search_spec) resolved the names once;
  # everything below gets typed values.  The time limit bounds the whole
  # query: building the program, every phase and the infeasibility report.
  mesh_shape, topology = spec.mesh_shape, spec.topology
  memory_budget, objective = spec.memory_budget, spec.objective
  opts = spec.solver
  time_limit_s, num_workers, seed = (opts.time_limit_s, opts.num_workers,
                                     opts.seed)
  t0 = time.perf_counter()
  phases = phase_order(objective, opts.tie_break)
  problem = search.problem(mesh_shape, topology, memory_budget,
                           need_peak="memory" in phases, overlap=spec.overlap,
                           deadline=t0 + time_limit_s)
  forbidden = formulation.add_forbidden(problem.form.model,
                                        problem.form.vars, opts.forbid)
  for rules in exclude:
    formulation.add_layout_exclusion(problem.form.model, problem.form.vars,
                                     rules)
  hint_x = None
  if hint is not None:
    from autolayout.plans import hint as plan_hint  # pylint: disable=g-import-not-at-top
    hint_x, hinted, skipped = plan_hint.hint_values(
        plan_hint.as_plan(hint), list(problem.form.vars.x), search.graph,
        problem.mesh_shape)
  elif phases[0] in ("time", "comm"):
    hint_x = first_guess.local_search(
        problem.form, problem.space, phases[0], frozenset(forbidden),
        None if memory_budget is None else (problem.memory_coefficients,
                                            memory_budget))
  try:
    unit = problem.form.units[objective]
    on_solution = None if progress is None else (
        lambda best, bound, t: progress(best * unit, bound * unit, t))
    left = arguments.time_left(t0, time_limit_s, "a layout")
    # Keep time for the final re-check by the cost model, which is not
    # interruptible: about CHECK_S_PER_OP per op, at most 40% of what is left.
    left -= min(0.4 * left, CHECK_S_PER_OP * len(search.graph.operations))
    pr = solve_phases(problem.form, phases, left, num_workers, seed,
                      opts.params, on_solution, hint_x,
                      complete_hint=True)
  except InfeasibleLayoutError:
    infeasible.explain(search, mesh_shape, topology, memory_budget,
                       time_limit_s - (time.perf_counter() - t0),
                       num_workers, seed)
  rules = rules_of(pr.x)
  unit = problem.form.units[objective]
  report = validate(problem, rules, memory_budget, objective,
                    pr.value if objective == "memory" else None)
  value = {"time": report.step_time_s, "comm": report.comm_time_s,
           "memory": report.peak_memory_bytes}[objective]
  if objective != "memory":
    check_agreement(pr.value, unit, value, problem, f"rules {rules}")
  bound, gap = bound_and_gap(pr, unit, value)
  result = LayoutResult(
      rules=rules, mesh_shape=problem.mesh_shape, report=report,
      objective=objective, objective_value=value, status=pr.status,
      best_bound=bound, gap=gap, solve_time_s=pr.solve_time_s,
      build_time_s=problem.build_time_s, model_size=model_size(problem),
      memory_budget=memory_budget, topology=problem.topology,
      graph=search.graph, outputs=problem.outputs)
  if hint is not None:
    result = dataclasses.replace(result, hint_report=plan_hint.hint_report(
        hinted, skipped, result))
  return result
