"""Non-negative least squares on relative residuals (SciPy's NNLS).

Every cost term is linear in its parameters once its law is fixed, e.g. a
collective's ``T = latency * steps(p) + volume(p, n) / bandwidth`` is linear
in ``(latency, 1 / bandwidth)``.  :func:`nonneg_lstsq` fits such a model with
non-negative coefficients, minimising the *relative* residuals (a timing of
10 us matters as much as one of 10 ms), by :func:`scipy.optimize.nnls`.

Example:
  >>> xs = [[1.0, n] for n in (1e3, 1e4, 1e5)]
  >>> ys = [2e-6 + n / 1e9 for n in (1e3, 1e4, 1e5)]
  >>> coef, rel = nonneg_lstsq(xs, ys)
  >>> [float(f"{c:.3g}") for c in coef], rel < 1e-9
  ([2e-06, 1e-09], True)
"""

import numpy as np

from costmodels.calibrate.timings import CalibrationError


def nonneg_lstsq(xs, ys, relative=True, offsets=None):
  """Non-negative least squares of ``ys ~ offsets + xs @ coef``.

  Args:
    xs: rows of features, one row per sample.
    ys: the timings.
    relative: weight each row by ``1 / y``, so that the fit minimises
      relative residuals.
    offsets: a known part of each timing (default 0), e.g. the price of a
      kernel the timed rep runs beside what is fitted.  The residuals stay
      relative to the whole timing: taking the known part off first and
      fitting what is left lets the timings it nearly explains (a few
      microseconds left of a rep) decide the fit.

  Returns:
    ``(coef, rel_rms)``: the coefficients (each >= 0) and the RMS of the
    relative residuals ``(pred - y) / y``.

  Raises:
    CalibrationError: with no samples, or a non-positive timing.
  """
  a = np.asarray(xs, dtype=float)
  y = np.asarray(ys, dtype=float)
  if a.ndim != 2 or len(y) == 0 or a.shape[0] != len(y):
    raise CalibrationError(f"a fit needs one feature row per timing, got "
                           f"{a.shape} features for {len(y)} timings")
  if np.any(y <= 0):
    raise CalibrationError("every timing must be positive to be fitted; "
                           "measure longer runs")
  off = np.zeros_like(y) if offsets is None else np.asarray(offsets, float)
  w = 1.0 / y if relative else np.ones_like(y)
  coef = nnls(a * w[:, None], (y - off) * w)
  return coef, float(np.sqrt(np.mean(((off + a @ coef - y) / y) ** 2)))


def nnls(a, y):
  """``argmin |a @ c - y|`` over ``c >= 0`` (:func:`scipy.optimize.nnls`),
  with each column scaled to unit norm first (timings' features span
  fifteen orders of magnitude: seconds per FLOP beside counts)."""
  a = np.asarray(a, float)
  y = np.asarray(y, float)
  norms = np.linalg.norm(a, axis=0)
  scale = np.where(norms > 0, norms, 1.0)
  # SciPy on first use: importing it costs 0.26 s, and every topology
  # file reader imports this package (mtf-layout solve fits nothing).
  from scipy import optimize  # pylint: disable=import-outside-toplevel
  coef, _ = optimize.nnls(a / scale, y, maxiter=50 * max(a.shape[1], 1))
  return coef / scale


def rel_errors(pred, meas):
  """``(pred - meas) / meas`` elementwise, as a numpy array."""
  pred, meas = np.asarray(pred, float), np.asarray(meas, float)
  return (pred - meas) / meas
