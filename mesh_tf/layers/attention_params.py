"""Mesh TensorFlow's attention weights: ``multihead_attention_params`` and
``multihead_attention_vars``.

Each of ``wq, wk, wv, wo`` has dims ``[heads, io_channels, kv_channels]``;
attention contracts them by name, so their dim order does not matter.  The
initial standard deviations fold the logit scale into the query and key
weights (``io^-1/2 * kv^-1/4`` each, so ``q . k`` is scaled by ``kv^-1/2``),
as the original does.  With ``combine`` the four live in one ``qkvo``
variable (the original's checkpoint layout) that is unstacked.
"""

import numpy as np

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.lowering import random_kernels
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import slicing
from mesh_tf.ops import variables as var_lib

__all__ = ["multihead_attention_params", "multihead_attention_vars",
           "reuse_or_get_variable"]

QKVO = dims_lib.Dimension("qkvo", 4)


class _StackedNormalInitializer(var_lib.Initializer):
  """Normal(0, stddevs[i]) for slot ``i`` of the leading dim: the layout-
  invariant stream of ``random_normal_initializer``, scaled per slot."""

  def __init__(self, stddevs):
    self.stddevs = tuple(float(s) for s in stddevs)

  def _value(self, full_shape, seed, begin, slice_shape):
    unit = random_kernels.numpy_random(full_shape, seed, "normal",
                                       begin=begin, slice_shape=slice_shape)
    lo = 0 if begin is None else begin[0]
    n = full_shape[0] if slice_shape is None else slice_shape[0]
    scale = np.asarray(self.stddevs[lo:lo + n], np.float32)
    return unit * scale.reshape([n] + [1] * (len(full_shape) - 1))

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    value = self._value(tuple(full_shape), seed, list(begin),
                        list(slice_shape))
    return tf.cast(tf.constant(value), dtype)

  def numpy(self, full_shape, dtype, seed):
    return self._value(tuple(full_shape), seed, None, None).astype(
        dtype if dtype != "bfloat16" else "float32")


def reuse_or_get_variable(mesh, name, shape, dtype, initializer, reuse):
  """``get_variable``, or with ``reuse`` the graph's variable of that
  (scoped) name when it has one: the ``tf.compat.v1`` reuse that unrolled
  decoding steps need to read one set of weights.

  Raises:
    ShapeError: if the existing variable has another shape.
  """
  if reuse:
    from mesh_tf.compat.tf_scope import scoped_name  # pylint: disable=g-import-not-at-top
    full = scoped_name(name)
    for var in mesh.graph.all_variables:
      if var.name == full:
        if var.shape != shape:
          raise ShapeError(f"variable {full} {var.shape!r} is reused with "
                           f"shape {shape!r}; give the layer another name")
        if not isinstance(dtype, dtypes_lib.VariableDType):
          dtype = dtypes_lib.VariableDType(dtype)
        from mesh_tf.ops.elementwise import cast  # pylint: disable=g-import-not-at-top
        return cast(cast(var.outputs[0], dtype.slice_dtype),
                    dtype.activation_dtype)
  return var_lib.get_variable(mesh, name, shape, dtype, initializer)


def _stddevs(heads, io_channels, kv_channels):
  qk = io_channels.size ** -0.5 * kv_channels.size ** -0.25
  v = io_channels.size ** -0.5
  # The original's output scale (its own TODO notes kv * heads would be
  # the principled one); kept so ported models initialise alike.
  o = (io_channels.size * heads.size) ** -0.5
  return [qk, qk, v, o]


def multihead_attention_params(mesh, heads, io_channels, kv_channels,
                               variable_dtype, combine=False, name=None,
                               reuse=False):
  """Creates the query, key, value and output weights of an attention layer.

  Args:
    mesh: the Mesh.
    heads, io_channels, kv_channels: Dimensions.
    variable_dtype: a :class:`mesh_tf.VariableDType` (or a dtype name).
    combine: one ``qkvo`` variable ``[qkvo=4, heads, io, kv]`` instead of
      four variables ``q``, ``k``, ``v``, ``o``.
    name: an optional scope for the variable names (mesh-tf's addition;
      an open ``tf.compat.v1.variable_scope`` prefixes them either way).
    reuse: read the graph's variables of these names if it has them (see
      :func:`reuse_or_get_variable`).

  Returns:
    ``[wq, wk, wv, wo]``, each ``[heads, io_channels, kv_channels]``.

  Example:
    >>> import mesh_tf as mtf
    >>> mesh = mtf.Mesh(mtf.Graph(), "m")
    >>> wq, wk, wv, wo = multihead_attention_params(
    ...     mesh, mtf.Dimension("heads", 2), mtf.Dimension("d_model", 8),
    ...     mtf.Dimension("d_kv", 4), "float32", combine=True)
    >>> wq.shape
    Shape[heads=2, d_model=8, d_kv=4]
  """
  heads = dims_lib.convert_to_dimension(heads)
  io_channels = dims_lib.convert_to_dimension(io_channels)
  kv_channels = dims_lib.convert_to_dimension(kv_channels)
  if not isinstance(variable_dtype, dtypes_lib.VariableDType):
    variable_dtype = dtypes_lib.VariableDType(variable_dtype or "float32")
  prefix = f"{name}/" if name else ""
  stddevs = _stddevs(heads, io_channels, kv_channels)
  shape = dims_lib.Shape([heads, io_channels, kv_channels])
  if combine:
    var = reuse_or_get_variable(
        mesh, prefix + "qkvo", dims_lib.Shape([QKVO]) + shape,
        variable_dtype, _StackedNormalInitializer(stddevs), reuse)
    return slicing.unstack(var, QKVO)
  return [reuse_or_get_variable(
      mesh, prefix + n, shape, variable_dtype,
      var_lib.random_normal_initializer(stddev=s), reuse)
          for n, s in zip("qkvo", stddevs)]


def multihead_attention_vars(mesh, heads, io_channels, kv_channels,
                             master_dtype, slice_dtype, activation_dtype,
                             name=None, reuse=False):
  """The original's older form of :func:`multihead_attention_params` with
  ``combine=True`` (one ``qkvo`` variable)."""
  return multihead_attention_params(
      mesh, heads, io_channels, kv_channels,
      dtypes_lib.VariableDType(master_dtype or "float32", slice_dtype,
                               activation_dtype), combine=True, name=name,
      reuse=reuse)
