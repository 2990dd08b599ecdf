r"""Training decisions as decision families of one CP-SAT program.

The ZeRO stage and the recompute count change the graph (storage gathers
and reduce-scatters, recomputed blocks), so each pair is priced on its own
graph by the existing pricing (:class:`autolayout.search.solve.LayoutSearch`: the
trace of the op's real lowering on ``ShapeMeshImpl``, the schedule's
memory steps, the overlap placements).  This module joins those candidate
programs into one, for one mesh and one microbatch count :math:`k`:

Sets
  * :math:`G`: variable groups (attention, embedding, ffn, norm);
    :math:`S`: ZeRO stage choices, each a stage :math:`s_g` per group
    (uniform ones give every group the same stage;
    :mod:`autolayout.training.zero`); :math:`R`: recompute counts (how many
    of the :math:`L` blocks recompute; e.g.
    :math:`\{0, L/4, L/2, 3L/4, L\}`);
  * :math:`C = S \times R`: candidates, each with its own scope tables
    :math:`\mathcal{S}_c`, memory steps :math:`K_c` and overlap terms.

Variables
  * :math:`x_{d,a}`: the layout rules, **shared** by every candidate (the
    union of their allowed pairs; repeated layers share one rule, and so
    one storage decision per storage dim), and each candidate's copy
    :math:`x^c_{d,a} \le z_c` with :math:`x_{d,a} = \sum_c x^c_{d,a}` (the
    disjunctive hull: the LP relaxation keeps every candidate's links
    between its tables, which enforced rows on a shared :math:`x` lose);
  * :math:`z_c \in \{0,1\}`, :math:`\sum_c z_c = 1`: the chosen
    candidate;
  * :math:`u_s = \sum_{c = (s, \cdot)} z_c` and
    :math:`v_r = \sum_{c = (\cdot, r)} z_c`: the stage choice and the
    recompute count; :math:`u_{g,t} = \sum_{c:\, s_g(c) = t} z_c`: the
    stage of group :math:`g` (one per group; repeated layers share it);
  * :math:`y^c_{S,\sigma}`: candidate :math:`c`'s table choices, with
    :math:`\sum_\sigma y^c_{S,\sigma} = z_c`: all zero unless :math:`c` is
    chosen.

Constraints
  * on each copy: one axis per dim, :math:`\sum_a x^c_{d,a} \le z_c`
    (constraint 1); candidate :math:`c`'s tables agree with :math:`x^c`
    (constraint 4); its tensors split an axis at most once,
    :math:`\sum_{d \in T} x^c_{d,a} \le z_c` (constraint 2); pairs its
    dims may not take have no copy, so they are 0 when :math:`c` is chosen;
  * candidate :math:`c`'s memory steps (constraint 5),
    :math:`\sum_{S,\sigma} m^c_{k,S,\sigma} y^c_{S,\sigma} \le M`: linear
    in choice :math:`\times` table value, and void when :math:`z_c = 0`
    because its :math:`y^c` are 0;
  * candidate :math:`c`'s overlap terms (exposed gradient syncs, see
    :func:`autolayout.search.overlap_program.add_overlap_constraints`), 0 unless
    chosen.

Objective
  :math:`\min \sum_c \sum_{S,\sigma} \lfloor t^c_{S,\sigma}/u \rceil
  y^c_{S,\sigma} + \sum_c E_c`, one time unit :math:`u` for all; then the
  simpler decisions (the lowest sum of the groups' stages, then fewer
  recomputed blocks) among
  optima, then the fixed rule order.  Only the chosen candidate's terms
  are non-zero, so the optimum is that candidate's own program value, and
  :func:`autolayout.search.validate.validate` re-checks it against
  ``costmodels.evaluate`` of the chosen graph and rules.

The same optimum, without the joint program, is what
:mod:`autolayout.training.candidate_search` finds by solving the candidates' own
programs in turn under the incumbent's cutoff (the default of
:func:`autolayout.training.decisions.solve_decisions`; ``joint=True`` builds this
one, the reference its tests compare with).

The microbatch count stays outside, as phases (one program per :math:`k`,
see :func:`autolayout.training.decisions.search_training`): each :math:`k` builds
every graph at another batch size.
"""

import collections
import time
from typing import Any, Dict, NamedTuple, Tuple

from ortools.sat.python import cp_model

from autolayout.search import formulation, overlap_program, solve
from autolayout.training import recompute, zero
from autolayout.errors import SolverError
from autolayout.search.formulation import DimAxis
from autolayout.search.result import LayoutResult, ModelSize
from autolayout.search.validate import bound_and_gap, check_agreement, validate

__all__ = ["Candidate", "DecisionProgram", "build_program", "decision_result",
           "solve_program"]


class Candidate(NamedTuple):
  """One (stage, recompute) pair: its decisions and its own program (a
  :class:`autolayout.search.solve.Problem` of its graph on the mesh)."""
  decisions: Any
  problem: Any


class DecisionProgram(NamedTuple):
  """The joint program of :func:`build_program`."""
  model: cp_model.CpModel
  x: Dict[DimAxis, Any]
  stage: Dict[Any, Any]        # u_s, per stage choice (int or per group)
  recompute: Dict[int, Any]    # v_r
  group_stage: Dict[Tuple[str, int], Any]   # u_{g,s}, per variable group
  chosen: Tuple[Any, ...]      # z_c, in candidate order
  candidates: Tuple[Candidate, ...]
  objective: Any
  simplicity: Any              # the decision tie-break expression
  unit: float
  build_time_s: float


def build_program(candidates, memory_budget=None):
  """The joint CP-SAT program of ``candidates`` (a product of stages and
  recompute counts at one k, each a :class:`Candidate` built with the same
  budget and overlap setting); see the module docstring for the math."""
  t0 = time.perf_counter()
  candidates = tuple(candidates)
  model = cp_model.CpModel()
  stages = {c.decisions.zero_stage for c in candidates}
  recs = sorted({c.decisions.recompute for c in candidates})
  if len(candidates) != len(stages) * len(recs):
    raise SolverError(f"the decision program needs every (stage, "
                      f"recompute) pair of stages {sorted(stages, key=str)} "
                      f"and recompute counts {recs}; got {len(candidates)} "
                      "candidates")
  x = {}
  for c in candidates:
    space = c.problem.space
    for d in space.dims:
      for a in space.options[d]:
        if DimAxis(d, a) not in x:
          x[DimAxis(d, a)] = model.new_bool_var(f"x[{d},{a}]")
  unit = max(formulation.time_unit(c.problem.form.tables)
             for c in candidates)
  terms, chosen = [], []
  copies = collections.defaultdict(list)   # DimAxis -> the x^c
  for c in candidates:
    d = c.decisions
    z = model.new_bool_var(f"choose[{zero.describe(d.zero_stage)},"
                           f"{d.recompute}]")
    chosen.append(z)
    space, problem = c.problem.space, c.problem
    # The candidate's own copy of the rules (the disjunctive hull: x is
    # the sum of the copies, each 0 unless its candidate is chosen), so
    # that the LP relaxation keeps each candidate's table links.
    v = formulation.Variables()
    for dim in space.dims:
      mine = []
      for a in space.options[dim]:
        k = DimAxis(dim, a)
        v.x[k] = model.new_bool_var(f"x[{dim},{a}|{len(chosen) - 1}]")
        copies[k].append(v.x[k])
        mine.append(v.x[k])
      if mine:
        model.add(sum(mine) <= z)   # one axis per dim (constraint 1)
    # Constraints 3-4 and 2 by the layout program's own builders, gated
    # by z_c.
    formulation.add_table_vars(model, v, problem.form.tables, chosen=z)
    formulation.add_tensor_axis_constraints(model, v, problem.graph, space,
                                            chosen=z)
    if memory_budget is not None:
      formulation.add_memory_constraints(
          model, v, problem.memory_coefficients, problem.host,
          memory_budget, with_peak=False)
    tables = problem.form.tables
    overlap_terms = overlap_program.add_overlap_constraints(
        model, v, tables, problem.form.overlap, unit)
    t, _ = formulation.time_objective(v, tables, "time", unit)
    terms.append(t + overlap_terms.time if overlap_terms.rounded else t)
  for k, var in x.items():
    model.add(var == sum(copies[k]))
  model.add_exactly_one(chosen)
  # Each family's indicators of its choice (sums of the z_c), built next
  # to the family's definition.
  decided = [c.decisions for c in candidates]
  _, u, per_group = zero.add_choice_vars(model, decided, chosen)
  w = recompute.add_choice_vars(model, decided, chosen)
  # Fixing a candidate first makes its tables propagate from x.
  model.add_decision_strategy(list(u.values()) + list(w.values()),
                              cp_model.CHOOSE_FIRST,
                              cp_model.SELECT_MAX_VALUE)
  # Among equal times: the least sharding (the lowest sum of the groups'
  # stages), then the fewest recomputed blocks.
  simplicity = sum(
      (len(recs) * zero.rank(c.decisions.zero_stage)
       + recs.index(c.decisions.recompute)) * z
      for c, z in zip(candidates, chosen))
  return DecisionProgram(model, x, u, w, per_group, tuple(chosen),
                         candidates, sum(terms), simplicity, unit,
                         time.perf_counter() - t0)


def solve_program(program, memory_budget=None, time_limit_s=60.0,
                  num_workers=8, seed=0, forbid=()):
  """Solves ``program``: time, then the simpler decisions, then the rule
  order.

  Returns ``(index of the chosen candidate, LayoutResult)``; the result's
  objective value is the program's, checked against
  ``costmodels.evaluate`` of the chosen candidate's graph and rules.

  Raises:
    InfeasibleLayoutError: (without details) if no candidate fits.
    SolverError: if the program's value differs from the cost model's.
  """
  model = program.model
  for dim, axis in forbid:
    var = program.x.get(DimAxis(dim, axis))
    if var is not None:
      model.add(var == 0)
  v = formulation.Variables()
  v.x = program.x
  form = formulation.Formulation(
      model, v, (), {"time": program.objective,
                     "decisions": program.simplicity},
      {"time": program.unit, "decisions": 1.0},
      formulation.tie_break_groups(v), 0)
  extra = {i: z for i, z in enumerate(program.chosen)}
  pr = solve.solve_phases(form, ["time", "decisions", "tie"], time_limit_s,
                          num_workers, seed, extra=extra)
  index = [i for i, val in pr.extra.items() if val][0]
  cand = program.candidates[index]
  build = program.build_time_s + sum(c.problem.build_time_s
                                     for c in program.candidates)
  result = decision_result(cand.decisions, cand.problem, pr, memory_budget,
                           [c.problem for c in program.candidates], build,
                           pr.solve_time_s, program.unit, model=model)
  return index, result


def decision_result(decisions, problem, pr, memory_budget, problems,
                    build_time_s, solve_time_s, unit=None, *, model=None,
                    report=None):
  """The LayoutResult of candidate ``decisions`` solved as ``pr`` (a
  :class:`autolayout.search.solve.PhaseResult` in ``unit`` seconds, default the
  problem's own), re-checked against ``costmodels.evaluate``; its model
  size sums ``problems`` (the programs solved for it; ``model``, the joint
  program, gives the variable and constraint counts when there is one;
  ``report``, the answer's CostReport if already validated)."""
  unit = problem.form.units["time"] if unit is None else unit
  dims = set(problem.space.options)
  rules = solve.rules_of({k: val for k, val in pr.x.items()
                          if k.dim in dims})
  if report is None:
    report = validate(problem, rules, memory_budget, "time")
  value = report.step_time_s
  check_agreement(pr.value, unit, value, problem,
                  f"{decisions} and rules {rules}")
  bound, gap = bound_and_gap(pr, unit, value)
  protos = ([model.proto] if model is not None
            else [p.form.model.proto for p in problems])
  size = ModelSize(
      variables=sum(len(p.variables) for p in protos),
      constraints=sum(len(p.constraints) for p in protos),
      tables=sum(len(p.form.tables) for p in problems),
      table_choices=sum(len(tb.choices) for p in problems
                        for tb in p.form.tables),
      memory_steps=sum(len(p.memory_coefficients) for p in problems))
  return LayoutResult(rules=rules, mesh_shape=problem.mesh_shape,
                      report=report, objective="time", objective_value=value,
                      status=pr.status, best_bound=bound, gap=gap,
                      solve_time_s=solve_time_s, build_time_s=build_time_s,
                      model_size=size, memory_budget=memory_budget,
                      topology=problem.topology,
                      decisions=decisions, graph=problem.graph,
                      outputs=problem.outputs)
