"""Roofline compute time of the slicewise work one device does.

The lowering records one :class:`mesh_tf.lowering.trace.ComputeRecord` per
slicewise computation with its FLOPs and output bytes *per device*.  Those
FLOPs are exact for einsum (``2 * prod(slice sizes of all dims)``) and count
replicated work wherever a layout leaves a dim unsplit: every device
computes its whole slice.

Time per record is the roofline

    ``t = max(flops / peak(record), bytes / hbm_bandwidth_bytes_per_s)``

with ``bytes`` the bytes the kernel reads (its input slices, weights
included) plus the bytes it writes.  Counting reads matters for
memory-bound work such as one-token decoding, whose time is reading the
weights and the cache.  ``peak(record)`` is the chip's dense matmul peak
for the record's dtype when it is a contraction, else its vector peak (see
:func:`costmodels.precision.record_peak_flops_per_s`): a float32 einsum
on an A100 runs at the TF32 156 TFLOP/s, not the bf16 312.
"""

from costmodels import hardware
from costmodels import precision


def roofline_time(flops, nbytes, chip, dtype="bfloat16", matmul=True):
  """``max(flops / peak, nbytes / hbm_bandwidth)`` seconds on ``chip``.

  ``peak`` is the matmul peak of ``dtype`` (or the vector peak when
  ``matmul`` is False).

  Example:
    >>> chip = hardware.CHIPS["tpu-v4"]
    >>> roofline_time(275e12, 0, chip)
    1.0
    >>> roofline_time(156e12, 0, "a100", "float32")   # TF32 tensor cores
    1.0
  """
  chip = hardware.get_chip(chip)
  peak = precision.peak_flops_per_s(chip, dtype, matmul)
  return max(flops / peak, nbytes / chip.hbm_bandwidth_bytes_per_s)


def compute_time(record, chip):
  """Roofline seconds of one ComputeRecord on ``chip``."""
  return roofline_time(record.flops_per_device,
                       record.output_bytes_per_device
                       + record.input_bytes_per_device, chip,
                       record.dtype, record.matmul)


def arithmetic_intensity(record):
  """FLOPs per byte moved (read + written) of a ComputeRecord."""
  nbytes = record.output_bytes_per_device + record.input_bytes_per_device
  if nbytes == 0:
    return float("inf")
  return record.flops_per_device / nbytes
