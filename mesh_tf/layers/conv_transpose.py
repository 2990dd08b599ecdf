"""Mesh TensorFlow's ``conv2d_transpose`` and ``conv3d_transpose`` for the
case its defaults use: the filter as large as the stride (``filter_size ==
strides``, e.g. 2x2 upsampling).

The windows then do not overlap, so the transposed convolution is one einsum
(each input position times the filter gives a ``filter_size`` block of
outputs) and a reshape that interleaves those blocks with the spatial dims.
Both are ordinary mtf ops: every dim may be split, and the gradient comes
from them.  Overlapping windows (a filter larger than the stride) are not
supported.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.core import _maybe_cast, _unique_scope
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import variables as var_lib

__all__ = ["conv2d_transpose", "conv3d_transpose"]


def _conv_transpose(n, x, output_dim, filter_size, strides, padding,
                    filter_initializer, variable_dtype, name):
  filter_size = [filter_size] * n if isinstance(filter_size, int) else list(
      filter_size)
  strides = [strides] * n if isinstance(strides, int) else list(strides)
  if filter_size != strides:
    raise ShapeError(
        f"conv{n}d_transpose: filter_size {filter_size} must equal strides "
        f"{strides} (non-overlapping windows); other cases are not "
        "supported")
  if str(padding).upper() not in ("SAME", "VALID"):
    raise ShapeError(f"conv{n}d_transpose: unknown padding {padding!r}")
  spatial = x.shape.dims[-1 - n:-1]
  in_dim = x.shape.dims[-1]
  output_dim = dims_lib.convert_to_dimension(output_dim)
  if output_dim.name in x.shape:
    raise ShapeError(f"conv{n}d_transpose: output dim {output_dim} is already "
                     f"a dim of {x.name} {x.shape!r}; give it another name")
  blocks = [dims_lib.Dimension(f"_{d.name}_block", k)
            for d, k in zip(spatial, filter_size)]
  scope = _unique_scope(x.graph, name or f"conv{n}d_transpose")
  fan_in = in_dim.size
  w = var_lib.get_variable(
      x.mesh, f"{scope}/kernel", dims_lib.Shape(blocks + [in_dim, output_dim]),
      variable_dtype or "float32",
      filter_initializer if filter_initializer is not None
      else var_lib.random_normal_initializer(stddev=1.0 / math.sqrt(fan_in)))
  batch = x.shape.dims[:-1 - n]
  interleaved = list(batch)
  for d, b in zip(spatial, blocks):
    interleaved += [d, b]
  y = einsum_ops.einsum([x, _maybe_cast(w, x.dtype)],
                        output_shape=dims_lib.Shape(interleaved
                                                    + [output_dim]))
  out = list(batch) + [dims_lib.Dimension(d.name, d.size * k)
                       for d, k in zip(spatial, filter_size)] + [output_dim]
  return reshape_ops.reshape(y, dims_lib.Shape(out))


def conv2d_transpose(x, output_dim, filter_size=(2, 2), strides=(2, 2),
                     padding="SAME", filter_initializer=None,
                     variable_dtype=None, name=None):
  """2-d transposed convolution of ``[batch..., h, w, in]``; the output has
  ``h * sh`` and ``w * sw`` and ``output_dim`` last.

  Raises:
    ShapeError: unless ``filter_size == strides``.
  """
  return _conv_transpose(2, x, output_dim, filter_size, strides, padding,
                         filter_initializer, variable_dtype, name)


def conv3d_transpose(x, output_dim, filter_size=(2, 2, 2),
                     strides=(2, 2, 2), padding="SAME",
                     filter_initializer=None, variable_dtype=None,
                     name=None):
  """3-d transposed convolution of ``[batch..., d, h, w, in]`` (see
  :func:`conv2d_transpose`)."""
  return _conv_transpose(3, x, output_dim, filter_size, strides, padding,
                         filter_initializer, variable_dtype, name)


