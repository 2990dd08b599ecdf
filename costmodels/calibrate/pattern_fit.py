"""One fit per contraction pattern (and elementwise work), on all devices
at once: :func:`fit_patterns`."""

import math

from costmodels.calibrate import conv_tiles
from costmodels.calibrate.least_squares import nonneg_lstsq
from costmodels.calibrate.timings import CalibrationError
from costmodels.compute_fits import ComputeClassFit


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
    shapes = len({(s.conv, s.flops) for s in rows})
    reads = pattern in CONV_PATTERNS and len(rows) >= 4 and len(
        {s.input_bytes for s in rows}) > 1 and (
            shapes >= conv_tiles.MIN_SHAPES or not all(s.conv for s in rows))
    # Convolutions timed at a few shapes that vary their channels and width
    # (the quick plan's thin ones): a FLOP rate and the blocks of a tile,
    # nothing else (conv_tiles.best_tile, few).
    thin = (pattern in CONV_PATTERNS and not reads
            and shapes >= conv_tiles.THIN_SHAPES)
    if pattern == "elementwise":   # its FLOPs are its bytes: bytes only
      xs = [[fixed, 0.0, s.nbytes] for s in rows]
    elif thin:
      xs = [[1.0, s.flops, 0.0] for s in rows]
    elif len(rows) >= 3:   # bytes: convolutions' only (docstring)
      conv = float(pattern in CONV_PATTERNS)
      xs = [[1.0, s.flops, conv * s.nbytes] + [s.input_bytes] * reads
            for s in rows]
    else:
      xs = [[fixed, s.flops, 0.0] for s in rows]
    # ... and, at shapes that vary their width and channels, the tile
    # their kernel computes the output in (conv_tiles).
    tile, xs = (conv_tiles.best_tile(rows, xs, ys, nonneg_lstsq,
                                     few=thin)
                if reads or thin else ((), xs))
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
