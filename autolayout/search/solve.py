"""The layout search's entry point, :func:`auto_layout`: the optimal layout
of a graph on one mesh.  It checks the query once into a
:class:`autolayout.spec.SearchSpec` (:meth:`LayoutSearch.solve`), and
:func:`~autolayout.search.query.solve_spec` answers it: the program from
the search state (:mod:`~autolayout.search.state`), its phases
(:mod:`~autolayout.search.phases`), the answer re-checked by the cost
model (:func:`validate`, without the solver) into a named
:class:`LayoutResult` (:mod:`~autolayout.search.result`).
"""

from mesh_tf.core.errors import InvalidArgumentError
from autolayout import arguments
from autolayout.arguments import DEFAULTS
from autolayout.errors import AutoLayoutError
from autolayout.search.phases import PhaseResult, rules_of, solve_phases
from autolayout.search.query import model_size, solve_spec
from autolayout.search.result import LayoutResult, ModelSize
from autolayout.search.state import (LayoutSearch, Problem, _outputs,
                                     build_problem, min_peak_layout)
from autolayout.search.validate import table_values, validate

__all__ = ["DEFAULT_NUM_WORKERS", "DEFAULT_SEED", "DEFAULT_TIME_LIMIT_S",
           "LayoutResult", "LayoutSearch", "ModelSize", "OBJECTIVES",
           "PhaseResult", "Problem", "auto_layout", "build_problem", "model_size",
           "min_peak_layout", "rules_of", "solve_phases", "solve_spec",
           "table_values", "validate"]

OBJECTIVES = arguments.OBJECTIVES
DEFAULT_TIME_LIMIT_S = DEFAULTS.time_limit_s
DEFAULT_NUM_WORKERS = DEFAULTS.num_workers
DEFAULT_SEED = DEFAULTS.seed

def auto_layout(graph, mesh_shape=None, outputs=None,
                topology=DEFAULTS.topology,
                memory_budget=DEFAULTS.memory_budget,
                objective=DEFAULTS.objective,
                time_limit_s=DEFAULT_TIME_LIMIT_S, *,
                num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED,
                tie_break=(), solver_params=None, forbid=(), progress=None,
                search=None, hint=None, overlap=True, max_axes_per_dim=None,
                spec=None):
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
    spec: the query as a :class:`autolayout.spec.SearchSpec` with a mesh,
      built at the caller's edge; the loose query arguments are then not
      read.

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
                      time_limit_s, num_workers, seed=seed,
                      tie_break=tie_break, solver_params=solver_params,
                      forbid=forbid, progress=progress, hint=hint,
                      overlap=overlap, spec=spec)


