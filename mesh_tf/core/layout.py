"""Layout rules (tensor dim name -> mesh axis name) and tensor layouts."""

from typing import NamedTuple, Optional, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import (DimMappedTwiceError, IndivisibleDimError,
                                 MeshAxisReuseError, UnknownNameError)


class LayoutRules:
  """Global rules mapping tensor dim names to mesh axis names.

  Example:
    >>> convert_to_layout_rules("batch:rows;d_ff:cols")
    LayoutRules[batch:rows, d_ff:cols]
  """
  __slots__ = ("_pairs",)

  def __init__(self, pairs=()):
    pairs = tuple(sorted(set((str(a), str(b)) for a, b in pairs)))
    seen = {}
    for dim, axis in pairs:
      if dim in seen:
        raise DimMappedTwiceError(
            f"layout rules map tensor dim {dim!r} to both mesh axis "
            f"{seen[dim]!r} and {axis!r}; a dim maps to at most one mesh axis, "
            "so keep one rule for it")
      seen[dim] = axis
    object.__setattr__(self, "_pairs", pairs)

  def __setattr__(self, name, value):
    raise AttributeError("LayoutRules is immutable")

  def __reduce__(self):
    return (LayoutRules, (self._pairs,))

  @property
  def pairs(self):
    return self._pairs

  def as_dict(self):
    return dict(self._pairs)

  def __iter__(self):
    return iter(self._pairs)

  def __len__(self):
    return len(self._pairs)

  def __eq__(self, other):
    return isinstance(other, LayoutRules) and self._pairs == other._pairs

  def __hash__(self):
    return hash(self._pairs)

  def __repr__(self):
    return "LayoutRules[" + ", ".join(f"{a}:{b}" for a, b in self._pairs) + "]"

  def __str__(self):
    return ";".join(f"{a}:{b}" for a, b in self._pairs)

  def tensor_dimension_to_mesh_axis(self, tensor_dimension, mesh_shape):
    """Index of the mesh axis that ``tensor_dimension`` maps to, or None.

    Raises:
      UnknownNameError: if the rule names a mesh axis not in ``mesh_shape``.
    """
    axis = self.as_dict().get(tensor_dimension.name)
    if axis is None:
      return None
    mesh_shape = dims_lib.convert_to_shape(mesh_shape)
    if axis not in mesh_shape:
      raise UnknownNameError(
          f"layout rule {tensor_dimension.name}:{axis} names mesh axis "
          f"{axis!r}, which is not in mesh {mesh_shape!r}; use one of "
          f"{mesh_shape.dimension_names}")
    return mesh_shape.index(axis)

  def tensor_layout(self, tensor_shape, mesh_shape, tensor_name=None):
    """The :class:`TensorLayout` of a tensor of ``tensor_shape``.

    Raises:
      MeshAxisReuseError: two dims of the tensor map to the same mesh axis.
      IndivisibleDimError: a dim's size is not divisible by its axis size.
    """
    return _tensor_layout(self, dims_lib.convert_to_shape(tensor_shape),
                          dims_lib.convert_to_shape(mesh_shape), tensor_name)


def _tensor_layout(rules, shape, mesh_shape, tensor_name):
  what = f"tensor {tensor_name!r}" if tensor_name else f"a tensor of {shape!r}"
  axes, used = [], {}
  for d in shape:
    a = rules.tensor_dimension_to_mesh_axis(d, mesh_shape)
    if a is not None:
      md = mesh_shape[a]
      if a in used:
        raise MeshAxisReuseError(
            f"{what} has dims {used[a]} and {d} that both map to mesh axis "
            f"{md}; a mesh axis can split at most one dim of a tensor, so "
            f"drop the rule for {used[a].name!r} or {d.name!r}")
      if d.size % md.size:
        raise IndivisibleDimError(
            f"{what} has dim {d}, which is not divisible by mesh axis {md}; "
            f"change the rule {d.name}:{md.name} or make {d.name!r} a "
            f"multiple of {md.size}")
      used[a] = d
    axes.append(a)
  return TensorLayout(tuple(axes))


class TensorLayout(NamedTuple):
  """For each tensor dim, the index of its mesh axis or None."""
  tensor_axis_to_mesh_axis: Tuple[Optional[int], ...]

  def __len__(self):
    return len(self.tensor_axis_to_mesh_axis)

  def __iter__(self):
    return iter(self.tensor_axis_to_mesh_axis)

  def __getitem__(self, i):
    return self.tensor_axis_to_mesh_axis[i]

  def __reduce__(self):
    # NamedTuple's default pickling uses iter(self), which yields the axes.
    return (TensorLayout, (self.tensor_axis_to_mesh_axis,))

  @property
  def is_fully_replicated(self):
    """True if no dim is split (Mesh TF's property)."""
    return all(a is None for a in self.tensor_axis_to_mesh_axis)

  def slice_sizes(self, tensor_shape, mesh_shape):
    """The per-processor slice of a tensor of ``tensor_shape`` (a Shape)
    under this layout on ``mesh_shape``, as a tuple of sizes: each split
    dim divided by its mesh axis' size.

    Example:
      >>> from mesh_tf.core.dims import convert_to_shape
      >>> TensorLayout((None, 0)).slice_sizes(convert_to_shape("b:8,d:12"),
      ...                                     convert_to_shape("x:4"))
      (8, 3)
    """
    return tuple(d.size // (mesh_shape[a].size if a is not None else 1)
                 for d, a in zip(tensor_shape, self.tensor_axis_to_mesh_axis))

  def mesh_axis_to_tensor_axis(self, mesh_ndims):
    """For each mesh axis, the tensor axis split over it, or None."""
    out = [None] * mesh_ndims
    for ta, ma in enumerate(self.tensor_axis_to_mesh_axis):
      if ma is not None:
        out[ma] = ta
    return tuple(out)

  def mesh_axes(self):
    """The mesh-axis indices used by this layout, in tensor-axis order."""
    return tuple(a for a in self.tensor_axis_to_mesh_axis if a is not None)


def convert_to_layout_rules(x):
  """Converts a string ``"batch:rows;d_ff:cols"``, a dict or pairs.

  ``,``, ``;``, ``.`` and whitespace are all accepted as separators.
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
