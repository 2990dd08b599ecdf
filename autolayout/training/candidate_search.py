r"""Training-decision candidates solved one at a time, by branch and bound.

:mod:`autolayout.training.decision_program` writes the choice of ZeRO stage and
recompute count (at one mesh and microbatch count) as one CP-SAT program
over every candidate :math:`c \in C`; its optimum is

.. math::
   \min_{c \in C} \; T^*_c, \qquad T^*_c = \min_{x \in X_c} \;
   \sum_{S,\sigma} t^c_{S,\sigma} y^c_{S,\sigma} + E_c(y^c)

(each candidate's own program value: its tables, memory steps and overlap
terms, :class:`autolayout.search.solve.Problem`), ties going to the simpler
candidate (the lowest sum of the groups' stages, then fewer recomputed
blocks).  Since the candidates share nothing but that minimum, this module
finds it without the joint program: it solves the candidates' own programs
in order of simplicity, and gives each after the first the **cutoff**

.. math::
   \sum_{S,\sigma} \lfloor t^c_{S,\sigma}/u_c \rceil y^c_{S,\sigma}
   + e_c \le \lfloor T_{\rm inc} / u_c \rfloor + \lceil \tau_c / u_c
   \rceil,

where :math:`T_{\rm inc}` is the incumbent's step time (re-checked by
``costmodels.evaluate``) and :math:`\tau_c` the rounding tolerance of
:func:`autolayout.search.validate.check_agreement`.  A candidate that cannot beat
the incumbent is then infeasible, which CP-SAT proves in milliseconds (its
program without the cutoff takes up to seconds to prove optimal: on
transformer_tiny's ZeRO-3 candidates on ``x:2;y:4``, 1-4 s against
0.01-0.06 s).  Every candidate that passes is solved to optimality from the
incumbent's rules as a hint, and wins when faster beyond 1e-9, or as fast
and simpler.  The answer is the joint program's: the same minimum, the
same tie-break between candidates.  The order (simplest first, or nearest
a likely winner first, :func:`try_order`) changes how soon the incumbent
is good, not the answer, unless the time runs out: then the best found so
far comes back with status "feasible".

Example:
  >>> index, result = solve_in_turn(decision_list, problem_of, budget,
  ...                               deadline, 8, 0)      # doctest: +SKIP
"""

import dataclasses
import math
from typing import NamedTuple, Optional

from autolayout import arguments
from autolayout.training import decision_program, zero
from autolayout.search import formulation, solve
from mesh_tf.training import storage
from autolayout.errors import InfeasibleLayoutError, TimeLimitError
from autolayout.search.validate import (check_agreement, rounding_slack,
                                        table_values, validate)

__all__ = ["Known", "simplicity", "solve_in_turn", "try_order"]


def simplicity(decisions):
  """The order candidates are tried in, simplest first: the sum of the
  groups' stages, then the recomputed blocks, then the stage's spelling
  (a fixed order among per-group choices of one sum)."""
  return (zero.rank(decisions.zero_stage), decisions.recompute,
          zero.describe(decisions.zero_stage))


def _better(step, d, best_step, best_d):
  """Faster beyond 1e-9 wins; otherwise the simpler decisions."""
  if abs(step - best_step) > 1e-9 * max(step, best_step):
    return step < best_step
  return simplicity(d) < simplicity(best_d)


def _cutoff_units(form, best_step):
  """The cutoff's right-hand side: the incumbent in the program's units,
  with the rounding slack that check_agreement allows."""
  return (math.floor(best_step / form.units["time"])
          + math.ceil(rounding_slack(form)))


def _cutoff(problem, best_step):
  """Adds ``time objective <= the incumbent`` to the problem's model."""
  form = problem.form
  form.model.add(form.objectives["time"] <= _cutoff_units(form, best_step))


class Known(NamedTuple):
  """What a search already proved about one candidate's program (on the
  same mesh, budget, forbidden rules and overlap), kept by the caller
  across the calls of :func:`solve_in_turn` (a query's phases): ``above``,
  a step time (s) it cannot reach (``math.inf``: it fits no layout; a
  finite one: the incumbent its cutoff made it infeasible under), or
  ``solved``, ``(step s, PhaseResult, Problem, CostReport or None)`` of
  its proven optimum (the report is made when it is first chosen: the
  step is its program's own value of it)."""
  above: float = math.inf
  solved: Optional[tuple] = None


def _distance(d, first):
  """How far candidate ``d`` is from ``first``: the groups' stage steps
  plus the recompute difference, in units of the layers."""
  stages = sum(abs(zero.stage_of(d.zero_stage, g)
                   - zero.stage_of(first.zero_stage, g))
               for g in storage.GROUPS)
  return (stages + abs(d.recompute - first.recompute)
          / max(1, d.recompute, first.recompute))


def try_order(decision_list, first=None):
  """The order :func:`solve_in_turn` tries the candidates in: simplest
  first.  With ``first`` (a plan in hand, e.g. the mesh screen's ZeRO 3
  and full recompute), the simplest, then ``first``, then the others
  nearest to ``first`` first: where the simplest fits it is the usual
  winner and its cutoff prunes the rest in milliseconds (moe_tiny: with
  ``first`` tried before it, the k = 1 phase took 41 s of solving instead
  of about 1 s), and where it does not, a bounded search (GPT-3) goes on
  from a plan that fits to its neighbours."""
  simplest = sorted(range(len(decision_list)),
                    key=lambda i: simplicity(decision_list[i]))
  if first is None or first not in decision_list:
    return simplest
  head = list(dict.fromkeys([simplest[0], decision_list.index(first)]))
  rest = sorted((i for i in simplest if i not in head),
                key=lambda i: (_distance(decision_list[i], first),
                               simplicity(decision_list[i])))
  return head + rest


def _reused(hit, best):
  """Whether a candidate's :class:`Known` answer makes its program
  unnecessary: it fits no layout, or cannot reach the incumbent ``best``
  (``(index, step, ...)`` or None), or is already solved."""
  if hit.solved is not None:
    return True
  return hit.above == math.inf or (best is not None and best[1] <= hit.above)


def solve_in_turn(decision_list, problem_of, memory_budget, deadline,
                  num_workers, seed, forbid=(), first=None, *, may_fit=None,
                  known=None):
  """The fastest of ``decision_list`` and its layout (see the module
  docstring).

  Args:
    decision_list: the candidates' TrainingDecisions.
    problem_of: ``fn(decisions) -> Problem``, the candidate's program on
      the mesh (built on demand, in the order tried).
    memory_budget: bytes per device or None (as the problems were built).
    deadline: a ``time.perf_counter()`` value bounding the whole search.
    num_workers, seed: CP-SAT's.
    forbid: ``(dim, axis)`` rules no candidate may use.
    first: the decisions of a likely winner, tried first (see
      :func:`try_order`); the answer does not depend on it unless the
      time runs out.
    may_fit: ``fn(decisions) -> bool``, False only when the candidate's
      program is proven infeasible without building it
      (:meth:`autolayout.search.state.LayoutSearch.may_fit`); such a
      candidate is skipped as its program would have been.
    known: a dict ``{decisions: Known}`` the caller owns across calls on
      the same mesh, budget, forbidden rules and overlap: what earlier
      calls proved is reused (a candidate that fits no layout, or cannot
      reach the incumbent, is skipped; a solved one is taken as solved,
      and kept only if its optimum is within the cutoff the incumbent
      would give it), and what this call proves is added.  The answer is
      the one every program solved again gives: a proven optimum's rules
      are unique (the tie phases), and the skipped programs are the ones
      CP-SAT would find infeasible.

  Returns:
    ``(index into decision_list, LayoutResult)``; its status is "optimal"
    only when every candidate was either solved to optimality or proven
    unable to beat the answer.

  Raises:
    InfeasibleLayoutError: (without details) if no candidate fits.
    TimeLimitError: if the time ran out before any candidate was solved.
  """
  order = try_order(decision_list, first)
  known = {} if known is None else known
  # The decisions are searched because the budget binds (the step as built
  # fits no layout), and on programs whose memory constraints bind
  # CP-SAT's presolve halves the solve, below PRESOLVE_MIN_VARIABLES too
  # (README plan, CPU s with and without: per-group stages 0.24 / 0.51,
  # uniform 0.037 / 0.08; with no budget it costs more: 1.15 / 0.66).
  params = None if memory_budget is None else {"cp_model_presolve": True}
  best = None        # (index, step, PhaseResult, Problem, CostReport)
  proven = True      # every candidate so far decided exactly
  built, solve_s, solved = 0.0, 0.0, []
  for i in order:
    d = decision_list[i]
    hit = known.get(d)
    if hit is not None and _reused(hit, best):
      if hit.solved is None:
        continue
      step, pr, problem, report = hit.solved
      if best is not None and round(pr.value) > _cutoff_units(problem.form,
                                                              best[1]):
        continue   # the cutoff would make its program infeasible
      solved.append(problem)
      if best is None or _better(step, d, best[1], decision_list[best[0]]):
        best = (i, step, pr, problem, report)
      continue
    try:
      arguments.deadline_left(deadline, f"the training graph {d.as_dict()}")
      if may_fit is not None and not may_fit(d):
        known[d] = Known(math.inf)
        continue
      problem = problem_of(d)
      left = arguments.deadline_left(deadline, "the decision programs")
    except TimeLimitError:
      if best is None:
        raise
      proven = False
      break
    built += problem.build_time_s
    solved.append(problem)
    formulation.add_forbidden(problem.form.model, problem.form.vars, forbid)
    hint = None
    if best is not None:
      _cutoff(problem, best[1])
      hint = best[2].x
    try:
      pr = solve.solve_phases(problem.form, ["time", "tie"], left,
                              num_workers, seed, params, hint=hint)
    except InfeasibleLayoutError:
      # Over budget, or (with a cutoff) cannot beat the incumbent.
      known[d] = Known(math.inf if best is None else best[1])
      continue
    except TimeLimitError:
      if best is None:
        raise
      proven = False
      break
    solve_s += pr.solve_time_s
    proven = proven and pr.status == "optimal"
    rules = solve.rules_of(pr.x)
    # The program's own exact value of its answer ranks the candidates
    # (within 1e-9 of the cost model's, which validate() checks for the
    # one chosen: re-pricing every loser took 0.6 s of the README plan's
    # 5.3 s).
    step = table_values(problem, rules)[0]
    check_agreement(pr.value, problem.form.units["time"], step, problem,
                    f"{d} and rules {rules}")
    if pr.status == "optimal":
      known[d] = Known(solved=(step, pr, problem, None))
    if best is None or _better(step, d, best[1], decision_list[best[0]]):
      best = (i, step, pr, problem, None)
  if best is None:
    raise InfeasibleLayoutError("infeasible")
  i, _, pr, problem, report = best
  if report is None:
    report = validate(problem, solve.rules_of(pr.x), memory_budget, "time")
    if pr.status == "optimal":
      known[decision_list[i]] = Known(solved=(report.step_time_s, pr,
                                              problem, report))
  result = decision_program.decision_result(
      decision_list[i], problem, pr, memory_budget, solved, built, solve_s,
      report=report)
  if not proven:
    result = dataclasses.replace(result, status="feasible")
  return i, result
