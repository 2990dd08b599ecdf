"""Named dimensions and shapes (pure Python, immutable, hashable)."""

import math
import re
from typing import NamedTuple

from mesh_tf.core.errors import ParseError, ShapeError, UnknownNameError

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class Dimension(NamedTuple):
  """A named dimension, e.g. ``Dimension("batch", 8)``."""
  name: str
  size: int

  def __repr__(self):
    return f"Dimension({self.name}={self.size})"

  def __str__(self):
    return f"{self.name}={self.size}"


def _check_dim(d):
  if not isinstance(d, Dimension):
    if isinstance(d, (tuple, list)) and len(d) == 2:
      d = Dimension(*d)
    else:
      raise ShapeError(f"expected a Dimension(name, size), got {d!r}")
  if not isinstance(d.name, str) or not _NAME_RE.match(d.name):
    raise ShapeError(f"invalid dimension name {d.name!r}: use letters, "
                     "digits, '_', '.', '-' and start with a letter or '_'")
  if isinstance(d.size, bool) or not isinstance(d.size, int) or d.size < 0:
    try:
      size = int(d.size)
    except (TypeError, ValueError):
      size = -1
    if size < 0 or size != d.size:
      raise ShapeError(f"dimension {d.name!r} has invalid size {d.size!r}; "
                       "sizes are non-negative integers")
    d = Dimension(d.name, size)
  return d


class Shape:
  """An ordered tuple of dims with distinct names.

  Example:
    >>> Shape([Dimension("batch", 8), Dimension("d_model", 512)])
    Shape[batch=8, d_model=512]
  """
  # The hash and the size are kept with the dims: a layout search asks
  # for them about 10^5 times per graph (lowering each op under every
  # local assignment; the memory schedule), and the dims never change.
  __slots__ = ("_dims", "_hash", "_size")

  def __init__(self, dims=()):
    dims = tuple(_check_dim(d) for d in dims)
    names = [d.name for d in dims]
    if len(set(names)) != len(names):
      dup = sorted({n for n in names if names.count(n) > 1})
      raise ShapeError(f"shape {_fmt(dims)} repeats the dim name(s) {dup}; "
                       "every dim of a tensor needs a distinct name")
    object.__setattr__(self, "_dims", dims)
    object.__setattr__(self, "_hash", hash(dims))
    object.__setattr__(self, "_size", math.prod(d.size for d in dims))

  def __setattr__(self, name, value):
    raise AttributeError("Shape is immutable")

  def __reduce__(self):
    return (Shape, (self._dims,))

  @property
  def dims(self):
    return list(self._dims)

  @property
  def ndims(self):
    return len(self._dims)

  @property
  def size(self):
    return self._size

  @property
  def dimension_names(self):
    return [d.name for d in self._dims]

  @property
  def to_integer_list(self):
    """The sizes, as a list.

    A property in Mesh TF; here the list may also be called
    (``shape.to_integer_list()``), so code written either way works.
    """
    return _CallableList(d.size for d in self._dims)

  to_int_list = to_integer_list

  @property
  def cumprod(self):
    """Exclusive cumulative products of the sizes (a callable list, as
    :attr:`to_integer_list`)."""
    out, p = _CallableList(), 1
    for d in self._dims:
      out.append(p)
      p *= d.size
    return out

  def to_string(self):
    """``"batch:8,d_model:512"`` (Mesh TF's name for ``str(shape)``)."""
    return str(self)

  def __len__(self):
    return len(self._dims)

  def __iter__(self):
    return iter(self._dims)

  def __getitem__(self, i):
    if isinstance(i, slice):
      return Shape(self._dims[i])
    return self._dims[i]

  def __eq__(self, other):
    # Values of one type only: a MeshShape is not a tensor's Shape, and a
    # list of dims is not a Shape (convert it with convert_to_shape).
    if type(other) is not type(self):
      return NotImplemented
    return self._dims == other._dims

  def __ne__(self, other):
    eq = self.__eq__(other)
    return eq if eq is NotImplemented else not eq

  def __hash__(self):
    return self._hash

  def __add__(self, other):
    return Shape(self._dims + tuple(convert_to_shape(other)))

  def __sub__(self, other):
    """Removes ``other``'s dims (by name) from this shape."""
    if isinstance(other, (Dimension, str)):
      other = [other]
    names = {d if isinstance(d, str) else d.name for d in other}
    return Shape([d for d in self._dims if d.name not in names])

  def __contains__(self, d):
    if isinstance(d, str):
      return any(x.name == d for x in self._dims)
    return d in self._dims

  def __repr__(self):
    return f"Shape{_fmt(self._dims)}"

  def __str__(self):
    return ",".join(f"{d.name}:{d.size}" for d in self._dims)

  def index(self, d):
    name = d if isinstance(d, str) else d.name
    for i, x in enumerate(self._dims):
      if x.name == name:
        if not isinstance(d, str) and x != d:
          break
        return i
    raise UnknownNameError(f"dim {d} is not in {self!r}")

  def get_dim_by_name(self, name):
    return self._dims[self.index(name)]

  def has_dim_name(self, name):
    return name in self

  def rename_dimension(self, old_name, new_name):
    i = self.index(old_name)
    dims = list(self._dims)
    dims[i] = Dimension(new_name, dims[i].size)
    return Shape(dims)

  def resize_dimension(self, name, new_size):
    i = self.index(name)
    dims = list(self._dims)
    dims[i] = Dimension(name, new_size)
    return Shape(dims)

  def is_compatible_with(self, other):
    """True if dims sharing a name also share a size."""
    sizes = {d.name: d.size for d in self._dims}
    return all(sizes.get(d.name, d.size) == d.size for d in other)


class _CallableList(list):
  """A list that returns a copy of itself when called (API compatibility)."""

  def __call__(self):
    return list(self)


def _fmt(dims):
  return "[" + ", ".join(str(d) for d in dims) + "]"


# Mesh TF also separates items with ".", e.g. "batch:8.d_model:512"; a "."
# before a digit stays, so that "batch:2.5" is reported as a bad size.
_SEP_RE = re.compile(r"(?:[;,\s]|\.(?=[A-Za-z_]))+")


def _parse_pairs(text, what):
  pairs = []
  for item in _SEP_RE.split(text.strip()):
    if not item:
      continue
    parts = item.split(":")
    if len(parts) != 2 or not parts[0] or not parts[1]:
      raise ParseError(f"cannot parse {what} {text!r}: item {item!r} is not "
                       "of the form name:value")
    pairs.append((parts[0], parts[1]))
  return pairs


def parse_name_sizes(text, what="shape", item="dim"):
  """``"a:2;b:4"`` -> ``[("a", 2), ("b", 4)]``.

  Raises:
    ParseError: quoting ``text`` and calling it ``what`` (``"shape"``,
      ``"mesh shape"``), naming the bad ``item`` (``"dim"``, ``"mesh axis"``).
  """
  out = []
  for name, size in _parse_pairs(text, what):
    try:
      size = int(size)
    except ValueError:
      raise ParseError(f"cannot parse {what} {text!r}: size {size!r} of "
                       f"{item} {name!r} is not an integer") from None
    out.append((name, size))
  return out


def _parse_shape(text):
  return Shape([Dimension(n, s) for n, s in parse_name_sizes(text)])


def convert_to_dimension(d):
  """Converts ``Dimension``, ``(name, size)`` or ``"name:size"``."""
  if d is None or isinstance(d, Dimension):
    return d
  if isinstance(d, str):
    s = _parse_shape(d)
    if s.ndims != 1:
      raise ParseError(f"expected one dimension, got {d!r}")
    return s[0]
  return _check_dim(tuple(d))


def convert_to_shape(x):
  """Converts a Shape, a list of dims or a string like ``"batch:8,d:512"``.

  ``,``, ``;``, ``.`` and whitespace are all accepted as separators.
  """
  if x is None or isinstance(x, Shape):
    return x
  if isinstance(x, str):
    return _parse_shape(x)
  if isinstance(x, Dimension):
    return Shape([x])
  return Shape([convert_to_dimension(d) for d in x])
