"""The fit of one collective kind's law to its chained probes' timings.

:func:`fit_collective` tries every (steps, volume) law pair of
:mod:`costmodels.collective_fits` and keeps the one with the smallest
relative residual.
"""

import math
from typing import NamedTuple, Tuple

import numpy as np

from costmodels.calibrate.least_squares import nonneg_lstsq
from costmodels.collective_fits import (STEP_LAWS, VOLUME_LAWS,
                                        CollectiveFit)


class CollectiveFitResult(NamedTuple):
  """The chosen fit of one collective kind, and the per-axis residuals."""
  fit: CollectiveFit
  by_axis: Tuple[Tuple[str, float], ...]  # (axis, RMS relative residual)


def fit_collective(samples, kind, algorithm, min_bytes=0, max_bytes=None,
                   steps_laws=None, volume_laws=None, offset=None):
  """Fits ``kind`` on ``samples`` with ``min_bytes <= nbytes < max_bytes``.

  Tries every (steps, volume) law pair and keeps the one with the smallest
  relative RMS residual.  ``offset(sample)`` (default 0) is the known part
  of a timing beside the collective (its rep's shape-restoring kernel):
  the law is fitted to the timing less it, with residuals relative to the
  whole timing (see :func:`nonneg_lstsq`).

  Returns:
    A :class:`CollectiveFitResult`, or None if no sample is in range.
  """
  rows = [s for s in samples if s.what == kind and s.nbytes >= min_bytes
          and (max_bytes is None or s.nbytes < max_bytes)]
  if not rows:
    return None
  offs = [offset(s) if offset else 0.0 for s in rows]
  best = None
  for st in (steps_laws or STEP_LAWS):
    for vol in (volume_laws or VOLUME_LAWS):
      xs = [[STEP_LAWS[st](s.group_size),
             VOLUME_LAWS[vol](s.group_size, s.nbytes)] for s in rows]
      coef, res = nonneg_lstsq(xs, [s.seconds for s in rows], offsets=offs)
      if best is None or res < best[0]:
        best = (res, st, vol, coef)
  res, st, vol, (lat, inv_bw) = best
  # A volume term that fitted to 0 means the timings do not grow with size
  # (e.g. a copy that only passes a reference): infinitely fast bytes.
  bw = 1.0 / inv_bw if inv_bw > 0 else math.inf
  fit = CollectiveFit(kind, algorithm, float(lat), bw, st, vol,
                      int(min_bytes), float(res), len(rows))
  by_axis = {}
  for s, o in zip(rows, offs):
    by_axis.setdefault(s.axis, []).append(
        (o + fit.time_s(s.group_size, s.nbytes) - s.seconds) / s.seconds)
  return CollectiveFitResult(fit, tuple(
      (a, float(np.sqrt(np.mean(np.square(v))))) for a, v in by_axis.items()))
