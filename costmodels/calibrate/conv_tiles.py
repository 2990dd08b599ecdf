"""Fitting the tile a convolution kernel computes its output in.

A convolution's timings on CPU do not follow its FLOPs once a slice is
thin: the kernel computes its output in blocks of output channels and of
the output's innermost spatial dim (see :mod:`costmodels.compute_fits`),
so a width of 2 or a single output channel costs about a whole block.
Calibration times the convolutions at shapes that vary their width and
channels apart from their FLOPs (``costmodels.calibrate.measure``'s plan),
and :func:`best_tile` picks the ``(width, in_channels, out_channels)``
blocks whose rounded-up FLOPs (:func:`costmodels.compute_fits.tiled_flops`)
fit those timings best, each block one of :data:`BLOCKS`.

Several tiles often fit equally well (with output channels of 8 and 1
only, blocks of 8 and 16 scale every timing alike, and the FLOP rate takes
up the difference); the smallest of them is kept, so that no block is
larger than the timings show.  A tile is kept only where it lowers the
fit's residual by :data:`MARGIN` or more: noise must not invent one.

Example:
  >>> from costmodels.calibrate.least_squares import nonneg_lstsq
  >>> from costmodels.calibrate.timings import Sample
  >>> from costmodels.compute_fits import tiled_flops
  >>> dims = [(14, 8, 8), (2, 8, 8), (4, 8, 8), (14, 1, 8), (14, 8, 1),
  ...         (14, 4, 8)]
  >>> rows = [Sample("matmul", "", 8, 0, 1e6, 1e-4 + tiled_flops(
  ...     1e6, d, (8, 1, 4)) / 1e10, pattern="conv", conv=d) for d in dims]
  >>> xs = [[1.0, s.flops, 0.0] for s in rows]
  >>> best_tile(rows, xs, [s.seconds for s in rows], nonneg_lstsq)[0]
  (8, 1, 4)
"""

import itertools
import math

from costmodels.compute_fits import tiled_flops

#: The block sizes a tile's dims are chosen from.
BLOCKS = (1, 2, 4, 8, 16)

#: How much a tile must lower the relative residual (a fraction of the
#: residual without one) to be kept.
MARGIN = 0.2

#: Timings of distinct shapes a tile needs (it adds three unknowns to the
#: fit's four).
MIN_SHAPES = 6

#: Timings of distinct shapes a tile of few shapes needs (the quick plan's
#: thin convolutions: one shape full, one with a single input channel, one
#: with a single output channel, and one two columns wide; a block per dim
#: they vary apart, beside the two unknowns of the fit).
THIN_SHAPES = 3

#: Residuals this close (relative, or within 1e-6) count as equal; the
#: smallest tile wins.
TIE = 0.01


def best_tile(rows, xs, ys, solve, flops_col=1, few=False):
  """``(tile, xs)``: the tile that fits ``rows`` best, and ``xs`` with its
  FLOP column (``flops_col``) rounded up to it; ``((), xs)`` where no tile
  lowers the residual by :data:`MARGIN`, or the rows are too few or lack
  their ``conv`` dims.

  Args:
    rows: the convolution :class:`~costmodels.calibrate.timings.Sample` s.
    xs: their feature rows, as the pattern fit builds them.
    ys: their timings.
    solve: ``solve(xs, ys) -> (coef, rel_rms)``
      (:func:`costmodels.calibrate.least_squares.nonneg_lstsq`).
    few: the quick plan's thin convolutions, from :data:`THIN_SHAPES`
      shapes or more: blocks of input and output channels, and of the
      width only where the rows' output widths differ (else the width
      block is 1).
  """
  need = THIN_SHAPES if few else MIN_SHAPES
  if len({(s.conv, s.flops) for s in rows}) < need or not all(
      len(s.conv) == 3 for s in rows):
    return (), xs
  floor = solve(xs, ys)[1]
  if floor < 1e-9:   # the FLOPs as they are explain every timing already
    return (), xs
  found = []
  widths = (1,) if few and len({s.conv[0] for s in rows}) < 2 else BLOCKS
  for tile in itertools.product(widths, BLOCKS, BLOCKS):
    if tile == (1, 1, 1):
      continue
    txs = _with_flops(rows, xs, tile, flops_col)
    found.append((solve(txs, ys)[1], math.prod(tile), tile, txs))
  best = min(r for r, *_ in found)
  if best > floor * (1.0 - MARGIN):
    return (), xs
  near = max(best * (1 + TIE), best + 1e-6)
  _, _, tile, txs = min((f for f in found if f[0] <= near),
                        key=lambda f: (f[1], f[2]))
  return tile, txs


def _with_flops(rows, xs, tile, col):
  return [list(x[:col]) + [tiled_flops(s.flops, s.conv, tile)]
          + list(x[col + 1:]) for x, s in zip(xs, rows)]
