"""Build the program, solve it with CP-SAT, and re-check the answer.

``auto_layout`` is the entry point.  Its stages are separate functions:
:func:`build_problem` (cost tables, memory steps, the CP-SAT model),
:func:`solve_phases` (a short, explicit CP-SAT run per objective phase) and
:func:`validate` (re-checks a solution with the cost model, without the
solver).
"""

import dataclasses
import time
from typing import NamedTuple, Optional

# OR-Tools must be imported before TensorFlow in any process (protobuf
# clash); mesh_tf loads TensorFlow lazily, after this.
from ortools.sat.python import cp_model

import costmodels
from costmodels import memory as cm_memory
from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import InvalidArgumentError
from mesh_tf.core.layout import LayoutRules
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from autolayout import arguments
from autolayout.search import (assignments, first_guess, formulation,
                               infeasible, memory_steps, overlap_program,
                               overlap_terms, tables)
from autolayout.arguments import DEFAULTS
from autolayout.errors import (AutoLayoutError, InfeasibleLayoutError,
                               SolverError, TimeLimitError,
                               check_import_order)
from autolayout.search.pricing import Pricer
from autolayout.search.validate import (bound_and_gap, check_agreement,  # noqa: F401
                                        table_values, validate)
from autolayout.search.result import LayoutResult, ModelSize
from costmodels import arguments as cm_args

OBJECTIVES = arguments.OBJECTIVES
DEFAULT_TIME_LIMIT_S = DEFAULTS.time_limit_s
DEFAULT_NUM_WORKERS = DEFAULTS.num_workers
DEFAULT_SEED = DEFAULTS.seed


# Seconds per op that costmodels.evaluate takes to re-check an answer (25-100
# us measured here); the solver stops that much before the time limit.
CHECK_S_PER_OP = 120e-6
# Programs with more variables than this are presolved by CP-SAT.
PRESOLVE_MIN_VARIABLES = 5000


class Problem(NamedTuple):
  """Everything built for one (graph, mesh, topology, outputs)."""
  graph: object
  mesh_shape: dims_lib.Shape
  outputs: tuple
  topology: object
  space: assignments.DimSpace
  form: formulation.Formulation
  host: dict
  build_time_s: float
  microbatches: object = None   # mesh_tf.training.microbatch.MicrobatchPlan or None
  memory_reserve_fraction: Optional[float] = None
  overlap: bool = True
  liveness: object = None  # costmodels.memory.Liveness shared by the checks
  # Constraint 5's per-step coefficients ({scope: {sigma: bytes}} per
  # step) and their scope hosts, for programs that combine several graphs
  # (autolayout.training.decision_program); () without memory constraints.
  memory_coefficients: tuple = ()


def _outputs(graph, outputs):
  if outputs is None:
    return tuple(cm_memory.default_outputs(graph))
  if not isinstance(outputs, (list, tuple)):
    outputs = [outputs]
  return tuple(outputs)


class LayoutSearch:
  """The layout search of one graph: the state every query shares.

  Building the cost tables, the dim-axis space and the memory steps of a
  (mesh shape, topology) is most of a solve's time, and the same ones serve
  every query on that mesh: re-solves under other budgets (Pareto sweeps),
  with forbidden rules (:func:`autolayout.explain`), or the smallest peak
  (the infeasibility report).  A ``LayoutSearch`` builds each on first use
  and keeps it for its own lifetime; the caller owns it, so there is no
  module state and nothing to invalidate behind anyone's back.

  The graph must not change while the search is in use (the tables would be
  stale): a query on a graph that gained ops raises AutoLayoutError (a bad
  graph or outputs, InvalidArgumentError).

  Args:
    graph: the mtf Graph.
    outputs: tensors whose values the step returns (kept live to the end);
      None: every tensor no op reads.
    outcomes: a dict the caller owns, shared by the searches of graphs
      that repeat each other's ops (training candidates): each op is
      priced once per mesh for all of them; None: this search's own.
    max_axes_per_dim: the most mesh axes one dim may split over (1: one
      axis per dim; 2 on mesh ``x:16;y:16`` also lets ``batch`` take
      ``x+y``, data parallelism over the whole slice).  More options make
      the tables and the program larger (see :mod:`autolayout.search.assignments`).
    narrow: see :class:`tables.GraphTables`; None: unless ``outcomes`` is
      shared (the training candidates' joint program picks among equal
      decisions by search order, which the tables' shape changes).

  Example:
    >>> search = LayoutSearch(graph, [loss])             # doctest: +SKIP
    >>> fast = search.solve("data:2;model:4", "dgx-h100")  # doctest: +SKIP
    >>> lean = search.solve("data:2;model:4", "dgx-h100",
    ...                     memory_budget=fast.peak_memory_bytes - 1)
    ...                                                  # doctest: +SKIP
  """

  def __init__(self, graph, outputs=None, microbatches=None,
               memory_reserve_fraction=None, max_axes_per_dim=1,
               outcomes=None, narrow=None):
    self.graph = cm_args.check_graph(graph)
    self.max_axes_per_dim = arguments.check_count(
        max_axes_per_dim, "max_axes_per_dim", 1, 8, 1)
    self.outputs = _outputs(graph, cm_args.check_outputs(graph, outputs))
    # A mesh_tf.training.microbatch.MicrobatchPlan: per-microbatch work priced k times.
    self.microbatches = microbatches
    # What the reports show as kept free of the HBM (None: the default).
    self.memory_reserve_fraction = memory_reserve_fraction
    self._num_ops = len(graph.operations)
    self._built = {}  # (what, mesh Shape, Topology) -> tables, space, steps
    # The caller's {(mesh Shape, Topology): op outcomes} shared with the
    # searches of other graphs (see tables.GraphTables), or None.
    self._outcomes = outcomes
    self._narrow = outcomes is None if narrow is None else bool(narrow)
    self._signatures = {}   # op -> its signature, for the tables of every mesh

  def _part(self, what, mesh_shape, topo, make):
    if len(self.graph.operations) != self._num_ops:
      raise AutoLayoutError(
          f"the graph grew from {self._num_ops} to "
          f"{len(self.graph.operations)} ops after its LayoutSearch was "
          "made; make a new LayoutSearch for the changed graph")
    key = (what, mesh_shape, topo)
    value = self._built.get(key)
    if value is None:
      value = self._built[key] = make()
    return value

  def liveness(self, deadline=None):
    """The cost model's schedule and live intervals of the graph: one per
    search, shared by the memory steps of every mesh, the infeasibility
    report and the final re-check.  ``deadline``: as :meth:`problem` (the
    schedule of a large graph stops when it passes)."""
    return self._part("liveness", None, None, lambda: cm_memory.liveness(
        self.graph, list(self.outputs), check=lambda: arguments.deadline_left(
            deadline, "the memory schedule")))

  def problem(self, mesh_shape, topology, memory_budget=None,
              need_peak=False, overlap=True, deadline=None):
    """Builds the CP-SAT model on ``mesh_shape`` and ``topology`` (see
    :mod:`autolayout.search.formulation` for the math), from this search's tables.
    ``overlap``: hide gradient syncs under compute, as
    :func:`costmodels.evaluate` does.

    ``deadline`` (a ``perf_counter`` value) bounds building the program:
    the tables stop when it passes, and each later part is only started
    before it (TimeLimitError otherwise).

    Returns a :class:`Problem`; its model is new, so adding constraints to
    it leaves later queries untouched.
    """
    t0 = time.perf_counter()
    mesh_shape = convert_to_mesh_shape(mesh_shape)
    topo = costmodels.get_topology(topology)
    graph, outputs = self.graph, self.outputs
    space = self._part("space", mesh_shape, topo,
                       lambda: assignments.dim_space(
                           graph, mesh_shape, self.max_axes_per_dim))
    shared = (None if self._outcomes is None
              else self._outcomes.setdefault((mesh_shape, topo), {}))
    gt = self._part("tables", mesh_shape, topo, lambda: tables.GraphTables(
        graph, mesh_shape, outputs, Pricer(topo, mesh_shape), space,
        self.microbatches, deadline, shared, self._signatures,
        self._narrow))
    # Memory constraints only when a budget or the peak is asked for.
    memory_bound = memory_budget is not None or need_peak
    ms = None
    if memory_bound:
      arguments.deadline_left(deadline, "the memory steps")
      live = self.liveness(deadline)
      arguments.deadline_left(deadline, "the memory steps")
      # The schedule's steps do not depend on the mesh: compressed once.
      steps = self._part("steps", None, None, lambda: memory_steps.compress(
          graph, list(outputs), liveness=live))
      ms = self._part("memory", mesh_shape, topo,
                      lambda: memory_steps.prune_by_layouts(steps, space))
    hide = None
    if overlap:
      arguments.deadline_left(deadline, "the overlap terms")
      hide = self._part("overlap", mesh_shape, topo,
                        lambda: overlap_terms.overlap_terms(graph, gt,
                                                            space.axes))
    arguments.deadline_left(deadline, "the integer program")
    problem = _assemble(graph, mesh_shape, outputs, topo, space, gt, ms,
                        memory_budget, need_peak, t0, hide)
    return problem._replace(
        microbatches=self.microbatches,
        memory_reserve_fraction=self.memory_reserve_fraction,
        liveness=self.liveness())

  def solve(self, mesh_shape=None, topology=DEFAULTS.topology,
            memory_budget=DEFAULTS.memory_budget,
            objective=DEFAULTS.objective, time_limit_s=DEFAULT_TIME_LIMIT_S,
            num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED,
            tie_break=(), solver_params=None, forbid=(), progress=None,
            hint=None, overlap=True, exclude=()):
    """The optimal layout on ``mesh_shape``; the arguments and the result
    are :func:`auto_layout`'s.  ``exclude``: whole layouts (LayoutRules) the
    answer must differ from."""
    return _solve(self, mesh_shape, topology, memory_budget, objective,
                  time_limit_s, num_workers, seed, tie_break, solver_params,
                  forbid, progress, hint, overlap, exclude)

  def min_peak(self, mesh_shape, topology,
               time_limit_s=DEFAULT_TIME_LIMIT_S,
               num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED):
    """``(peak bytes, rules, problem, status)`` of the layout with the
    smallest peak memory per device (``status`` "feasible": the smallest
    found within ``time_limit_s``, not proven).  ``time_limit_s`` bounds
    building and solving together."""
    t0 = time.perf_counter()
    problem = self.problem(mesh_shape, topology, need_peak=True,
                           deadline=t0 + time_limit_s)
    left = arguments.time_left(t0, time_limit_s, "the smallest peak")
    pr = solve_phases(problem.form, ["memory"], left, num_workers, seed)
    return int(round(pr.value)), rules_of(pr.x), problem, pr.status


def build_problem(graph, mesh_shape, outputs, topology, memory_budget=None,
                  need_peak=False, overlap=True, max_axes_per_dim=1):
  """:meth:`LayoutSearch.problem` of a new search of ``graph``."""
  return LayoutSearch(graph, outputs, max_axes_per_dim=max_axes_per_dim).problem(mesh_shape, topology,
                                              memory_budget, need_peak,
                                              overlap)


def _assemble(graph, mesh_shape, outputs, topo, space, gt, ms, memory_budget,
              need_peak, t0, overlap=None):
  """The CP-SAT model of one query, from the search's tables.  ``overlap``
  is ``(placements, OverlapSpec)``, or None to expose every collective."""
  memory_bound = ms is not None
  placed, spec = overlap if overlap else (None, None)
  tbls, host = formulation.build_tables(gt, space,
                                        ms.scopes if ms else (), placed)
  model = cp_model.CpModel()
  v = formulation.Variables()
  formulation.add_dim_axis_vars(model, v, space)
  formulation.add_tensor_axis_constraints(model, v, graph, space)
  formulation.add_table_vars(model, v, tbls)
  if any(not tb.choices for tb in tbls):
    bad = [tb.scope for tb in tbls if not tb.choices]
    raise SolverError(f"no valid local assignment for dims {bad[0]} on mesh "
                      f"{mesh_shape}; every layout of them fails to lower")
  coefficients = ()
  if memory_bound:
    coefficients = tuple(memory_steps.step_coefficients(ms, space))
    formulation.add_memory_constraints(model, v, coefficients, host,
                                       memory_budget, with_peak=need_peak)
  objectives, units = {}, {}
  # With overlap terms both objectives share one unit, so that they share
  # the exposed-sync variables e_a.
  unit = formulation.time_unit(tbls) if spec else None
  exposed = overlap_program.add_overlap_constraints(model, v, tbls, spec,
                                                    unit)
  rounded = exposed.rounded
  for which in ("time", "comm"):
    objectives[which], units[which] = formulation.time_objective(
        v, tbls, which, unit)
    if rounded:
      objectives[which] = objectives[which] + (
          exposed.time if which == "time" else exposed.exposed)
  if v.peak is not None:
    objectives["memory"], units["memory"] = v.peak, 1.0
  form = formulation.Formulation(model, v, tuple(tbls), objectives, units,
                                 formulation.tie_break_groups(v),
                                 len(ms.steps) if ms else 0, spec, rounded)
  return Problem(graph, mesh_shape, outputs, topo, space, form, host,
                 time.perf_counter() - t0, overlap=overlap is not None,
                 memory_coefficients=coefficients)


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
                 solver_params=None, progress=None, hint=None, extra=None,
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


def _model_size(problem):
  proto = problem.form.model.proto
  return ModelSize(
      variables=len(proto.variables), constraints=len(proto.constraints),
      tables=len(problem.form.tables),
      table_choices=sum(len(tb.choices) for tb in problem.form.tables),
      memory_steps=problem.form.memory_steps)


def _phases(objective, extra=()):
  first = {"time": ["time"], "comm": ["comm", "time"],
           "memory": ["memory", "time"]}[objective]
  return first + [p for p in extra if p not in first] + ["tie"]


def min_peak_layout(graph, mesh_shape, outputs, topology,
                    time_limit_s=DEFAULT_TIME_LIMIT_S,
                    num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED):
  """:meth:`LayoutSearch.min_peak` of a new search of ``graph``."""
  return LayoutSearch(graph, outputs).min_peak(mesh_shape, topology,
                                               time_limit_s, num_workers,
                                               seed)


def auto_layout(graph, mesh_shape=None, outputs=None,
                topology=DEFAULTS.topology,
                memory_budget=DEFAULTS.memory_budget,
                objective=DEFAULTS.objective,
                time_limit_s=DEFAULT_TIME_LIMIT_S,
                num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED,
                tie_break=(), solver_params=None, forbid=(), progress=None,
                search=None, hint=None, overlap=True, max_axes_per_dim=None):
  """Finds the layout rules that minimise predicted step time.

  Args:
    graph: an mtf Graph (one mesh).
    mesh_shape: the mesh, e.g. ``"rows:2;cols:4"`` (``autolayout.auto_layout``
      also takes None: the best mesh shape, see
      :func:`autolayout.default_search.auto_layout`).
    outputs: tensors whose values are exported (default: those nobody
      reads).
    topology: a costmodels Topology or its name; default ``tpu-v5e-16x16``.
    memory_budget: bytes per device, a size string (``"16GB"``,
      ``"12GiB"``, ``"90%"`` of HBM), ``"hbm"`` (default: the chip's HBM) or
      None / ``"none"`` for no limit.
    objective: ``"time"`` (step time), ``"latency"`` (the same: the
      predicted time of one step, for a one-token decoding graph from
      ``mesh_tf.models.decoding``), ``"comm"`` (communication time) or
      ``"memory"`` (peak memory per device).
    time_limit_s: CP-SAT wall-time limit for all phases together (building
      the tables is not counted).  On time-out the best layout found is
      returned with status "feasible", its bound and gap.
    num_workers: CP-SAT worker threads.
    seed: CP-SAT random seed.
    tie_break: extra objectives (e.g. ``("memory",)``) to minimise, in
      order, among optima of the main one, before the fixed rule order.
    solver_params: further CP-SAT parameters by name.
    forbid: ``(dim, axis)`` rules the answer must not use.
    progress: optional ``progress(best, bound, elapsed_s)`` called by the
      solver for each improving layout (objective units: seconds, or bytes
      for "memory"), e.g. to show a live display.
    search: a :class:`LayoutSearch` of ``graph`` (and ``outputs``) whose
      tables to reuse; None: a new one, for this call only.
    hint: a previous :class:`~autolayout.plans.plan.Plan` (or its file path) to
      start the search from, e.g. after the shapes, batch or mesh changed.
      Its rules are matched by dim and axis name; those that no longer
      apply are skipped.  The result's ``hint_report`` says which rules
      changed and which cost terms moved (:mod:`autolayout.plans.hint`).
    overlap: hide gradient syncs under the rest of the backward pass, as
      :func:`costmodels.evaluate` does (the objective is the exposed step
      time); False prices every collective in full.
    max_axes_per_dim: the most mesh axes one dim may split over (rules
      such as ``batch:x+y``; see :class:`LayoutSearch`); None: 1, or
      ``search``'s own.

  Returns:
    A :class:`LayoutResult`; ``status`` is "optimal" when proven.

  Raises:
    InvalidArgumentError: for a misused argument (named, with a valid
      value).
    InfeasibleLayoutError: if no layout fits ``memory_budget``; it states
      the smallest reachable peak and the tensors that dominate it.
    costmodels.TopologyError: if the mesh does not embed in the topology.
    SolverError: if CP-SAT finds no layout within ``time_limit_s``.

  Example:
    >>> r = auto_layout(graph, "data:2;model:4", [loss],
    ...                 topology="dgx-h100")              # doctest: +SKIP
    >>> str(r.rules)                                     # doctest: +SKIP
    'batch:data;d_ff:model;heads:model'
  """
  if search is None:
    search = LayoutSearch(graph, outputs, max_axes_per_dim=(
        1 if max_axes_per_dim is None else max_axes_per_dim))
  elif not isinstance(search, LayoutSearch):
    raise InvalidArgumentError(
        f"search must be a LayoutSearch, got {type(search).__name__}; pass "
        "search=LayoutSearch(graph, outputs), or None")
  elif search.graph is not graph:
    raise AutoLayoutError("auto_layout was given a LayoutSearch of another "
                          "graph; pass search=LayoutSearch(graph, outputs)")
  elif outputs is not None and [id(t) for t in _outputs(graph, outputs)] != [
      id(t) for t in search.outputs]:
    raise AutoLayoutError(
        "auto_layout was given outputs that differ from its LayoutSearch's "
        f"{[t.name for t in search.outputs]}; pass outputs=None, or "
        "search=LayoutSearch(graph, outputs)")
  elif max_axes_per_dim not in (None, search.max_axes_per_dim):
    raise InvalidArgumentError(
        f"max_axes_per_dim={max_axes_per_dim!r} differs from the given "
        f"search's {search.max_axes_per_dim}; pass it to "
        "LayoutSearch(graph, outputs, max_axes_per_dim=...) instead")
  return search.solve(mesh_shape, topology, memory_budget, objective,
                      time_limit_s, num_workers, seed, tie_break,
                      solver_params, forbid, progress, hint, overlap)


def _solve(search, mesh_shape, topology, memory_budget, objective,
           time_limit_s, num_workers, seed, tie_break, solver_params, forbid,
           progress, hint=None, overlap=True, exclude=()):
  """The body of :meth:`LayoutSearch.solve`."""
  check_import_order()
  (mesh_shape, topology, memory_budget, objective, time_limit_s, num_workers,
   seed, tie_break, forbid, solver_params, progress) = (
       arguments.check_search_args(
           search.graph, mesh_shape, topology, memory_budget, objective,
           time_limit_s, num_workers, seed, tie_break, forbid,
           solver_params, progress))
  if objective == "latency":
    # The latency of a one-token decoding graph (mesh_tf.models.decoding)
    # is its predicted step time: solve "time", report it as latency.
    result = _solve(search, mesh_shape, topology, memory_budget, "time",
                    time_limit_s, num_workers, seed, tie_break,
                    solver_params, forbid, progress, hint, overlap,
                    exclude)
    return dataclasses.replace(result, objective="latency")
  # The edge (check_search_args) resolved the names once; everything below
  # gets typed values.  The time limit bounds the whole query: building
  # the program, every phase and the infeasibility report.
  t0 = time.perf_counter()
  phases = _phases(objective, tie_break)
  problem = search.problem(mesh_shape, topology, memory_budget,
                           need_peak="memory" in phases, overlap=overlap,
                           deadline=t0 + time_limit_s)
  forbidden = formulation.add_forbidden(problem.form.model,
                                        problem.form.vars, forbid)
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
                      solver_params, on_solution, hint_x,
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
  result = LayoutResult(rules, problem.mesh_shape, report, objective, value,
                        pr.status, bound, gap, pr.solve_time_s,
                        problem.build_time_s, _model_size(problem),
                        memory_budget, problem.topology, graph=search.graph,
                        outputs=problem.outputs)
  if hint is not None:
    result = dataclasses.replace(result, hint_report=plan_hint.hint_report(
        hinted, skipped, result))
  return result
