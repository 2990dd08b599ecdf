"""Search over mesh shapes: every factorisation that embeds in a topology.

``auto_mesh_and_layout(graph, 64, ...)`` tries 64, 2x32, 4x16, 8x8, 16x4,
2x4x8, ... (any integer factors, ordered, not only powers of two), keeps
those :func:`costmodels.map_mesh` can lay onto the topology, solves each
exactly and ranks the results by predicted step time.
"""

import time

import pandas as pd

import costmodels
from autolayout import arguments
from autolayout.arguments import DEFAULTS
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from autolayout.errors import InfeasibleLayoutError, TimeLimitError
from costmodels import arguments as cm_args

from autolayout.search.solve import (DEFAULT_NUM_WORKERS, DEFAULT_SEED,
                                     DEFAULT_TIME_LIMIT_S, LayoutSearch)

AXIS_NAMES = ("x", "y", "z", "w")
#: Mesh axes tried when ``auto_layout`` (or ``mtf-layout solve``) is given no
#: mesh: every 1- and 2-axis shape of the topology's chips.
DEFAULT_MAX_AXES = 2


def _factorizations(n, max_axes, min_factor=2):
  if n == 1:
    yield ()
    return
  if max_axes == 0:
    return
  for f in range(min_factor, n + 1):
    if n % f == 0:
      for rest in _factorizations(n // f, max_axes - 1, 2):
        yield (f,) + rest


def mesh_factorizations(num_devices, max_axes=3, axis_names=AXIS_NAMES):
  """Every ordered factorisation of ``num_devices`` into 1..``max_axes``
  factors > 1, as mesh strings such as ``"x:4;y:16"``.

  Example:
    >>> mesh_factorizations(8, 2)
    ['x:8', 'x:2;y:4', 'x:4;y:2']
  """
  out = []
  for fs in _factorizations(int(num_devices), max_axes):
    out.append(";".join(f"{a}:{f}" for a, f in zip(axis_names, fs)))
  if num_devices == 1:
    out = [f"{axis_names[0]}:1"]
  return sorted(out, key=lambda s: (s.count(":"), s))


def physical_axis_names(topology, mesh_shape):
  """``mesh_shape`` with each axis renamed after what it lies on (row-major,
  as :func:`costmodels.map_mesh` lays it), so that a name says what the
  axis is: an axis over every chip of the topology is ``chips``; one on
  torus dims is named after its link and those dims (``ici_x``, ``ici_y``,
  ``ici_xy`` for part of x and all of y); one on named physical dims keeps
  their names (``node``, ``gpu``, ``node_gpu``).  On ``tpu-v5e-16x16``,
  ``x:16;y:16`` becomes ``ici_x:16;ici_y:16`` and ``x:256`` ``chips:256``;
  on ``h100x8-nodes4``, ``x:4;y:8`` becomes ``node:4;gpu:8``.  Names
  repeated by axes that share one physical dim get ``_2``, ``_3``...  So a
  rule such as ``batch:node`` says where the data travels, and ``batch``
  never lands on an axis named ``model``.

  Raises:
    costmodels.TopologyError: if the mesh does not embed in ``topology``.

  Example:
    >>> str(physical_axis_names("h100x8-nodes4", "x:4;y:8"))
    'node:4,gpu:8'
    >>> str(physical_axis_names("tpu-v5e-16x16", "x:2;y:128"))
    'ici_x:2,ici_xy:128'
  """
  topology = costmodels.get_topology(topology)
  mesh_shape = convert_to_mesh_shape(mesh_shape)
  mapping = costmodels.map_mesh(topology, mesh_shape)
  names, seen = [], {}
  for a in mapping.axes:
    phys = []
    for seg in sorted(a.segments, key=lambda g: g.phys_index):
      if seg.phys_dim not in phys:
        phys.append(seg.phys_dim)
    if a.size == topology.num_chips and a.size > 1:
      name = "chips"
    elif phys and all(len(n) == 1 for n in phys):
      # torus dims (x, y, z): the letters alone read as internal codes
      name = f"{a.link_kind.split('+')[0]}_{''.join(phys)}"
    else:
      name = "_".join(phys) or "one"
    seen[name] = seen.get(name, 0) + 1
    if seen[name] > 1:
      name = f"{name}_{seen[name]}"
    names.append(name)
  return convert_to_mesh_shape(
      ";".join(f"{n}:{d.size}" for n, d in zip(names, mesh_shape.dims)))


def _rank(r):
  return (r.step_time_s, r.peak_memory_bytes, str(r.mesh_shape))


def auto_mesh_and_layout(graph, num_devices=None, outputs=None,
                         topology=DEFAULTS.topology,
                         memory_budget=DEFAULTS.memory_budget,
                         objective=DEFAULTS.objective,
                         max_axes=DEFAULTS.max_axes,
                         time_limit_s=DEFAULT_TIME_LIMIT_S,
                         *, num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED,
                         search=None, hint=None, overlap=True,
                         physical_names=False, progress=None):
  """Solves every mesh shape of ``num_devices`` that fits ``topology``.

  The defaults are ``mtf-layout mesh``'s: ``num_devices`` the topology's
  chips, at most ``max_axes=2`` mesh axes, topology ``tpu-v5e-16x16`` and
  the chip's HBM as the budget (``memory_budget`` as in
  :func:`autolayout.auto_layout`).
  ``search``: a :class:`LayoutSearch` of ``graph`` to reuse (and to keep
  each mesh's tables for later queries); None: a new one.  ``hint``: a
  previous plan (or its file) that seeds every mesh's solve, matched by
  dim and axis name (see :func:`autolayout.auto_layout`).  ``overlap``: as
  for :func:`auto_layout`.  ``physical_names``: name each tried mesh's axes
  after the physical dims they lie on (:func:`physical_axis_names`) instead
  of ``x, y, z``.

  ``time_limit_s`` bounds the whole search, every mesh shape together:
  each mesh gets what is left, and meshes not reached in time are listed
  with status ``"time-limit"`` (the results found so far are returned;
  TimeLimitError if there are none).  ``progress(mesh, index, count,
  best)``, if given, is called before each mesh shape is solved, with the
  best :class:`LayoutResult` so far (or None), e.g. for a live display.

  Returns:
    ``(results, table)``: the :class:`LayoutResult` of each mesh shape with a
    feasible layout, best first (by step time, then peak memory, then mesh
    string), and a DataFrame with one row per tried mesh (``status``
    ``"no-fit"`` when it does not embed, ``"infeasible"`` when no layout fits
    the budget).

  Raises:
    InvalidArgumentError: for a misused argument (named, with a valid
      value), e.g. ``num_devices=0`` or ``max_axes=0``.
    InfeasibleLayoutError: if no mesh shape has a layout within the budget.
    TimeLimitError: if the time limit ran out before any mesh was solved.
  """
  topology = arguments.resolve_topology(topology)  # resolved once, here
  if num_devices is None:
    num_devices = topology.num_chips
  num_devices = arguments.check_count(num_devices, "num_devices", 1,
                                      arguments.MAX_DEVICES,
                                      topology.num_chips)
  max_axes = arguments.check_count(max_axes, "max_axes", 1,
                                   arguments.MAX_AXES, DEFAULTS.max_axes)
  memory_budget = cm_args.resolve_memory_budget(memory_budget, topology)
  if search is None:
    search = LayoutSearch(graph, outputs)
  time_limit_s = arguments.check_time_limit(time_limit_s)
  t0 = time.perf_counter()
  results, rows, best_peak, skipped = [], [], None, 0
  meshes = mesh_factorizations(num_devices, max_axes)
  for index, mesh in enumerate(meshes):
    mesh_shape = convert_to_mesh_shape(mesh)
    try:
      costmodels.map_mesh(topology, mesh_shape)
      if physical_names:
        mesh_shape = physical_axis_names(topology, mesh_shape)
        mesh = mesh_shape.text
    except costmodels.TopologyError as e:
      rows.append({"mesh": mesh, "status": "no-fit", "rules": None,
                   "step_time_s": None, "peak_memory_bytes": None,
                   "solve_time_s": None, "note": str(e).split(";")[0]})
      continue
    left = time_limit_s - (time.perf_counter() - t0)
    if progress is not None:
      progress(mesh, index, len(meshes),
               min(results, key=_rank) if results else None)
    try:
      if left <= 0.01:
        raise TimeLimitError("no time left")
      r = search.solve(mesh_shape, topology, memory_budget, objective,
                       left, num_workers, seed=seed, hint=hint,
                       overlap=overlap)
    except TimeLimitError:
      skipped += 1
      rows.append({"mesh": mesh, "status": "time-limit", "rules": None,
                   "step_time_s": None, "peak_memory_bytes": None,
                   "solve_time_s": None,
                   "note": f"not solved within {time_limit_s:g} s"})
      continue
    except InfeasibleLayoutError as e:
      if e.min_peak_bytes is not None and (
          best_peak is None or e.min_peak_bytes < best_peak[0]):
        best_peak = (e.min_peak_bytes, mesh, e)
      rows.append({"mesh": mesh, "status": "infeasible", "rules": None,
                   "step_time_s": None,
                   "peak_memory_bytes": e.min_peak_bytes,
                   "solve_time_s": None, "note": "over budget"})
      continue
    results.append(r)
    rows.append({"mesh": mesh, "status": r.status, "rules": str(r.rules),
                 "step_time_s": r.step_time_s,
                 "peak_memory_bytes": r.peak_memory_bytes,
                 "solve_time_s": r.solve_time_s, "note": ""})
  if not results and skipped:
    raise TimeLimitError(
        f"the time limit of {time_limit_s:g} s ran out before any of the "
        f"{len(meshes)} mesh shapes of {num_devices} devices was solved "
        f"({skipped} not reached); raise the time limit")
  if not results and best_peak is not None:
    raise InfeasibleLayoutError(
        f"no mesh shape of {num_devices} devices has a layout within "
        f"{memory_budget} bytes per device; the best, {best_peak[1]}, "
        f"peaks at {best_peak[0]} bytes. {best_peak[2]}",
        memory_budget=memory_budget, min_peak_bytes=best_peak[0],
        dominating=best_peak[2].dominating)
  results.sort(key=_rank)
  table = pd.DataFrame(rows)
  if len(table):
    table = table.sort_values(["step_time_s", "mesh"], na_position="last",
                              kind="stable").reset_index(drop=True)
  return results, table
