"""Roofline compute time of the slicewise work one device does.

The lowering records one :class:`mesh_tf.lowering.trace.ComputeRecord` per
slicewise computation with its FLOPs and output bytes *per device*.  Those
FLOPs are exact for einsum (``2 * prod(slice sizes of all dims)``) and count
replicated work wherever a layout leaves a dim unsplit: every device
computes its whole slice.

Time per record is the roofline

    ``t = max(flops / peak_bf16_flops_per_s,
              bytes / hbm_bandwidth_bytes_per_s)``

with ``bytes`` the record's output bytes (what the kernel writes to HBM).
Reads are not in the trace, so memory-bound kernels are, if anything,
underestimated; the same rule applies to every layout, so comparisons
between layouts stay fair.  All FLOPs run at the chip's dense bf16 peak.
"""

from costmodels import hardware


def roofline_time(flops, nbytes, chip):
  """``max(flops / peak, nbytes / hbm_bandwidth)`` seconds on ``chip``.

  Example:
    >>> chip = hardware.CHIPS["tpu-v4"]
    >>> roofline_time(275e12, 0, chip)
    1.0
  """
  chip = hardware.get_chip(chip)
  return max(flops / chip.peak_bf16_flops_per_s,
             nbytes / chip.hbm_bandwidth_bytes_per_s)


def compute_time(record, chip):
  """Roofline seconds of one ComputeRecord on ``chip``."""
  return roofline_time(record.flops_per_device,
                       record.output_bytes_per_device, chip)


def arithmetic_intensity(record):
  """FLOPs per output byte of a ComputeRecord (inf if it writes nothing)."""
  if record.output_bytes_per_device == 0:
    return float("inf")
  return record.flops_per_device / record.output_bytes_per_device
