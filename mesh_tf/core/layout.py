"""Layout rules (tensor dim name -> mesh axes) and tensor layouts.

A rule maps a tensor dim to one mesh axis (``"batch:rows"``) or to an ordered
tuple of mesh axes (``"batch:rows+cols"``), as JAX writes
``P(('rows', 'cols'))``: the dim is split into ``rows * cols`` blocks, and the
processor at coordinates ``(r, c)`` holds block ``r * cols + c``.  The first
axis is the major one.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import (DimMappedTwiceError, IndivisibleDimError,
                                 MeshAxisReuseError, MultiAxisDimError,
                                 ParseError, UnknownNameError)


def _axes_of(dim, value):
  """The tuple of mesh-axis names of one rule's value.

  ``value`` is an axis name, ``"a+b"`` (several axes, major first) or a
  tuple/list of names.
  """
  if isinstance(value, str):
    axes = tuple(value.split("+"))
  else:
    axes = tuple(str(a) for a in value)
  if not axes or any(not a for a in axes):
    raise ParseError(
        f"layout rule for tensor dim {dim!r} has mesh axes {value!r}; write "
        f"one axis ({dim}:rows) or several joined by '+' ({dim}:rows+cols)")
  seen = set()
  for a in axes:
    if a in seen:
      raise MeshAxisReuseError(
          f"layout rule {dim}:{'+'.join(axes)} uses mesh axis {a!r} twice; "
          "a dim splits over each mesh axis at most once, so list it once")
    seen.add(a)
  return axes


class LayoutRules:
  """Global rules mapping tensor dim names to mesh axes.

  Each dim maps to one mesh axis or to an ordered tuple of them (major
  first, see the module docstring).  Iterating, or :attr:`pairs`, gives
  one ``(dim, value)`` pair per ruled dim, sorted by dim: ``value`` is the
  axis name, or the tuple of names of a multi-axis dim, so that
  ``LayoutRules(rules.pairs) == rules``; :meth:`axes_dict` gives
  ``dim -> tuple of axes`` for every ruled dim.

  Example:
    >>> convert_to_layout_rules("batch:rows;d_ff:cols")
    LayoutRules[batch:rows, d_ff:cols]
    >>> convert_to_layout_rules("batch:rows+cols").axes_dict()
    {'batch': ('rows', 'cols')}

  Raises:
    DimMappedTwiceError: the rules map one dim to two different values.
    MeshAxisReuseError: one rule lists a mesh axis twice.
  """
  # ``_by_dim``: the same rules as a dict, for the lookup every tensor dim
  # of every lowered op makes (never handed out, so it stays as built).
  __slots__ = ("_rules", "_by_dim")

  def __init__(self, pairs=()):
    rules = {}
    for dim, value in pairs:
      dim = str(dim)
      axes = _axes_of(dim, value)
      if dim in rules and rules[dim] != axes:
        raise DimMappedTwiceError(
            f"layout rules map tensor dim {dim!r} to both mesh axis "
            f"{'+'.join(min(rules[dim], axes))!r} and "
            f"{'+'.join(max(rules[dim], axes))!r}; a dim maps to at most one "
            "mesh axis, so keep one rule for it (to split it over several "
            f"axes, write one rule {dim}:{'+'.join(rules[dim] + axes)})")
      rules[dim] = axes
    object.__setattr__(self, "_rules", tuple(sorted(rules.items())))
    object.__setattr__(self, "_by_dim", dict(self._rules))

  def __setattr__(self, name, value):
    raise AttributeError("LayoutRules is immutable")

  def __reduce__(self):
    return (LayoutRules, (self._rules,))

  @property
  def pairs(self):
    """``(dim, axis name or tuple of names)`` per ruled dim, sorted."""
    return tuple((d, axes[0] if len(axes) == 1 else axes)
                 for d, axes in self._rules)

  @property
  def rules(self):
    """``(dim, tuple of axes)`` per ruled dim, sorted by dim."""
    return self._rules

  def as_dict(self):
    """``dim -> axis name`` (a tuple of names for a multi-axis dim)."""
    return dict(self.pairs)

  def axes_dict(self):
    """``dim -> tuple of mesh-axis names`` (major first)."""
    return dict(self._rules)

  def mesh_axes_of(self, dim_name):
    """The mesh-axis names that ``dim_name`` splits over; () if none."""
    return self._by_dim.get(dim_name, ())

  @property
  def is_multi_axis(self):
    """True if some dim splits over more than one mesh axis."""
    return any(len(axes) > 1 for _, axes in self._rules)

  def __iter__(self):
    return iter(self.pairs)

  def __len__(self):
    return len(self.pairs)

  def __eq__(self, other):
    return isinstance(other, LayoutRules) and self._rules == other._rules

  def __hash__(self):
    return hash(self._rules)

  def __repr__(self):
    return "LayoutRules[" + ", ".join(
        f"{d}:{'+'.join(axes)}" for d, axes in self._rules) + "]"

  def __str__(self):
    return ";".join(f"{d}:{'+'.join(axes)}" for d, axes in self._rules)

  def tensor_dimension_to_mesh_axes(self, tensor_dimension, mesh_shape):
    """Indices of the mesh axes ``tensor_dimension`` splits over (major
    first); () if it is not split.

    Raises:
      UnknownNameError: if the rule names a mesh axis not in ``mesh_shape``.
    """
    axes = self.mesh_axes_of(tensor_dimension.name)
    if not axes:
      return ()
    mesh_shape = dims_lib.convert_to_shape(mesh_shape)
    for axis in axes:
      if axis not in mesh_shape:
        raise UnknownNameError(
            f"layout rule {tensor_dimension.name}:{'+'.join(axes)} names "
            f"mesh axis {axis!r}, which is not in mesh {mesh_shape!r}; use "
            f"one of {mesh_shape.dimension_names}")
    return tuple(mesh_shape.index(a) for a in axes)

  def tensor_dimension_to_mesh_axis(self, tensor_dimension, mesh_shape):
    """Index of the mesh axis that ``tensor_dimension`` maps to, or None.

    Raises:
      UnknownNameError: if the rule names a mesh axis not in ``mesh_shape``.
      MultiAxisDimError: if the dim splits over several mesh axes (ask
        :meth:`tensor_dimension_to_mesh_axes`).
    """
    axes = self.tensor_dimension_to_mesh_axes(tensor_dimension, mesh_shape)
    return _single(axes, f"dim {tensor_dimension}", self.mesh_axes_of(
        tensor_dimension.name))

  def tensor_layout(self, tensor_shape, mesh_shape, tensor_name=None):
    """The :class:`TensorLayout` of a tensor of ``tensor_shape``.

    Raises:
      MeshAxisReuseError: two dims of the tensor map to the same mesh axis.
      IndivisibleDimError: a dim's size is not divisible by the product of
        its mesh axes' sizes.
    """
    return _tensor_layout(self, dims_lib.convert_to_shape(tensor_shape),
                          dims_lib.convert_to_shape(mesh_shape), tensor_name)


def _single(axes, what, names=()):
  if not axes:
    return None
  if len(axes) > 1:
    names = "+".join(map(str, names or axes))
    raise MultiAxisDimError(
        f"{what} splits over several mesh axes ({names}), "
        "but this code handles one mesh axis per dim; use the multi-axis "
        "accessor (tensor_dimension_to_mesh_axes / "
        "tensor_axis_to_mesh_axes), or split the dim over one axis")
  return axes[0]


def _tensor_layout(rules, shape, mesh_shape, tensor_name):
  out, used = [], {}
  ruled = rules._by_dim  # pylint: disable=protected-access
  for d in shape:
    if d.name not in ruled:   # replicated: most dims of most layouts
      out.append(())
      continue
    axes = rules.tensor_dimension_to_mesh_axes(d, mesh_shape)
    for a in axes:
      if a in used:
        what = _what(shape, tensor_name)
        raise MeshAxisReuseError(
            f"{what} has dims {used[a]} and {d} that both map to mesh axis "
            f"{mesh_shape[a]}; a mesh axis can split at most one dim of a "
            f"tensor, so drop the rule for {used[a].name!r} or {d.name!r}")
      used[a] = d
    n = math.prod(mesh_shape[a].size for a in axes)
    if axes and d.size % n:
      what = _what(shape, tensor_name)
      names = "+".join(mesh_shape[a].name for a in axes)
      if len(axes) == 1:
        md = mesh_shape[axes[0]]
        raise IndivisibleDimError(
            f"{what} has dim {d}, which is not divisible by mesh axis {md}; "
            f"change the rule {d.name}:{md.name} or make {d.name!r} a "
            f"multiple of {md.size}")
      raise IndivisibleDimError(
          f"{what} has dim {d}, which is not divisible by mesh axes "
          f"{' * '.join(str(mesh_shape[a]) for a in axes)} = {n}; change the "
          f"rule {d.name}:{names} (fewer axes) or make {d.name!r} a "
          f"multiple of {n}")
    out.append(axes)
  # Each entry is already a tuple of int indices (Shape.index): stored as
  # is, not normalised again (the layout search builds 10^4 of these).
  layout = TensorLayout.__new__(TensorLayout)
  object.__setattr__(layout, "_axes", tuple(out))
  return layout


def _what(shape, tensor_name):
  """How an error names the tensor being laid out."""
  return f"tensor {tensor_name!r}" if tensor_name else f"a tensor of {shape!r}"


def _normalise(entry):
  if entry is None:
    return ()
  if isinstance(entry, int):
    return (entry,)
  return tuple(int(a) for a in entry)


class TensorLayout:
  """For each tensor dim, the mesh-axis indices it splits over.

  Built from one entry per dim: None (replicated), a mesh-axis index, or a
  tuple of indices (major first).  :attr:`tensor_axis_to_mesh_axes` gives
  the tuples (``()`` = replicated); the original Mesh TF accessors
  (:attr:`tensor_axis_to_mesh_axis`, iteration, indexing,
  :meth:`mesh_axis_to_tensor_axis`) give one index or None per dim and
  raise :class:`MultiAxisDimError` on a dim over several axes, except
  :meth:`mesh_axis_to_tensor_axis`, which is well defined for any layout.
  """
  __slots__ = ("_axes",)

  def __init__(self, tensor_axis_to_mesh_axis):
    if isinstance(tensor_axis_to_mesh_axis, TensorLayout):
      tensor_axis_to_mesh_axis = tensor_axis_to_mesh_axis._axes
    object.__setattr__(self, "_axes", tuple(
        _normalise(e) for e in tensor_axis_to_mesh_axis))

  @classmethod
  def from_axes(cls, axes):
    """A layout from one tuple of mesh-axis indices per dim."""
    return cls(tuple(tuple(a) for a in axes))

  def __setattr__(self, name, value):
    raise AttributeError("TensorLayout is immutable")

  def __reduce__(self):
    return (TensorLayout, (self._axes,))

  def __eq__(self, other):
    return isinstance(other, TensorLayout) and self._axes == other._axes

  def __hash__(self):
    return hash(self._axes)

  def __repr__(self):
    if self.is_multi_axis:
      return f"TensorLayout(tensor_axis_to_mesh_axes={self._axes!r})"
    return ("TensorLayout(tensor_axis_to_mesh_axis="
            f"{self.tensor_axis_to_mesh_axis!r})")

  @property
  def tensor_axis_to_mesh_axes(self):
    """For each tensor dim, the tuple of its mesh-axis indices (major
    first; ``()`` if the dim is replicated)."""
    return self._axes

  @property
  def is_multi_axis(self):
    """True if some dim splits over more than one mesh axis."""
    return any(len(a) > 1 for a in self._axes)

  @property
  def tensor_axis_to_mesh_axis(self):
    """For each tensor dim, its mesh-axis index or None (Mesh TF's field).

    Raises:
      MultiAxisDimError: if a dim splits over several mesh axes.
    """
    return tuple(_single(a, f"tensor axis {i}") for i, a in
                 enumerate(self._axes))

  def __len__(self):
    return len(self._axes)

  def __iter__(self):
    return iter(self.tensor_axis_to_mesh_axis)

  def __getitem__(self, i):
    return _single(self._axes[i], f"tensor axis {i}")

  @property
  def is_fully_replicated(self):
    """True if no dim is split (Mesh TF's property)."""
    return not any(self._axes)

  def slice_sizes(self, tensor_shape, mesh_shape):
    """The per-processor slice of a tensor of ``tensor_shape`` (a Shape)
    under this layout on ``mesh_shape``, as a tuple of sizes: each split
    dim divided by the product of its mesh axes' sizes.

    Example:
      >>> from mesh_tf.core.dims import convert_to_shape
      >>> TensorLayout((None, 0)).slice_sizes(convert_to_shape("b:8,d:12"),
      ...                                     convert_to_shape("x:4"))
      (8, 3)
    """
    return tuple(d.size // math.prod(mesh_shape[a].size for a in axes)
                 for d, axes in zip(tensor_shape, self._axes))

  def mesh_axis_to_tensor_axis(self, mesh_ndims):
    """For each mesh axis, the tensor axis split over it, or None."""
    out = [None] * mesh_ndims
    for ta, axes in enumerate(self._axes):
      for ma in axes:
        if ma < mesh_ndims:
          out[ma] = ta
    return tuple(out)

  def mesh_axes(self):
    """The mesh-axis indices used by this layout, in tensor-axis order."""
    return tuple(a for axes in self._axes for a in axes)


def convert_to_layout_rules(x):
  """Converts a string ``"batch:rows;d_ff:cols"``, a dict or pairs.

  ``,``, ``;``, ``.`` and whitespace are all accepted as separators; a dim
  over several mesh axes is written ``batch:rows+cols`` (major first), or
  with a tuple value in a dict or pair: ``{"batch": ("rows", "cols")}``.
  """
  if isinstance(x, LayoutRules):
    return x
  if x is None:
    return LayoutRules()
  if isinstance(x, str):
    return LayoutRules(dims_lib._parse_pairs(x, "layout rules"))
  if isinstance(x, dict):
    return LayoutRules(x.items())
  return LayoutRules(x)
