"""Why no layout fits the memory budget: the smallest peak any layout
reaches, the op where it peaks and the tensors live there, re-checked by the
cost model's memory profile; or, before any search, that the variables
alone cannot fit (:func:`check_state_fits`)."""

import math

from costmodels import memory as cm_memory
from autolayout.errors import (InfeasibleLayoutError, SolverError,
                               TimeLimitError)


def explain(search, mesh_shape, topology, budget, time_limit_s, num_workers,
            seed):
  """Raises the InfeasibleLayoutError of a query that fits no layout: the
  smallest reachable peak (by :meth:`LayoutSearch.min_peak`, within what is
  left of the time limit), its layout, op and dominating tensors."""
  graph = search.graph
  try:
    peak, rules, problem, status = search.min_peak(
        mesh_shape, topology, time_limit_s, num_workers, seed)
  except TimeLimitError:
    raise InfeasibleLayoutError(
        f"no layout of the graph on mesh {mesh_shape} keeps per-device "
        f"memory within the budget of {budget} bytes; the time limit ran "
        "out before the smallest reachable peak was found",
        memory_budget=budget) from None
  prof = cm_memory.memory_profile(graph, problem.mesh_shape, rules,
                                  outputs=list(problem.outputs),
                                  liveness_plan=problem.liveness)
  if prof.peak_bytes != peak:
    raise SolverError(f"the program's peak {peak} differs from the cost "
                      f"model's {prof.peak_bytes} for rules {rules}")
  smallest = ("the smallest peak any valid layout reaches is"
              if status == "optimal" else
              f"the smallest peak found within {time_limit_s:g} s is")
  live = [(t.name, prof.tensor_bytes[t])
          for t, a, b in problem.liveness.intervals
          if a <= prof.peak_step <= b]
  live.sort(key=lambda p: (-p[1], p[0]))
  top = live[:5]
  mesh = ", ".join(str(d) for d in problem.mesh_shape)
  raise InfeasibleLayoutError(
      f"no layout of the graph on mesh [{mesh}] keeps per-device memory "
      f"within the budget of {budget} bytes ({budget / 2**20:.4g} MiB): "
      f"{smallest} {peak} bytes "
      f"({peak / 2**20:.4g} MiB, layout {rules or 'replicated'!s}), at op "
      f"{getattr(prof.peak_op, 'name', '?')}, dominated by "
      + ", ".join(f"{n} ({b} bytes)" for n, b in top)
      + f"; raise memory_budget to at least {peak} bytes, use a mesh with "
      "more devices, or shrink those tensors",
      memory_budget=budget, min_peak_bytes=peak, dominating=top)


def state_floor_bytes(graph, num_devices):
  """``(total, floor)``: the bytes of every variable of ``graph``
  (parameters, optimizer slots, step counters, gradient accumulators), and
  that total spread evenly over ``num_devices``.  Variables are live for
  the whole step and some device holds each of their bytes, so no layout,
  ZeRO stage, recompute count or microbatch count (which only adds
  accumulators) brings any device's peak below ``floor``."""
  total = sum(cm_memory.full_bytes(t) for v in graph.all_variables
              for t in v.outputs[:1])
  return total, math.ceil(total / num_devices)


def check_state_fits(graph, mesh_shape, budget, what="the graph"):
  """Raises InfeasibleLayoutError, without searching, when the variables
  of ``graph`` spread evenly over ``mesh_shape``'s devices exceed
  ``budget`` bytes per device (see :func:`state_floor_bytes`).  Its
  ``floor_bytes`` is that bound and ``min_devices`` the fewest devices of
  this budget that could hold them; ``min_peak_bytes`` is None (the
  smallest peak was not searched for)."""
  if budget is None:
    return
  n = mesh_shape.size
  total, floor = state_floor_bytes(graph, n)
  if floor <= budget:
    return
  need = math.ceil(total / budget)
  raise InfeasibleLayoutError(
      f"no layout of {what} on mesh {mesh_shape} keeps per-device memory "
      f"within the budget of {budget} bytes ({budget / 2**30:.4g} GiB): "
      f"its variables (parameters and optimizer state) alone are {total} "
      f"bytes ({total / 2**30:.4g} GiB), at least {floor} bytes "
      f"({floor / 2**30:.4g} GiB) per device spread evenly over all {n} "
      f"devices; use at least {need} devices of this budget, a larger "
      "memory_budget, or a smaller model",
      memory_budget=budget, floor_bytes=floor, num_devices=n,
      min_devices=need)
