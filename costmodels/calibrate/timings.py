"""The timings calibration fits: :class:`Sample`, and the error it raises.

Samples are plain named tuples, so that fits can be checked against
synthetic timings made from known parameters (see the tests), and a
calibration file's ``samples`` read back with :func:`sample_from_dict`.
"""

from typing import NamedTuple

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

    transfers: of a ``model_step`` timing: ``((kind, group_size,
      bytes_per_device), ...)`` of each of its collectives (files written
      before: ``()``), whose volumes price a collective's bytes in a step
      (:mod:`costmodels.calibrate.step_costs`).

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
  transfers: tuple = ()


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
  d["transfers"] = tuple(tuple(t) for t in d.get("transfers", ()))
  return Sample(**d)
