"""Mesh TensorFlow layers that mesh-tf composes from its own ops:
``dot_product_attention``, ``dense_product``, ``weights_nonzero``,
``multiplicative_jitter``, ``rename_length_to_memory_length``, the dense
initializer classes, ``annealed_dropout``, ``corr`` and
``get_dense_kernel_weights``.  Gradients come from the ops they are made of.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Tensor
from mesh_tf.layers import core as core_layers
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import random as random_ops
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import variables as var_lib

__all__ = ["DenseInitializer", "VarianceScalingInitializer",
           "annealed_dropout", "attention_mask_same_segment", "batch_norm",
           "corr", "dense_product", "dot_product_attention",
           "get_dense_kernel_weights", "multiplicative_jitter",
           "rename_length_to_memory_length", "weights_nonzero"]


def dot_product_attention(q, k, v, mask, is_training=True, dropout=0.0,
                          dropout_broadcast_dims=None, extra_logit=None):
  """``softmax(q . k + mask) . v`` over named dims (Mesh TF's layer).

  Args:
    q: ``[batch..., heads..., length, d_k]`` (``d_k`` last).
    k: ``[batch..., heads..., memory_length, d_k]`` (``memory_length``
      second to last).
    v: ``[batch..., heads..., memory_length, d_v]`` (``d_v`` last).
    mask: a bias broadcast onto the logits, or None.
    is_training: dropout applies only when training (Mesh TF 0.1.21's
      order; a float here is the later releases' positional ``dropout``).
    dropout: dropout rate on the attention weights (when training).
    dropout_broadcast_dims: dims along which the dropout mask is shared.
    extra_logit: an extra logit in the softmax's normaliser (a "null"
      position), as in Mesh TF.

  Returns:
    ``q``'s shape with ``d_k`` replaced by ``d_v``.
  """
  from mesh_tf.layers.attention import training_and_rate  # pylint: disable=g-import-not-at-top
  is_training, dropout = training_and_rate(is_training, dropout)
  memory_length = k.shape.dims[-2]
  logits = einsum_lib.einsum(
      [q, k], output_shape=dims_lib.Shape(q.shape.dims[:-1]
                                          + [memory_length]))
  if mask is not None:
    logits = ew.add(logits, mask)
  weights = reduce_ops.softmax(logits, memory_length, extra_logit=extra_logit)
  if dropout and is_training:
    noise = None
    if dropout_broadcast_dims:
      noise = weights.shape - core_layers._dims_list(dropout_broadcast_dims)  # pylint: disable=protected-access
    weights = core_layers.dropout(weights, rate=dropout, noise_shape=noise)
  out_shape = dims_lib.Shape(q.shape.dims[:-1] + [v.shape.dims[-1]])
  return einsum_lib.einsum([weights, v], output_shape=out_shape)


def weights_nonzero(targets, dtype="float32"):
  """1.0 where ``targets`` is nonzero, else 0.0 (loss weights that skip
  padding)."""
  return ew.cast(ew.not_equal(targets, 0), dtype)


def rename_length_to_memory_length(x, length_name="length",
                                   memory_length_name="memory_length"):
  """``x`` with its ``length_name`` dim renamed ``memory_length_name``."""
  return reshape_ops.rename_dimension(x, length_name, memory_length_name)


def dense_product(x, reduced_dims, new_dims, activation_functions=None,
                  name="dense_product", **kwargs):
  """The elementwise product of several dense layers of ``x``, one per
  activation (``["linear", "sigmoid"]`` is a gated linear unit).

  Extra keyword arguments go to each :func:`mesh_tf.layers.dense`; each
  layer's variables live under ``name/<i>``.
  """
  fns = activation_functions or ["linear"]
  if isinstance(fns, str) or callable(fns):
    fns = [fns]
  scope = core_layers._unique_scope(x.graph, name)  # pylint: disable=protected-access
  out = None
  for i, fn in enumerate(fns):
    h = core_layers.dense(x, new_dims, reduced_dims=reduced_dims,
                          activation=None if fn == "linear" else fn,
                          name=f"{scope}/{i}", **kwargs)
    out = h if out is None else ew.multiply(out, h)
  return out


def multiplicative_jitter(x, epsilon=1e-2, seed=0):
  """``x`` times uniform noise in ``[1 - epsilon, 1 + epsilon)`` (identity
  for ``epsilon=0``).  The noise is layout-invariant for a given seed."""
  if epsilon == 0:
    return x
  noise = random_ops.random_uniform(x.mesh, x.shape, minval=1.0 - epsilon,
                                    maxval=1.0 + epsilon, dtype=x.dtype,
                                    seed=seed)
  return ew.multiply(x, noise)


DenseInitializer = core_layers.DenseInitializer


class VarianceScalingInitializer(DenseInitializer):
  """Variance ``scale / n`` with ``n`` the fan-in, fan-out or their mean.

  Args:
    scale: the variance numerator.
    mode: "fan_in", "fan_out" or "fan_avg".
    distribution: "normal" (truncated at two standard deviations, drawn
      through ``tf.truncated_normal_initializer`` as in Mesh TF) or
      "uniform".

  Raises:
    MtfError: for another mode or distribution.
  """

  def __init__(self, scale=1.0, mode="fan_in", distribution="normal"):
    if mode not in ("fan_in", "fan_out", "fan_avg"):
      raise MtfError(f"VarianceScalingInitializer: unknown mode {mode!r}; "
                     "use fan_in, fan_out or fan_avg")
    if distribution not in ("normal", "uniform"):
      raise MtfError(f"VarianceScalingInitializer: unknown distribution "
                     f"{distribution!r}; use normal or uniform")
    self.scale, self.mode, self.distribution = float(scale), mode, distribution

  def __call__(self, reduced_dims, new_dims):
    fan_in = math.prod(dims_lib.convert_to_dimension(d).size
                       for d in reduced_dims)
    fan_out = math.prod(dims_lib.convert_to_dimension(d).size
                        for d in new_dims)
    n = {"fan_in": fan_in, "fan_out": fan_out,
         "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
    if n <= 0:
      raise ShapeError("VarianceScalingInitializer: the kernel has no "
                       "elements along its fan dims")
    variance = self.scale / n
    if self.distribution == "normal":
      return var_lib.tf_truncated_normal_initializer(
          stddev=math.sqrt(variance))
    limit = math.sqrt(3.0 * variance)
    return var_lib.random_uniform_initializer(minval=-limit, maxval=limit)


def attention_mask_same_segment(query_segment, memory_segment=None,
                                memory_length_name="memory_length",
                                dtype="float32"):
  """Bias that masks out memory positions of another segment (packed
  examples): ``MASK_BIAS`` where the segment ids differ, else 0.

  ``memory_segment`` defaults to ``query_segment`` with its last dim
  renamed ``memory_length_name`` (self-attention).
  """
  from mesh_tf.layers.attention import MASK_BIAS  # pylint: disable=g-import-not-at-top
  if memory_segment is None:
    memory_segment = reshape_ops.rename_dimension(
        query_segment, query_segment.shape.dims[-1].name, memory_length_name)
  return ew.multiply(ew.cast(ew.not_equal(query_segment, memory_segment),
                             dtype), MASK_BIAS)


def batch_norm(x, is_training, momentum, epsilon=1e-9, dims_idx_start=0,
               dims_idx_end=-1, init_zero=False, name=None):
  """Batch normalisation over ``x.shape.dims[dims_idx_start:dims_idx_end]``.

  Training normalises by the batch's mean and variance over those dims and
  updates the moving averages (``moving = momentum * moving + (1 -
  momentum) * batch``); inference normalises by the moving averages.  The
  learned ``scale`` (ones, or zeros with ``init_zero``) and ``beta``
  (zeros) and the moving statistics have the other dims.

  Returns:
    ``(normed, update_ops)``: the output (``x``'s shape) and the assign ops
    of the moving averages (empty when not training).  Run the update ops
    with the step, e.g. by adding them to the optimizer's ops.
  """
  reduced = x.shape.dims[dims_idx_start:dims_idx_end]
  if not reduced:
    raise ShapeError(f"batch_norm: dims [{dims_idx_start}:{dims_idx_end}] of "
                     f"{x.name} {x.shape!r} select no dim to normalise over")
  stats_shape = x.shape - reduced
  scope = core_layers._unique_scope(x.graph, name or "batch_norm")  # pylint: disable=protected-access
  scale = var_lib.get_variable(
      x.mesh, f"{scope}/scale", stats_shape, "float32",
      var_lib.zeros_initializer() if init_zero else var_lib.ones_initializer())
  beta = var_lib.get_variable(x.mesh, f"{scope}/beta", stats_shape, "float32",
                              var_lib.zeros_initializer())
  moving_mean = var_lib.get_variable(
      x.mesh, f"{scope}/moving_mean", stats_shape, "float32",
      var_lib.zeros_initializer(), trainable=False)
  moving_var = var_lib.get_variable(
      x.mesh, f"{scope}/moving_variance", stats_shape, "float32",
      var_lib.ones_initializer(), trainable=False)
  updates = []
  if is_training:
    mean = reduce_ops.reduce_mean(x, output_shape=stats_shape)
    var = reduce_ops.reduce_mean(ew.square(ew.subtract(x, mean)),
                                 output_shape=stats_shape)
    keep = 1.0 - momentum
    updates = [
        var_lib.assign(moving_mean, ew.add(ew.multiply(moving_mean, momentum),
                                           ew.multiply(mean, keep))),
        var_lib.assign(moving_var, ew.add(ew.multiply(moving_var, momentum),
                                          ew.multiply(var, keep)))]
  else:
    mean, var = moving_mean, moving_var
  normed = ew.multiply(ew.subtract(x, mean), ew.rsqrt(ew.add(var, epsilon)))
  out = ew.add(ew.multiply(normed, scale), beta)
  if out.shape != x.shape:
    out = reshape_ops.transpose(out, x.shape)
  return out, updates


def annealed_dropout(x, is_training, start_step, end_step, init_rate=None,
                     noise_shape=None, name=None, step=None, seed=0):
  """Dropout whose rate falls linearly from ``init_rate`` at ``start_step``
  to 0 at ``end_step`` (and stays there).

  Args:
    x: a float Tensor.
    is_training: False returns ``x``.
    start_step, end_step: numbers, ``start_step < end_step``.
    init_rate: the dropout rate up to ``start_step``.
    noise_shape: dims of ``x`` that get independent noise (default all).
    name: op name.
    step: the training step, an mtf scalar Tensor or a number.  Mesh TF read
      TensorFlow's global step; so does mesh-tf when ``step`` is None inside
      a ``tf.compat.v1`` graph (it is imported, replicated, into the mesh).
    seed: the noise seed (layout-invariant noise).

  Returns:
    ``x`` times a mask of ``1 / keep_prob`` (kept) and 0 (dropped).

  Raises:
    MtfError: without ``init_rate``, with ``end_step <= start_step``, or
      with no step to read.
  """
  if not is_training:
    return x
  if init_rate is None or not 0.0 <= init_rate < 1.0:
    raise MtfError(f"annealed_dropout: init_rate={init_rate!r} must be in "
                   "[0, 1)")
  if not end_step > start_step:
    raise MtfError(f"annealed_dropout: end_step={end_step!r} must be after "
                   f"start_step={start_step!r}")
  if step is None:
    step = _tf_global_step(x.mesh)
  if not isinstance(step, Tensor):
    from mesh_tf.ops import creation  # pylint: disable=g-import-not-at-top
    step = creation.constant(x.mesh, float(step), dtype="float32")
  frac = ew.divide(ew.subtract(ew.cast(step, "float32"), float(start_step)),
                   float(end_step - start_step))
  frac = ew.minimum(ew.maximum(frac, 0.0), 1.0)
  keep = ew.cast(ew.add(ew.multiply(frac, init_rate), 1.0 - init_rate),
                 x.dtype)
  shape = x.shape if noise_shape is None else dims_lib.convert_to_shape(
      noise_shape)
  noise = random_ops.random_uniform(x.mesh, shape, dtype=x.dtype, seed=seed,
                                    name=name)
  mask = ew.divide(ew.cast(ew.less(noise, keep), x.dtype), keep)
  return ew.multiply(x, mask)


def _tf_global_step(mesh):
  import sys  # pylint: disable=g-import-not-at-top
  tf = sys.modules.get("tensorflow")
  if tf is None or tf.executing_eagerly():
    raise MtfError("annealed_dropout: outside a tf.compat.v1 graph there is "
                   "no global step to read; pass step= (an mtf scalar or a "
                   "number)")
  from mesh_tf.ops import creation  # pylint: disable=g-import-not-at-top
  gs = tf.compat.v1.train.get_or_create_global_step()
  return creation.import_fully_replicated(
      mesh, tf.cast(gs, tf.float32), dims_lib.Shape([]),
      name="annealed_dropout_step")


def corr(x, dim, epsilon=1e-20, name="pearson_correlation"):
  """Pearson correlation between the entries of ``dim``, the other dims of
  ``x`` being samples.

  Returns:
    ``[<dim>_1, <dim>_2]``: the correlation matrix.
  """
  del name
  dim = core_layers._resolve(x, [dim], "corr")[0]  # pylint: disable=protected-access
  centred = ew.subtract(x, reduce_ops.reduce_mean(x, output_shape=[dim]))
  a = reshape_ops.rename_dimension(centred, dim.name, f"{dim.name}_1")
  b = reshape_ops.rename_dimension(centred, dim.name, f"{dim.name}_2")
  da, db = a.shape.get_dim_by_name(f"{dim.name}_1"), b.shape.get_dim_by_name(
      f"{dim.name}_2")

  def norm(t, d):
    return ew.add(ew.sqrt(reduce_ops.reduce_sum(ew.square(t),
                                                output_shape=[d])), epsilon)
  num = einsum_lib.einsum([a, b], output_shape=dims_lib.Shape([da, db]))
  den = einsum_lib.einsum([norm(a, da), norm(b, db)],
                          output_shape=dims_lib.Shape([da, db]))
  return ew.divide(num, den)


def get_dense_kernel_weights(x, new_dims, reduced_dims, expert_dims,
                             kernel_initializer, name=None,
                             variable_dtype=None, master_dtype="float32",
                             slice_dtype="float32"):
  """The kernel variable ``name/kernel`` of :func:`mesh_tf.layers.dense`,
  ``[expert_dims, reduced_dims, new_dims]``, cast to ``x``'s dtype.

  ``kernel_initializer`` may be a :class:`DenseInitializer` (it sees the
  dims); the default is :class:`VarianceScalingInitializer` ``()``.
  """
  new_dims = core_layers._dims_list(new_dims)  # pylint: disable=protected-access
  reduced_dims = core_layers._dims_list(reduced_dims)  # pylint: disable=protected-access
  expert_dims = core_layers._dims_list(expert_dims)  # pylint: disable=protected-access
  if kernel_initializer is None:
    kernel_initializer = VarianceScalingInitializer()
  if isinstance(kernel_initializer, DenseInitializer):
    kernel_initializer = kernel_initializer(reduced_dims, new_dims)
  if variable_dtype is None:
    variable_dtype = dtypes_lib.VariableDType(master_dtype, slice_dtype,
                                              x.dtype)
  scope = core_layers._unique_scope(x.graph, name or "dense")  # pylint: disable=protected-access
  w = var_lib.get_variable(
      x.mesh, f"{scope}/kernel",
      dims_lib.Shape(expert_dims + reduced_dims + new_dims), variable_dtype,
      kernel_initializer)
  return core_layers._maybe_cast(w, x.dtype)  # pylint: disable=protected-access
