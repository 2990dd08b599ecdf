"""Why no layout fits the memory budget: the smallest peak any layout
reaches, the op where it peaks and the tensors live there, re-checked by the
cost model's memory profile."""

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
