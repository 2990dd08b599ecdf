"""Mesh TensorFlow layers that mesh-tf composes from its own ops:
``dot_product_attention``, ``dense_product``, ``weights_nonzero``,
``multiplicative_jitter``, ``rename_length_to_memory_length`` and the dense
initializer classes.  Gradients come from the ops they are made of.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.layers import core as core_layers
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import random as random_ops
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import variables as var_lib

__all__ = ["DenseInitializer", "VarianceScalingInitializer",
           "attention_mask_same_segment", "batch_norm", "dense_product",
           "dot_product_attention", "multiplicative_jitter",
           "rename_length_to_memory_length", "weights_nonzero"]


def dot_product_attention(q, k, v, mask, dropout=0.0,
                          dropout_broadcast_dims=None, extra_logit=None,
                          is_training=True):
  """``softmax(q . k + mask) . v`` over named dims (Mesh TF's layer).

  Args:
    q: ``[batch..., heads..., length, d_k]`` (``d_k`` last).
    k: ``[batch..., heads..., memory_length, d_k]`` (``memory_length``
      second to last).
    v: ``[batch..., heads..., memory_length, d_v]`` (``d_v`` last).
    mask: a bias broadcast onto the logits, or None.
    dropout: dropout rate on the attention weights (when training).
    dropout_broadcast_dims: dims along which the dropout mask is shared.
    extra_logit: an extra logit in the softmax's normaliser (a "null"
      position), as in Mesh TF.

  Returns:
    ``q``'s shape with ``d_k`` replaced by ``d_v``.
  """
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
    distribution: "normal" (untruncated) or "uniform".

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
      return var_lib.random_normal_initializer(stddev=math.sqrt(variance))
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
