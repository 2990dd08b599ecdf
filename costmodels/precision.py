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
  >>> round(achievable_flops_per_s(a100, "bfloat16") / 1e12, 1)  # measured
  267.9

The datasheet peak (:func:`peak_flops_per_s`) is what model-FLOPs
utilisation divides by; the roofline prices matmuls at the achievable rate
(:func:`achievable_flops_per_s`: the peak times the chip's measured
fraction for large matmuls, ``ChipSpec.matmul_efficiency``).
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
  dtype = _matmul_dtype(dtype, matmul)
  if dtype is None:
    return chip.peak_vector_flops_per_s
  return chip.peak_flops_per_s(dtype)


def achievable_flops_per_s(chip, dtype, matmul=True):
  """FLOP/s the roofline prices work of ``dtype`` at: a matmul at the
  chip's achievable matmul rate of that dtype (datasheet peak times its
  measured fraction), other work at the vector units' peak."""
  chip = hardware.get_chip(chip)
  dtype = _matmul_dtype(dtype, matmul)
  if dtype is None:
    return chip.peak_vector_flops_per_s
  return chip.achievable_flops_per_s(dtype)


def _matmul_dtype(dtype, matmul):
  """The key of ``ChipSpec.peak_flops_per_s`` a computation of ``dtype``
  runs at on the matrix units, or None for vector work."""
  if dtype != "tf32":
    dtype = dtypes_lib.as_dtype(dtype)
  if not matmul or not (dtype == "tf32" or dtypes_lib.is_floating(dtype)):
    return None
  if dtype == "float64":
    # No chip here has fast fp64 matmuls on its matrix units at ML rates;
    # price it as true fp32 (optimistic for TPUs, which emulate it).
    return "fp32_strict"
  return dtype


def record_flops_per_s(record, chip):
  """The rate a :class:`mesh_tf.ComputeRecord` is priced at on ``chip``
  (its achievable rate, :func:`achievable_flops_per_s`)."""
  return achievable_flops_per_s(chip, record.dtype, record.matmul)
