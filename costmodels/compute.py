"""Roofline compute time of the slicewise work one device does.

The lowering records one :class:`mesh_tf.lowering.trace.ComputeRecord` per
slicewise computation with its FLOPs and output bytes *per device*.  Those
FLOPs are exact for einsum (``2 * prod(slice sizes of all dims)``) and count
replicated work wherever a layout leaves a dim unsplit: every device
computes its whole slice.

Time per record is the roofline

    ``t = max(flops / peak_bf16_flops_per_s,
              bytes / hbm_bandwidth_bytes_per_s)``

with ``bytes`` the bytes the kernel reads (its input slices, weights
included) plus the bytes it writes, and the record's time is

    ``launch_overhead_s + shared_compute_factor * t``

with both terms from the :class:`~costmodels.hardware.ChipSpec` (0 and 1 for
every preset, so there it is the plain roofline; a calibrated topology
measures them: the fixed cost of launching a kernel, and how much slower a
device is when the devices of the topology share compute).  Counting reads
matters for memory-bound work such as one-token decoding, whose time is
reading the weights and the cache.  All FLOPs run at the chip's dense bf16 peak.
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
  """Seconds of one ComputeRecord on ``chip``: its launch cost plus its
  roofline, scaled by the chip's shared-compute factor (see the module
  docstring)."""
  t = roofline_time(record.flops_per_device,
                    record.output_bytes_per_device
                    + record.input_bytes_per_device, chip)
  if chip.launch_overhead_s == 0.0 and chip.shared_compute_factor == 1.0:
    return t  # the presets: exactly the roofline
  return chip.launch_overhead_s + chip.shared_compute_factor * t


def arithmetic_intensity(record):
  """FLOPs per byte moved (read + written) of a ComputeRecord."""
  nbytes = record.output_bytes_per_device + record.input_bytes_per_device
  if nbytes == 0:
    return float("inf")
  return record.flops_per_device / nbytes
