"""Mesh TensorFlow's ``dynamic_shift``: a shift by a per-position offset
held in a tensor, composed from mesh-tf's ops (so its lowering, gradient
and cost are theirs)."""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import DTypeError, ShapeError
from mesh_tf.graph import Tensor
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import gather as gather_ops
from mesh_tf.ops import reshape as reshape_ops

__all__ = ["dynamic_shift"]


def dynamic_shift(x, offset, dim, wrap):
  """Shifts ``x`` along ``dim`` by ``offset``, an integer Tensor, right for
  positive values: ``y[..., j, ...] = x[..., j - offset[...], ...]``.

  Args:
    x: an mtf Tensor.
    offset: an integer mtf Tensor whose dims are dims of ``x`` other than
      ``dim``: each position of them gets its own offset.
    dim: the Dimension of ``x`` (or its name) to shift along.
    wrap: True to roll elements around, False to fill with zeros.

  Returns:
    A Tensor of ``x``'s shape.

  The shift is an einsum of ``x`` with the one-hot matrix of the source
  positions, so every dim may be split; a split ``dim`` costs the einsum's
  all-reduce.  Differentiable in ``x``.

  Raises:
    ShapeError: if ``dim`` is not a dim of ``x``, or ``offset`` has ``dim``
      or a dim ``x`` lacks.
    DTypeError: if ``offset`` is not an integer Tensor.
  """
  if not isinstance(x, Tensor) or not isinstance(offset, Tensor):
    raise ShapeError(f"dynamic_shift takes mtf Tensors x and offset, got "
                     f"{x!r} and {offset!r}")
  name = dim if isinstance(dim, str) else dims_lib.convert_to_dimension(
      dim).name
  if name not in x.shape:
    raise ShapeError(f"dynamic_shift: {name!r} is not a dim of {x.name} "
                     f"{x.shape!r}")
  dim = x.shape.get_dim_by_name(name)
  if name in offset.shape:
    raise ShapeError(f"dynamic_shift: offset {offset.shape!r} may not have "
                     f"the shifted dim {dim}")
  extra = [d for d in offset.shape if d not in x.shape]
  if extra:
    raise ShapeError(f"dynamic_shift: offset {offset.shape!r} has dims "
                     f"{extra} that x {x.shape!r} lacks")
  if not dtypes_lib.is_integer(offset.dtype):
    raise DTypeError(f"dynamic_shift: offset {offset.name} is "
                     f"{offset.dtype}; it must be an integer Tensor")
  source = creation_ops.range(x.mesh, dim, offset.dtype) - offset
  if wrap:
    source = ew.mod(source, dim.size)
  tmp = dims_lib.Dimension(f"_dynamic_shift_{name}", dim.size)
  # picks[..., j, i] = 1 where output position j reads input position i.
  picks = gather_ops.one_hot(source, tmp, dtype=x.dtype)
  moved = reshape_ops.rename_dimension(x, name, tmp.name)
  return einsum_ops.einsum([moved, picks], output_shape=x.shape,
                           name="dynamic_shift")
