"""The default question, answered by one function for the API and the CLI.

``mtf.auto_layout`` / :func:`autolayout.auto_layout` and a bare
``mtf-layout solve`` both call :func:`solve_default`, so they share every
default:

1. the layout of the step as built, on the given mesh or, without one, on
   the best of every 1- and 2-axis mesh shape of the topology's chips
   (axes named after their physical dims,
   :func:`autolayout.meshes.mesh_search.auto_mesh_and_layout`);
2. when that step fits no layout of the budget, and the graph is the
   training step of a zoo Transformer whose ``config`` is given, the
   training decisions (bf16 compute, ZeRO stage per variable group,
   recompute, microbatches; :mod:`autolayout.training.decisions`, and without a mesh
   :mod:`autolayout.meshes.training_meshes`) are searched instead, with the time
   left.

Why only then: the decisions that the search takes (ZeRO stage, recompute,
microbatches) exist to save memory.  ZeRO 1-2 swap the gradient all-reduce
for a reduce-scatter and an all-gather of the same bytes and add the
storage gathers; recompute adds forward FLOPs (more compute to hide
communication under, but it costs more than it hides); k microbatches
repeat every per-microbatch launch and gather.  So with memory to spare
they can only add time, and ``benchmarks/default_decisions.py`` measures
it: with no budget, the whole decision search at a fixed dtype returns
ZeRO 0, no recompute and k = 1, at exactly the decision-free step time
(transformer_tiny on ``x:2;y:4`` and ``x:8``, moe_tiny on ``x:2;y:4``,
float32 and bfloat16).  Precision is not such a decision: bf16 changes
the numbers, so it is the caller's choice (``--set
param_dtype=bfloat16``), and the fallback, which must fit, takes bf16.

Example:
  >>> answer = solve_default(model.graph, None, [model.loss],
  ...                        "tpu-v5e-2x4",
  ...                        config=model.config)         # doctest: +SKIP
  >>> answer.fell_back, str(answer.result.mesh_shape)     # doctest: +SKIP
  (False, 'x:2,y:4')
"""

import dataclasses
import math
import time
from typing import Any, NamedTuple, Optional

from autolayout import arguments
from autolayout.search import solve
from autolayout.spec import search_spec
from autolayout.training.families import family
from autolayout.arguments import DEFAULTS
from autolayout.errors import InfeasibleLayoutError
from autolayout.meshes.mesh_search import DEFAULT_MAX_AXES, auto_mesh_and_layout
from mesh_tf.core.errors import InvalidArgumentError

__all__ = ["DefaultAnswer", "auto_layout", "solve_default"]


class DefaultAnswer(NamedTuple):
  """What :func:`solve_default` found.

  Attributes:
    result: the LayoutResult; ``meshes_tried`` is set when the mesh was
      searched, ``decisions`` when the training decisions were.
    meshes: a DataFrame with a row per mesh shape tried (None with a given
      mesh).
    decisions_tried: the training search's ``tried`` rows (``()`` when it
      did not run).
    fell_back: the step as built fits no layout, so the training
      decisions were searched.
  """
  result: Any
  meshes: Optional[Any] = None
  decisions_tried: tuple = ()
  fell_back: bool = False


def _can_fall_back(graph, config, objective):
  return (config is not None and hasattr(config, "recompute")
          and objective == "time" and arguments.is_training_graph(graph))


def _tried(table):
  return tuple((row.mesh, row.status,
                None if row.step_time_s is None or math.isnan(
                    row.step_time_s) else float(row.step_time_s))
               for row in table.itertuples())


def solve_default(graph, mesh_shape=None, outputs=None,
                  topology=DEFAULTS.topology,
                  memory_budget=DEFAULTS.memory_budget,
                  objective=DEFAULTS.objective,
                  time_limit_s=solve.DEFAULT_TIME_LIMIT_S,
                  num_workers=solve.DEFAULT_NUM_WORKERS, *,
                  seed=solve.DEFAULT_SEED, config=None, num_devices=None,
                  max_axes=DEFAULT_MAX_AXES, search=None, hint=None,
                  overlap=True, fixed=None, param_dtype="bfloat16",
                  memory_reserve_fraction=None, progress=None,
                  mesh_progress=None, decision_progress=None, tie_break=(),
                  solver_params=None, forbid=(), max_axes_per_dim=None,
                  spec=None):
  """The default answer (see the module docstring).

  Args:
    graph, mesh_shape, outputs, topology, memory_budget, objective,
      time_limit_s, num_workers, seed, search, hint, overlap,
      tie_break, solver_params, forbid, max_axes_per_dim: as
      :func:`autolayout.search.solve.auto_layout` (``tie_break``,
      ``solver_params`` and ``forbid`` with a given mesh only);
      ``time_limit_s`` bounds everything, the fallback included.
    config: the zoo config ``graph`` was built from (``mesh_tf.models``,
      a Transformer-family config); None: no fallback.
    num_devices: chips of the mesh search (default: the topology's).
    max_axes: most mesh axes of the mesh search.
    fixed, param_dtype, memory_reserve_fraction: the fallback's, as
      :func:`autolayout.training.decisions.search_training`.
    progress: ``fn(best, bound, elapsed_s)`` of the solver, given mesh.
    decision_progress: ``fn(decisions, step_time_s or None)`` after each
      program of the training-decision search, given mesh (and
      ``fn(None, None)`` when it starts: the step as built fits no layout).
    mesh_progress: ``fn(mesh, index, count, best)`` before each mesh shape
      (without a mesh; the fallback calls it with its stage in the name).
    spec: the whole query as a :class:`autolayout.spec.SearchSpec`, built
      at the caller's edge (the CLI's); the loose query arguments are then
      not read.

  Returns:
    A :class:`DefaultAnswer`.

  Raises:
    InfeasibleLayoutError: if nothing fits, the fallback included.
    InvalidArgumentError: for a misused argument, e.g. ``tie_break``
      without a mesh.
    TimeLimitError: if the time ran out before any plan was found.
  """
  t0 = time.perf_counter()
  if spec is None:
    # The edge: every name, string and size is checked and resolved here,
    # once; below, only the typed spec travels.
    fixed = {name: family(name).check(value)
             for name, value in (fixed or {}).items()}
    spec = search_spec(
        graph, topology=topology, mesh_shape=mesh_shape,
        num_devices=num_devices, memory_budget=memory_budget,
        objective=objective, time_limit_s=time_limit_s,
        num_workers=num_workers, seed=seed, tie_break=tie_break,
        forbid=forbid, solver_params=solver_params, fixed=fixed,
        param_dtype=param_dtype, overlap=overlap, max_axes=max_axes,
        memory_reserve_fraction=memory_reserve_fraction)
  topology, opts = spec.topology, spec.solver
  try:
    if spec.mesh_shape is not None:
      if _can_fall_back(graph, config, spec.objective):
        if search is None:
          search = solve.LayoutSearch(graph, outputs, max_axes_per_dim=(
              1 if max_axes_per_dim is None else max_axes_per_dim))
        if not search.may_fit(spec.mesh_shape, topology,
                              spec.memory_budget):
          # No layout's memory fits: the fallback answers, and building
          # the program to find it infeasible, then its smallest peak
          # for an error nobody reads, took 0.4 s of the README plan.
          raise InfeasibleLayoutError("no layout fits the memory budget",
                                      memory_budget=spec.memory_budget)
      r = solve.auto_layout(graph, outputs=outputs, progress=progress,
                            search=search, hint=hint,
                            max_axes_per_dim=max_axes_per_dim, spec=spec)
      return DefaultAnswer(r)
    for name, value, default in (("tie_break", opts.tie_break, ()),
                                 ("solver_params", opts.solver_params, ()),
                                 ("forbid", opts.forbid, ()),
                                 ("progress", progress, None)):
      if value is not None and value != default:
        raise InvalidArgumentError(
            f"{name} applies to one given mesh, but mesh_shape is None "
            "(the mesh search); pass a mesh_shape such as 'data:8', or "
            f"drop {name} (auto_mesh_and_layout takes a per-mesh "
            "progress)")
    if search is None and max_axes_per_dim is not None:
      search = solve.LayoutSearch(graph, outputs,
                                  max_axes_per_dim=max_axes_per_dim)
    results, table = auto_mesh_and_layout(
        graph, spec.num_devices or topology.num_chips, outputs, topology,
        spec.memory_budget, spec.objective, spec.max_axes,
        opts.time_limit_s, num_workers=opts.num_workers, seed=opts.seed,
        search=search,
        hint=hint, overlap=spec.overlap, physical_names=True,
        progress=mesh_progress)
    result = dataclasses.replace(results[0], meshes_tried=_tried(table))
    if (table["status"] == "time-limit").any():
      # Some shapes were not reached in time: the best so far, not proven
      # best over every mesh.
      result = dataclasses.replace(result, status="feasible")
    return DefaultAnswer(result, table)
  except InfeasibleLayoutError:
    if not _can_fall_back(graph, config, spec.objective):
      raise
  left = max(1.0, opts.time_limit_s - (time.perf_counter() - t0))
  if spec.mesh_shape is not None:
    from autolayout.training import decisions
    if decision_progress is not None:
      decision_progress(None, None)
    plan = decisions.search_training(
        config, spec.mesh_shape, topology, spec.memory_budget,
        fixed=spec.fixed_decisions, param_dtype=spec.param_dtype,
        time_limit_s=left,
        memory_reserve_fraction=spec.memory_reserve_fraction,
        overlap=spec.overlap, progress=decision_progress)
    return DefaultAnswer(plan.result, None, plan.tried, True)
  from autolayout.meshes.training_meshes import search_training_meshes
  plan, table = search_training_meshes(
      config, topology, spec.memory_budget, spec.num_devices, spec.max_axes,
      fixed=spec.fixed_decisions, param_dtype=spec.param_dtype,
      time_limit_s=left, overlap=spec.overlap,
      memory_reserve_fraction=spec.memory_reserve_fraction,
      progress=None if mesh_progress is None else (
          lambda mesh, stage, i, count: mesh_progress(
              f"{mesh} ({stage})", i, count, None)))
  return DefaultAnswer(plan.result, table, plan.tried, True)


def auto_layout(graph, mesh_shape=None, outputs=None,
                topology=DEFAULTS.topology,
                memory_budget=DEFAULTS.memory_budget,
                objective=DEFAULTS.objective,
                time_limit_s=solve.DEFAULT_TIME_LIMIT_S,
                num_workers=solve.DEFAULT_NUM_WORKERS, *,
                seed=solve.DEFAULT_SEED, tie_break=(), solver_params=None,
                forbid=(), progress=None, search=None, hint=None,
                overlap=True, max_axes_per_dim=None, config=None, spec=None):
  """:func:`autolayout.search.solve.auto_layout`, with ``mtf-layout solve``'s
  defaults (:func:`solve_default`, the same function the CLI calls).

  ``mesh_shape=None`` (the default) searches every 1- and 2-axis mesh
  shape of the topology's chips, names each axis after the physical dims
  it lies on (:func:`autolayout.meshes.mesh_search.physical_axis_names`), and
  returns the best result, whose ``meshes_tried`` lists every shape tried,
  best first, as ``(mesh, status, step_time_s or None)``.
  ``tie_break``, ``solver_params``, ``forbid`` and ``progress`` apply to a
  given mesh only: with ``mesh_shape=None`` they are an
  InvalidArgumentError.

  ``spec``: the whole query as a :class:`autolayout.spec.SearchSpec`
  (:func:`autolayout.search_spec`), built once at the caller's edge; the
  loose query arguments are then not read.

  ``config``: the zoo config ``graph`` was built from (e.g.
  ``models.build_model(name).config``).  With it, a training step that
  fits no layout of the budget is answered with training decisions
  (bf16, ZeRO stage, recompute, microbatches), as the CLI does; the
  result's ``decisions`` says which, and its ``graph`` is the step built
  for them (:func:`autolayout.training.decisions.build_training`).

  Example:
    >>> r = auto_layout(graph, topology="h100x8-nodes4")   # doctest: +SKIP
    >>> str(r.mesh_shape), str(r.rules)                    # doctest: +SKIP
    ('chips:32', 'batch:chips')
  """
  return solve_default(
      graph, mesh_shape, outputs, topology, memory_budget, objective,
      time_limit_s, num_workers, seed=seed, config=config, search=search,
      hint=hint, overlap=overlap, progress=progress, tie_break=tie_break,
      solver_params=solver_params, forbid=forbid,
      max_axes_per_dim=max_axes_per_dim, spec=spec).result
