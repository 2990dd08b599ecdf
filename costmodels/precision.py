"""Which peak a computation runs at: its dtype and the unit that runs it.

A contraction (einsum of several operands, convolution) runs on the chip's
matrix units at the dense peak of its dtype; everything else (elementwise
work, reductions, optimizer updates) runs on the vector units.  The trace
records both facts per computation (:class:`mesh_tf.ComputeRecord`'s
``dtype`` and ``matmul``), so the roofline prices a bfloat16 einsum at the
bf16 peak and a float32 one at TF32 (GPUs) or six bf16 passes (TPUs) --
which is what made fp32 training look as fast as bf16 before.

Example:
  >>> from costmodels import hardware
  >>> a100 = hardware.CHIPS["a100"]
  >>> peak_flops_per_s(a100, "bfloat16") / 1e12
  312.0
  >>> peak_flops_per_s(a100, "float32") / 1e12      # TF32
  156.0
  >>> peak_flops_per_s(a100, "float32", matmul=False) / 1e12
  19.5
"""

from mesh_tf.core import dtypes as dtypes_lib
from costmodels import hardware


def peak_flops_per_s(chip, dtype, matmul=True):
  """FLOP/s of work of ``dtype`` on ``chip``: the matmul peak of that dtype
  (``matmul``), else the vector units' peak.

  Integer and boolean work (indices, masks) is vector work whatever
  ``matmul`` says.
  """
  chip = hardware.get_chip(chip)
  if dtype != "tf32":
    dtype = dtypes_lib.as_dtype(dtype)
  if not matmul or not (dtype == "tf32" or dtypes_lib.is_floating(dtype)):
    return chip.peak_vector_flops_per_s
  if dtype == "float64":
    # No chip here has fast fp64 matmuls on its matrix units at ML rates;
    # price it as true fp32 (optimistic for TPUs, which emulate it).
    dtype = "fp32_strict"
  return chip.peak_flops_per_s(dtype)


def record_peak_flops_per_s(record, chip):
  """The peak a :class:`mesh_tf.ComputeRecord` runs at on ``chip``."""
  return peak_flops_per_s(chip, record.dtype, record.matmul)
