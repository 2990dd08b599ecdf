"""Least-squares fits of cost parameters to measured timings (numpy only).

Every cost term is linear in its parameters once its law is fixed, e.g. a
collective's ``T = latency * steps(p) + volume(p, n) / bandwidth`` is linear
in ``(latency, 1 / bandwidth)``.  :func:`nonneg_lstsq` fits such a model with
non-negative coefficients, minimising the *relative* residuals (a timing of
10 us matters as much as one of 10 ms), and :func:`fit_collective` tries
every law pair of :mod:`costmodels.collective_fits` and keeps the best.

Samples are plain :class:`Sample` tuples, so fits can be checked against
synthetic timings made from known parameters (see the tests).

Example:
  >>> xs = [[1.0, n] for n in (1e3, 1e4, 1e5)]
  >>> ys = [2e-6 + n / 1e9 for n in (1e3, 1e4, 1e5)]
  >>> coef, rel = nonneg_lstsq(xs, ys)
  >>> [float(f"{c:.3g}") for c in coef], rel < 1e-9
  ([2e-06, 1e-09], True)
"""

import itertools
import math
from typing import NamedTuple, Optional, Tuple

import numpy as np

from costmodels.collective_fits import (STEP_LAWS, VOLUME_LAWS,
                                        CollectiveFit)
from costmodels.calibrate import conv_tiles
from costmodels.compute_fits import ComputeClassFit
from mesh_tf.core.errors import MtfError


class CalibrationError(MtfError):
  """Calibration cannot measure or fit what it was asked to."""


class Sample(NamedTuple):
  """One measured timing.

  Attributes:
    what: ``"allreduce"``, ``"allgather"``, ``"alltoall"``, ``"permute"``,
      ``"allsplit"``, ``"matmul"``, ``"elementwise"``, ``"launch"`` or
      ``"step"`` (a reference training step; ``flops`` holds its number of
      compute records).
    axis: the mesh axis (collectives), or ``""``.
    group_size: participants (collectives), or devices that ran at once.
    nbytes: input bytes per participant (collectives, elementwise) or 0.
    flops: FLOPs per device (matmul; for collectives, those of the rep's
      shape-restoring kernel) or 0.
    seconds: the median measured time of one operation (for collectives,
      the whole rep: the collective and its shape-restoring kernel).
    dtype: the data type.
    link: the physical dimension the axis runs over (collectives):
      ``"device"``, ``"process"``, or ``""`` if it spans both.
    companion_bytes: bytes read + written by the rep's shape-restoring
      kernel (collectives).
    pattern: the contraction pattern of a ``matmul`` timing (see
      :mod:`costmodels.compute_fits`), the model of a ``model_step``
      timing, or ``""``.
    records: of a ``model_step`` timing (one training step of a small
      model, its compute negligible): ``((class, count, flops, bytes,
      matrices), ...)``, its compute records per pricing class (the
      record's pattern, or ``"elementwise"``), with their FLOPs and bytes
      per device summed and the ``(batch, rows, cols)`` of each matrix
      product (files written before have no ``matrices``).
    messages, collectives, blocking: of a ``model_step`` timing:
      ``sum(group_size - 1)`` over the step's collectives (the slices each
      device receives), how many collectives it runs (0 in older files:
      ``messages / (n - 1)``, on ``x:n``) and how many of them it waits
      for (all but its gradient syncs; None in older files).
    matrix: of a ``kernel`` timing (a chain of tiny matrix products, their
      FLOPs negligible, all devices at once) or an einsum's (``matmul``):
      the product's ``(batch, rows, cols)``; see
      :func:`fit_threaded_kernel` and :func:`fit_patterns`.
    input_bytes: of a convolution timing: the bytes of ``nbytes`` it reads
      (its two operands), as a record counts them.
    conv: of a convolution timing: ``(out_width, in_channels,
      out_channels)``, as a record's ``conv`` (files written before: ``()``).

  ``overlap_comm``, ``overlap_compute`` and ``overlap_both`` timings (an
  all-reduce of ``nbytes`` over ``axis``, an einsum chain of ``flops``, and
  the two in one call) measure the overlap efficiency.
  """
  what: str
  axis: str
  group_size: int
  nbytes: int
  flops: float
  seconds: float
  dtype: str = "float32"
  link: str = ""
  companion_bytes: int = 0
  pattern: str = ""
  records: tuple = ()
  messages: int = 0
  matrix: tuple = ()
  input_bytes: int = 0
  collectives: int = 0
  conv: tuple = ()
  blocking: int = None


def sample_from_dict(d):
  """The :class:`Sample` of a dict as JSON gives it back (``records`` as
  lists), with tuples again; keys that are not fields (``event``) are
  dropped."""
  d = {k: v for k, v in d.items() if k in Sample._fields}
  d["records"] = tuple(
      tuple(r[:4]) + ((tuple(tuple(m) for m in r[4]),) if len(r) > 4 else ())
      for r in d.get("records", ()))
  d["matrix"] = tuple(d.get("matrix", ()))
  d["conv"] = tuple(d.get("conv", ()))
  return Sample(**d)


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
  best = best_nonneg(
      a * w[:, None], (y - off) * w,
      lambda coef: float(np.sqrt(np.mean(((off + a @ coef - y) / y) ** 2))),
      1e-15)
  if best is None:
    return np.zeros(a.shape[1]), 1.0
  return best


def best_nonneg(a, y, score, tol):
  """``(coef, score)`` of the best non-negative least-squares solution of
  ``a @ coef ~ y``, or None if none is non-negative.

  Few parameters: every subset of free coefficients (the others 0) is
  solved and the non-negative solution with the lowest ``score(coef)``
  (lower by more than ``tol``) kept -- exact NNLS for small ``a.shape[1]``.
  """
  k = a.shape[1]
  best = None
  for r in range(k, 0, -1):
    for cols in itertools.combinations(range(k), r):
      sol, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
      if np.any(sol < 0):
        continue
      coef = np.zeros(k)
      coef[list(cols)] = sol
      res = score(coef)
      if best is None or res < best[1] - tol:
        best = (coef, res)
  return best


def rel_errors(pred, meas):
  """``(pred - meas) / meas`` elementwise, as a numpy array."""
  pred, meas = np.asarray(pred, float), np.asarray(meas, float)
  return (pred - meas) / meas


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


def _alone(s, num_devices):
  return s.group_size == 1 and num_devices > 1


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


#: The patterns whose records are matrix products (a ``matrix`` to price
#: the threaded-kernel cost by, see :func:`fit_threaded_kernel`).
THREADED_PATTERNS = ("matmul", "batched", "transposed")
#: The convolution patterns (a term in the bytes they read, see
#: :class:`~costmodels.compute_fits.ComputeClassFit`).
CONV_PATTERNS = ("conv", "conv_filter")


def fit_patterns(samples, dtype, num_devices, launch_s, threaded_s=0.0,
                 matrix_s=0.0):
  """One :class:`~costmodels.compute_fits.ComputeClassFit` per contraction
  pattern, and one for ``elementwise`` (vector) work, timed on all
  ``num_devices`` devices at once, in ``dtype`` (how
  models run: the patterns contend for shared cores and memory unlike
  each other, e.g. transposes are memory-bound).

  Model: ``T = launch_s + latency + F / flops_per_s + B / bandwidth``
  (``B`` read + written, for ``elementwise`` and convolutions: a product's
  chain bytes, hot in cache, grow with its FLOPs and a byte term for them
  came and went run to run, taking the in-step byte cost along), non-
  negative least squares on relative residuals of the whole
  timing ``T``, with one fixed term ``c`` whose excess over the chip's
  ``launch_s`` is the pattern's ``latency`` (``max(c - launch_s, 0)``; for
  a matrix product, whose probes are all too large to run inline, less the
  ``threaded_s`` the chip adds to such products too; and each timing of a
  batched product first less the ``matrix_s`` the chip adds per matrix of
  its batch beyond the first, by its sample's ``matrix``); a pattern timed
  at fewer than two sizes fits its FLOP rate alone.  (With ``launch_s``
  taken off each timing first, the smallest, near zero, decided the fit:
  elementwise bandwidth 220 GB/s per device where every timing said 4-8.)

  Returns:
    A tuple of fits, sorted by pattern.

  Timings that do not grow with size (noise): one rate through the origin.

  Raises:
    CalibrationError: if a pattern's timings cannot be fitted at all.
  """
  by = {}
  for s in samples:
    if s.group_size != num_devices or s.dtype != dtype:
      continue
    if s.what == "matmul" and s.pattern:
      by.setdefault(s.pattern, []).append(s)
    elif s.what == "elementwise":
      # Memory-bound work on all devices shares the memory bandwidth:
      # slowed 10-14x where the matmuls' shared-compute factor says 6-7x.
      by.setdefault("elementwise", []).append(s)
  out = []
  for pattern, rows in sorted(by.items()):
    if pattern in THREADED_PATTERNS and matrix_s:
      rows = [s._replace(seconds=max(
          s.seconds - matrix_s * (s.matrix[0] - 1), 0.5 * s.seconds))
              if len(s.matrix) == 3 else s for s in rows]
    fixed = 1.0 if len(rows) >= 2 else 0.0
    # Fits through the origin price the time beyond the launch.
    net = [max(s.seconds - launch_s, 0.02 * s.seconds) for s in rows]
    ys = [s.seconds for s in rows] if fixed else net
    # Convolutions timed at shapes that vary their channels apart from
    # their FLOPs also fit the bytes they read (ComputeClassFit).
    reads = pattern in CONV_PATTERNS and len(rows) >= 4 and len(
        {s.input_bytes for s in rows}) > 1
    if pattern == "elementwise":   # its FLOPs are its bytes: bytes only
      xs = [[fixed, 0.0, s.nbytes] for s in rows]
    elif len(rows) >= 3:   # bytes: convolutions' only (docstring)
      conv = float(pattern in CONV_PATTERNS)
      xs = [[1.0, s.flops, conv * s.nbytes] + [s.input_bytes] * reads
            for s in rows]
    else:
      xs = [[fixed, s.flops, 0.0] for s in rows]
    # ... and, at shapes that vary their width and channels, the tile
    # their kernel computes the output in (conv_tiles).
    tile, xs = (conv_tiles.best_tile(rows, xs, ys, nonneg_lstsq) if reads
                else ((), xs))
    coef, res = nonneg_lstsq(xs, ys)
    lat, inv_peak, inv_bw = coef[:3]
    inv_in = coef[3] if reads else 0.0
    # A term that explains under a millionth of any timing is round-off.
    tiny = 1e-6 * max(ys)
    inv_peak = inv_peak if inv_peak * max(x[1] for x in xs) > tiny else 0
    inv_bw = inv_bw if inv_bw * max(s.nbytes for s in rows) > tiny else 0.0
    if inv_in * max(s.input_bytes for s in rows) <= tiny:
      inv_in = 0.0
    if inv_peak <= 0 and inv_bw <= 0 and inv_in <= 0:
      # Timings that do not grow with size (noise on a shared machine, or
      # sizes too close): one rate through the origin instead, so that the
      # pattern is still priced by its own measured speed.
      col = 2 if pattern == "elementwise" else 1
      xs = [[0.0, 0.0, 0.0] for _ in rows]
      for x, s in zip(xs, rows):
        x[col] = s.nbytes if col == 2 else s.flops
      fixed, tile = 0.0, ()
      (lat, inv_peak, inv_bw), res = nonneg_lstsq(xs, net)
    if inv_peak <= 0 and inv_bw <= 0 and inv_in <= 0:
      raise CalibrationError(f"the {pattern} timings cannot be fitted to "
                             "their size; measure larger sizes")
    if fixed:
      lat = max(float(lat) - launch_s - (
          threaded_s if pattern in THREADED_PATTERNS else 0.0), 0.0)
    out.append(ComputeClassFit(pattern, float(lat),
                               1.0 / inv_peak if inv_peak > 0 else math.inf,
                               1.0 / inv_bw if inv_bw > 0 else math.inf,
                               float(res), len(rows),
                               1.0 / inv_in if inv_in > 0 else math.inf,
                               tile))
  return tuple(out)


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


def overlap_efficiency_of(comm_s, compute_s, both_s):
  """``eta`` of one timed triple (see :func:`fit_overlap`), in [0, 1].

    >>> round(overlap_efficiency_of(1.0, 4.0, 4.5), 6)   # all hidden
    0.5
    >>> round(overlap_efficiency_of(4.0, 1.0, 4.75), 6)  # 0.25 = eta**2
    0.5
  """
  x = comm_s + compute_s - both_s
  if x <= 0 or comm_s <= 0 or compute_s <= 0:
    return 0.0
  eta = x / comm_s if comm_s * comm_s <= x * compute_s else math.sqrt(
      x / compute_s)
  return min(1.0, eta)


def fit_overlap(samples, link):
  """The overlap efficiency of the axes on physical link ``link``, or
  None if it has no overlap timings.

  Per timed triple -- an all-reduce alone (``M``), an einsum chain alone
  (``C``), both in one call (``T``) -- the cost model's law with the sync
  released as compute starts (:mod:`costmodels.overlap`: exposed ``E =
  max(0, M - eta C)``, and each hidden second slows the compute by ``1 -
  eta``), ``T = C + E + (1 - eta)(M - E)``, is solved for ``eta`` with the
  saving ``x = M + C - T``: ``eta = x / M`` where the compute hides all of
  the communication (``M**2 <= x C``), else ``eta = sqrt(x / C)``.  The
  estimate is the median over triples, clipped to ``[0, 1]``.

  Returns:
    ``(eta, samples, rel_spread)``: the median, the triple count and the
    median absolute deviation of the per-triple values.
  """
  parts = {}
  for s in samples:
    if s.what.startswith("overlap_") and s.link == link:
      parts.setdefault((s.axis, s.nbytes, s.flops), {})[s.what] = s.seconds
  etas = []
  for p in parts.values():
    if len(p) == 3:
      m, c, t = p["overlap_comm"], p["overlap_compute"], p["overlap_both"]
      etas.append(overlap_efficiency_of(m, c, t))
  if not etas:
    return None
  eta = float(np.median(etas))
  return eta, len(etas), float(np.median(np.abs(np.array(etas) - eta)))


def matmul_peaks_by_dtype(samples, dtype, peak_flops_per_s):
  """``((dtype, flops_per_s), ...)``: ``dtype`` at the fitted
  ``peak_flops_per_s``, and every other dtype timed on one device alone at
  that peak times its throughput over ``dtype``'s on the same einsum."""
  alone = [s for s in samples if s.what == "matmul" and s.group_size == 1
           and s.seconds > 0 and s.pattern in ("", "matmul")]
  base = {s.flops: s.flops / s.seconds for s in alone if s.dtype == dtype}
  out = [(dtype, float(peak_flops_per_s))]
  for s in alone:
    if s.dtype != dtype and s.flops in base and s.dtype not in dict(out):
      out.append((s.dtype, float(peak_flops_per_s) * (s.flops / s.seconds)
                  / base[s.flops]))
  return tuple(out)


def axis_link(samples, axis) -> Optional[str]:
  """The physical link name recorded for ``axis`` in ``samples``."""
  for s in samples:
    if s.axis == axis and s.link:
      return s.link
  return None
