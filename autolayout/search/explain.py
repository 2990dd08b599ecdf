"""Why a layout uses each of its rules: the cost of dropping each one, and
of the best *different* layout that puts the dim elsewhere.

Mesh axes that are interchangeable (same size, same links: ``x`` and ``y``
of a square torus) make mirror images of a layout that cost the same; a
runner-up that is such a mirror image of the chosen layout says nothing, so
the re-solve excludes every one of them (and the other dims re-solve
freely).
"""

import itertools

import time

import pandas as pd

import costmodels
from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import LayoutError
from mesh_tf.core.layout import LayoutRules, convert_to_layout_rules
from autolayout.search import assignments
from autolayout.arguments import DEFAULTS
from autolayout.errors import AutoLayoutError
from autolayout.search.solve import (DEFAULT_NUM_WORKERS, DEFAULT_SEED,
                                     DEFAULT_TIME_LIMIT_S, LayoutSearch)

COLUMNS = ("dim", "axis", "step_time_s", "peak_memory_bytes",
           "without_step_time_s", "without_peak_memory_bytes",
           "runner_up_axis", "runner_up_rules", "runner_up_step_time_s",
           "runner_up_peak_memory_bytes", "runner_up_comm_by_axis_s")


def interchangeable_axes(mapping):
  """Groups of mesh-axis names (size > 1) with equal size and equal links,
  so that swapping them maps every layout to one of equal cost."""
  groups = {}
  for a in mapping.axes:
    if a.size < 2:
      continue
    key = (a.size, a.link_kind, a.structure, a.bandwidth_bytes_per_s,
           a.latency_s, tuple((s.size, s.stride, s.structure, s.link)
                              for s in a.segments))
    groups.setdefault(key, []).append(a.axis)
  return [tuple(g) for g in groups.values() if len(g) > 1]


def mirror_images(rules, groups):
  """Every layout other than ``rules`` obtained by permuting the axes within
  each group of interchangeable axes."""
  perms = [list(itertools.permutations(g)) for g in groups]
  out = set()
  for choice in itertools.product(*perms):
    m = {}
    for g, p in zip(groups, choice):
      m.update(dict(zip(g, p)))
    image = LayoutRules([(d, m.get(a, a) if isinstance(a, str)
                          else tuple(m.get(x, x) for x in a))
                         for d, a in rules.pairs])
    if set(image.pairs) != set(rules.pairs):
      out.add(image)
  return sorted(out, key=str)


def explain(search, mesh_shape, rules, topology=DEFAULTS.topology,
            memory_budget=DEFAULTS.memory_budget, objective=DEFAULTS.objective,
            report=None,
            time_limit_s=DEFAULT_TIME_LIMIT_S,
            *, num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED,
            overlap=True):
  """For each rule of ``rules``, the step time and peak memory without it,
  and with the dim on its runner-up axis.

  Any layout can be explained, the solver's or one given by hand; the
  runner-ups are re-solved exactly through ``search``, so its tables serve
  every rule.

  Args:
    search: a :class:`LayoutSearch`, or an mtf Graph (then a new search of
      it, with the default outputs).
    mesh_shape: the mesh (a Shape or ``"data:2;model:4"``).
    rules: the layout to explain (LayoutRules or a rules string).
    topology: a costmodels Topology or its name (default
      ``tpu-v5e-16x16``, as everywhere).
    memory_budget: the runner-ups' per-device budget: bytes, a size string
      (``"16GB"``), ``"hbm"`` (default) or None for no limit.
    objective: what the runner-ups minimise (as for ``auto_layout``).
    report: the CostReport of ``rules`` if already at hand (else priced).
    time_limit_s, num_workers, seed: CP-SAT settings of the re-solves;
      the time limit bounds them all together (a runner-up not reached in
      time is None).
    overlap: price with gradient syncs hidden under compute (as
      ``costmodels.evaluate``); False: every collective exposed.

  Returns:
    A DataFrame with one row per rule ``dim:axis``: the chosen
    ``step_time_s`` and ``peak_memory_bytes``; ``without_*``: the same
    layout minus this rule; ``runner_up_*``: the best layout (same budget
    and objective) that does not put ``dim`` on ``axis``, with
    ``runner_up_axis`` the axis it gives ``dim`` (None: replicated) and
    ``runner_up_rules`` its rules, ``runner_up_comm_by_axis_s`` its
    exposed communication per mesh axis.  The runner-up is never a mirror
    image of ``rules`` under a swap of interchangeable axes.  A value is
    None where no such layout exists.

  Example:
    >>> r = autolayout.auto_layout(graph, "x:2;y:4")     # doctest: +SKIP
    >>> explain(graph, r.mesh_shape, r.rules)            # doctest: +SKIP
  """
  if not isinstance(search, LayoutSearch):
    search = LayoutSearch(search)
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  rules = convert_to_layout_rules(rules)
  outputs = list(search.outputs)
  if report is None:
    report = costmodels.evaluate(search.graph, mesh_shape, rules, topology,
                                 outputs=outputs,
                                 microbatches=search.microbatches,
                                 overlap=overlap)
  base = dict(rules.pairs)
  mirrors = mirror_images(rules, interchangeable_axes(
      costmodels.map_mesh(topology, mesh_shape)))
  rows = []
  t0 = time.perf_counter()  # time_limit_s bounds every re-solve together
  for dim, axis in rules.pairs:
    rest = LayoutRules([(k, v) for k, v in base.items() if k != dim])
    try:
      r0 = costmodels.evaluate(search.graph, mesh_shape, rest, topology,
                               outputs=outputs,
                               microbatches=search.microbatches,
                               overlap=overlap)
    except LayoutError:
      r0 = None
    left = time_limit_s - (time.perf_counter() - t0)
    try:
      alt = search.solve(mesh_shape, topology, memory_budget, objective,
                         left, num_workers, seed=seed,
                         forbid=[(dim, axis)], overlap=overlap,
                         exclude=mirrors) if left > 0.01 else None
    except AutoLayoutError:
      alt = None
    rows.append({
        # A multi-axis option shows as it is written in rules: "x+y".
        "dim": dim, "axis": assignments.option_text(axis),
        "step_time_s": report.step_time_s,
        "peak_memory_bytes": report.peak_memory_bytes,
        "without_step_time_s": r0.step_time_s if r0 else None,
        "without_peak_memory_bytes": r0.peak_memory_bytes if r0 else None,
        "runner_up_axis": (assignments.option_text(alt.rules.as_dict()[dim])
                           if alt and dim in alt.rules.as_dict() else None),
        "runner_up_rules": str(alt.rules) if alt else None,
        "runner_up_step_time_s": alt.step_time_s if alt else None,
        "runner_up_peak_memory_bytes": (alt.peak_memory_bytes
                                        if alt else None),
        "runner_up_comm_by_axis_s": (dict(alt.report.comm_time_by_axis)
                                     if alt else None)})
  return pd.DataFrame(rows, columns=list(COLUMNS))
