"""Multi-head attention and its masks.

Dims: queries carry a length dim (``length``), keys and values a distinct
memory-length dim (``memory_length``), so that attention logits are an
einsum over named dims.  Every dim may be split across the mesh; splitting
``heads`` gives Megatron-style model parallelism (one all-reduce after the
output projection), splitting ``batch`` gives data parallelism.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.core import _dropout, _maybe_cast, _unique_scope
from mesh_tf.ops.reduce import softmax
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import variables as var_lib

# A large negative logit bias that masks a position out.
MASK_BIAS = -1e9


def _rename(x, old_name, new_name):
  from mesh_tf.ops.reshape import rename_dimension
  return rename_dimension(x, old_name, new_name)


def attention_mask_autoregressive(query_pos, memory_pos=None,
                                  memory_length_name="memory_length",
                                  dtype="float32"):
  """Bias that lets each query attend only to memory positions <= its own.

  Args:
    query_pos: int Tensor of query positions, e.g. ``mtf.range(mesh,
      length_dim)``.
    memory_pos: int Tensor of memory positions; by default ``query_pos``
      renamed to ``memory_length_name`` (self-attention).
    dtype: dtype of the bias.

  Returns:
    Tensor over the dims of both, ``MASK_BIAS`` where memory > query, else 0.
  """
  if memory_pos is None:
    (length_dim,) = [d for d in query_pos.shape.dims[-1:]]
    memory_pos = _rename(query_pos, length_dim.name, memory_length_name)
  return ew.cast(ew.less(query_pos, memory_pos), dtype) * MASK_BIAS


def attention_mask_ignore_padding(inputs, length_name=None,
                                  memory_length_name="memory_length",
                                  pad_id=0, dtype="float32"):
  """Bias that masks out memory positions whose token id is ``pad_id``.

  Args:
    inputs: int Tensor of token ids ``[batch, length]``.
    length_name: name of its length dim (default: its last dim).

  Returns:
    Tensor ``[batch, memory_length]``: ``MASK_BIAS`` at padding, else 0.
  """
  length_name = length_name or inputs.shape.dims[-1].name
  memory_ids = _rename(inputs, length_name, memory_length_name)
  return ew.cast(ew.equal(memory_ids, pad_id), dtype) * MASK_BIAS


def attention(q, k, v, memory_length_dim, key_dim, value_dim, bias=None,
              dropout_rate=0.0, dropout_broadcast_dims=None,
              is_training=True):
  """Dot-product attention: ``softmax(q.k + bias) . v``.

  Args:
    q: ``[..., length, key_dim]`` (already scaled).
    k: ``[..., memory_length, key_dim]``.
    v: ``[..., memory_length, value_dim]``.
    memory_length_dim: the dim of keys/values that is attended over.
    key_dim, value_dim: the per-head channel dims.
    bias: added to the logits (see the mask functions), or None.
    dropout_rate: dropout on the attention weights.

  Returns:
    Tensor of shape ``q.shape - key_dim + value_dim``.
  """
  logits = einsum_lib.einsum([q, k], reduced_dims=[key_dim])
  if bias is not None:
    logits = logits + _maybe_cast(bias, logits.dtype)
  weights = softmax(logits, memory_length_dim)
  if dropout_rate:
    noise = None
    if dropout_broadcast_dims:
      noise = weights.shape - list(dropout_broadcast_dims)
    weights = _dropout(weights, dropout_rate, noise_shape=noise,
                       is_training=is_training)
  out_shape = dims_lib.Shape(
      [d for d in q.shape.dims if d.name != key_dim.name] + [value_dim])
  return einsum_lib.einsum([weights, v], output_shape=out_shape)


def multihead_weights(mesh, scope, io, heads, kv_channels, master_dtype,
                      dtype, reuse=False):
  """The variables ``scope/{q,k,v,o}`` of :func:`multihead_attention`, cast
  to ``dtype``: ``[io, heads, kv]`` for q, k, v and ``[heads, kv, io]`` for
  o.  The incremental (decoding) layers read the same ones (``reuse``)."""
  from mesh_tf.layers.attention_params import reuse_or_get_variable  # pylint: disable=g-import-not-at-top
  in_shape = dims_lib.Shape([io, heads, kv_channels])
  std = 1.0 / math.sqrt(io.size)

  def weight(n, stddev, shape):
    w = reuse_or_get_variable(
        mesh, f"{scope}/{n}", shape, master_dtype,
        var_lib.random_normal_initializer(stddev=stddev), reuse)
    return _maybe_cast(w, dtype)
  return (weight("q", std / math.sqrt(kv_channels.size), in_shape),
          weight("k", std, in_shape), weight("v", std, in_shape),
          weight("o", 1.0 / math.sqrt(heads.size * kv_channels.size),
                 dims_lib.Shape([heads, kv_channels, io])))


def training_and_rate(is_training, dropout):
  """``(is_training, dropout)`` from Mesh TF 0.1.21's parameter order, which
  puts ``is_training`` before ``dropout``: a float in ``is_training``'s
  place is the dropout rate of the releases after 0.1.21, which dropped
  ``is_training`` and took the rate there."""
  if isinstance(is_training, float) and not dropout:
    return True, is_training
  return bool(is_training), dropout


def multihead_attention(query_antecedent, memory_antecedent, mask,
                        kv_channels, heads, is_training=True, dropout=0.0,
                        dropout_broadcast_dims=None, master_dtype="float32",
                        slice_dtype=None, name=None,
                        memory_length_name="memory_length"):
  """Multi-head attention (self-attention when ``memory_antecedent`` is None).

  Args:
    query_antecedent: ``[batch..., length, io_channels]``.
    memory_antecedent: ``[batch..., memory_length, io_channels]``, or None
      for self-attention (the query's length dim, its second-to-last, is
      renamed to ``memory_length_name``).
    mask: a bias broadcastable to the logits ``[batch..., heads, length,
      memory_length]`` (e.g. from :func:`attention_mask_autoregressive`),
      or None.
    kv_channels: the per-head Dimension (``d_kv``).
    heads: the heads Dimension; splitting it over the mesh is model
      parallelism.
    is_training: dropout applies only when training (Mesh TF 0.1.21's
      order; see :func:`training_and_rate`).
    dropout: dropout rate on the attention weights.
    master_dtype, slice_dtype: the variables' stored and compute dtypes
      (see :class:`mesh_tf.VariableDType`).
    name: scope of the variables ``name/{q,k,v,o}``.

  Returns:
    Tensor of the shape of ``query_antecedent``.

  The 1/sqrt(d_kv) logit scale is folded into ``q``'s initializer, as in
  Mesh TensorFlow, which saves one op per layer.
  """
  is_training, dropout = training_and_rate(is_training, dropout)
  if slice_dtype is not None:
    master_dtype = dtypes_lib.VariableDType(master_dtype, slice_dtype)
  x = query_antecedent
  io = x.shape.dims[-1]
  length = x.shape.dims[-2]
  if memory_antecedent is None:
    memory_antecedent = _rename(x, length.name, memory_length_name)
  mem_dims = [d for d in memory_antecedent.shape.dims
              if d.name not in x.shape]
  if len(mem_dims) != 1 or memory_antecedent.shape.dims[-1] != io:
    raise ShapeError(
        f"multihead_attention: memory {memory_antecedent.name} "
        f"{memory_antecedent.shape!r} must have the query's dims "
        f"{x.shape!r} with the length dim {length} renamed (e.g. to "
        f"{memory_length_name!r}) and {io} last")
  memory_length = mem_dims[0]
  scope = _unique_scope(x.graph, name or "multihead_attention")
  kv_channels = dims_lib.convert_to_dimension(kv_channels)
  heads = dims_lib.convert_to_dimension(heads)
  wq, wk, wv, wo = multihead_weights(x.mesh, scope, io, heads, kv_channels,
                                     master_dtype, x.dtype)
  batch_dims = x.shape.dims[:-2]
  q = einsum_lib.einsum(
      [x, wq], output_shape=dims_lib.Shape(batch_dims + [heads, length,
                                                         kv_channels]),
      name=f"{scope}/q_proj")
  mem_batch = [d for d in memory_antecedent.shape.dims
               if d.name not in (memory_length.name, io.name)]
  k = einsum_lib.einsum(
      [memory_antecedent, wk],
      output_shape=dims_lib.Shape(mem_batch + [heads, memory_length,
                                               kv_channels]),
      name=f"{scope}/k_proj")
  v = einsum_lib.einsum(
      [memory_antecedent, wv],
      output_shape=dims_lib.Shape(mem_batch + [heads, memory_length,
                                               kv_channels]),
      name=f"{scope}/v_proj")
  o = attention(q, k, v, memory_length, kv_channels, kv_channels, mask,
                dropout_rate=dropout,
                dropout_broadcast_dims=dropout_broadcast_dims,
                is_training=is_training)
  return einsum_lib.einsum([o, wo], output_shape=x.shape,
                           name=f"{scope}/o_proj")
