"""Mesh TensorFlow's variable helpers: ``VariableDType``, the per-slice
assign functions (``assign_slice``...), and ``read_variable``.

Pure Python; the assign functions run on TF slice variables only when an
``AssignOperation`` with a custom ``assign_fn`` is lowered.
"""

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import elementwise as ew

__all__ = ["ReadVariable", "VariableDType", "assign_add_slice",
           "assign_slice", "assign_sub_slice", "read_variable"]


class VariableDType:
  """The three dtypes of a Mesh TensorFlow variable.

  Args:
    master_dtype: dtype of the master (the checkpointed, full copy).
    slice_dtype: dtype of the per-device slices (default: master_dtype).
    activation_dtype: dtype the variable's value is cast to when read
      (default: slice_dtype).

  mesh-tf stores one copy, in ``slice_dtype``; the master of a
  ``tf.compat.v1`` program (:mod:`mesh_tf.lowering.masters`) has that dtype
  too.  Pass one as ``dtype`` to :func:`mesh_tf.get_variable`.

  Example:
    >>> d = VariableDType("float32", "bfloat16")
    >>> d.activation_dtype
    'bfloat16'
  """

  __slots__ = ("_activation", "_master", "_slice")

  def __init__(self, master_dtype="float32", slice_dtype=None,
               activation_dtype=None):
    self._master = dtypes_lib.as_dtype(master_dtype)
    self._slice = dtypes_lib.as_dtype(slice_dtype or self._master)
    self._activation = dtypes_lib.as_dtype(activation_dtype or self._slice)

  @property
  def master_dtype(self):
    return self._master

  @property
  def slice_dtype(self):
    return self._slice

  @property
  def activation_dtype(self):
    return self._activation

  def __eq__(self, other):
    return isinstance(other, VariableDType) and (
        (self._master, self._slice, self._activation)
        == (other._master, other._slice, other._activation))

  def __hash__(self):
    return hash((self._master, self._slice, self._activation))

  def __repr__(self):
    return (f"VariableDType(master={self._master}, slice={self._slice}, "
            f"activation={self._activation})")


# --- per-slice assign functions: fn(variable, slice_var, value) -> TF op ---
def assign_slice(variable, slice_var, val):
  """Sets one slice: the default ``assign_fn`` of :func:`mesh_tf.assign`."""
  del variable
  return slice_var.assign(val, read_value=False)


def assign_add_slice(variable, slice_var, val):
  """Adds ``val`` to one slice (``assign_fn`` of :func:`mesh_tf.assign_add`)."""
  del variable
  return slice_var.assign_add(val, read_value=False)


def assign_sub_slice(variable, slice_var, val):
  """Subtracts ``val`` from one slice (``assign_fn`` of ``assign_sub``)."""
  del variable
  return slice_var.assign_sub(val, read_value=False)


MODE_OF_ASSIGN_FN = {assign_slice: "assign", assign_add_slice: "assign_add",
                     assign_sub_slice: "assign_sub"}


def run_assign_fn(impl, assign_fn, variable, laid_variable, laid_value):
  """Calls a custom ``assign_fn(variable, slice_var, value)`` on each
  processor's slice; returns the TF ops (None for the shape-only backend)."""
  if laid_variable.slices is None:
    return None
  ops = []
  for p, (s, t) in enumerate(zip(laid_variable.slices,
                                 laid_value.tensor_list)):
    with tf.device(impl.devices[p]):
      ops.append(assign_fn(variable, s, t))
  return ops


def _identity(x):
  return tf.identity(x)


class ReadVariable(ew.UnaryOperation):
  """Reads a variable's current value (Mesh TF's ``ReadVariable``).

  An identity of the variable's output Tensor, so its gradient is the
  identity's.
  """

  def __init__(self, var, name=None):
    from mesh_tf.ops.variables import Variable  # pylint: disable=g-import-not-at-top
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
