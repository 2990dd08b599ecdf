"""Mesh TensorFlow's ``conv2d_transpose`` and ``conv3d_transpose`` layers.

They take 0.1.21's parameters and make its variable: one kernel
``name/kernel`` (default scope ``conv2d_transpose`` / ``conv3d_transpose``)
in TF's transposed-convolution layout ``[fh, fw, out, in]`` (3-d: ``[fd,
fh, fw, out, in]``), with TF's Glorot-uniform default initialiser, so a
checkpoint of the original restores unchanged.

When the filter is as large as the stride (``filter_size == strides``, the
original's default 2x2 upsampling) the windows do not overlap: the
transposed convolution is one einsum (each input position times the filter
gives a ``filter_size`` block of outputs) and a reshape that interleaves
those blocks with the spatial dims.  Both are ordinary mtf ops: every dim
may be split, and the gradient comes from them.

Other filter sizes (overlapping or gapped windows) are
:func:`conv_transpose_general`: the input is dilated by the stride (an einsum
with a one-hot and a reshape), then convolved at stride 1 with the mirrored
filter, so a split spatial dim gets a halo exchange (SAME padding).  Output
sizes are TF's: ``size * stride`` for SAME, ``size * stride + max(k - s,
0)`` for VALID.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.conv import glorot_uniform, window_dim_names
from mesh_tf.layers.core import _maybe_cast, _unique_scope, variable_dtype_of
from mesh_tf.ops import conv as conv_ops
from mesh_tf.ops import creation
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import variables as var_lib

__all__ = ["conv2d_transpose", "conv3d_transpose", "conv_transpose_general",
           "make_transpose_kernel", "transpose_padding"]


def sizes(v, n, what, arg):
  """``v`` (an int or n ints) as a list of n positive ints."""
  v = [v] * n if isinstance(v, int) else list(v)
  if len(v) != n or not all(isinstance(k, int) and k >= 1 for k in v):
    raise ShapeError(f"{what}: {arg} {v!r} needs {n} positive integers")
  return v


def make_transpose_kernel(x, n, output_dim, filter_size, filter_initializer,
                          variable_dtype, name):
  """The ``name/kernel`` variable ``[fh, fw, out, in]`` (``[fd, fh, fw, out,
  in]``) of a transposed convolution of ``x`` (cast to ``x``'s dtype), its
  scope and ``output_dim`` as a Dimension.

  Raises:
    ShapeError: for an output dim ``x`` already has, or a dim of ``x``
      named like a window dim.
  """
  what = f"conv{n}d_transpose"
  in_dim = x.shape.dims[-1]
  output_dim = dims_lib.convert_to_dimension(output_dim)
  if output_dim.name in x.shape:
    raise ShapeError(f"{what}: output dim {output_dim} is already a dim of "
                     f"{x.name} {x.shape!r}; give it another name")
  fnames = window_dim_names(x, n, what)
  fdims = [dims_lib.Dimension(f, k) for f, k in zip(fnames, filter_size)]
  scope = _unique_scope(x.graph, name or what)
  w = var_lib.get_variable(
      x.mesh, f"{scope}/kernel",
      dims_lib.Shape(fdims + [output_dim, in_dim]),
      variable_dtype_of(variable_dtype, None, None),
      filter_initializer if filter_initializer is not None
      else glorot_uniform(filter_size, in_dim.size, output_dim.size))
  return _maybe_cast(w, x.dtype), scope, output_dim


def conv_transpose(n, x, output_dim, filter_size, strides, padding,
                   filter_initializer, variable_dtype, name):
  """The layer of :func:`conv2d_transpose` (``n = 2``) and
  :func:`conv3d_transpose` (``n = 3``)."""
  what = f"conv{n}d_transpose"
  filter_size = sizes(filter_size, n, what, "filter_size")
  strides = sizes(strides, n, what, "strides")
  if str(padding).upper() not in ("SAME", "VALID"):
    raise ShapeError(f"{what}: padding {padding!r} must be 'SAME' or "
                     "'VALID'")
  if x.shape.ndims < n + 1:
    raise ShapeError(f"{what}: {x.name} {x.shape!r} needs {n} spatial dims "
                     "and a channel dim")
  w, scope, output_dim = make_transpose_kernel(
      x, n, output_dim, filter_size, filter_initializer, variable_dtype, name)
  spatial = x.shape.dims[-1 - n:-1]
  if filter_size != strides:
    return conv_transpose_general(x, w, spatial, x.shape.dims[-1],
                                  output_dim, strides, padding,
                                  name=f"{scope}/conv")
  # Non-overlapping windows: out[i * s + j] = x[i] . w[j], an einsum whose
  # window dims interleave with the spatial dims, then one reshape.
  batch = x.shape.dims[:-1 - n]
  interleaved = list(batch)
  for d, f in zip(spatial, w.shape.dims[:n]):
    interleaved += [d, f]
  y = einsum_ops.einsum(
      [x, w], output_shape=dims_lib.Shape(interleaved + [output_dim]),
      name=f"{scope}/einsum")
  out = list(batch) + [dims_lib.Dimension(d.name, d.size * k)
                       for d, k in zip(spatial, filter_size)] + [output_dim]
  return reshape_ops.reshape(y, dims_lib.Shape(out), name=f"{scope}/reshape")


def conv2d_transpose(x, output_dim, filter_size=(2, 2), strides=(2, 2),
                     padding="SAME", filter_initializer=None,
                     variable_dtype=None, name=None):
  """2-d transposed convolution (Mesh TF's NHWC, TF's
  ``tf.nn.conv2d_transpose``).

  Args:
    x: ``[batch..., height, width, in_channels]``.
    output_dim: the output channel Dimension (a new name).
    filter_size: ``(fh, fw)`` (an integer: both); any window.
    strides: ``(stride_h, stride_w)`` (an integer: both).
    padding: "SAME" (output ``h * sh, w * sw``) or "VALID" (TF's sizes, see
      :func:`transpose_padding`).
    filter_initializer: initialiser of ``name/kernel`` ``[fh, fw, out,
      in]`` (TF's transposed layout); default TF's Glorot uniform.
    variable_dtype: a :class:`mesh_tf.VariableDType`.
    name: the kernel's scope (default ``conv2d_transpose``).

  Returns:
    ``x``'s shape with each spatial dim resized (same names) and the channel
    dim replaced by ``output_dim``.  With ``filter_size == strides`` every
    dim may be split; otherwise a split spatial dim needs SAME padding (a
    halo exchange).

  Raises:
    ShapeError: for bad sizes or padding, an output dim ``x`` already has,
      or a dim of ``x`` named like a window dim (``fh``, ``fw``).
  """
  return conv_transpose(2, x, output_dim, filter_size, strides, padding,
                        filter_initializer, variable_dtype, name)


def conv3d_transpose(x, output_dim, filter_size=(2, 2, 2),
                     strides=(2, 2, 2), padding="SAME",
                     filter_initializer=None, variable_dtype=None,
                     name=None):
  """3-d transposed convolution (Mesh TF's NDHWC, TF's
  ``tf.nn.conv3d_transpose``).

  Args:
    x: ``[batch..., depth, height, width, in_channels]``.
    output_dim: the output channel Dimension (a new name).
    filter_size: ``(fd, fh, fw)`` (an integer: all three); any window.
    strides: ``(stride_d, stride_h, stride_w)`` (an integer: all three).
    padding: "SAME" or "VALID" (see :func:`conv2d_transpose`).
    filter_initializer: initialiser of ``name/kernel`` ``[fd, fh, fw, out,
      in]``; default TF's Glorot uniform.
    variable_dtype: a :class:`mesh_tf.VariableDType`.
    name: the kernel's scope (default ``conv3d_transpose``).

  Returns:
    As :func:`conv2d_transpose`.

  Raises:
    ShapeError: as :func:`conv2d_transpose` (window dims ``fd, fh, fw``).
  """
  return conv_transpose(3, x, output_dim, filter_size, strides, padding,
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
    kernel: the filter dims (one per spatial dim, in order) and the two
      channel dims ``output_dim`` and ``in_dim``, in any order (the layers
      pass TF's transposed layout ``[filter..., out, in]``).
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
