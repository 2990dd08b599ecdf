"""Roofline compute time of the slicewise work one device does.

The lowering records one :class:`mesh_tf.lowering.trace.ComputeRecord` per
slicewise computation with its FLOPs and output bytes *per device*.  Those
FLOPs are exact for einsum (``2 * prod(slice sizes of all dims)``) and count
replicated work wherever a layout leaves a dim unsplit: every device
computes its whole slice.

Time per record is the roofline

    ``t = max(flops / rate(record), bytes / hbm_bandwidth_bytes_per_s)``

with ``bytes`` the bytes the kernel reads (its input slices, weights
included) plus the bytes it writes.  Counting reads matters for
memory-bound work such as one-token decoding, whose time is reading the
weights and the cache.  ``rate(record)`` is, for a contraction, the chip's
*achievable* dense matmul rate for the record's dtype -- the datasheet
peak times the fraction large matmuls measure on it
(``ChipSpec.matmul_efficiency``: 85.9% on an A100, 80.1% on an H100) --
else its vector peak (see
:func:`costmodels.precision.record_flops_per_s`): a float32 einsum
on an A100 runs at the TF32 156 TFLOP/s (times that fraction), not the
bf16 312.  Model-FLOPs utilisation, by its definition, still divides by
the datasheet peak.

A record whose ``pattern`` (how its contraction runs: plain matmul,
batched, with transposes, convolution; ``elementwise`` for every record
that is not a contraction; see :mod:`costmodels.compute_fits`) has a
measured fit on the chip takes
``launch_overhead_s + max(fit.time_s(flops, bytes), shared_compute_factor
* bytes / hbm_bandwidth_bytes_per_s)`` instead (a convolution's FLOPs
rounded up to its fit's tile, :func:`costmodels.compute_fits.tiled_flops`):
the fit was measured with
every device of the topology computing at once, so shared compute is in
it.  Its FLOP rate is scaled by the chip's peak of the record's dtype over
its calibrated peak.

A record's time is ``launch_overhead_s + shared_compute_factor * t``, both
terms from the :class:`~costmodels.hardware.ChipSpec`: 0 and 1 for every
preset (so there it is the plain roofline); a calibrated topology measures
them (the fixed cost of launching a kernel, and how much slower a device is
when the devices of the topology share compute).  A matrix product whose
kernel is too large to run inline adds the chip's ``threaded_kernel_s``
(:func:`threaded_kernel_time`; 0 for the presets): on CPU, TF runs a
product of up to 16 rows and 64 columns on the calling thread and hands a
larger one, or a batch of two or more, to its thread pool, which cost
about 115-200 us a product more on 8 logical CPU devices of a 2-core
machine, all computing at once, however few its FLOPs; and each matrix of
a batched product beyond the first adds ``batch_matrix_s`` (about 0.7 us
there: the MoE's expert einsums multiply hundreds of 1x1 to 16x8 matrices
per device; measured, :mod:`costmodels.calibrate`).
"""

from costmodels import hardware
from costmodels import precision


def roofline_time(flops, nbytes, chip, dtype="bfloat16", matmul=True):
  """``max(flops / rate, nbytes / hbm_bandwidth)`` seconds on ``chip``.

  ``rate`` is the achievable matmul rate of ``dtype`` (datasheet peak
  times ``chip.matmul_efficiency(dtype)``), or the vector peak when
  ``matmul`` is False.

  Example:
    >>> round(roofline_time(267.9e12, 0, "a100"), 9)  # 85.9% of 312e12
    1.0
    >>> roofline_time(19.5e12, 0, "a100", "float32", matmul=False)
    1.0
  """
  chip = hardware.get_chip(chip)
  rate = precision.achievable_flops_per_s(chip, dtype, matmul)
  return max(flops / rate, nbytes / chip.hbm_bandwidth_bytes_per_s)


def compute_time(record, chip):
  """Seconds of one ComputeRecord on ``chip``: its roofline (at the peak of
  its dtype), plus the chip's launch cost, scaled by its shared-compute
  factor; or its pattern's measured fit (see the module docstring)."""
  chip = hardware.get_chip(chip)
  nbytes = record.output_bytes_per_device + record.input_bytes_per_device
  fit = (chip.compute_fit(record.pattern if record.matmul
                          else "elementwise")
         if chip.compute_fits else None)
  if fit is not None:
    scale = (precision.peak_flops_per_s(chip, record.dtype, True)
             / chip.peak_bf16_flops_per_s)
    return chip.launch_overhead_s + threaded_kernel_time(record, chip) + max(
        fit.time_s(record.flops_per_device, nbytes, scale,
                   record.input_bytes_per_device, record.conv),
        chip.shared_compute_factor * nbytes
        / chip.hbm_bandwidth_bytes_per_s)
  t = roofline_time(record.flops_per_device, nbytes, chip, record.dtype,
                    record.matmul)
  if (chip.launch_overhead_s == 0.0 and chip.shared_compute_factor == 1.0
      and chip.threaded_kernel_s == 0.0 and chip.batch_matrix_s == 0.0):
    return t  # the presets: exactly the roofline
  return (chip.launch_overhead_s + threaded_kernel_time(record, chip)
          + chip.shared_compute_factor * t)


def threaded_kernel_time(record, chip):
  """``chip.threaded_kernel_s`` for a record of a matrix product larger
  than ``chip.inline_kernel_max`` in batch, rows or columns (its kernel
  hands the work to a thread pool), else 0 (any other record, and a
  product that runs inline).

  Example:
    >>> from mesh_tf.lowering.trace import ComputeRecord
    >>> chip = hardware.get_chip("a100")._replace(
    ...     threaded_kernel_s=1e-4, inline_kernel_max=(1, 16, 64))
    >>> [threaded_kernel_time(ComputeRecord("mm", 0, 0, matmul=True,
    ...                                     matrix=m), chip)
    ...  for m in ((1, 16, 64), (1, 32, 8), (1, 8, 128), (2, 4, 4), ())]
    [0.0, 0.0001, 0.0001, 0.0001, 0.0]
  """
  return handoff_time(record.matrix, chip)


def handoff_time(matrix, chip):
  """The seconds a matrix product of ``(batch, rows, cols)`` ``matrix``
  pays for its shape alone: ``chip.threaded_kernel_s`` if it is larger than
  ``chip.inline_kernel_max``, plus ``chip.batch_matrix_s`` per matrix of
  its batch beyond the first; 0 for ``()`` (no matrix product).

  Example:
    >>> chip = hardware.get_chip("a100")._replace(
    ...     threaded_kernel_s=1e-4, inline_kernel_max=(1, 16, 64),
    ...     batch_matrix_s=1e-6)
    >>> [round(handoff_time(m, chip) * 1e6, 3)
    ...  for m in ((1, 8, 8), (1, 32, 8), (257, 1, 1), ())]
    [0.0, 100.0, 356.0, 0.0]
  """
  if not matrix:
    return 0.0
  per_matrix = chip.batch_matrix_s * (matrix[0] - 1)
  limit = chip.inline_kernel_max
  if not chip.threaded_kernel_s or (
      limit and all(n <= m for n, m in zip(matrix, limit))):
    return per_matrix
  return chip.threaded_kernel_s + per_matrix


def arithmetic_intensity(record):
  """FLOPs per byte moved (read + written) of a ComputeRecord."""
  nbytes = record.output_bytes_per_device + record.input_bytes_per_device
  if nbytes == 0:
    return float("inf")
  return record.flops_per_device / nbytes
