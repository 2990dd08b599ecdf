"""One decoding step of attention (Mesh TensorFlow's ``*_incremental``
layers), and memory-compressed self-attention.

A decoding step reads a key/value cache ``[batch..., heads, memory_length,
kv_channels]`` and returns it with the step's keys and values written in.
Run step by step from a zero cache, each layer gives what its full-sequence
form gives at that position:

* :func:`multihead_self_attention_incremental` equals
  :func:`mesh_tf.layers.multihead_attention` with an autoregressive mask
  and the same ``name`` (it reads the same variables);
* :func:`masked_local_attention_1d_incremental` equals
  :func:`mesh_tf.layers.masked_local_attention_1d` with ``window_size``
  the cache length (its cache is a ring buffer; slots not yet written are
  masked).
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Tensor
from mesh_tf.layers.attention import MASK_BIAS, multihead_weights
from mesh_tf.layers.attention_params import multihead_attention_vars
from mesh_tf.layers.compat_layers import dot_product_attention
from mesh_tf.layers.core import _unique_scope
from mesh_tf.ops import creation
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import reshape as reshape_ops

__all__ = ["compress_mean", "masked_local_attention_1d_incremental",
           "multihead_encdec_attention_incremental",
           "multihead_self_attention_incremental",
           "multihead_self_attention_memory_compressed"]


def _step(mesh, step_num):
  if isinstance(step_num, Tensor):
    if step_num.shape.ndims:
      raise ShapeError(f"step_num {step_num.name} {step_num.shape!r} must be "
                       "a scalar")
    return step_num
  return creation.constant(mesh, int(step_num), dtype="int32")


def _cache_dims(x, prev_k, prev_v, what):
  if prev_k.shape != prev_v.shape or prev_k.shape.ndims < 3:
    raise ShapeError(f"{what}: prev_k {prev_k.shape!r} and prev_v "
                     f"{prev_v.shape!r} must both be [batch..., heads, "
                     "memory_length, kv_channels]")
  heads, memory, kv = prev_k.shape.dims[-3:]
  batch = x.shape.dims[:-1]
  if dims_lib.Shape(batch) != dims_lib.Shape(prev_k.shape.dims[:-3]):
    raise ShapeError(f"{what}: the cache's batch dims {prev_k.shape!r} must "
                     f"be those of {x.name} {x.shape!r} before its channels")
  return batch, heads, memory, kv


def _write(cache, new, at):
  return ew.where(at, new, cache, output_shape=cache.shape)


def _project(x, weights, batch, heads, kv):
  shape = dims_lib.Shape(batch + [heads, kv])
  return [einsum_ops.einsum([x, w], output_shape=shape) for w in weights[:3]]


def multihead_self_attention_incremental(query_antecedent, prev_k, prev_v,
                                         step_num, master_dtype="float32",
                                         slice_dtype="float32",
                                         name="multihead_attention"):
  """Self-attention for the position ``step_num`` of a decoded sequence.

  Args:
    query_antecedent: ``[batch..., io_channels]`` (this step's input).
    prev_k, prev_v: the caches ``[batch..., heads, memory_length,
      kv_channels]`` (zeros at the start).
    step_num: an int32 scalar Tensor or an int, ``< memory_length``.
    master_dtype: the variables' dtype; ``slice_dtype`` is accepted for the
      original's signature.
    name: the scope of :func:`mesh_tf.layers.multihead_attention`'s
      variables to read (``name/{q,k,v,o}``); every step with this name
      reads the same ones, made by the first if the graph has none.

  Returns:
    ``(y, new_k, new_v)``: ``y`` of ``query_antecedent``'s shape and the
    caches with this step written at ``step_num``.
  """
  del slice_dtype
  x = query_antecedent
  batch, heads, memory, kv = _cache_dims(
      x, prev_k, prev_v, "multihead_self_attention_incremental")
  step = _step(x.mesh, step_num)
  weights = multihead_weights(x.mesh, name or "multihead_attention",
                              x.shape.dims[-1], heads, kv, master_dtype,
                              x.dtype, reuse=True)
  q, k, v = _project(x, weights, batch, heads, kv)
  pos = creation.range(x.mesh, memory, "int32")
  at = ew.equal(pos, step)
  k, v = _write(prev_k, k, at), _write(prev_v, v, at)
  mask = ew.multiply(ew.cast(ew.greater(pos, step), x.dtype), MASK_BIAS)
  o = dot_product_attention(q, k, v, mask)
  return einsum_ops.einsum([o, weights[3]], output_shape=x.shape), k, v


def multihead_encdec_attention_incremental(query_antecedent, wq, wo, k, v,
                                           mask, name="multihead_attention"):
  """Attention of one decoding step over a fixed memory (the encoder's).

  Args:
    query_antecedent: ``query_dims + [io_channels]``.
    wq, wo: the query and output weights (dims ``heads, io_channels,
      kv_channels`` in any order).
    k, v: ``memory_dims + [heads, memory_length, kv_channels]``, with
      ``memory_dims`` a subset of ``query_dims``.
    mask: a bias broadcast onto the logits, or None.
    name: accepted for the original's signature (no variables are made).

  Returns:
    A Tensor of ``query_antecedent``'s shape.
  """
  del name
  heads, _, kv = k.shape.dims[-3:]
  x = query_antecedent
  q = einsum_ops.einsum([x, wq], output_shape=dims_lib.Shape(
      x.shape.dims[:-1] + [heads, kv]))
  o = dot_product_attention(q, k, v, mask)
  return einsum_ops.einsum([o, wo], output_shape=x.shape)


def masked_local_attention_1d_incremental(x, prev_k, prev_v, step_num,
                                          master_dtype=None, slice_dtype=None,
                                          params=None, name=None):
  """One decoding step of :func:`mesh_tf.layers.masked_local_attention_1d`.

  Args:
    x: ``[batch..., io_channels]``.
    prev_k, prev_v: ring-buffer caches ``[batch..., heads, window_length,
      kv_channels]``; step ``t`` writes slot ``t % window_length``.
    step_num: an int32 scalar Tensor or an int.
    master_dtype, slice_dtype: the variables' dtypes (without ``params``).
    params: optional ``(wq, wk, wv, wo)``; else the ``qkvo`` variable under
      ``name`` (default ``masked_local_attention_1d``), as the full layer
      makes it.

  Returns:
    ``(y, new_k, new_v)``.
  """
  batch, heads, window, kv = _cache_dims(
      x, prev_k, prev_v, "masked_local_attention_1d_incremental")
  if params is None:
    params = multihead_attention_vars(
        x.mesh, heads, x.shape.dims[-1], kv, master_dtype, slice_dtype,
        x.dtype, name=name or "masked_local_attention_1d", reuse=True)
  step = _step(x.mesh, step_num)
  q, k, v = _project(x, params, batch, heads, kv)
  slot = creation.range(x.mesh, window, "int32")
  at = ew.equal(slot, ew.mod(step, window.size))
  k, v = _write(prev_k, k, at), _write(prev_v, v, at)
  # Before the ring is full, the slots after the step hold no position yet.
  mask = ew.multiply(ew.cast(ew.greater(slot, step), x.dtype), MASK_BIAS)
  o = dot_product_attention(q, k, v, mask)
  return einsum_ops.einsum([o, params[3]], output_shape=x.shape), k, v


def compress_mean(x, dim, compression_factor):
  """``x`` with ``dim`` shortened ``compression_factor`` times by taking the
  mean of each group of consecutive entries (the dim keeps its name).

  Raises:
    ShapeError: if the factor does not divide the dim.
  """
  return _group_mean(x, dim, compression_factor, None)


def _group_mean(x, dim, compression_factor, new_name):
  """:func:`compress_mean` whose shortened dim is called ``new_name``."""
  dim = x.shape.get_dim_by_name(dim if isinstance(dim, str) else dim.name)
  c = int(compression_factor)
  if c < 1 or dim.size % c:
    raise ShapeError(f"compress_mean: compression_factor={compression_factor}"
                     f" must divide {dim} of {x.name}")
  factor = dims_lib.Dimension("compression_factor", c)
  short = dims_lib.Dimension(new_name or dim.name, dim.size // c)
  dims = []
  for d in x.shape.dims:
    dims += [short, factor] if d == dim else [d]
  return reduce_ops.reduce_mean(reshape_ops.reshape(x, dims_lib.Shape(dims)),
                                reduced_dim=factor)


def multihead_self_attention_memory_compressed(x, mask_right,
                                               compression_factor,
                                               kv_channels, heads,
                                               is_training=True, dropout=0.0,
                                               dropout_broadcast_dims=None,
                                               master_dtype="float32",
                                               slice_dtype="float32",
                                               name="multihead_attention"):
  """Self-attention over a memory shortened by mean-pooling the sequence.

  Memory position ``j`` is the mean of positions ``[j*c, (j+1)*c)`` (``c``
  the compression factor).  With ``mask_right`` a query sees only memory
  positions whose whole group is at or before it; the softmax has an extra
  zero logit, so a query that sees none attends to nothing.

  Args:
    x: ``[batch..., length, io_channels]``.
    mask_right: a bool (causal).
    compression_factor: an int dividing the length.
    kv_channels, heads: Dimensions.
    is_training: dropout applies only when training.
    dropout, dropout_broadcast_dims: dropout on the attention weights.
    name: scope of the ``qkvo`` variable.

  Returns:
    A Tensor of ``x``'s shape.
  """
  batch = x.shape.dims[:-2]
  length, io = x.shape.dims[-2:]
  scope = _unique_scope(x.graph, name or "compressed_attention")
  wq, wk, wv, wo = multihead_attention_vars(x.mesh, heads, io, kv_channels,
                                            master_dtype, slice_dtype,
                                            x.dtype, name=scope)
  # Straight into a new dim name: one size per name keeps it priceable.
  memory = _group_mean(x, length, compression_factor, "memory_length")
  memory_length = memory.shape.get_dim_by_name("memory_length")
  q = einsum_ops.einsum([x, wq], output_shape=dims_lib.Shape(
      batch + [heads, length, kv_channels]))
  kv_shape = dims_lib.Shape(batch + [heads, memory_length, kv_channels])
  k = einsum_ops.einsum([memory, wk], output_shape=kv_shape)
  v = einsum_ops.einsum([memory, wv], output_shape=kv_shape)
  mask = None
  if mask_right:
    c = int(compression_factor)
    last = creation.range(x.mesh, memory_length, "int32") * c + (c - 1)
    mask = ew.multiply(ew.cast(ew.greater(
        last, creation.range(x.mesh, length, "int32")), x.dtype), MASK_BIAS)
  o = dot_product_attention(q, k, v, mask, dropout=dropout,
                            dropout_broadcast_dims=dropout_broadcast_dims,
                            extra_logit=0.0, is_training=is_training)
  return einsum_ops.einsum([o, wo], output_shape=x.shape)
