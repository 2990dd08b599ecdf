"""Order statistics and scans over one named dim: top_k, top_1, argmax, cumsum.

All of them work when the dim is split over a mesh axis; none has an
unsplittable dim.

* ``top_k`` / ``top_1`` / ``argmax``: each processor takes the top
  ``min(k, local size)`` of its slice with *global* indices, packs values and
  indices into one integer tensor (value bits next to the index), all-concats
  those candidates over the dim's mesh axis (one collective) and takes the
  top ``k`` of them.  Ties go to the lowest global index, exactly as on one
  device: within a processor equal values come in index order, and
  processors are concatenated in coordinate order, which is index order.
* ``cumsum``: local cumulative sum, plus the sum of the slice totals of the
  processors before this one on the axis (one all-concat of the totals).
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import DTypeError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import gather as gather_ops
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops.base import is_float, resolve_dim

__all__ = ["TopKOperation", "CumsumOperation", "top_k", "top_1", "argmax",
           "cumsum"]

# Values travel as integer bits beside their int index, in a carrier dtype
# as wide as the value: (bitcast type or None for a plain cast, carrier).
_PACKING = {
    "float32": ("int32", "int32"), "float64": ("int64", "int64"),
    "float16": ("int16", "int32"), "bfloat16": ("int16", "int32"),
    "int32": (None, "int32"), "int64": (None, "int64"),
    "int16": (None, "int32"), "int8": (None, "int32"),
    "uint8": (None, "int32"),
}


def _resolve_dim(x, dim, op_name, what="reduced_dim"):
  if not isinstance(x, Tensor):
    raise ShapeError(f"{op_name}: expected an mtf Tensor, got {x!r}")
  return resolve_dim(x, dim, op_name, what)


def _split_axis(impl, dim):
  """The mesh axes (size > 1, major first) that split ``dim``, or None; the
  recorded collectives take the tuple as one dim's axes."""
  return impl.dim_axes(dim)


def _pack(values, indices, dtype):
  bits, carrier = _PACKING[dtype]
  v = tf.bitcast(values, bits) if bits else values
  v = tf.cast(v, carrier)
  return tf.stack([v, tf.cast(indices, carrier)], axis=-1)


def _unpack(packed, dtype):
  bits, _ = _PACKING[dtype]
  v, i = packed[..., 0], packed[..., 1]
  if bits:
    v = tf.bitcast(tf.cast(v, bits), dtype)
  else:
    v = tf.cast(v, dtype)
  return v, i


class TopKOperation(Operation):
  """The ``k`` largest entries of ``x`` along ``reduced_dim``, sorted.

  Outputs ``values`` (dtype of x) and ``indices`` (int32, positions along
  ``reduced_dim``), both of shape ``x.shape - reduced_dim + [k_dim]``; with
  ``k_dim=None`` (``top_1``) the shape is ``x.shape - reduced_dim``.

  Attributes (for gradients): ``reduced_dim``, ``k_dim`` (None for top-1),
  ``k``.  The gradient of ``values`` scatters ``dy`` to positions
  ``indices`` of ``reduced_dim``: ``einsum([dy, one_hot(indices,
  reduced_dim)])`` summed over ``k_dim``.  ``indices`` has no gradient.
  """

  def __init__(self, x, reduced_dim, k_dim, name=None):
    name = name or ("top_k" if k_dim else "top_1")
    if x.dtype not in _PACKING:
      raise DTypeError(f"{name}: {x.name} has dtype {x.dtype}; top_k "
                       f"supports {sorted(_PACKING)}; cast it first")
    k = k_dim.size if k_dim is not None else 1
    if k < 1 or k > reduced_dim.size:
      raise ShapeError(
          f"{name}: k_dim {k_dim} asks for {k} entries but reduced_dim "
          f"{reduced_dim} of {x.name} has {reduced_dim.size}; use "
          f"1 <= k <= {reduced_dim.size}")
    out_shape = x.shape - [reduced_dim]
    if k_dim is not None:
      if k_dim.name in out_shape:
        raise ShapeError(f"{name}: k_dim {k_dim} is already a dim of "
                         f"{x.name} {x.shape!r}; give it a new name")
      if k_dim.name == reduced_dim.name and k_dim.size != reduced_dim.size:
        raise ShapeError(
            f"{name}: k_dim {k_dim} reuses the name of reduced_dim "
            f"{reduced_dim} with another size; give k_dim a new name")
      out_shape = out_shape + [k_dim]
    super().__init__([x], name=name)
    self.reduced_dim = reduced_dim
    self.k_dim = k_dim
    self.k = k
    self._outputs = [Tensor(self, out_shape, x.dtype, index=0),
                     Tensor(self, out_shape, "int32", index=1)]

  def cost_params(self):
    return (self.reduced_dim, self.k_dim, self.k)

  def gradient(self, grad_ys):
    g = grad_ys[0]  # the indices output has no gradient
    x = self.inputs[0]
    if g is None or not is_float(x):
      return [None]
    hot = gather_ops.one_hot(self.outputs[1], self.reduced_dim,
                             dtype=g.dtype, name=f"{self.name}_grad_one_hot")
    return [einsum_ops.einsum([hot, g], output_shape=x.shape,
                              name=f"{self.name}_grad")]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x = self.inputs[0]
    values_t, indices_t = self.outputs
    k, dtype, squeeze = self.k, x.dtype, self.k_dim is None
    r = x.shape.index(self.reduced_dim)
    perm = [i for i in range(x.shape.ndims) if i != r] + [r]
    nb = len(perm) - 1
    laid = lowering.laid_out(x)
    n_local = laid.slice_shape[r]
    batch_slice = [laid.slice_shape[i] for i in perm[:-1]]
    axis = _split_axis(impl, self.reduced_dim)
    k_axis = _split_axis(impl, self.k_dim) if self.k_dim is not None else None
    full_k = tuple(batch_slice) + (() if squeeze else (k,))

    def finish(v, i):
      if squeeze:
        v, i = v[..., 0], i[..., 0]
      return v, i

    if axis is None:
      def local(t):
        v, i = tf.math.top_k(_transpose(t, perm), k, sorted=True)
        return finish(v, tf.cast(i, tf.int32))
      outs = impl.slicewise(local, laid, slice_shape=[full_k, full_k],
                            dtype=[dtype, "int32"],
                            flops=laid.slice_size * _log2(k))
    else:
      kl = min(k, n_local)

      def candidates(pnum, t):
        v, i = tf.math.top_k(_transpose(t, perm), kl, sorted=True)
        offset = impl.slice_begin(x, pnum)[r]
        return _pack(v, tf.cast(i, tf.int32) + offset, dtype)
      carrier = _PACKING[dtype][1]
      packed = impl.slicewise_pnum(
          candidates, laid, slice_shape=tuple(batch_slice) + (kl, 2),
          dtype=carrier, flops=laid.slice_size * _log2(kl))
      packed = impl.allconcat(packed, axis, nb)

      def merge(p):
        v, gi = _unpack(p, dtype)
        v2, pos = tf.math.top_k(v, k, sorted=True)
        i2 = tf.gather(gi, pos, axis=nb, batch_dims=nb)
        return finish(v2, tf.cast(i2, tf.int32))
      outs = impl.slicewise(merge, packed, slice_shape=[full_k, full_k],
                            dtype=[dtype, "int32"],
                            flops=(packed.slice_size // 2) * _log2(k))
    if k_axis is not None:
      outs = [impl.allsplit(o, k_axis, nb) for o in outs]
    lowering.set_tensor_lowering(values_t, outs[0])
    lowering.set_tensor_lowering(indices_t, outs[1])


def _log2(n):
  return max(1, (int(n) - 1).bit_length())


def _transpose(t, perm):
  if list(perm) != list(range(len(perm))):
    t = tf.transpose(t, perm)
  return t


def top_k(x, reduced_dim, k_dim, name=None):
  """The ``k_dim.size`` largest entries of ``x`` along ``reduced_dim``.

  Like ``tf.math.top_k``: values come sorted in decreasing order, and equal
  values are ordered by increasing index (lowest index first), on every
  layout.

  Args:
    x: an mtf Tensor of a real dtype.
    reduced_dim: the Dimension (or its name) of ``x`` to select along; it
      may be split by the layout.
    k_dim: the new Dimension holding the ``k`` results; it may be split too.
    name: op name.

  Returns:
    ``(values, indices)``, both of shape ``x.shape - reduced_dim + [k_dim]``
    (k_dim last); ``indices`` are int32 positions along ``reduced_dim``.

  Raises:
    UnknownNameError: if ``reduced_dim`` is not a dim of ``x``.
    ShapeError: if ``k_dim.size`` is not in ``[1, reduced_dim.size]`` or
      ``k_dim`` clashes with a dim of ``x``.
    DTypeError: for a bool or complex ``x``.

  Example:
    >>> v, i = top_k(logits, vocab, mtf.Dimension("k", 4))  # doctest: +SKIP
  """
  reduced_dim = _resolve_dim(x, reduced_dim, name or "top_k")
  k_dim = dims_lib.convert_to_dimension(k_dim)
  if k_dim is None:
    raise ShapeError(f"{name or 'top_k'}: k_dim must be a Dimension; use "
                     "top_1 for the single largest entry")
  op = TopKOperation(x, reduced_dim, k_dim, name=name)
  return op.outputs[0], op.outputs[1]


def top_1(x, reduced_dim, name=None):
  """The largest entry of ``x`` along ``reduced_dim`` and its index.

  Returns:
    ``(values, indices)`` of shape ``x.shape - reduced_dim``; ``indices``
    are int32, the lowest index among equal maxima.

  Raises:
    UnknownNameError: if ``reduced_dim`` is not a dim of ``x``.
    DTypeError: for a bool or complex ``x``.
  """
  reduced_dim = _resolve_dim(x, reduced_dim, name or "top_1")
  op = TopKOperation(x, reduced_dim, None, name=name)
  return op.outputs[0], op.outputs[1]


def argmax(x, reduced_dim, name=None):
  """The int32 index of the largest entry along ``reduced_dim`` (lowest
  index among equal maxima), of shape ``x.shape - reduced_dim``."""
  return top_1(x, reduced_dim, name=name or "argmax")[1]


class CumsumOperation(Operation):
  """Cumulative sum of ``x`` along ``dim`` (``exclusive``: shifted by one).

  Attributes (for gradients): ``dim``, ``exclusive``.  The gradient is the
  reverse cumulative sum of ``dy`` along ``dim`` with the same
  ``exclusive``, i.e. ``reverse(cumsum(reverse(dy)))``.
  """

  def __init__(self, x, dim, exclusive=False, name=None):
    name = name or "cumsum"
    if x.dtype == "bool":
      raise DTypeError(f"{name}: {x.name} has dtype bool; cast it to a "
                       "number before cumsum")
    super().__init__([x], name=name)
    self.dim = dim
    self.exclusive = bool(exclusive)
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def cost_params(self):
    return (self.dim, self.exclusive)

  def gradient(self, grad_ys):
    # dx_i = sum_{j >= i} dy_j (inclusive) or sum_{j > i} dy_j (exclusive):
    # the total minus the opposite-exclusivity prefix sum.
    g = grad_ys[0]
    x = self.inputs[0]
    if g is None or not is_float(x):
      return [None]
    total = reduce_ops.reduce_sum(g, output_shape=g.shape - [self.dim])
    prefix = cumsum(g, self.dim, exclusive=not self.exclusive)
    # -(prefix - total) keeps x's dim order, and equals total - prefix.
    return [ew.negative(ew.subtract(prefix, total))]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    i = x.shape.index(self.dim)
    exclusive = self.exclusive
    laid = lowering.laid_out(x)
    axis = _split_axis(impl, self.dim)
    y = impl.slicewise(lambda t: tf.cumsum(t, axis=i, exclusive=exclusive),
                       laid, shape=out.shape)
    if axis is None:
      lowering.set_tensor_lowering(out, y)
      return
    totals_shape = list(laid.slice_shape)
    totals_shape[i] = 1
    totals = impl.slicewise(lambda t: tf.reduce_sum(t, axis=i, keepdims=True),
                            laid, slice_shape=totals_shape,
                            flops=laid.slice_size)
    totals = impl.allconcat(totals, axis, i)

    def add_prefix(pnum, local, tot):
      c = impl.block_index(pnum, axis)
      if c == 0:
        return tf.identity(local)
      begin = [0] * len(totals_shape)
      size = list(totals_shape)
      size[i] = c
      prefix = tf.reduce_sum(tf.slice(tot, begin, size), axis=i,
                             keepdims=True)
      return local + prefix
    lowering.set_tensor_lowering(out, impl.slicewise_pnum(
        add_prefix, y, totals, shape=out.shape))


def cumsum(x, dim, exclusive=False, name=None):
  """Cumulative sum of ``x`` along ``dim``, which may be split.

  Args:
    x: a numeric mtf Tensor.
    dim: the Dimension (or its name) of ``x`` to scan.
    exclusive: if True, element ``j`` holds the sum of elements ``< j``.
    name: op name.

  Returns:
    A Tensor of ``x``'s shape and dtype.

  Raises:
    UnknownNameError: if ``dim`` is not a dim of ``x``.
    DTypeError: for a bool ``x``.

  Example:
    >>> positions = cumsum(mask, seq_dim, exclusive=True)  # doctest: +SKIP
  """
  dim = _resolve_dim(x, dim, name or "cumsum", what="dim")
  return CumsumOperation(x, dim, exclusive, name=name).outputs[0]
