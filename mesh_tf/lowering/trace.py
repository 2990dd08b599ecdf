"""The record of what a lowering did: collectives, slicewise compute, variables.

Both backends write the same record, because the same op lowering code calls
the same recorded ``MeshImpl`` methods.  The cost model prices this record.
"""

import collections
from typing import NamedTuple, Optional, Tuple


class CollectiveRecord(NamedTuple):
  """One collective as the lowering issued it.

  ``bytes_per_device`` is the size of each participant's *input* slice.
  ``kind`` is one of ``allreduce``, ``allconcat``, ``alltoall``, ``receive``,
  ``reduce_scatter``.  ``mesh_axes`` are the axes the group spans: sorted
  by mesh index for an all-reduce; for a collective on a dim over several
  axes (rule ``batch:x+y``), that dim's axes in rule order, major first, in
  one record whose ``group_size`` is their product.
  ``op_name`` is the op being lowered when the collective ran; ``source_op``
  is the op whose layout caused it (they differ for a lazy SUM all-reduce,
  which runs when a later op first needs the value).
  """
  op_name: str
  kind: str
  mesh_axes: Tuple[str, ...]
  group_size: int
  bytes_per_device: int
  reduction: Optional[str] = None
  source_op: Optional[str] = None

  def key(self):
    """What the cost model must predict: everything but the op name."""
    return (self.kind, self.mesh_axes, self.group_size, self.bytes_per_device,
            self.reduction)


class ComputeRecord(NamedTuple):
  """One slicewise computation: FLOPs, bytes written and bytes read (its
  laid-out input slices) on each device.

  ``dtype`` is the dtype the arithmetic runs in (its first input's, else its
  output's); ``matmul`` is True for contractions (einsum of several
  operands, convolutions), which run on matrix units at the dtype's matmul
  peak, and False for elementwise and reduction work.  ``pattern`` names
  how the contraction runs (one of
  :data:`mesh_tf.lowering.einsum_kernels.PATTERNS`, e.g. ``"transposed"``
  for an einsum whose operands TF transposes first), or ``""``; a
  calibrated topology prices each pattern at its own measured throughput.
  ``matrix`` is ``(batch, rows, cols)`` of the matrix product an einsum of
  two operands runs (:func:`mesh_tf.lowering.einsum_kernels.product_matrix`),
  else ``()``: whether its kernel is small enough to run inline, without
  handing work to a thread pool (a calibrated fixed cost, see
  :func:`costmodels.compute.compute_time`).  ``conv`` is ``(out_width,
  in_channels, out_channels)`` of the convolution kernel a ``conv`` or
  ``conv_filter`` record runs on each device (the innermost spatial dim of
  its output, and the channels it reads and writes), else ``()``: CPU
  kernels compute the output in tiles along those dims, so a thin width or
  a channel count of 1 costs far more than its FLOPs (see
  :mod:`costmodels.compute_fits`).
  """
  op_name: str
  flops_per_device: int
  output_bytes_per_device: int
  input_bytes_per_device: int = 0
  dtype: str = "float32"
  matmul: bool = False
  pattern: str = ""
  matrix: tuple = ()
  conv: tuple = ()


class CollectiveTrace:
  """Ordered records of one lowering on one mesh."""

  def __init__(self):
    self.collectives = []
    self.compute = []
    self.variables = collections.OrderedDict()  # name -> bytes per device

  def collective_keys(self):
    return sorted(c.key() for c in self.collectives)

  def by_op(self):
    out = collections.OrderedDict()
    for c in self.collectives:
      out.setdefault(c.op_name, []).append(c)
    return out

  @property
  def total_flops_per_device(self):
    return sum(c.flops_per_device for c in self.compute)

  @property
  def total_collective_bytes(self):
    return sum(c.bytes_per_device for c in self.collectives)

  def __eq__(self, other):
    return (isinstance(other, CollectiveTrace)
            and self.collectives == other.collectives
            and self.compute == other.compute
            and self.variables == other.variables)

  def __repr__(self):
    return (f"CollectiveTrace({len(self.collectives)} collectives, "
            f"{len(self.compute)} compute records, "
            f"{len(self.variables)} variables)")
