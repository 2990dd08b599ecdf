"""The memory-versus-step-time Pareto front of layouts on one mesh.

Starting from the fastest layout (with the least memory among the fastest),
it repeatedly asks for the fastest layout that needs strictly less memory
than the last one, until none exists.  Every point is optimal for its
budget, so the list is exactly the front.
"""

import time

import pandas as pd

from autolayout import arguments
from autolayout.arguments import DEFAULTS
from autolayout.errors import InfeasibleLayoutError, TimeLimitError
from autolayout.search.solve import (DEFAULT_NUM_WORKERS, DEFAULT_SEED,
                                     DEFAULT_TIME_LIMIT_S, LayoutSearch)


def pareto(graph, mesh_shape=None, outputs=None, topology=DEFAULTS.topology,
           max_points=DEFAULTS.max_points, time_limit_s=DEFAULT_TIME_LIMIT_S,
           num_workers=DEFAULT_NUM_WORKERS, seed=DEFAULT_SEED, *, search=None,
           overlap=True):
  """The Pareto front of (peak memory, step time) (``overlap``: as for
  :func:`auto_layout`).

  The defaults are ``mtf-layout pareto``'s (at most 12 points, topology
  ``tpu-v5e-16x16`` with its own ``data x model`` mesh).

  Every point is a re-solve on the same mesh, so one :class:`LayoutSearch`
  (``search``, or a new one) builds the tables once for all of them.

  Returns:
    ``(results, table)``: :class:`LayoutResult`s from fastest (most memory)
    to leanest, and a DataFrame with ``rules``, ``step_time_s``,
    ``peak_memory_bytes`` and ``status`` per point.

  ``time_limit_s`` bounds the whole front (every point together); the
  points found when it runs out are returned.

  Raises:
    InvalidArgumentError: for a misused argument, e.g. ``max_points=0``.
    TimeLimitError: if the time ran out before the first point.
  """
  max_points = arguments.check_count(max_points, "max_points", 1,
                                     arguments.MAX_POINTS,
                                     DEFAULTS.max_points)
  time_limit_s = arguments.check_time_limit(time_limit_s)
  if search is None:
    search = LayoutSearch(graph, outputs)
  t0 = time.perf_counter()
  results, budget, unbounded_s = [], None, 0.0
  while len(results) < max_points:
    # The time limit bounds the whole front: each point gets what is left,
    # and the points found when it runs out are the answer.  The part of a
    # point CP-SAT's limit does not bound (the first guess and the final
    # re-check by the cost model, seconds on a 10k-op graph) cannot be cut
    # short, so a point is only started while more than the last one's
    # is left.
    left = time_limit_s - (time.perf_counter() - t0)
    try:
      if left <= max(0.01, 1.5 * unbounded_s):
        raise TimeLimitError("no time left")
      start = time.perf_counter()
      r = search.solve(mesh_shape, topology, budget, "time", left,
                       num_workers, seed=seed, tie_break=("memory",),
                       overlap=overlap)
      unbounded_s = (time.perf_counter() - start - r.solve_time_s
                     - r.build_time_s)
    except InfeasibleLayoutError:
      break
    except TimeLimitError:
      if not results:
        raise TimeLimitError(
            f"the time limit of {time_limit_s:g} s ran out before the "
            "fastest layout was found; raise the time limit") from None
      break
    results.append(r)
    budget = r.peak_memory_bytes - 1
    if budget < 1:
      break
  table = pd.DataFrame([{"rules": str(r.rules), "step_time_s": r.step_time_s,
                         "peak_memory_bytes": r.peak_memory_bytes,
                         "status": r.status} for r in results])
  return results, table
