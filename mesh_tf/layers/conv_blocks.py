"""Mesh TensorFlow's convolutions over images cut into blocks
(``conv2d_with_blocks``, ``conv3d_with_blocks`` and their transposes) and
``separable_conv1d``.

An image ``[batch, h_blocks, w_blocks, h, w, channels]`` is a grid of
blocks: the ``*_blocks`` dims count them and may be split across the mesh,
``h`` and ``w`` run inside one block and are never split.  Each block gets
its neighbours' edges by a halo exchange over the blocks dim (zeros past the
image), a spatial dim without a blocks dim is zero-padded, and the
convolution then runs per block with VALID padding.  The result equals the
convolution of the whole image with SAME padding.

As in the original these layers have a kernel and no bias: ``name/kernel``
``[fh, fw, in, out]`` (``[fd, fh, fw, in, out]``) like
:func:`mesh_tf.layers.conv2d`'s, and for the transposes ``[fh, fw, out,
in]`` (``[fd, fh, fw, out, in]``, default scope ``conv2d_transpose`` /
``conv3d_transpose``) like :func:`mesh_tf.layers.conv2d_transpose`'s.
"""


from mesh_tf.core.errors import ShapeError
from mesh_tf.layers import conv_transpose as transpose_lib
from mesh_tf.layers.compat_layers import VarianceScalingInitializer
from mesh_tf.layers.conv import _conv_layer
from mesh_tf.layers.core import _maybe_cast, _unique_scope, dense
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import shift as shift_ops
from mesh_tf.ops import slicing
from mesh_tf.ops import variables as var_lib

__all__ = ["conv2d_transpose_with_blocks", "conv2d_with_blocks",
           "conv3d_transpose_with_blocks", "conv3d_with_blocks",
           "separable_conv1d"]


def _sizes(v, n, what):
  v = [v] * n if isinstance(v, int) else list(v)
  if len(v) != n:
    raise ShapeError(f"{what}: needs {n} sizes, got {v}")
  return v


def _blocks_of(x, blocks_dims, what):
  out = []
  for b in blocks_dims:
    if b is None:
      out.append(None)
      continue
    name = b if isinstance(b, str) else b.name
    if name not in x.shape:
      raise ShapeError(f"{what}: blocks dim {b} is not a dim of {x.name} "
                       f"{x.shape!r}")
    out.append(x.shape.get_dim_by_name(name))
  return out


def _extend(x, blocks, within, before, after):
  """``x`` with ``before``/``after`` entries of the neighbour blocks along
  ``within`` (zeros past the image), or zero-padded without ``blocks``."""
  if not before and not after:
    return x
  if blocks is None:
    return slicing.pad(x, [before, after], within.name)
  halo = max(before, after)
  both = shift_ops.halo_exchange(x, blocks, within, halo)
  return slicing.slice(both, halo - before, within.size + before + after,
                       within.name)


def _with_blocks(n, x, output_dim, filter_size, strides, padding,
                 blocks_dims, filter_initializer, variable_dtype, name):
  what = f"conv{n}d_with_blocks"
  filter_size = _sizes(filter_size, n, what)
  strides = _sizes(strides, n, what)
  blocks = _blocks_of(x, blocks_dims, what) + [None] * (n - len(blocks_dims))
  if all(b is None for b in blocks):
    return _conv_layer(n, x, output_dim, filter_size, strides, padding,
                       filter_initializer, False, None,
                       variable_dtype or "float32", None, name)
  if str(padding).upper() != "SAME":
    raise ShapeError(f"{what}: padding {padding!r} is not supported with "
                     "blocks; use SAME")
  if any(k % 2 == 0 for k in filter_size):
    raise ShapeError(f"{what}: filter_size {filter_size} must be odd with "
                     "blocks (a halo of k // 2 on each side)")
  spatial = x.shape.dims[-1 - n:-1]
  for b, d, k in zip(blocks, spatial, filter_size):
    x = _extend(x, b, d, k // 2, k // 2)
  return _conv_layer(n, x, output_dim, filter_size, strides, "VALID",
                     filter_initializer, False, None,
                     variable_dtype or "float32", None, name)


def conv2d_with_blocks(x, output_dim, filter_size=(3, 3), strides=(1, 1),
                       padding="SAME", h_blocks_dim=None, w_blocks_dim=None,
                       filter_initializer=None, variable_dtype=None,
                       name=None):
  """2-d convolution of an image cut into blocks (see the module doc).

  Args:
    x: ``[batch..., h_blocks, w_blocks, h, w, in_channels]``.
    output_dim: the output channel Dimension.
    filter_size: odd window sizes ``(fh, fw)``.
    strides: per block, as in the original (1 keeps the image size).
    padding: "SAME".
    h_blocks_dim, w_blocks_dim: the blocks Dimensions (or names); with
      neither, an ordinary convolution over ``h, w``.
    filter_initializer, variable_dtype, name: of ``name/kernel``.

  Returns:
    ``x``'s shape with ``output_dim`` last.

  Raises:
    ShapeError: for even windows, VALID padding, or an unknown blocks dim.
  """
  return _with_blocks(2, x, output_dim, filter_size, strides, padding,
                      [h_blocks_dim, w_blocks_dim], filter_initializer,
                      variable_dtype, name)


def conv3d_with_blocks(x, output_dim, filter_size=(3, 3, 3),
                       strides=(1, 1, 1), padding="SAME", d_blocks_dim=None,
                       h_blocks_dim=None, filter_initializer=None,
                       variable_dtype=None, name=None):
  """3-d convolution of ``[batch..., d_blocks, h_blocks, d, h, w, in]``;
  ``w`` has no blocks (see :func:`conv2d_with_blocks`)."""
  return _with_blocks(3, x, output_dim, filter_size, strides, padding,
                      [d_blocks_dim, h_blocks_dim], filter_initializer,
                      variable_dtype, name)


def _transpose_with_blocks(n, x, output_dim, filter_size, strides, padding,
                           blocks_dims, filter_initializer, variable_dtype,
                           name):
  what = f"conv{n}d_transpose_with_blocks"
  filter_size = transpose_lib.sizes(filter_size, n, what, "filter_size")
  strides = transpose_lib.sizes(strides, n, what, "strides")
  blocks = _blocks_of(x, blocks_dims, what) + [None] * (n - len(blocks_dims))
  if filter_size == strides or all(b is None for b in blocks):
    # Windows that do not overlap need no halo; no blocks, no halo either.
    return transpose_lib.conv_transpose(n, x, output_dim, filter_size,
                                        strides, padding, filter_initializer,
                                        variable_dtype, name)
  if str(padding).upper() != "SAME":
    raise ShapeError(f"{what}: padding {padding!r} is not supported with "
                     "blocks; use SAME")
  w, scope, output_dim = transpose_lib.make_transpose_kernel(
      x, n, output_dim, filter_size, filter_initializer, variable_dtype, name)
  spatial = x.shape.dims[-1 - n:-1]
  crops = []
  for b, d, k, s in zip(blocks, spatial, filter_size, strides):
    pad = transpose_lib.transpose_padding(d.size, k, s, "SAME")[0]
    # Inputs [i0 - before, i1 + after] of the block reach its outputs.
    before, after = (k - 1 - pad) // s, (s - 1 + pad) // s
    x = _extend(x, b, d, before, after)
    crops.append((d, pad + before * s))
  y = transpose_lib.conv_transpose_general(
      x, w, x.shape.dims[-1 - n:-1], x.shape.dims[-1], output_dim, strides,
      "VALID", name=f"{scope}/conv")
  for (d, begin), s in zip(crops, strides):
    y = slicing.slice(y, begin, d.size * s, d.name)
  return y


def conv2d_transpose_with_blocks(x, output_dim, filter_size=(2, 2),
                                 strides=(2, 2), padding="SAME",
                                 h_blocks_dim=None, w_blocks_dim=None,
                                 filter_initializer=None, variable_dtype=None,
                                 name=None):
  """2-d transposed convolution of an image cut into blocks: each block of
  ``h, w`` becomes ``h * sh, w * sw``, equal to the transposed convolution
  of the whole image (SAME).  Any window size; a window wider than the
  stride takes a halo from the neighbour blocks.

  Args:
    x: ``[batch..., h_blocks, w_blocks, h, w, in_channels]``.
    filter_initializer: for ``name/kernel`` ``[fh, fw, out, in]`` (TF's
      transposed layout, as :func:`mesh_tf.layers.conv2d_transpose`; the
      default scope is ``conv2d_transpose``, as in the original).
    Others as in :func:`conv2d_with_blocks`.
  """
  return _transpose_with_blocks(2, x, output_dim, filter_size, strides,
                                padding, [h_blocks_dim, w_blocks_dim],
                                filter_initializer, variable_dtype, name)


def conv3d_transpose_with_blocks(x, output_dim, filter_size=(2, 2, 2),
                                 strides=(2, 2, 2), padding="SAME",
                                 d_blocks_dim=None, h_blocks_dim=None,
                                 filter_initializer=None, variable_dtype=None,
                                 name=None):
  """3-d form of :func:`conv2d_transpose_with_blocks` for ``[batch...,
  d_blocks, h_blocks, d, h, w, in]`` (``w`` has no blocks)."""
  return _transpose_with_blocks(3, x, output_dim, filter_size, strides,
                                padding, [d_blocks_dim, h_blocks_dim],
                                filter_initializer, variable_dtype, name)


def separable_conv1d(x, output_dim, min_relative_pos=-1, max_relative_pos=1,
                     depthwise_filter_initializer_scale=1.0,
                     pointwise_filter_initializer_scale=1.0, name=None,
                     use_bias=True, kernel_depth_weights=None):
  """A depthwise 1-d convolution followed by a pointwise (dense) one.

  ``depthwise[p, c] = sum_r w_r[c] * x[p + r, c]`` over the relative
  positions ``r`` in ``[min_relative_pos, max_relative_pos]`` (zeros past
  the ends), plus a bias; then a dense layer from the channels to
  ``output_dim``.

  Args:
    x: ``[batch..., length, channels]``; the length may be split (the shifts
      exchange edges).
    output_dim: the output Dimension.
    min_relative_pos, max_relative_pos: the window, inclusive.
    depthwise_filter_initializer_scale, pointwise_filter_initializer_scale:
      variance scales of the two kernels.
    name: scope of ``depthwise_dense_<i>/kernel`` (``[channels]``),
      ``depthwise_dense_0/bias`` and ``pointwise_dense/{kernel,bias}``.
    use_bias: add the biases.
    kernel_depth_weights: optional list of ``[channels]`` Tensors, one per
      relative position, used instead of the depthwise kernels.

  Returns:
    ``x``'s shape with ``output_dim`` in place of the channels.

  Raises:
    ShapeError: for an empty window or a wrong number of depth weights.
  """
  depth, length = x.shape.dims[-1], x.shape.dims[-2]
  size = max_relative_pos - min_relative_pos + 1
  if size < 1:
    raise ShapeError(f"separable_conv1d: window [{min_relative_pos}, "
                     f"{max_relative_pos}] is empty")
  if kernel_depth_weights is not None and len(kernel_depth_weights) != size:
    raise ShapeError(f"separable_conv1d: {len(kernel_depth_weights)} "
                     f"kernel_depth_weights for a window of {size}")
  scope = _unique_scope(x.graph, name or "separable_conv1d")
  # Mesh TF's depthwise kernels: variance scale / size, truncated normal.
  depthwise_init = VarianceScalingInitializer(
      depthwise_filter_initializer_scale / size)([], [])
  out = None
  for i in range(size):
    r = min_relative_pos + i
    if kernel_depth_weights is not None:
      w = kernel_depth_weights[i]
    else:
      w = _maybe_cast(var_lib.get_variable(
          x.mesh, f"{scope}/depthwise_dense_{i}/kernel", [depth], "float32",
          depthwise_init), x.dtype)
    term = ew.multiply(shift_ops.shift(x, -r, length, wrap=False), w)
    out = term if out is None else ew.add(out, term)
  if use_bias:
    out = ew.add(out, _maybe_cast(var_lib.get_variable(
        x.mesh, f"{scope}/depthwise_dense_0/bias", [depth], "float32",
        var_lib.zeros_initializer()), x.dtype))
  return dense(out, output_dim, reduced_dims=[depth], use_bias=use_bias,
               kernel_initializer=VarianceScalingInitializer(
                   pointwise_filter_initializer_scale),
               name=f"{scope}/pointwise_dense")
