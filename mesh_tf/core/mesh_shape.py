"""The shape of a processor mesh: named axes and their sizes.

A :class:`MeshShape` is what a mesh *is* before any device is attached to it
(as JAX's ``AbstractMesh``): the cost model, the layout search and the
shape-only backend need nothing more.  Strings such as ``"rows:2;cols:4"``
are parsed into one by :func:`convert_to_mesh_shape` at the API and CLI
edges; internals pass the typed value.

Example:
  >>> m = convert_to_mesh_shape("rows:2;cols:4")
  >>> m
  MeshShape[rows=2, cols=4]
  >>> m.size, m["cols"].size, m.axis_names
  (8, 4, ('rows', 'cols'))
  >>> m.text
  'rows:2;cols:4'
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ParseError, ShapeError


class MeshShape(dims_lib.Shape):
  """Named mesh axes, each of at least one processor (immutable, hashable).

  A :class:`~mesh_tf.Shape` whose dims are mesh axes, so it goes wherever a
  mesh Shape went before; it equals only a MeshShape with the same axes
  (value equality is between values of one type).  :attr:`text` is its one
  written form, ``name:size;name:size``, which :func:`convert_to_mesh_shape`
  reads back (``str()`` keeps a Shape's ``name:size,name:size``);
  ``m["axis"]`` is that axis' Dimension.

  Args:
    dims: Dimensions or ``(name, size)`` pairs, major axis first.

  Raises:
    ShapeError: for a repeated axis name, or an axis of size below 1.
  """
  __slots__ = ()

  def __init__(self, dims=()):
    dims = tuple(dims)
    names = [d[0] if isinstance(d, (tuple, list)) else d for d in dims]
    dup = sorted({n for n in names if names.count(n) > 1}, key=str)
    if dup:
      raise ShapeError(f"mesh axes {dup} appear more than once; give every "
                       "mesh axis its own name")
    super().__init__(dims)
    for d in self._dims:
      if d.size < 1:
        raise ShapeError(
            f"mesh axis {d.name}={d.size} has no processors; every mesh axis "
            "needs a size of at least 1")

  def __reduce__(self):
    return (MeshShape, (self._dims,))

  @property
  def text(self):
    """The mesh as written at the edges: ``"rows:2;cols:4"`` (the form
    :func:`convert_to_mesh_shape` parses, and the CLI and plan files show).
    """
    return ";".join(f"{d.name}:{d.size}" for d in self._dims)

  @property
  def axis_names(self):
    """The axis names, as a tuple, major first."""
    return tuple(d.name for d in self._dims)

  def __getitem__(self, i):
    if isinstance(i, str):
      return self.get_dim_by_name(i)
    return super().__getitem__(i)

  def __repr__(self):
    return f"MeshShape[{', '.join(str(d) for d in self._dims)}]"


def convert_to_mesh_shape(x):
  """A :class:`MeshShape` from a MeshShape, a Shape, a list of dims or
  ``(name, size)`` pairs, or a string such as ``"rows:2;cols:4"``.

  Call it once, where a mesh shape enters the program; a MeshShape passes
  through unchanged.

  Raises:
    ParseError: for a string that is not ``name:size`` items separated by
      ``;``, ``,`` or spaces; the message quotes the string.
    ShapeError: for a repeated axis name or an axis of size below 1.

  Example:
    >>> convert_to_mesh_shape("data:16, model:8")
    MeshShape[data=16, model=8]
  """
  if isinstance(x, MeshShape):
    return x
  if isinstance(x, str):
    try:
      pairs = dims_lib.parse_name_sizes(x, "mesh shape", "mesh axis")
    except ParseError as e:
      raise ParseError(f"{e}; write mesh axes as name:size separated by "
                       "';', e.g. 'rows:2;cols:4'") from None
    try:
      return MeshShape(pairs)
    except ShapeError as e:
      raise ShapeError(f"invalid mesh shape {x!r}: {e}") from None
  if x is None:
    raise ShapeError("a mesh shape is required, e.g. 'rows:2;cols:4'")
  return MeshShape(dims_lib.convert_to_shape(x))
