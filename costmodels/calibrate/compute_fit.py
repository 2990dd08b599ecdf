"""The chip's roofline: matmul peak, elementwise bandwidth, launch cost
and shared-compute factor (:func:`fit_compute`), and the matmul peak of
every other dtype timed (:func:`matmul_peaks_by_dtype`)."""

from typing import NamedTuple, Tuple

import numpy as np

from costmodels.calibrate.least_squares import nonneg_lstsq
from costmodels.calibrate.timings import CalibrationError


class ComputeFit(NamedTuple):
  """Fitted compute parameters of one device set.

  Attributes:
    peak_flops_per_s: matmul throughput of one device alone (dtype of the
      fit).
    bandwidth_bytes_per_s: elementwise (memory-bound) bandwidth alone.
    launch_overhead_s: fixed seconds per kernel, all devices at once.
    shared_compute_factor: slow-down of each device when all compute.
    launch_alone_s: fixed seconds per kernel on one device alone.
    residuals: ``((what, RMS relative residual), ...)``.
  """
  peak_flops_per_s: float
  bandwidth_bytes_per_s: float
  launch_overhead_s: float
  shared_compute_factor: float
  launch_alone_s: float
  residuals: Tuple[Tuple[str, float], ...]


def fit_compute(samples, num_devices, dtype="float32"):
  """Fits peak FLOP/s, bandwidth, launch cost and the shared-compute factor.

  ``samples`` hold ``matmul`` (FLOPs) and ``elementwise`` (bytes read +
  written) timings of one op, on one device alone (``group_size == 1``) and
  on all ``num_devices`` at once, and ``launch`` timings of tiny ops on all
  devices.  With one device, alone and all are the same runs.

  Model, per op: alone ``T = l1 + max(F / peak, B / bw)``; all devices
  ``T = l + s * max(F / peak, B / bw)``.  Where ``step`` samples (reference
  training steps of two depths) are given, ``l`` is the larger of the
  fitted one and their time per compute record.

  Raises:
    CalibrationError: if a kind of sample is missing.
  """
  def pick(what, alone):
    # The chip's peak is the plain matmul's; other patterns get their own
    # fits (fit_patterns).
    out = [s for s in samples if s.what == what and s.dtype == dtype
           and s.pattern in ("", "matmul")
           and (s.group_size == 1 if alone else s.group_size == num_devices)]
    if not out:
      raise CalibrationError(
          f"no {what} timings ({dtype}, {'one device' if alone else 'all'}"
          " devices) to fit; run the measurements first")
    return out
  mm1, el1 = pick("matmul", True), pick("elementwise", True)
  mmn, eln = pick("matmul", False), pick("elementwise", False)
  launch = pick("launch", False)
  launch1 = [s for s in samples if s.what == "launch" and s.group_size == 1]
  # One device alone: T = l1 + F / peak and T = l1 + B / bw, jointly.
  xs = ([[1.0, s.flops, 0.0] for s in mm1]
        + [[1.0, 0.0, s.nbytes] for s in el1]
        + [[1.0, 0.0, 0.0] for s in launch1])
  ys = [s.seconds for s in mm1 + el1 + launch1]
  (l1, inv_peak, inv_bw), res1 = nonneg_lstsq(xs, ys)
  if inv_peak <= 0 or inv_bw <= 0:
    raise CalibrationError("the matmul or elementwise timings do not grow "
                           "with size; measure larger sizes")
  # All devices: T = l + s * roofline, with the roofline fitted above.
  xs = ([[1.0, s.flops * inv_peak] for s in mmn]
        + [[1.0, s.nbytes * inv_bw] for s in eln]
        + [[1.0, 0.0] for s in launch])
  ys = [s.seconds for s in mmn + eln + launch]
  (launch, factor), resn = nonneg_lstsq(xs, ys)
  if num_devices == 1:
    launch, factor = l1, 1.0
  factor = max(float(factor), 1e-3)
  # A lowered step's record costs more to launch than one kernel of a long
  # fused chain: the least-squares slope of the reference steps' times over
  # their record counts (several depths, so that one noisy step does not
  # decide it).
  steps = [s for s in samples if s.what == "step"]
  if len({s.flops for s in steps}) >= 2:
    slope = float(np.polyfit([s.flops for s in steps],
                             [s.seconds for s in steps], 1)[0])
    if slope > launch:
      launch = slope
  return ComputeFit(1.0 / inv_peak, 1.0 / inv_bw, float(launch), factor,
                    float(l1), (("compute, one device", res1),
                                ("compute, all devices", resn)))


def matmul_peaks_by_dtype(samples, dtype, peak_flops_per_s):
  """``((dtype, flops_per_s), ...)``: ``dtype`` at the fitted
  ``peak_flops_per_s``, and every other dtype timed on one device alone:
  where it was timed at two sizes or more, its own line ``T = l + F /
  peak`` (the launch cost apart: on a GPU a kernel's launch is a large
  part of a small product's time, and a ratio of whole timings then
  takes a bfloat16 tensor-core peak for a third of itself); else that
  peak times its throughput over ``dtype``'s on the same einsum.

  Example:
    >>> from costmodels.calibrate.timings import Sample
    >>> ts = [Sample("matmul", "", 1, 0, f, 1e-5 + f / p, dtype=d)
    ...       for d, p in (("float32", 1e12), ("bfloat16", 8e12))
    ...       for f in (1e8, 1e10)]
    >>> [(d, round(p / 1e12, 6)) for d, p in
    ...  matmul_peaks_by_dtype(ts, "float32", 1e12)]
    [('float32', 1.0), ('bfloat16', 8.0)]
  """
  alone = [s for s in samples if s.what == "matmul" and s.group_size == 1
           and s.seconds > 0 and s.pattern in ("", "matmul")]
  base = {s.flops: s.flops / s.seconds for s in alone if s.dtype == dtype}
  out = [(dtype, float(peak_flops_per_s))]
  for s in alone:
    if s.dtype == dtype or s.dtype in dict(out):
      continue
    mine = [x for x in alone if x.dtype == s.dtype]
    if len({x.flops for x in mine}) >= 2:
      (_, inv_peak), _ = nonneg_lstsq([[1.0, x.flops] for x in mine],
                                      [x.seconds for x in mine])
      if inv_peak > 0:
        out.append((s.dtype, 1.0 / float(inv_peak)))
        continue
    if s.flops in base:
      out.append((s.dtype, float(peak_flops_per_s) * (s.flops / s.seconds)
                  / base[s.flops]))
  return tuple(out)
