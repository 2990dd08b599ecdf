"""The fixed cost of a matrix product whose kernel hands its work to a
thread pool, and of each matrix of a batch (:func:`fit_threaded_kernel`)."""

from typing import NamedTuple

import numpy as np

from costmodels.calibrate.least_squares import rel_errors


class ThreadedKernel(NamedTuple):
  """What :func:`fit_threaded_kernel` found.

  Attributes:
    seconds: the extra fixed cost of a threaded product (0: no step).
    inline_max: ``(batch, rows, cols)`` of the largest product that ran
      inline, or ``()``.
    rel_residual: RMS relative residual of the two-level law (with the
      batch term).
    samples: timings it was fitted on.
    matrix_s: seconds each matrix of a batch costs beyond the first (0:
      no batch sweep, or no growth with the batch).
  """
  seconds: float
  inline_max: tuple
  rel_residual: float
  samples: int
  matrix_s: float = 0.0


def fit_threaded_kernel(samples, num_devices):
  """The fixed cost of a matrix product whose kernel hands its work to a
  thread pool, from ``kernel`` timings of tiny products on all
  ``num_devices`` devices (from the smallest, one sweep over each of batch,
  rows and columns with the other two at their smallest; FLOPs
  negligible), or None without such timings.

  First the batch term: each matrix of a batch costs ``matrix_s``, the
  least-squares slope of the batch sweep's timings over the batch (its
  products of two or more, all threaded), and that is taken off every
  timing.  Then a timing above the midpoint of the fastest and the slowest
  is threaded, the others inline; the cost is the median threaded timing
  less the median inline one, and ``inline_max`` the largest batch (rows,
  columns) up to which every product of its sweep ran inline.  A sweep
  whose slowest timing is under 1.5x its fastest shows no step: cost 0.

  Example:
    >>> ts = {(1, 8, 8): 5e-5, (1, 16, 8): 5e-5, (1, 32, 8): 1.7e-4,
    ...       (1, 8, 64): 5e-5, (1, 8, 128): 1.7e-4, (2, 8, 8): 1.71e-4,
    ...       (65, 8, 8): 1.7e-4 + 64e-6, (257, 8, 8): 1.7e-4 + 256e-6}
    >>> from costmodels.calibrate.timings import Sample
    >>> got = fit_threaded_kernel([Sample("kernel", "", 8, 0, 0.0, t,
    ...                                   matrix=m) for m, t in ts.items()], 8)
    >>> got.inline_max, round(got.seconds, 9), round(got.matrix_s, 12)
    ((1, 16, 64), 0.00012, 1e-06)
  """
  times = {s.matrix: s.seconds for s in samples
           if s.what == "kernel" and s.group_size == num_devices
           and len(s.matrix) == 3 and s.seconds > 0}
  if len(times) < 3:
    return None
  raw = times
  # The slope over every batch of two or more, then again over those of
  # them that the first pass found threaded (one that ran inline is a step
  # below the line, not on it).
  matrix_s = _batch_slope(raw, set(raw))
  for _ in range(2):
    times = {m: max(t - matrix_s * (m[0] - 1), 1e-9) for m, t in raw.items()}
    lo, hi = min(times.values()), max(times.values())
    if hi < 1.5 * lo:
      return ThreadedKernel(0.0, (), 0.0, len(times), matrix_s)
    mid = (lo + hi) / 2
    inline = {m: t < mid for m, t in times.items()}
    matrix_s = _batch_slope(raw, {m for m in raw if not inline[m]})
  times = {m: max(t - matrix_s * (m[0] - 1), 1e-9) for m, t in raw.items()}
  fewest = min(times)

  def reach(axis):
    # Walk one sweep from its smallest product up, while products run inline.
    sweep = sorted(m for m in times if all(
        m[k] == fewest[k] for k in range(3) if k != axis))
    best = 0
    for m in sweep:
      if not inline[m]:
        break
      best = m[axis]
    return best
  limit = tuple(reach(k) for k in range(3))
  fast = [t for m, t in times.items() if inline[m]]
  slow = [t for m, t in times.items() if not inline[m]]
  lo_t, hi_t = float(np.median(fast)), float(np.median(slow))
  pred = [lo_t if inline[m] else hi_t for m in times]
  res = float(np.sqrt(np.mean(np.square(rel_errors(pred,
                                                   list(times.values()))))))
  return ThreadedKernel(hi_t - lo_t, limit if all(limit) else (), res,
                        len(times), matrix_s)


def _batch_slope(times, among):
  """Seconds per matrix of a batch: the least-squares slope of the timings
  of ``times`` (``{(batch, rows, cols): seconds}``) of products in
  ``among`` whose rows and columns are the smallest and whose batch is two
  or more, over their batch; 0 with fewer than two such batches, or a
  slope that is not positive."""
  fewest = min(times)
  sweep = sorted((m[0], t) for m, t in times.items()
                 if m in among and m[0] >= 2 and m[1:] == fewest[1:])
  if len({b for b, _ in sweep}) < 2:
    return 0.0
  slope = float(np.polyfit([b for b, _ in sweep], [t for _, t in sweep],
                           1)[0])
  return max(slope, 0.0)
