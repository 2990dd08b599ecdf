"""Mesh TensorFlow's ``mtf.utils``: ``BalancedVariablePlacer`` and
``outside_all_rewrites``.

``BalancedVariablePlacer`` is a TF device function: used as
``with tf.device(placer):``, it puts each new variable on the device that
holds the fewest bytes of variables so far, and leaves other ops where they
are.  TensorFlow is not imported here; the placer only reads the ops TF
hands it.
"""

import contextlib
import math

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError

__all__ = ["BalancedVariablePlacer", "outside_all_rewrites"]

_VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp")


class BalancedVariablePlacer:
  """Places variables on ``devices``, always on the least-loaded one.

  Args:
    devices: device strings.
    init_usage: bytes already held by each device (default zeros).

  Raises:
    MtfError: if ``devices`` is empty or ``init_usage`` has another length.

  Example:
    >>> placer = BalancedVariablePlacer(["/cpu:0", "/cpu:1"])
    >>> with tf.compat.v1.device(placer):                # doctest: +SKIP
    ...   a = tf.compat.v1.get_variable("a", [1024])
  """

  def __init__(self, devices, init_usage=None):
    self._devices = list(devices)
    if not self._devices:
      raise MtfError("BalancedVariablePlacer needs at least one device")
    usage = [0] * len(self._devices) if init_usage is None else list(
        init_usage)
    if len(usage) != len(self._devices):
      raise MtfError(f"init_usage has {len(usage)} entries for "
                     f"{len(self._devices)} devices")
    self._usage = usage

  @property
  def usage(self):
    """Bytes of variables placed on each device so far (a tuple)."""
    return tuple(self._usage)

  def __call__(self, op):
    if op.type not in _VARIABLE_OPS:
      return op.device
    i = min(range(len(self._devices)), key=lambda k: (self._usage[k], k))
    self._usage[i] += _variable_bytes(op)
    return self._devices[i]


def _variable_bytes(op):
  shape = op.get_attr("shape")
  dims = [d.size for d in shape.dim] if hasattr(shape, "dim") else list(
      shape)
  dtype = op.get_attr("dtype")
  try:
    size = dtypes_lib.size_of(getattr(dtype, "name", dtype))
  except MtfError:
    size = 4
  return math.prod(max(0, int(d)) for d in dims) * size


@contextlib.contextmanager
def outside_all_rewrites():
  """Mesh TF's scope for ops kept off TPU rewrites; nothing to leave here."""
  yield
