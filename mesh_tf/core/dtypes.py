"""Dtypes as plain strings, so that graphs can be built without TensorFlow.

Anything with a ``name`` attribute (a ``tf.DType``, a ``numpy.dtype``) or a
string is accepted and normalised to its canonical name.
"""

from mesh_tf.core.errors import DTypeError

_SIZES = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint32": 4, "uint64": 8, "bool": 1, "complex64": 8,
}
_ALIASES = {"float": "float32", "double": "float64", "half": "float16",
            "int": "int32"}

float16, bfloat16, float32, float64 = "float16", "bfloat16", "float32", "float64"
int8, int16, int32, int64, uint8 = "int8", "int16", "int32", "int64", "uint8"
bool_ = "bool"


def as_dtype(dtype):
  """Returns the canonical name of ``dtype`` ('float32', 'int32', ...).

  Raises:
    DTypeError: for an unknown dtype.
  """
  if dtype is None:
    return "float32"
  if type(dtype) is str and dtype in _SIZES:  # canonical already (hot path)
    return dtype
  if isinstance(dtype, VariableDType):
    # Mesh TF accepts a VariableDType wherever a dtype goes; a tensor gets
    # its activation dtype (mtf.Variable itself stores the master dtype).
    return dtype.activation_dtype
  name = getattr(dtype, "name", dtype)
  if isinstance(dtype, type):  # numpy scalar types such as np.float32
    name = dtype.__name__
  name = _ALIASES.get(name, name)
  if name == "bool_":
    name = "bool"
  if name not in _SIZES:
    raise DTypeError(f"unknown dtype {dtype!r}; use one of {sorted(_SIZES)}")
  return name


def size_of(dtype):
  """Bytes per element of ``dtype``."""
  return _SIZES[as_dtype(dtype)]


def is_floating(dtype):
  return as_dtype(dtype) in ("float16", "bfloat16", "float32", "float64")


def is_integer(dtype):
  return as_dtype(dtype).startswith(("int", "uint"))


class VariableDType:
  """The three dtypes of a variable under mixed precision (Mesh TF's
  ``mtf.VariableDType``).

  Attributes:
    master_dtype: the dtype the variable is stored (and checkpointed and
      updated by the optimizer) in.
    slice_dtype: the dtype of the compute copy the model reads: the stored
      value is cast to it once per use site, and that copy counts as
      parameter memory.  Equal to ``master_dtype`` means no copy.
    activation_dtype: the dtype of the value handed to the graph (a further
      cast of the compute copy, when it differs).

  Unlike the original Mesh TF, where ``slice_dtype`` was the dtype of the
  on-device slices themselves, here the on-device variable is the master
  (so float32 optimizer updates stay exact) and ``slice_dtype`` is the
  compute copy made from it -- what mixed-precision training does.

  Example:
    >>> VariableDType("float32", "bfloat16")
    VariableDType(master=float32, slice=bfloat16, activation=bfloat16)
  """
  __slots__ = ("master_dtype", "slice_dtype", "activation_dtype")

  def __init__(self, master_dtype="float32", slice_dtype=None,
               activation_dtype=None):
    master = as_dtype(master_dtype)
    sl = as_dtype(slice_dtype) if slice_dtype is not None else master
    act = as_dtype(activation_dtype) if activation_dtype is not None else sl
    object.__setattr__(self, "master_dtype", master)
    object.__setattr__(self, "slice_dtype", sl)
    object.__setattr__(self, "activation_dtype", act)

  def __setattr__(self, name, value):
    raise AttributeError("VariableDType is immutable")

  def _key(self):
    return (self.master_dtype, self.slice_dtype, self.activation_dtype)

  def __eq__(self, other):
    return isinstance(other, VariableDType) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __reduce__(self):
    return (VariableDType, self._key())

  def __repr__(self):
    return (f"VariableDType(master={self.master_dtype}, slice="
            f"{self.slice_dtype}, activation={self.activation_dtype})")
