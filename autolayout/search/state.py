"""The layout search's state: :class:`LayoutSearch` keeps one graph's
cost tables, dim-axis space and memory steps per mesh for every query, and
:meth:`LayoutSearch.problem` assembles a query's CP-SAT program
(:class:`Problem`) from them.  Solving it is :mod:`~autolayout.search.phases`;
the query as a whole is :mod:`~autolayout.search.solve`.
"""

import dataclasses
import time
from typing import NamedTuple, Optional

# OR-Tools must be imported before TensorFlow in any process (protobuf
# clash); mesh_tf loads TensorFlow lazily, after this.
from ortools.sat.python import cp_model

import costmodels
from costmodels import arguments as cm_args
from costmodels import memory as cm_memory
from mesh_tf.core import dims as dims_lib
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from autolayout import arguments
from autolayout import spec as spec_lib
from autolayout.arguments import DEFAULTS
from autolayout.errors import AutoLayoutError, SolverError
from autolayout.search import (assignments, formulation, memory_steps,
                               overlap_program, overlap_terms, phases,
                               tables)
from autolayout.search.pricing import Pricer

__all__ = ["LayoutSearch", "Problem", "build_problem", "min_peak_layout"]


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
      priced once per mesh for all of them, and its key, scope and table
      built once per mesh and dim-axis space; None: this search's own.
    max_axes_per_dim: the most mesh axes one dim may split over (1: one
      axis per dim; 2 on mesh ``x:16;y:16`` also lets ``batch`` take
      ``x+y``, data parallelism over the whole slice).  More options make
      the tables and the program larger (see :mod:`autolayout.search.assignments`).
    narrow: see :class:`tables.GraphTables`; None: unless ``outcomes`` is
      shared (the training candidates' joint program picks among equal
      decisions by search order, which the tables' shape changes).
    known_copies: a dict the caller owns, of the kernel copies each
      product equation makes, shared like ``outcomes``
      (:func:`costmodels.kernel_copies.copies_of`); None: worked out anew.

  Example:
    >>> search = LayoutSearch(graph, [loss])             # doctest: +SKIP
    >>> fast = search.solve("data:2;model:4", "dgx-h100")  # doctest: +SKIP
    >>> lean = search.solve("data:2;model:4", "dgx-h100",
    ...                     memory_budget=fast.peak_memory_bytes - 1)
    ...                                                  # doctest: +SKIP
  """

  def __init__(self, graph, outputs=None, microbatches=None,
               memory_reserve_fraction=None, max_axes_per_dim=1,
               outcomes=None, narrow=None, known_copies=None):
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
    # The caller's {equation: kernel copies} shared with other graphs'
    # searches (costmodels.kernel_copies.copies_of), or None.
    self._known_copies = known_copies

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
            deadline, "the memory schedule"),
        known_copies=self._known_copies))

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
    space = self._space(mesh_shape, topo)
    shared = structure = None
    if self._outcomes is not None:
      shared = self._outcomes.setdefault((mesh_shape, topo), {})
      # The ops' keys, scopes and tables, shared where the dim-axis space
      # (what local assignments read) is the same.
      structure = self._outcomes.setdefault(
          ("structure", mesh_shape, topo,
           tuple(sorted(space.options.items())), space.conflicts), {})
    gt = self._part("tables", mesh_shape, topo, lambda: tables.GraphTables(
        graph, mesh_shape, outputs, Pricer(topo, mesh_shape), space,
        self.microbatches, deadline, shared, signatures=self._signatures,
        narrow=self._narrow, structure=structure))
    # Memory constraints only when a budget or the peak is asked for.
    memory_bound = memory_budget is not None or need_peak
    ms = (self._memory_steps(mesh_shape, topo, space, deadline)
          if memory_bound else None)
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

  def _space(self, mesh_shape, topo):
    """The dim-axis space on one mesh."""
    return self._part("space", mesh_shape, topo, lambda: assignments.dim_space(
        self.graph, mesh_shape, self.max_axes_per_dim))

  def _memory_steps(self, mesh_shape, topo, space, deadline):
    """The memory steps of constraint 5 on one mesh."""
    arguments.deadline_left(deadline, "the memory steps")
    live = self.liveness(deadline)
    arguments.deadline_left(deadline, "the memory steps")
    # The schedule's steps do not depend on the mesh: compressed once.
    steps = self._part("steps", None, None, lambda: memory_steps.compress(
        self.graph, list(self.outputs), liveness=live))
    return self._part("memory", mesh_shape, topo,
                      lambda: memory_steps.prune_by_layouts(steps, space))

  def may_fit(self, mesh_shape, topology, memory_budget, deadline=None):
    """False when no valid global layout keeps the memory of every step
    within ``memory_budget`` (the steps' ``least_peak``,
    :func:`memory_steps.prune_by_layouts`): the program :meth:`problem`
    builds for that budget is then infeasible, which this finds without
    the cost tables, in milliseconds where the program takes 0.1-1 s
    (the space, schedule and steps it builds are the program's own, kept
    for it).  True when some layout fits the memory alone, when there is
    no budget, or when the mesh has too many layouts to scan; only the
    program decides then.

    Example:
      >>> search.may_fit("data:2;model:4", "dgx-h100", 20000)
      ...                                                # doctest: +SKIP
      False
    """
    if memory_budget is None:
      return True
    mesh_shape = convert_to_mesh_shape(mesh_shape)
    topo = costmodels.get_topology(topology)
    space = self._space(mesh_shape, topo)
    ms = self._memory_steps(mesh_shape, topo, space, deadline)
    return ms.least_peak is None or ms.least_peak <= memory_budget

  def solve(self, mesh_shape=None, topology=DEFAULTS.topology,
            memory_budget=DEFAULTS.memory_budget,
            objective=DEFAULTS.objective, time_limit_s=DEFAULTS.time_limit_s,
            num_workers=DEFAULTS.num_workers, *, seed=DEFAULTS.seed,
            tie_break=(), solver_params=None, forbid=(), progress=None,
            hint=None, overlap=True, exclude=(), spec=None):
    """The optimal layout on ``mesh_shape``; the arguments and the result
    are :func:`autolayout.search.solve.auto_layout`'s.  ``exclude``: whole
    layouts (LayoutRules) the answer must differ from.  ``spec``: the
    query as a :class:`autolayout.spec.SearchSpec` with its mesh, built
    at the caller's edge (the loose arguments are then not read)."""
    from autolayout.search import query  # pylint: disable=g-import-not-at-top
    if spec is None:
      spec, progress = spec_lib.check_search_args(
          self.graph, mesh_shape, topology, memory_budget, objective,
          time_limit_s, num_workers, seed, tie_break=tie_break,
          forbid=forbid, solver_params=solver_params, progress=progress)
      spec = dataclasses.replace(spec, overlap=bool(overlap))
    else:
      spec_lib.check_progress(progress)
    return query.solve_spec(self, spec, progress=progress, hint=hint,
                            exclude=exclude)

  def min_peak(self, mesh_shape, topology,
               time_limit_s=DEFAULTS.time_limit_s,
               num_workers=DEFAULTS.num_workers, seed=DEFAULTS.seed):
    """``(peak bytes, rules, problem, status)`` of the layout with the
    smallest peak memory per device (``status`` "feasible": the smallest
    found within ``time_limit_s``, not proven).  ``time_limit_s`` bounds
    building and solving together."""
    t0 = time.perf_counter()
    problem = self.problem(mesh_shape, topology, need_peak=True,
                           deadline=t0 + time_limit_s)
    left = arguments.time_left(t0, time_limit_s, "the smallest peak")
    pr = phases.solve_phases(problem.form, ["memory"], left, num_workers,
                             seed)
    return int(round(pr.value)), phases.rules_of(pr.x), problem, pr.status


def build_problem(graph, mesh_shape, outputs, topology, memory_budget=None,
                  need_peak=False, overlap=True, max_axes_per_dim=1):
  """:meth:`LayoutSearch.problem` of a new search of ``graph``."""
  search = LayoutSearch(graph, outputs, max_axes_per_dim=max_axes_per_dim)
  return search.problem(mesh_shape, topology, memory_budget, need_peak,
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


def min_peak_layout(graph, mesh_shape, outputs, topology,
                    time_limit_s=DEFAULTS.time_limit_s,
                    num_workers=DEFAULTS.num_workers, seed=DEFAULTS.seed):
  """:meth:`LayoutSearch.min_peak` of a new search of ``graph``."""
  return LayoutSearch(graph, outputs).min_peak(mesh_shape, topology,
                                               time_limit_s, num_workers,
                                               seed)


