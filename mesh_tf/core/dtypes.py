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
