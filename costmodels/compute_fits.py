"""Measured compute costs per contraction pattern: what calibration fits,
and how a record of that pattern is priced.

One dense peak per dtype prices every contraction alike, but on CPU the
same FLOPs take an order of magnitude longer when TF must transpose an
operand or the result around its matmul (about 10 against 145 GFLOP/s,
measured at the zoo's sizes), and convolutions run their own kernels.  A
calibrated :class:`~costmodels.hardware.ChipSpec` therefore carries one
:class:`ComputeClassFit` per pattern it measured -- ``matmul``,
``batched``, ``transposed``, ``product``, ``conv``, ``conv_filter``: the
patterns of :data:`mesh_tf.lowering.einsum_kernels.PATTERNS`, which the
lowering writes into each :class:`mesh_tf.ComputeRecord`, and
``elementwise`` for every record that is not a contraction (memory-bound
work shares the memory bandwidth across devices) -- and a record
of that pattern takes, on each device while every device of the topology
computes (so shared compute is in the fit), beyond the chip's launch cost

    ``latency_s + flops / flops_per_s + bytes / bandwidth_bytes_per_s``

(``bytes`` read and written: memory-bound work's, a convolution's, and
in a calibrated topology every pattern's cost of a byte in a step,
see :mod:`costmodels.calibrate.record_costs`).
A record whose pattern has no fit (every preset) keeps the chip's roofline.

A convolution's fit may also carry a ``tile``: ``(width, in_channels,
out_channels)`` blocks in which its kernel computes the output.  CPU
convolution kernels (oneDNN's, under TF) vectorise over output channels
and unroll over the output's innermost spatial dim, so a block that the
record's slice fills only in part costs a whole one: its ``flops`` term is
the FLOPs of the record's dims rounded up to whole blocks
(:func:`tiled_flops`, with the record's
:attr:`~mesh_tf.lowering.trace.ComputeRecord.conv`).  Measured on 8
logical CPU devices of a 2-core machine, all at once: a ``[8, 18, 18, 4,
8]`` volume (output width 2) convolved to 8 channels took 2.2x the time of
``[8, 4, 18, 18, 8]`` (width 16), the same FLOPs; one convolved to a
single output channel 4.6x that of 8 output channels on an eighth of the
volume.  A layout that splits a convolution's width or channels makes
such slices; without tiles the model priced them at their FLOPs and ranked
them as good as splitting the depth.

Example:
  >>> f = ComputeClassFit("transposed", 2e-6, 1e10, 4e9)
  >>> round(f.time_s(1e8, 4e6) * 1e3, 3)   # 2 us + 10 ms + 1 ms
  11.002
"""

import math
from typing import NamedTuple

from costmodels.errors import TopologyError


class ComputeClassFit(NamedTuple):
  """The measured speed of one contraction pattern per device, all the
  topology's devices computing at once.

  Attributes:
    pattern: e.g. ``"transposed"`` (see the module docstring).
    latency_s: fixed seconds per record beyond the chip's launch cost.
    flops_per_s: FLOP/s of that pattern, in the calibration's dtype
      (other dtypes scale by the chip's matmul peak ratio); ``inf`` where
      the bytes term alone explains the timings (``elementwise``).
    bandwidth_bytes_per_s: rate of the bytes term (``inf``: none).
    rel_residual: RMS relative residual of the fit.
    samples: timings it was fitted on.
    input_bandwidth_bytes_per_s: rate of a term in the bytes the record
      reads, on top of the bytes term (``inf``: none).  The convolutions
      have one: with few channels a 3-D convolution's time follows the
      volume it reads, its FLOPs hardly (on 8 logical CPU devices of a
      2-core machine, ``[1, 16^3, 8] -> 1`` filter took as long as ``-> 8``
      filters, 8x its FLOPs, and 2x the time of ``[1, 16^3, 1] -> 8``).
    tile: ``(width, in_channels, out_channels)`` blocks of a convolution
      kernel (module docstring), ``()``: FLOPs as they are.
  """
  pattern: str
  latency_s: float
  flops_per_s: float
  bandwidth_bytes_per_s: float = math.inf
  rel_residual: float = 0.0
  samples: int = 0
  input_bandwidth_bytes_per_s: float = math.inf
  tile: tuple = ()

  def time_s(self, flops, nbytes, flops_scale=1.0, input_bytes=0, conv=()):
    """Seconds of one record alone (``nbytes`` read and written,
    ``input_bytes`` of them read, ``conv`` the dims of a convolution
    record); ``flops_scale`` multiplies the FLOP rate (a dtype faster or
    slower than the calibrated one)."""
    flops = tiled_flops(flops, conv, self.tile)
    return (self.latency_s + flops / (self.flops_per_s * flops_scale)
            + nbytes / self.bandwidth_bytes_per_s
            + input_bytes / self.input_bandwidth_bytes_per_s)


def tiled_flops(flops, dims, tile):
  """``flops`` of a convolution whose ``dims`` (``(out_width,
  in_channels, out_channels)``) are rounded up to whole blocks of
  ``tile``; ``flops`` as they are where either is ``()``.

  Example:
    >>> tiled_flops(1000, (2, 8, 1), (8, 1, 4))   # width 2 of 8, 1 of 4
    16000.0
    >>> tiled_flops(1000, (16, 8, 8), (8, 1, 4)), tiled_flops(1000, (), (8,))
    (1000.0, 1000)
  """
  if not dims or not tile:
    return flops
  return flops * math.prod(-(-d // b) * b / d for d, b in zip(dims, tile))


def check_compute_fit(fit):
  """``fit`` if its numbers are usable, else TopologyError naming them."""
  if fit.tile and (len(fit.tile) != 3 or not all(
      isinstance(b, int) and b >= 1 for b in fit.tile)):
    raise TopologyError(
        f"compute fit of pattern {fit.pattern!r} needs a tile of 3 positive "
        f"integers (width, in_channels, out_channels) or none, got "
        f"{fit.tile!r}; recalibrate")
  if not (fit.flops_per_s > 0 and fit.bandwidth_bytes_per_s > 0
          and fit.input_bandwidth_bytes_per_s > 0 and fit.latency_s >= 0):
    raise TopologyError(
        f"compute fit of pattern {fit.pattern!r} needs flops_per_s > 0, "
        f"bandwidth_bytes_per_s > 0, input_bandwidth_bytes_per_s > 0 and "
        f"latency_s >= 0, got {fit.flops_per_s!r}, "
        f"{fit.bandwidth_bytes_per_s!r}, {fit.input_bandwidth_bytes_per_s!r}, "
        f"{fit.latency_s!r}; recalibrate")
  return fit
