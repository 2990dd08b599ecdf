"""One layout query as one typed value, built once at the edge.

The CLI, :func:`mtf.auto_layout` / :func:`autolayout.auto_layout` and the
notebooks each turn what the user wrote (topology names, mesh strings,
``"16GB"``, ``--zero-stage ffn=3``) into one :class:`SearchSpec` with
:func:`search_spec`; below that edge every function takes the spec, or
typed parts of it, and nothing resolves a topology or parses a mesh or a
decision again.

Example:
  >>> spec = search_spec(topology="tpu-v5e-2x4", mesh_shape="data:2;model:4",
  ...                    memory_budget="8GB", time_limit_s=10)
  >>> spec.topology.num_chips, spec.mesh_shape.text, spec.memory_budget
  (8, 'data:2;model:4', 8000000000)
  >>> spec.solver.time_limit_s, spec.solver.num_workers
  (10.0, 2)
"""

import dataclasses
from typing import Any, Optional, Tuple

from autolayout import arguments
from autolayout.arguments import DEFAULTS
from costmodels import arguments as cm_args
from mesh_tf.core.errors import InvalidArgumentError
from mesh_tf.core.mesh_shape import MeshShape

__all__ = ["SearchSpec", "SolverOptions", "check_progress",
           "check_search_args", "search_spec"]


@dataclasses.dataclass(frozen=True)
class SolverOptions:
  """How CP-SAT is run: the time limit for the whole query, worker
  threads, seed, extra tie-break objectives, forbidden ``(dim, axis)``
  rules and further CP-SAT parameters (``(name, value)`` pairs)."""
  time_limit_s: float = DEFAULTS.time_limit_s
  num_workers: int = DEFAULTS.num_workers
  seed: int = DEFAULTS.seed
  tie_break: Tuple[str, ...] = ()
  forbid: Tuple[Tuple[str, Any], ...] = ()
  solver_params: Tuple[Tuple[str, Any], ...] = ()

  @property
  def params(self):
    """The CP-SAT parameters as a new dict."""
    return dict(self.solver_params)


@dataclasses.dataclass(frozen=True)
class SearchSpec:
  """One layout query, typed.

  Attributes:
    topology: the resolved :class:`costmodels.Topology`.
    mesh_shape: the :class:`~mesh_tf.core.mesh_shape.MeshShape`, or None
      to search the mesh shapes of ``num_devices`` chips.
    num_devices: the chips of the mesh search (None with a mesh).
    memory_budget: bytes per device, or None for no limit.
    objective: ``"time"``, ``"latency"``, ``"comm"`` or ``"memory"``.
    training: the question: True, the training step; False, the forward
      pass; None, the step as the graph was built.
    fixed: ``((family, typed value), ...)`` of the training decisions the
      caller fixed (:mod:`autolayout.training.families`); the others are
      searched where the training decisions are.
    param_dtype: the compute dtype of the training search, unless fixed.
    solver: the :class:`SolverOptions`.
    overlap: hide gradient syncs under compute, as
      :func:`costmodels.evaluate` does.
    max_axes: the most mesh axes of the mesh search.
    memory_reserve_fraction: the HBM reserve the reports show (None: the
      default).
  """
  topology: Any
  mesh_shape: Optional[MeshShape] = None
  num_devices: Optional[int] = None
  memory_budget: Optional[int] = None
  objective: str = DEFAULTS.objective
  training: Optional[bool] = None
  fixed: Tuple[Tuple[str, Any], ...] = ()
  param_dtype: str = "bfloat16"
  solver: SolverOptions = SolverOptions()
  overlap: bool = True
  max_axes: int = DEFAULTS.max_axes
  memory_reserve_fraction: Optional[float] = None

  @property
  def fixed_decisions(self):
    """The fixed training decisions as a new ``{family: value}`` dict."""
    return dict(self.fixed)

  def on_mesh(self, mesh_shape):
    """This query on one given ``mesh_shape`` (a MeshShape)."""
    return dataclasses.replace(self, mesh_shape=mesh_shape, num_devices=None)


def search_spec(graph=None, *, topology=DEFAULTS.topology, mesh_shape=None,
                num_devices=None, memory_budget=DEFAULTS.memory_budget,
                objective=DEFAULTS.objective,
                time_limit_s=DEFAULTS.time_limit_s,
                num_workers=DEFAULTS.num_workers, seed=DEFAULTS.seed,
                tie_break=(), forbid=(), solver_params=None, training=None,
                fixed=None, param_dtype="bfloat16", overlap=True,
                max_axes=DEFAULTS.max_axes, memory_reserve_fraction=None,
                default_mesh=False):
  """Checks, resolves and parses the arguments of one layout query, once.

  Args:
    graph: the graph the query is about (the objective is checked
      against it: ``"latency"`` needs a decoding step); None: not checked.
    topology: a :class:`costmodels.Topology` or its name (resolved here).
    mesh_shape: a mesh string, Shape or MeshShape; None: the mesh search
      (or, with ``default_mesh``, :func:`autolayout.arguments.default_mesh`
      of the topology).
    memory_budget: bytes or a size string (``"16GB"``, ``"90%"``,
      ``"hbm"``, ``"none"``).
    fixed: ``{family: typed value}`` of training decisions, each already
      checked by its family (:mod:`autolayout.training.families`).
    Others: as :class:`SearchSpec` and :class:`SolverOptions`.

  Returns:
    A :class:`SearchSpec`.

  Raises:
    InvalidArgumentError: naming the first bad argument and a valid value.
    costmodels.TopologyError: for an unknown topology.
  """
  topo = arguments.resolve_topology(topology)
  if mesh_shape is None and default_mesh:
    mesh_shape = arguments.default_mesh(topo)
  mesh = None if mesh_shape is None else cm_args.check_mesh_shape(mesh_shape)
  budget = cm_args.resolve_memory_budget(memory_budget, topo)
  objective = arguments.check_objective(objective, graph)
  decided = tuple(sorted((fixed or {}).items()))
  solver = SolverOptions(
      arguments.check_time_limit(time_limit_s),
      arguments.check_count(num_workers, "num_workers", 1,
                            arguments.MAX_NUM_WORKERS, DEFAULTS.num_workers),
      arguments.check_count(seed, "seed", 0, arguments.MAX_SEED,
                            DEFAULTS.seed),
      arguments.check_tie_break(tie_break), arguments.check_forbid(forbid),
      tuple(arguments.check_solver_params(solver_params).items()))
  return SearchSpec(
      topo, mesh, num_devices, budget, objective, training, decided, param_dtype, solver, bool(overlap), max_axes,
      memory_reserve_fraction)


def check_search_args(graph, mesh_shape, topology, memory_budget, objective,
                      time_limit_s, num_workers, seed, *, tie_break=(),
                      forbid=(), solver_params=None, progress=None):
  """The :class:`SearchSpec` of one query of
  :func:`autolayout.auto_layout` on a given mesh (the graph and outputs
  are checked by its :class:`~autolayout.LayoutSearch`), and its checked
  ``progress``.

  ``mesh_shape`` None means :func:`default_mesh` of the topology;
  ``memory_budget`` takes bytes or a size string (``"16GB"``, ``"90%"``,
  ``"hbm"``, ``"none"``).

  Returns:
    ``(SearchSpec, progress)``.

  Raises:
    InvalidArgumentError: naming the first bad argument and a valid value.
    costmodels.TopologyError: for an unknown topology.
  """
  spec = search_spec(graph, topology=topology, mesh_shape=mesh_shape,
                     memory_budget=memory_budget, objective=objective,
                     time_limit_s=time_limit_s, num_workers=num_workers,
                     seed=seed, tie_break=tie_break, forbid=forbid,
                     solver_params=solver_params, default_mesh=True)
  return spec, check_progress(progress)


def check_progress(progress):
  """``progress``, a callable or None (it is no part of the spec: a
  display, not the question).

  Raises:
    InvalidArgumentError: for anything else.
  """
  if progress is not None and not callable(progress):
    raise InvalidArgumentError(
        f"progress={cm_args.echo(progress, 80)} is not callable; pass a "
        "function progress(best, bound, elapsed_s) or None")
  return progress
