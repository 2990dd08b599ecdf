"""The fixed cost of a matrix product whose kernel hands its work to a
thread pool, and of each matrix of a batch (:func:`fit_threaded_kernel`)."""

import itertools
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


def fit_threaded_kernel(samples, num_devices, handoff=True):
  """The fixed cost of a matrix product whose kernel hands its work to a
  thread pool, from ``kernel`` timings of tiny products on all
  ``num_devices`` devices (from the smallest, one sweep over each of batch,
  rows and columns with the other two at their smallest; FLOPs
  negligible), or None without such timings.

  The law: a product of ``(batch, rows, cols)`` takes ``base + matrix_s *
  (batch - 1)``, and ``seconds`` more if it is larger than ``inline_max``
  in any of the three (its kernel hands the work to a thread pool).  Every
  ``inline_max`` whose entries are sizes of the sweeps is tried, each with
  ``base``, ``seconds`` and ``matrix_s >= 0`` fitted by SciPy's robust
  least squares on relative residuals (``soft_l1``: one timing that a busy
  machine stretched 10x moves the fit as little as a timing 20% off, where
  the midpoint rule that came before took it for the threaded level); the
  one of least robust cost is kept.  ``handoff=False`` (kernels with no
  thread pool to hand work to: one intra-op thread, as
  :func:`mesh_tf.lowering.placement.cpu_thread_pools` gives logical CPU
  devices that outnumber the cores) fits the law without the step: there
  every product runs inline, and a step fitted to the sweeps' noise (on 8
  logical devices of a 2-core machine the tiny products took 41-180 us in
  no order of size) was taken for a hand-off, once of 617 us on the
  batch of 1024 alone, which priced every batched product above 64
  matrices 0.6 ms slow.  ``matrix_s`` is fitted only where
  the batch sweep has two batches of two or more.  A step under half the
  inline level (``seconds < base / 2``) is no step: cost 0.

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
  fewest = min(times)
  sweeps = [sorted({m[k] for m in times if all(
      m[j] == fewest[j] for j in range(3) if j != k)}) for k in range(3)]
  batches = {m[0] for m in times if m[0] >= 2 and m[1:] == fewest[1:]}
  with_batch = len(batches) >= 2
  best = None
  if not handoff:
    best = _fit_law(times, {m: False for m in times}, with_batch) + ((),)
  for limit in itertools.product(*sweeps) if handoff else ():
    threaded = {m: not all(n <= k for n, k in zip(m, limit)) for m in times}
    if not any(threaded.values()):
      continue
    fit = _fit_law(times, threaded, with_batch)
    if best is None or fit[0] < best[0]:
      best = fit + (limit,)
  if best is None:   # a single product per sweep: no step to see
    return ThreadedKernel(0.0, (), 0.0, len(times), 0.0)
  _, base, seconds, matrix_s, threaded, limit = best
  if seconds < 0.5 * base:
    seconds, limit = 0.0, ()
    _, base, _, matrix_s, threaded = _fit_law(
        times, {m: False for m in times}, with_batch)
  pred = [base + matrix_s * (m[0] - 1) + (seconds if threaded[m] else 0.0)
          for m in times]
  res = float(np.sqrt(np.mean(np.square(rel_errors(pred,
                                                   list(times.values()))))))
  return ThreadedKernel(seconds, limit, res, len(times), matrix_s)


def _fit_law(times, threaded, with_batch):
  """``(robust cost, base, seconds, matrix_s, threaded)`` of the law of
  :func:`fit_threaded_kernel` fitted to ``times`` with the products that
  ``threaded`` marks handed to a pool (``seconds`` 0 if none is)."""
  from scipy import optimize  # pylint: disable=import-outside-toplevel
  ms = list(times)
  t = np.array([times[m] for m in ms])
  cols = [np.ones(len(ms))]
  if any(threaded.values()):
    cols.append(np.array([1.0 if threaded[m] else 0.0 for m in ms]))
  if with_batch:
    cols.append(np.array([m[0] - 1.0 for m in ms]))
  a = np.stack(cols, axis=1)
  # Each coefficient in units of the median timing over its column's
  # largest entry, so that the solver's variables are of order one.
  scale = float(np.median(t)) / np.maximum(np.abs(a).max(axis=0), 1e-30)
  x0 = np.full(a.shape[1], 0.0)
  x0[0] = float(np.min(t)) / scale[0]
  got = optimize.least_squares(lambda x: (a @ (x * scale)) / t - 1.0, x0,
                               bounds=(0.0, np.inf), loss="soft_l1",
                               f_scale=0.1, xtol=1e-12, ftol=1e-12,
                               gtol=1e-12)
  coef = got.x * scale
  seconds = float(coef[1]) if any(threaded.values()) else 0.0
  matrix_s = float(coef[-1]) if with_batch else 0.0
  return float(got.cost), float(coef[0]), seconds, matrix_s, threaded
