"""Mesh TensorFlow's ``read_variable`` and its op ``ReadVariable``."""

from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops.variables import Variable

__all__ = ["ReadVariable", "read_variable"]


def _identity(x):
  return tf.identity(x)


class ReadVariable(ew.UnaryOperation):
  """Reads a variable's current value (Mesh TF's ``ReadVariable``).

  An identity of the variable's output Tensor, so its gradient is the
  identity's.
  """

  def __init__(self, var, name=None):
    if isinstance(var, Tensor):
      var = var.operation
    if not isinstance(var, Variable):
      raise MtfError(f"read_variable expects an mtf Variable (or its value "
                     f"Tensor), got {var!r}")
    super().__init__("identity", _identity, var.outputs[0],
                     name=name or "read_variable")
    self.variable = var


def read_variable(var):
  """The value of variable ``var`` as a new Tensor (Mesh TF's spelling)."""
  return ReadVariable(var).outputs[0]
