"""The training plan of a zoo model when no mesh is given: mesh shapes and
training decisions searched together.

Every 1- and 2-axis mesh shape of the topology's chips that embeds (axes
named after their physical dims, as :func:`autolayout.auto_layout` does
without a mesh) is first **screened** with the most memory-saving stage
and recompute count (ZeRO 3, every block recomputed; the microbatch walk
and the layout rules are still searched, the walk stopping at the first k
that fits).  The ``top`` fastest shapes then
get the whole decision program (stage and recompute as CP-SAT decision
families, :mod:`autolayout.training.decision_program`), and the fastest plan of all
wins.  Screening costs one graph per microbatch count on every shape; the
decision program costs one graph per (stage, recompute) pair, so it runs
only where it can change the answer most.  The screen is a heuristic: a
shape that is slow when everything is sharded and recomputed could in
principle be the fastest with other decisions; ``top=None`` gives every
shape the whole program.

Example:
  >>> from mesh_tf import models
  >>> plan, table = search_training_meshes(
  ...     models.get_config("gpt3_175b"), "a100x8-nodes128")  # doctest: +SKIP
"""

import dataclasses
import time

import pandas as pd

import costmodels
from autolayout import arguments
from autolayout.training import decisions
from autolayout.errors import InfeasibleLayoutError, TimeLimitError
from autolayout.meshes.mesh_search import (DEFAULT_MAX_AXES, mesh_factorizations,
                                           physical_axis_names)
from costmodels import arguments as cm_args

__all__ = ["search_training_meshes"]


def _meshes(topology, num_devices, max_axes):
  out, rows = [], []
  for mesh in mesh_factorizations(num_devices, max_axes):
    try:
      costmodels.map_mesh(topology, mesh)
    except costmodels.TopologyError as e:
      rows.append({"mesh": mesh, "status": "no-fit", "step_time_s": None,
                   "decisions": None, "searched": "",
                   "note": str(e).split(";")[0]})
      continue
    out.append(physical_axis_names(topology, mesh))
  return out, rows




def search_training_meshes(config, topology, memory_budget="hbm",
                           num_devices=None, max_axes=DEFAULT_MAX_AXES,
                           *, top=1, fixed=None, param_dtype="bfloat16",
                           time_limit_s=60.0, forbid=(), overlap=True,
                           recompute_count=5, memory_reserve_fraction=None,
                           progress=None):
  """The fastest training plan of zoo ``config`` over mesh shapes and
  training decisions (see the module docstring).

  Args:
    config: a Transformer-family zoo config.
    topology: a Topology or its name.
    memory_budget: bytes per device, a size string, ``"hbm"`` (the chip's
      usable memory) or None.
    num_devices: chips to use (default: all of the topology's).
    max_axes: most mesh axes.
    top: how many screened shapes get the whole decision program (None:
      every shape).
    fixed, param_dtype, forbid, overlap, recompute_count,
      memory_reserve_fraction: as :func:`autolayout.training.decisions.search_training`.
    time_limit_s: bounds the whole search, every shape together; shapes
      not reached are listed with status "time-limit", and the best plan so
      far comes back with status "feasible" (TimeLimitError if none).
    progress: optional ``fn(mesh, stage, index, count)`` before each shape
      is searched, ``stage`` "screen" or "decisions".

  Returns:
    ``(TrainingPlan, table)``: the best plan (its result's
    ``meshes_tried`` lists every shape, best first) and a DataFrame with a
    row per shape (``searched``: "screen" or "decisions").

  Raises:
    InfeasibleLayoutError: if no shape has a plan within the budget (the
      error of the shape with the smallest peak).
  """
  topology = arguments.resolve_topology(topology)
  if num_devices is None:
    num_devices = topology.num_chips
  num_devices = arguments.check_count(num_devices, "num_devices", 1,
                                      arguments.MAX_DEVICES,
                                      topology.num_chips)
  memory_budget = cm_args.resolve_memory_budget(memory_budget, topology)
  fixed = dict(fixed or {})
  meshes, rows = _meshes(topology, num_devices, max_axes)
  # Shapes whose largest axis cannot split the batch are screened last:
  # they need many microbatches (a graph each) or model parallelism over a
  # large axis, are rarely the fastest, and would eat a bounded search's
  # time before the likely winners were screened.
  meshes.sort(key=lambda m: config.batch % max(d.size for d in m) != 0)
  candidates = decisions.Candidates(config, memory_reserve_fraction)
  lean = dict(fixed)
  lean.setdefault("zero_stage", 3)
  lean.setdefault("recompute", config.layers)
  common = dict(param_dtype=param_dtype, time_limit_s=time_limit_s,
                forbid=forbid, overlap=overlap,
                memory_reserve_fraction=memory_reserve_fraction,
                candidates=candidates)
  # The time limit bounds the whole search: every shape's screen and
  # decision program.  Shapes not reached in time are listed as such, and
  # the best plan so far is the answer (status "feasible").
  deadline = time.perf_counter() + time_limit_s
  common["deadline"] = deadline
  screened, errors, cut = {}, [], False
  for i, mesh in enumerate(meshes):
    if time.perf_counter() >= deadline:
      cut = True
      rows.append({"mesh": mesh.text, "status": "time-limit",
                   "step_time_s": None, "decisions": None, "searched": "",
                   "note": f"not screened within {time_limit_s:g} s"})
      continue
    if progress:
      progress(mesh.text, "screen", i, len(meshes))
    try:
      # The screen ranks shapes: the first k with a plan is enough (the
      # decision program walks k again on the shapes it searches).
      screened[mesh] = decisions.search_training(
          config, mesh, topology, memory_budget, fixed=lean,
          first_fit=True, **common)
    except TimeLimitError as e:
      cut = True
      errors.append(e)
      rows.append({"mesh": mesh.text, "status": "time-limit",
                   "step_time_s": None, "decisions": None,
                   "searched": "screen",
                   "note": f"not screened within {time_limit_s:g} s"})
    except InfeasibleLayoutError as e:
      if e.floor_bytes is not None:
        raise   # every shape has these devices: none can hold the variables
      errors.append(e)
      rows.append({"mesh": mesh.text, "status": "infeasible",
                   "step_time_s": None, "decisions": None,
                   "searched": "screen", "note": "over budget with ZeRO 3 and full recompute"})
  if not screened:
    peaks = [e for e in errors if getattr(e, "min_peak_bytes", None)]
    if peaks:
      raise min(peaks, key=lambda e: e.min_peak_bytes)
    if cut:
      raise TimeLimitError(
          f"the time limit of {time_limit_s:g} s ran out before any mesh "
          "shape's training plan was found; raise the time limit")
    raise errors[0] if errors else InfeasibleLayoutError(
        f"no mesh shape of {num_devices} devices embeds in {topology.name}")
  order = sorted(screened, key=lambda m: (
      screened[m].result.step_time_s, m.text))
  full = order if top is None else order[:top]
  plans = dict(screened)
  searched = {}
  for i, mesh in enumerate(full):
    if time.perf_counter() >= deadline:
      cut = True
      break
    if progress:
      progress(mesh.text, "decisions", i, len(full))
    t1 = time.perf_counter()
    try:
      # Where ZeRO 3 with every block recomputed needs k microbatches, no
      # decisions fit in fewer: the walk starts there.
      plan = decisions.search_training(
          config, mesh, topology, memory_budget, fixed=fixed,
          recompute_count=recompute_count,
          min_microbatches=min(d.microbatches for d, t, _ in
                               screened[mesh].tried if t is not None),
          start=screened[mesh].decisions, **common)
    except TimeLimitError:
      cut = True
      continue   # the screen found a plan; keep it
    except InfeasibleLayoutError:
      continue   # the screen found a plan; keep it
    searched[mesh] = time.perf_counter() - t1
    if plan.result.step_time_s <= plans[mesh].result.step_time_s:
      plans[mesh] = plan
  for mesh, plan in plans.items():
    rows.append({"mesh": mesh.text, "status": plan.result.status,
                 "step_time_s": plan.result.step_time_s,
                 "decisions": str(plan.decisions.as_dict()),
                 "searched": "decisions" if mesh in searched else "screen",
                 "note": ""})
  table = pd.DataFrame(rows).sort_values(
      ["step_time_s", "mesh"], na_position="last",
      kind="stable").reset_index(drop=True)
  best = min(plans, key=lambda m: (plans[m].result.step_time_s, m.text))
  tried = tuple((r.mesh, r.status, None if pd.isna(r.step_time_s)
                 else float(r.step_time_s)) for r in table.itertuples())
  plan = plans[best]
  result = dataclasses.replace(plan.result, meshes_tried=tried)
  if cut:
    result = dataclasses.replace(result, status="feasible")
  return plan._replace(result=result), table
