"""Mesh TensorFlow's ``conv2d_transpose`` and ``conv3d_transpose`` for the
case its defaults use: the filter as large as the stride (``filter_size ==
strides``, e.g. 2x2 upsampling).

The windows then do not overlap, so the transposed convolution is one einsum
(each input position times the filter gives a ``filter_size`` block of
outputs) and a reshape that interleaves those blocks with the spatial dims.
Both are ordinary mtf ops: every dim may be split, and the gradient comes
from them.

Other filter sizes (overlapping or gapped windows) are
:func:`conv_transpose_general`: the input is dilated by the stride (an einsum
with a one-hot and a reshape), then convolved at stride 1 with the mirrored
filter, so a split spatial dim gets a halo exchange (SAME padding).  The
``*_with_blocks`` layers use it; ``conv2d_transpose`` itself keeps the
original's tested case.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.core import _maybe_cast, _unique_scope
from mesh_tf.ops import conv as conv_ops
from mesh_tf.ops import creation
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import variables as var_lib

__all__ = ["conv2d_transpose", "conv3d_transpose", "conv_transpose_general",
           "transpose_padding"]


def _conv_transpose(n, x, output_dim, filter_size, strides, padding,
                    filter_initializer, variable_dtype, name):
  filter_size = [filter_size] * n if isinstance(filter_size, int) else list(
      filter_size)
  strides = [strides] * n if isinstance(strides, int) else list(strides)
  if str(padding).upper() not in ("SAME", "VALID"):
    raise ShapeError(f"conv{n}d_transpose: unknown padding {padding!r}")
  spatial = x.shape.dims[-1 - n:-1]
  in_dim = x.shape.dims[-1]
  output_dim = dims_lib.convert_to_dimension(output_dim)
  if output_dim.name in x.shape:
    raise ShapeError(f"conv{n}d_transpose: output dim {output_dim} is already "
                     f"a dim of {x.name} {x.shape!r}; give it another name")
  if filter_size != strides:
    # Overlapping (or gapped) windows: the general transposed convolution,
    # with TF's kernel layout [filter..., in, out].
    scope = _unique_scope(x.graph, name or f"conv{n}d_transpose")
    fdims = [dims_lib.Dimension(f"{d.name}_filter", k)
             for d, k in zip(spatial, filter_size)]
    kernel = var_lib.get_variable(
        x.mesh, f"{scope}/kernel",
        dims_lib.Shape(fdims + [in_dim, output_dim]),
        variable_dtype or "float32",
        filter_initializer if filter_initializer is not None
        else var_lib.random_normal_initializer(
            stddev=1.0 / math.sqrt(in_dim.size * math.prod(filter_size))))
    return conv_transpose_general(x, _maybe_cast(kernel, x.dtype), spatial,
                                  in_dim, output_dim, strides, padding,
                                  name=f"{scope}/conv")
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

  Any window and stride: ``filter_size == strides`` (the default) is one
  einsum and a reshape, so every dim may be split; other windows are TF's
  transposed convolution (a dilated input and a mirrored filter), whose
  kernel is ``name/kernel`` ``[filter..., in, out]``.
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




def transpose_padding(size, k, s, padding):
  """``(pad_before, output_size)`` of TF's transposed convolution of a
  spatial dim of ``size`` with window ``k`` and stride ``s``: output
  position ``o`` sums ``x[i] * w[j]`` over ``i * s + j - pad_before == o``.
  """
  if str(padding).upper() == "SAME":
    return max(k - s, 0) // 2, size * s
  if str(padding).upper() == "VALID":
    return 0, size * s + max(k - s, 0)
  raise ShapeError(f"transposed convolution: unknown padding {padding!r}; "
                   "use SAME or VALID")


def _dilate(x, dim, s):
  """``x`` with ``s - 1`` zeros after each entry along ``dim``."""
  if s == 1:
    return x
  step = dims_lib.Dimension(f"_{dim.name}_stride", s)
  first = ew.cast(ew.equal(creation.range(x.mesh, step, "int32"), 0),
                  x.dtype)
  dims = []
  for d in x.shape.dims:
    dims += [d, step] if d.name == dim.name else [d]
  y = einsum_ops.einsum([x, first], output_shape=dims_lib.Shape(dims))
  return reshape_ops.reshape(y, dims_lib.Shape(
      [dims_lib.Dimension(d.name, d.size * s) if d.name == dim.name else d
       for d in x.shape.dims]))


def _mirror(w, fdim):
  """``w`` reversed along ``fdim`` (an einsum with the anti-diagonal)."""
  k = fdim.size
  other = dims_lib.Dimension(f"_{fdim.name}_mirror", k)
  anti = ew.cast(ew.equal(ew.add(creation.range(w.mesh, fdim, "int32"),
                                 creation.range(w.mesh, other, "int32")),
                          k - 1), w.dtype)
  shape = dims_lib.Shape([other if d.name == fdim.name else d
                          for d in w.shape.dims])
  return reshape_ops.rename_dimension(
      einsum_ops.einsum([w, anti], output_shape=shape), other.name,
      fdim.name)


def conv_transpose_general(x, kernel, spatial, in_dim, output_dim, strides,
                           padding, name=None):
  """TF's ``conv{n}d_transpose`` of ``x`` for any window and stride.

  Args:
    x: ``[batch..., spatial..., in_dim]`` (spatial dims named in
      ``spatial``).
    kernel: ``[filter dims (one per spatial dim, in order), in_dim,
      output_dim]``.
    spatial: the spatial Dimensions of ``x``.
    strides: one per spatial dim.
    padding: "SAME" (output ``size * stride``) or "VALID".

  Returns:
    ``x``'s shape with each spatial dim resized (same names) and ``in_dim``
    replaced by ``output_dim``.
  """
  fdims = [d for d in kernel.shape.dims
           if d.name not in (in_dim.name, output_dim.name)]
  pads = []
  for d, f, s in zip(spatial, fdims, strides):
    before, out = transpose_padding(d.size, f.size, s, padding)
    # Stride-1 correlation of the dilated input with the mirrored filter.
    pads.append((f.size - 1 - before, out + before - d.size * s))
    x = _dilate(x, d, s)
    kernel = _mirror(kernel, f)
  return conv_ops.conv(x, kernel, [d.name for d in spatial],
                       in_dim=in_dim.name, out_dim=output_dim.name,
                       padding=pads, name=name)


def make_transpose_kernel(x, n, output_dim, filter_size, filter_initializer,
                          variable_dtype, name):
  """The ``name/kernel`` variable ``[filter_<spatial>..., in, out]`` of a
  general transposed convolution layer, and its scope."""
  spatial = x.shape.dims[-1 - n:-1]
  in_dim = x.shape.dims[-1]
  scope = _unique_scope(x.graph, name or f"conv{n}d_transpose")
  fdims = [dims_lib.Dimension(f"filter_{d.name}", k)
           for d, k in zip(spatial, filter_size)]
  w = var_lib.get_variable(
      x.mesh, f"{scope}/kernel", dims_lib.Shape(fdims + [in_dim, output_dim]),
      variable_dtype or "float32",
      filter_initializer if filter_initializer is not None
      else var_lib.random_normal_initializer(
          stddev=1.0 / math.sqrt(in_dim.size)))
  return _maybe_cast(w, x.dtype), scope
