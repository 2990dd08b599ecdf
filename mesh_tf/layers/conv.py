"""Convolution and pooling layers: variables plus :mod:`mesh_tf.ops.conv`
and :mod:`mesh_tf.ops.pool`.

``conv1d``, ``conv2d`` and ``conv3d`` take Mesh TF 0.1.21's parameters in
its order, and make its variables: one kernel ``name/kernel`` with dims
``fh, fw`` (``fd, fh, fw`` in 3-d), in and out channels, no bias, TF's
Glorot-uniform default initialiser.  ``conv1d`` is the original's 2-d
convolution of height 1: its kernel is ``conv2d/kernel`` ``[fh=1, fw, in,
out]``.  Keyword-only extras: ``use_bias``, ``activation``,
``master_dtype`` and ``spatial_dims``.

Inputs are ``[batch..., spatial..., channels]``: the spatial dims are the
``n`` dims before the last, unless ``spatial_dims`` names them.  Spatial
dims may be split across the mesh (stride 1, SAME padding): the convolution
exchanges halos with neighbouring processors.  Output sizes follow TF:
SAME gives ``ceil(n / stride)``, VALID ``ceil((n - k + 1) / stride)``; the
dims keep their names.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.core import (_maybe_cast, _unique_scope, get_activation,
                                 variable_dtype_of)
from mesh_tf.ops import conv as conv_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import pool as pool_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import variables as var_lib

# Mesh TF's names of the kernel's window dims, per convolution rank.
FILTER_DIM_NAMES = {1: ("fh", "fw"), 2: ("fh", "fw"), 3: ("fd", "fh", "fw")}


def _sizes(v, n, what, arg):
  v = [v] * n if isinstance(v, int) else list(v)
  if len(v) != n or not all(isinstance(k, int) and k >= 1 for k in v):
    raise ShapeError(f"{what}: {arg} {v!r} needs {n} positive integers")
  return v


def window_dim_names(x, n, what):
  """The kernel's window dim names of an ``n``-d conv layer, checked
  against the dims of its input ``x``."""
  fnames = FILTER_DIM_NAMES[n]
  clash = [f for f in fnames if f in x.shape]
  if clash:
    raise ShapeError(f"{what}: {x.name} {x.shape!r} has a dim named "
                     f"{clash[0]!r}, the name of the kernel's window dim; "
                     "rename it")
  return fnames


def glorot_uniform(filter_size, in_size, out_size):
  """TF's default initialiser of a kernel ``[window..., in, out]``:
  uniform in ``+-sqrt(6 / (fan_in + fan_out))``, the fans counting the
  window (layout-invariant here)."""
  window = math.prod(filter_size)
  limit = math.sqrt(6.0 / (window * (in_size + out_size)))
  return var_lib.random_uniform_initializer(minval=-limit, maxval=limit)


def _conv_layer(n, x, output_dim, filter_size, strides, padding,
                filter_initializer, use_bias, activation, master_dtype,
                spatial_dims, name, variable_dtype=None):
  what = f"conv{n}d"
  if spatial_dims is None:
    spatial_dims = x.shape.dimension_names[-1 - n:-1]
  spatial = [d if isinstance(d, str) else d.name for d in spatial_dims]
  if len(spatial) != n:
    raise ShapeError(f"{what}: needs {n} spatial dims, got {spatial}")
  in_dim = x.shape.dims[-1]
  if in_dim.name in spatial:
    raise ShapeError(f"{what}: the last dim of {x.name} {x.shape!r} is the "
                     "channel dim and cannot be spatial")
  output_dim = dims_lib.convert_to_dimension(output_dim)
  if output_dim.name in x.shape:
    raise ShapeError(f"{what}: output dim {output_dim} is already a dim of "
                     f"{x.name} {x.shape!r}; give it another name")
  filter_size = _sizes(filter_size, n, what, "filter_size")
  strides = _sizes(strides, n, what, "strides")
  fnames = window_dim_names(x, n, what)
  # conv1d's kernel is the original's height-1 2-d kernel.
  window = [1] + filter_size if n == 1 else filter_size
  fdims = [dims_lib.Dimension(f, k) for f, k in zip(fnames, window)]
  scope = _unique_scope(x.graph, name or f"conv{max(n, 2)}d")
  var_dtype = variable_dtype_of(variable_dtype, master_dtype, None)
  w = var_lib.get_variable(
      x.mesh, f"{scope}/kernel",
      dims_lib.Shape(fdims + [in_dim, output_dim]), var_dtype,
      filter_initializer if filter_initializer is not None
      else glorot_uniform(window, in_dim.size, output_dim.size))
  w = _maybe_cast(w, x.dtype)
  if n == 1:
    w = reshape_ops.reshape(w, dims_lib.Shape(fdims[1:] + [in_dim,
                                                           output_dim]),
                            name=f"{scope}/kernel_1d")
  y = conv_ops.conv(x, w, spatial, in_dim.name, output_dim.name,
                    strides=strides, padding=padding, name=f"{scope}/conv")
  if use_bias:
    b = var_lib.get_variable(x.mesh, f"{scope}/bias", [output_dim],
                             var_dtype, var_lib.zeros_initializer())
    y = ew.add(y, _maybe_cast(b, x.dtype), name=f"{scope}/bias_add")
  act = get_activation(activation)
  return act(y) if act is not None else y


def conv1d(x, output_dim, filter_size=3, stride=1, *, padding="SAME",
           filter_initializer=None, variable_dtype=None, name=None,
           use_bias=False, activation=None, master_dtype=None,
           spatial_dims=None, strides=None):
  """A 1-d convolution over the dim before the channels.

  Args:
    x: ``[batch..., width, in_channels]``.
    output_dim: the output channel Dimension (a new name).
    filter_size: the window width (default 3).
    stride: an integer (``strides=`` also works).
    padding: "SAME" or "VALID" (keyword, as in Mesh TF's ``**kw_args``).
    filter_initializer: initialiser of ``name/kernel`` ``[fh=1, fw, in,
      out]``; default TF's Glorot uniform.
    variable_dtype: a :class:`mesh_tf.VariableDType`.
    name: the kernel's scope (default ``conv2d``, as in Mesh TF).

  Keyword only (not in Mesh TF): ``use_bias`` (a ``name/bias`` over
  ``output_dim``), ``activation`` (as in :func:`mesh_tf.layers.dense`),
  ``master_dtype`` (without ``variable_dtype``), ``spatial_dims`` (names of
  the spatial dims; default the 1 before the last dim).

  Returns:
    ``x``'s shape with the channel dim replaced by ``output_dim`` and the
    spatial dims resized (same names).

  Raises:
    ShapeError: for bad sizes, an output dim ``x`` already has, or a dim
      of ``x`` named like a window dim.
  """
  return _conv_layer(1, x, output_dim, filter_size,
                     stride if strides is None else strides, padding,
                     filter_initializer, use_bias, activation, master_dtype,
                     spatial_dims, name, variable_dtype)


def conv2d(x, output_dim, filter_size=(3, 3), strides=(1, 1),
           padding="SAME", filter_initializer=None, variable_dtype=None,
           name=None, *, use_bias=False, activation=None, master_dtype=None,
           spatial_dims=None):
  """A 2-d convolution (Mesh TF's NHWC).

  Args:
    x: ``[batch..., height, width, in_channels]``.
    output_dim: the output channel Dimension (a new name).
    filter_size: ``(fh, fw)`` (an integer: both).
    strides: ``(stride_h, stride_w)`` (an integer: both); split spatial
      dims need 1.
    padding: "SAME" or "VALID"; split spatial dims need "SAME".
    filter_initializer: initialiser of ``name/kernel`` ``[fh, fw, in,
      out]``; default TF's Glorot uniform.
    variable_dtype: a :class:`mesh_tf.VariableDType`.
    name: the kernel's scope (default ``conv2d``).

  Keyword only (not in Mesh TF): ``use_bias`` (a ``name/bias`` over
  ``output_dim``), ``activation`` (as in :func:`mesh_tf.layers.dense`),
  ``master_dtype`` (without ``variable_dtype``), ``spatial_dims`` (names of
  the spatial dims; default the 2 before the last dim).

  Returns:
    ``x``'s shape with the channel dim replaced by ``output_dim`` and the
    spatial dims resized (same names).

  Raises:
    ShapeError: for bad sizes, an output dim ``x`` already has, or a dim
      of ``x`` named like a window dim.
  """
  return _conv_layer(2, x, output_dim, filter_size, strides, padding,
                     filter_initializer, use_bias, activation, master_dtype,
                     spatial_dims, name, variable_dtype)


def conv3d(x, output_dim, filter_size=(3, 3, 3), strides=(1, 1, 1),
           padding="SAME", filter_initializer=None, variable_dtype=None,
           name=None, *, use_bias=False, activation=None, master_dtype=None,
           spatial_dims=None):
  """A 3-d convolution (Mesh TF's NDHWC).

  Args:
    x: ``[batch..., depth, height, width, in_channels]``.
    output_dim: the output channel Dimension (a new name).
    filter_size: ``(fd, fh, fw)`` (an integer: all three).
    strides: ``(stride_d, stride_h, stride_w)`` (an integer: all three).
    padding: "SAME" or "VALID".
    filter_initializer: initialiser of ``name/kernel`` ``[fd, fh, fw, in,
      out]``; default TF's Glorot uniform.
    variable_dtype: a :class:`mesh_tf.VariableDType`.
    name: the kernel's scope (default ``conv3d``).

  Keyword only (not in Mesh TF): ``use_bias`` (a ``name/bias`` over
  ``output_dim``), ``activation`` (as in :func:`mesh_tf.layers.dense`),
  ``master_dtype`` (without ``variable_dtype``), ``spatial_dims`` (names of
  the spatial dims; default the 3 before the last dim).

  Returns:
    ``x``'s shape with the channel dim replaced by ``output_dim`` and the
    spatial dims resized (same names).

  Raises:
    ShapeError: for bad sizes, an output dim ``x`` already has, or a dim
      of ``x`` named like a window dim.
  """
  return _conv_layer(3, x, output_dim, filter_size, strides, padding,
                     filter_initializer, use_bias, activation, master_dtype,
                     spatial_dims, name, variable_dtype)


max_pool1d, max_pool2d, max_pool3d = (pool_ops.max_pool1d, pool_ops.max_pool2d,
                                      pool_ops.max_pool3d)
avg_pool1d, avg_pool2d, avg_pool3d = (pool_ops.avg_pool1d, pool_ops.avg_pool2d,
                                      pool_ops.avg_pool3d)
