"""Convolution and pooling layers: variables plus :mod:`mesh_tf.ops.conv`
and :mod:`mesh_tf.ops.pool`.

Inputs are ``[batch..., spatial..., channels]``: the spatial dims are the
``n`` dims before the last, unless ``spatial_dims`` names them.  Spatial
dims may be split across the mesh (stride 1, SAME padding): the convolution
exchanges halos with neighbouring processors.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.core import _maybe_cast, _unique_scope, get_activation
from mesh_tf.ops import conv as conv_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import pool as pool_ops
from mesh_tf.ops import variables as var_lib


def _conv_layer(n, x, output_dim, filter_size, strides, padding,
                filter_initializer, use_bias, activation, master_dtype,
                spatial_dims, name):
  if spatial_dims is None:
    spatial_dims = x.shape.dimension_names[-1 - n:-1]
  spatial = [d if isinstance(d, str) else d.name for d in spatial_dims]
  if len(spatial) != n:
    raise ShapeError(f"conv{n}d: needs {n} spatial dims, got {spatial}")
  in_dim = x.shape.dims[-1]
  if in_dim.name in spatial:
    raise ShapeError(f"conv{n}d: the last dim of {x.name} {x.shape!r} is the "
                     "channel dim and cannot be spatial")
  output_dim = dims_lib.convert_to_dimension(output_dim)
  if output_dim.name in x.shape:
    raise ShapeError(f"conv{n}d: output dim {output_dim} is already a dim of "
                     f"{x.name} {x.shape!r}; give it another name")
  if isinstance(filter_size, int):
    filter_size = [filter_size] * n
  if isinstance(strides, int):
    strides = [strides] * n
  scope = _unique_scope(x.graph, name or f"conv{n}d")
  fdims = [dims_lib.Dimension(f"filter_{s}", k)
           for s, k in zip(spatial, filter_size)]
  fan_in = math.prod(filter_size) * in_dim.size
  w = var_lib.get_variable(
      x.mesh, f"{scope}/kernel",
      dims_lib.Shape(fdims + [in_dim, output_dim]), master_dtype,
      filter_initializer if filter_initializer is not None
      else var_lib.random_normal_initializer(stddev=1.0 / math.sqrt(fan_in)))
  y = conv_ops.conv(x, _maybe_cast(w, x.dtype), spatial, in_dim.name,
                    output_dim.name, strides=strides, padding=padding,
                    name=f"{scope}/conv")
  if use_bias:
    b = var_lib.get_variable(x.mesh, f"{scope}/bias", [output_dim],
                             master_dtype, var_lib.zeros_initializer())
    y = ew.add(y, _maybe_cast(b, x.dtype), name=f"{scope}/bias_add")
  act = get_activation(activation)
  return act(y) if act is not None else y


def _make(n):
  default_size = [3] * n

  def layer(x, output_dim, filter_size=None, strides=1, padding="SAME",
            filter_initializer=None, use_bias=True, activation=None,
            master_dtype="float32", spatial_dims=None, name=None):
    return _conv_layer(n, x, output_dim, filter_size or default_size,
                       strides, padding, filter_initializer, use_bias,
                       activation, master_dtype, spatial_dims, name)
  layer.__name__ = layer.__qualname__ = f"conv{n}d"
  layer.__doc__ = f"""A {n}-d convolution layer with filter and bias variables.

  Args:
    x: ``[batch..., {n} spatial dims, in_channels]``.
    output_dim: the output channel Dimension (a new name).
    filter_size: window per spatial dim (default 3).
    strides: per spatial dim (default 1); split spatial dims need 1.
    padding: "SAME" or "VALID"; split spatial dims need "SAME".
    filter_initializer: default Normal(0, 1/sqrt(fan_in)).
    use_bias, activation: as in :func:`mesh_tf.layers.dense`.
    spatial_dims: names of the spatial dims (default: the {n} before the
      last dim).
    name: scope of ``name/kernel`` (dims ``filter_<spatial>``, in, out) and
      ``name/bias``.

  Returns:
    ``x``'s shape with the channel dim replaced by ``output_dim``.
  """
  return layer


conv1d, conv2d, conv3d = _make(1), _make(2), _make(3)
max_pool1d, max_pool2d, max_pool3d = (pool_ops.max_pool1d, pool_ops.max_pool2d,
                                      pool_ops.max_pool3d)
avg_pool1d, avg_pool2d, avg_pool3d = (pool_ops.avg_pool1d, pool_ops.avg_pool2d,
                                      pool_ops.avg_pool3d)
