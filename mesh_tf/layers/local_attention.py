"""Local attention (Mesh TensorFlow's ``masked_local_attention_1d`` and the
1-D / 2-D spatial-block attention), with its halo and bias helpers.

A long sequence (or image) is cut into blocks; a ``blocks`` dim counts them
and may be split across the mesh, a within-block dim never needs to be.
Keys and values get their neighbours' edges by a halo exchange over the
blocks dim (two point-to-point shifts when it is split), so each processor
attends within its own blocks and a bounded neighbourhood.

Where the original attended to zero keys past the ends of the sequence or
image (its comments note it "could mask this out, but we don't"), these
layers mask them, so a position sees exactly the neighbourhood the
docstrings describe and results do not depend on how the length is cut.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.attention import MASK_BIAS
from mesh_tf.layers.attention_params import multihead_attention_vars
from mesh_tf.layers.compat_layers import dot_product_attention
from mesh_tf.layers.core import _unique_scope
from mesh_tf.ops import creation
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import shift as shift_ops
from mesh_tf.ops import slicing

__all__ = ["attention_bias_local_2d_block", "attention_bias_local_block",
           "local_1d_halo_exchange", "local_2d_halo_exchange",
           "local_2d_self_attention_spatial_blocks",
           "local_self_attention_spatial_blocks", "masked_local_attention_1d"]


def _bias(condition, dtype="float32"):
  return ew.multiply(ew.cast(condition, dtype), MASK_BIAS)


def _left_halo(x, blocks_dim, block_dim, halo):
  both = shift_ops.halo_exchange(x, blocks_dim, block_dim, halo)
  return slicing.slice(both, 0, block_dim.size + halo, block_dim.name)


def attention_bias_local_block(mesh, block_length, memory_length,
                               dtype="int32"):
  """Causal bias of a block attending to itself and the block before it.

  Args:
    mesh: the Mesh.
    block_length: the query block Dimension.
    memory_length: the memory Dimension; the result has its name and twice
      ``block_length``'s size (previous block, then this one).
    dtype: accepted for the original's signature; the bias is float32.

  Returns:
    ``[block_length, memory_length]``: 0 over the previous block and where
    the memory position is not after the query, ``MASK_BIAS`` elsewhere.
  """
  del dtype
  b = block_length.size
  memory = dims_lib.Dimension(memory_length.name, 2 * b)
  q = creation.range(mesh, block_length, "int32") + b
  out = _bias(ew.greater(creation.range(mesh, memory, "int32"), q))
  return reshape_ops.transpose(out, dims_lib.Shape([block_length, memory]))


def attention_bias_local_2d_block(mesh, h_dim, w_dim, memory_h_dim,
                                  memory_w_dim, dtype="int32"):
  """Causal bias of a 2-d block attending to itself and the blocks above,
  to the left and above-left, in raster order.

  The memory is the 2x2 group of blocks ending in the query's block, so the
  result's memory dims have the given names and twice ``h_dim``'s and
  ``w_dim``'s sizes.  A memory pixel is visible when its row is above the
  query's, or in the query's row and not to its right.

  Returns:
    ``[h_dim, w_dim, memory_h, memory_w]`` (float32 bias).
  """
  del dtype
  mh = dims_lib.Dimension(memory_h_dim.name, 2 * h_dim.size)
  mw = dims_lib.Dimension(memory_w_dim.name, 2 * w_dim.size)
  qi = creation.range(mesh, h_dim, "int32") + h_dim.size
  qj = creation.range(mesh, w_dim, "int32") + w_dim.size
  mi = creation.range(mesh, mh, "int32")
  mj = creation.range(mesh, mw, "int32")
  future = ew.logical_or(ew.greater(mi, qi), ew.logical_and(
      ew.equal(mi, qi), ew.greater(mj, qj)))
  out = _bias(future)
  return reshape_ops.transpose(out, dims_lib.Shape([h_dim, w_dim, mh, mw]))


def local_1d_halo_exchange(k, v, num_w_blocks, w_dim, mask_right):
  """Gives each block of keys and values its neighbour blocks: the block
  before (and, unless ``mask_right``, the block after) along ``w_dim``.

  With ``num_w_blocks`` None there is one block, padded with zeros.
  Returns ``(k, v)`` with ``w_dim`` two or three times as long.
  """
  w = w_dim.size
  after = 0 if mask_right else w
  out = []
  for t in (k, v):
    if num_w_blocks is None:
      t = slicing.pad(t, [w, after], w_dim.name)
    elif mask_right:
      t = _left_halo(t, num_w_blocks, w_dim, w)
    else:
      t = shift_ops.halo_exchange(t, num_w_blocks, w_dim, w)
    out.append(t)
  return tuple(out)


def local_2d_halo_exchange(k, v, num_h_blocks, h_dim, num_w_blocks, w_dim,
                           mask_right):
  """:func:`local_1d_halo_exchange` along both ``h_dim`` and ``w_dim``."""
  for blocks, dim in ((num_h_blocks, h_dim), (num_w_blocks, w_dim)):
    dim = k.shape.get_dim_by_name(dim.name)
    k, v = local_1d_halo_exchange(k, v, blocks, dim, mask_right)
  return k, v


def _outside(mesh, blocks, block_size, memory, before):
  """Bias over ``[blocks, memory]`` masking haloed memory positions that lie
  past either end of the whole sequence."""
  start = ew.multiply(creation.range(mesh, blocks, "int32"), block_size)
  pos = ew.add(start, creation.range(mesh, memory, "int32") - before)
  return _bias(ew.logical_or(ew.less(pos, 0), ew.greater_equal(
      pos, blocks.size * block_size)))


def _qkv(x, weights, q_dims, mem, mem_dims):
  wq, wk, wv, _ = weights
  q = einsum_ops.einsum([x, wq], output_shape=dims_lib.Shape(q_dims))
  k = einsum_ops.einsum([mem, wk], output_shape=dims_lib.Shape(mem_dims))
  v = einsum_ops.einsum([mem, wv], output_shape=dims_lib.Shape(mem_dims))
  return q, k, v


def local_self_attention_spatial_blocks(
    query_antecedent, kv_channels, heads, is_training=True, memory_w_dim=None,
    mask_right=False, master_dtype="float32", slice_dtype="float32",
    name=None):
  """Self-attention within a block and its neighbour blocks (1-d).

  Args:
    query_antecedent: ``[batch, num_w_blocks, w_dim, io_channels]``;
      ``num_w_blocks`` may be split across the mesh.
    kv_channels, heads: Dimensions.
    is_training: accepted for Mesh TF 0.1.21's signature (these layers
      have no dropout).
    memory_w_dim: optional; its name names the memory dim (default
      ``memory_<w_dim>``).
    mask_right: causal: see the previous block and this one up to the query;
      otherwise the previous, this and the next block.
    master_dtype, slice_dtype: the variables' dtypes.
    name: scope of the ``qkvo`` variable (default ``multihead_attention``).

  Returns:
    A Tensor of ``query_antecedent``'s shape.
  """
  del is_training
  x = query_antecedent
  if x.shape.ndims != 4:
    raise ShapeError(f"local_self_attention_spatial_blocks: {x.name} "
                     f"{x.shape!r} must be [batch, num_w_blocks, w, io]")
  batch, num_w_blocks, w_dim, io = x.shape.dims
  scope = _unique_scope(x.graph, name or "multihead_attention")
  weights = multihead_attention_vars(x.mesh, heads, io, kv_channels,
                                     master_dtype, slice_dtype, x.dtype,
                                     name=scope)
  mem_name = memory_w_dim.name if memory_w_dim is not None else (
      "memory_" + w_dim.name)
  mem = reshape_ops.rename_dimension(x, w_dim.name, mem_name)
  mem_w = mem.shape.get_dim_by_name(mem_name)
  q, k, v = _qkv(x, weights, [batch, heads, num_w_blocks, w_dim, kv_channels],
                 mem, [batch, heads, num_w_blocks, mem_w, kv_channels])
  k, v = local_1d_halo_exchange(k, v, num_w_blocks, mem_w, mask_right)
  mem_w = k.shape.get_dim_by_name(mem_name)
  mask = _outside(x.mesh, num_w_blocks, w_dim.size, mem_w, w_dim.size)
  if mask_right:
    mask = ew.add(mask, attention_bias_local_block(x.mesh, w_dim, mem_w))
  o = dot_product_attention(q, k, v, mask=mask)
  return einsum_ops.einsum([o, weights[3]], output_shape=x.shape)


def local_2d_self_attention_spatial_blocks(
    query_antecedent, kv_channels, heads, is_training=True, memory_h_dim=None,
    memory_w_dim=None, mask_right=False, master_dtype="float32",
    slice_dtype="float32", name=None):
  """Self-attention within a 2-d block and its neighbour blocks.

  Args:
    query_antecedent: ``[batch, num_h_blocks, num_w_blocks, h_dim, w_dim,
      io_channels]``; both blocks dims may be split across the mesh.
    memory_h_dim, memory_w_dim: optional; name the memory dims (default
      ``memory_<h_dim>``, ``memory_<w_dim>``).
    mask_right: causal in raster order over the blocks above, to the left,
      above-left and this one (see :func:`attention_bias_local_2d_block`);
      otherwise the 3x3 blocks around the query's.
    Others as in :func:`local_self_attention_spatial_blocks`.

  Returns:
    A Tensor of ``query_antecedent``'s shape.
  """
  del is_training
  x = query_antecedent
  if x.shape.ndims != 6:
    raise ShapeError(
        f"local_2d_self_attention_spatial_blocks: {x.name} {x.shape!r} must "
        "be [batch, num_h_blocks, num_w_blocks, h, w, io]")
  batch, num_h, num_w, h_dim, w_dim, io = x.shape.dims
  scope = _unique_scope(x.graph, name or "multihead_attention")
  weights = multihead_attention_vars(x.mesh, heads, io, kv_channels,
                                     master_dtype, slice_dtype, x.dtype,
                                     name=scope)
  mh_name = memory_h_dim.name if memory_h_dim is not None else (
      "memory_" + h_dim.name)
  mw_name = memory_w_dim.name if memory_w_dim is not None else (
      "memory_" + w_dim.name)
  mem = reshape_ops.rename_dimension(x, h_dim.name, mh_name)
  mem = reshape_ops.rename_dimension(mem, w_dim.name, mw_name)
  mh, mw = (mem.shape.get_dim_by_name(n) for n in (mh_name, mw_name))
  q, k, v = _qkv(x, weights, [batch, heads, num_h, num_w, h_dim, w_dim,
                              kv_channels],
                 mem, [batch, heads, num_h, num_w, mh, mw, kv_channels])
  k, v = local_2d_halo_exchange(k, v, num_h, mh, num_w, mw, mask_right)
  mh, mw = (k.shape.get_dim_by_name(n) for n in (mh_name, mw_name))
  mask = ew.add(_outside(x.mesh, num_h, h_dim.size, mh, h_dim.size),
                _outside(x.mesh, num_w, w_dim.size, mw, w_dim.size))
  mask_dims = [num_h, num_w]
  if mask_right:
    mask = ew.add(mask, attention_bias_local_2d_block(x.mesh, h_dim, w_dim,
                                                      mh, mw))
    mask_dims += [h_dim, w_dim]
  # Attention runs over one memory dim: the haloed rows times columns.
  memory = dims_lib.Dimension(f"{mh_name}_{mw_name}", mh.size * mw.size)
  mask = reshape_ops.reshape(
      reshape_ops.transpose(mask, dims_lib.Shape(mask_dims + [mh, mw])),
      dims_lib.Shape(mask_dims + [memory]))
  k, v = (reshape_ops.reshape(t, dims_lib.Shape(
      [batch, heads, num_h, num_w, memory, kv_channels])) for t in (k, v))
  o = dot_product_attention(q, k, v, mask=mask)
  return einsum_ops.einsum([o, weights[3]], output_shape=x.shape)


def _block_length(length_per_split, window_size):
  # The original's choice: the largest divisor of the per-processor length
  # up to max(window, 128).  Here it changes only speed, never results.
  b = max(window_size, 128)
  while length_per_split % b:
    b -= 1
  return b


def masked_local_attention_1d(x, kv_channels, heads, is_training=True,
                              window_size=128, master_dtype="float32",
                              slice_dtype="float32", length_per_split=None,
                              return_kv=None, params=None, name=None):
  """Causal attention over a sliding window: position ``p`` sees the
  memory positions in ``(p - window_size, p]`` (from position 0 on).

  The length is cut into blocks whose count keeps the length dim's name, so
  a layout that splits the length splits the blocks; each block gets the
  ``window_size - 1`` keys and values before it by a halo exchange.

  Args:
    x: ``[batch..., length, io_channels]``.
    kv_channels, heads: Dimensions.
    is_training: accepted for Mesh TF 0.1.21's signature (no dropout).
    window_size: an integer >= 1.
    master_dtype, slice_dtype: the variables' dtypes (without ``params``).
    length_per_split: the length per processor when the length is split;
      the block length is its largest divisor up to ``max(window_size,
      128)`` (default: the whole length).
    return_kv: an optional list; ``k`` and ``v`` (``[batch..., heads,
      length, kv_channels]``) are appended to it.
    params: optional ``(wq, wk, wv, wo)`` from
      :func:`multihead_attention_params`; else a ``qkvo`` variable under
      ``name`` (default ``masked_local_attention_1d``).

  Returns:
    A Tensor of ``x``'s shape.

  Raises:
    ShapeError: for a window below 1 or a ``length_per_split`` that does
      not divide the length.
  """
  del is_training
  if window_size < 1:
    raise ShapeError(f"masked_local_attention_1d: window_size={window_size} "
                     "must be at least 1")
  batch_dims = x.shape.dims[:-2]
  length, io = x.shape.dims[-2:]
  if params is None:
    scope = _unique_scope(x.graph, name or "masked_local_attention_1d")
    params = multihead_attention_vars(x.mesh, heads, io, kv_channels,
                                      master_dtype, slice_dtype, x.dtype,
                                      name=scope)
  wq, wk, wv, wo = params
  qkv_shape = dims_lib.Shape(batch_dims + [heads, length, kv_channels])
  q = einsum_ops.einsum([x, wq], output_shape=qkv_shape)
  k = einsum_ops.einsum([x, wk], output_shape=qkv_shape)
  v = einsum_ops.einsum([x, wv], output_shape=qkv_shape)
  if return_kv is not None:
    return_kv.extend([k, v])
  per_split = length.size if length_per_split is None else length_per_split
  if per_split <= 0 or length.size % per_split:
    raise ShapeError(f"masked_local_attention_1d: length_per_split="
                     f"{length_per_split} must divide the length {length}")
  b = _block_length(per_split, window_size)
  halo = window_size - 1
  blocks = dims_lib.Dimension(length.name, length.size // b)
  qb = dims_lib.Dimension("query_block_length", b)
  mb = dims_lib.Dimension("memory_block_length", b)
  q = reshape_ops.reshape(q, dims_lib.Shape(
      batch_dims + [heads, blocks, qb, kv_channels]))
  k, v = (_left_halo(reshape_ops.reshape(t, dims_lib.Shape(
      batch_dims + [heads, blocks, mb, kv_channels])), blocks, mb, halo)
          for t in (k, v))
  mb = k.shape.get_dim_by_name(mb.name)
  qpos = creation.range(x.mesh, qb, "int32") + halo
  mpos = creation.range(x.mesh, mb, "int32")
  mask = ew.add(_bias(ew.logical_or(ew.greater(mpos, qpos), ew.less_equal(
      mpos, qpos - window_size))), _outside(x.mesh, blocks, b, mb, halo))
  o = dot_product_attention(q, k, v, mask=mask)
  o = reshape_ops.reshape(o, qkv_shape)
  return einsum_ops.einsum([o, wo], output_shape=x.shape)
