"""Index ops: ``one_hot`` and ``gather``.

Both work under any layout; neither has an unsplittable dim.

* ``one_hot``: every processor builds its part of the one-hot tensor from
  its slice of the indices and its offset on the (possibly split) class dim.
  No communication.
* ``gather``: the direct method, not ``one_hot`` + ``einsum``.  Each
  processor looks up the rows of ``weights`` it owns (indices outside its
  part of ``dim`` give zeros).  When ``dim`` is split over a mesh axis, the
  partial results are summed over that axis with a lazy SUM all-reduce, as a
  contraction would be.  This costs ``indices x row`` memory and FLOPs
  instead of the ``indices x dim x row`` of a one-hot contraction, and the
  same one all-reduce.  Out-of-range indices give zero rows on every layout
  (as the one-hot contraction would).
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import DTypeError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops.base import is_float, resolve_dim

__all__ = ["OneHotOperation", "GatherOperation", "one_hot", "gather"]


def _check_integer(op_name, t, what):
  if not dtypes_lib.is_integer(t.dtype):
    raise DTypeError(f"{op_name}: {what} {t.name} has dtype {t.dtype}, but "
                     "indices must be an integer type; cast it with "
                     "mtf.to_int32")


class OneHotOperation(Operation):
  """``out[i..., c] = on_value if indices[i...] == c else off_value``.

  The output shape is ``indices.shape + [output_dim]``.  Attributes (for
  gradients and cost models): ``output_dim``, ``on_value``, ``off_value``.
  It has no gradient: its only input is an integer tensor.
  """

  no_gradient_reason = "its only input is an integer tensor of indices"

  def __init__(self, indices, output_dim, on_value, off_value, dtype,
               name=None):
    name = name or "one_hot"
    _check_integer(name, indices, "indices")
    if output_dim.name in indices.shape:
      raise ShapeError(
          f"{name}: output dim {output_dim} is already a dim of indices "
          f"{indices.name} {indices.shape!r}; give the class dim a new name")
    super().__init__([indices], name=name)
    self.output_dim = output_dim
    if not dtypes_lib.is_floating(dtype) and dtypes_lib.as_dtype(
        dtype) != "bool":  # one_hot(..., dtype=int32) with the 1.0 default
      on_value, off_value = int(on_value), int(off_value)
    self.on_value = on_value
    self.off_value = off_value
    self._outputs = [Tensor(self, indices.shape + [output_dim], dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    depth = impl.slice_shape(out)[-1]
    axis = out.shape.ndims - 1
    on, off, dtype = self.on_value, self.off_value, out.dtype

    def fn(pnum, idx):
      offset = impl.slice_begin(out, pnum)[axis]
      if offset:
        idx = idx - tf.constant(offset, idx.dtype)
      return tf.one_hot(idx, depth, on_value=tf.constant(on, dtype),
                        off_value=tf.constant(off, dtype), dtype=dtype)
    lowering.set_tensor_lowering(out, impl.slicewise_pnum(
        fn, lowering.laid_out(self.inputs[0]), shape=out.shape, dtype=dtype))

  def cost_params(self):
    return (self.output_dim, self.on_value, self.off_value)


def one_hot(indices, output_dim, on_value=1.0, off_value=0.0, dtype="float32",
            name=None):
  """One-hot encodes integer ``indices`` along the new dim ``output_dim``.

  Args:
    indices: an integer mtf Tensor.
    output_dim: the class Dimension (or ``"name:size"``), appended last.
      It may be split by the layout.
    on_value, off_value: the values at and away from each index.
    dtype: the output dtype.
    name: op name.

  Returns:
    A Tensor of shape ``indices.shape + [output_dim]``.  Indices outside
    ``[0, output_dim.size)`` give rows of ``off_value``.

  Raises:
    DTypeError: if ``indices`` is not an integer tensor.
    ShapeError: if ``output_dim`` is already a dim of ``indices``.

  Example:
    >>> y = one_hot(ids, mtf.Dimension("vocab", 512))  # doctest: +SKIP
  """
  if not isinstance(indices, Tensor):
    raise ShapeError(f"one_hot expects an mtf Tensor of indices, got "
                     f"{indices!r}")
  output_dim = dims_lib.convert_to_dimension(output_dim)
  return OneHotOperation(indices, output_dim, on_value, off_value,
                         dtypes_lib.as_dtype(dtype), name=name).outputs[0]


class GatherOperation(Operation):
  """``out[s..., i..., w...] = weights[s..., dim=indices[s..., i...], w...]``.

  Dims that ``indices`` shares with ``weights`` (``s``) are batch dims,
  matched by name, as in ``einsum([one_hot(indices, dim), weights])``.

  Attributes (for gradients): ``dim`` (the gathered Dimension), ``weights``
  and ``indices`` (the inputs), ``batch_dim_names``.  The gradient with
  respect to ``weights`` scatter-adds the output gradient into ``dim``,
  i.e. ``einsum([one_hot(indices, dim), dy], output_shape=weights.shape)``.
  """

  def __init__(self, weights, indices, dim, output_shape, name=None):
    super().__init__([weights, indices], name=name or "gather")
    self.dim = dim
    self.batch_dim_names = tuple(n for n in indices.shape.dimension_names
                                 if n in weights.shape)
    self._outputs = [Tensor(self, output_shape, weights.dtype)]

  @property
  def weights(self):
    return self.inputs[0]

  def cost_params(self):
    return (self.dim, self.batch_dim_names)

  def gradient(self, grad_ys):
    # Scatter-add dy into the gathered rows: a contraction with the one-hot
    # of the indices, laid out (and all-reduced) like any einsum.
    g = grad_ys[0]
    weights, indices = self.inputs
    if g is None or not is_float(weights):
      return [None, None]
    hot = one_hot(indices, self.dim, dtype=g.dtype,
                  name=f"{self.name}_grad_one_hot")
    return [einsum_ops.einsum([hot, g], output_shape=weights.shape,
                              name=f"{self.name}_grad"), None]

  @property
  def indices(self):
    return self.inputs[1]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    weights, indices = self.inputs
    out = self.outputs[0]
    dim = self.dim
    # The gathered dim's mesh axes (a tuple; several for a multi-axis dim).
    d_axis = impl.dim_axes(dim)
    batch = list(self.batch_dim_names)
    w_names = weights.shape.dimension_names
    i_names = indices.shape.dimension_names
    w_rest = [n for n in w_names if n != dim.name and n not in batch]
    i_rest = [n for n in i_names if n not in batch]
    # An indices dim split on dim's mesh axis: gather it whole, then split
    # the summed output again (as einsum does).
    resplit = [n for n in i_rest
               if d_axis is not None and not set(d_axis).isdisjoint(
                   impl.tensor_dimension_to_mesh_axes(
                       indices.shape.get_dim_by_name(n)))]
    laid_w = lowering.laid_out(weights)
    laid_i = lowering.laid_out(indices)
    for n in resplit:
      laid_i = impl.allconcat(laid_i, impl.tensor_dimension_to_mesh_axes(
          indices.shape.get_dim_by_name(n)), i_names.index(n))
    sizes = dict(zip(w_names, laid_w.slice_shape))
    sizes.update(zip(i_names, laid_i.slice_shape))
    w_perm = [w_names.index(n) for n in batch + [dim.name] + w_rest]
    i_perm = [i_names.index(n) for n in batch + i_rest]
    canon = batch + i_rest + w_rest
    out_names = out.shape.dimension_names
    o_perm = [canon.index(n) for n in out_names]
    out_slice = tuple(sizes[n] for n in out_names)
    nb, n_local = len(batch), sizes[dim.name]
    d_index = w_names.index(dim.name)

    def fn(pnum, w, idx):
      w = _transpose(w, w_perm)
      idx = _transpose(idx, i_perm)
      offset = impl.slice_begin(weights, pnum)[d_index]
      local = idx - tf.constant(offset, idx.dtype) if offset else idx
      valid = tf.logical_and(local >= 0, local < n_local)
      safe = tf.where(valid, local, tf.zeros_like(local))
      g = tf.gather(w, safe, axis=nb, batch_dims=nb)
      mask = tf.reshape(valid, tf.concat(
          [tf.shape(valid), tf.ones([len(w_rest)], tf.int32)], 0))
      g = tf.where(mask, g, tf.zeros_like(g))
      return _transpose(g, o_perm)
    y = impl.slicewise_pnum(fn, laid_w, laid_i, slice_shape=out_slice,
                            dtype=out.dtype)
    if resplit:
      y = impl.allreduce(y, d_axis, "SUM")
      for n in resplit:
        y = impl.allsplit(y, impl.tensor_dimension_to_mesh_axes(
            indices.shape.get_dim_by_name(n)), out_names.index(n))
      lowering.set_tensor_lowering(out, y)
    elif d_axis is not None:
      lowering.set_tensor_lowering(out, LazyAllreduceSum(impl, y, d_axis))
    else:
      lowering.set_tensor_lowering(out, y)


def _transpose(t, perm):
  if list(perm) != list(range(len(perm))):
    t = tf.transpose(t, perm)
  return t


def gather(weights, indices, dim, output_shape=None, name=None):
  """Looks up entries of ``weights`` along ``dim`` at integer ``indices``.

  Dims shared by ``weights`` and ``indices`` (other than ``dim``) are batch
  dims matched by name.  ``dim`` may be split by the layout: each processor
  gathers the rows it owns and the partial results are summed over
  ``dim``'s mesh axis (a lazy SUM all-reduce).

  Args:
    weights: an mtf Tensor with dim ``dim``.
    indices: an integer mtf Tensor, or a Python int / list (made a constant
      of shape ``[]`` only for an int).
    dim: the Dimension (or its name) of ``weights`` to index.
    output_shape: optional order of the output dims; it must hold exactly
      the dims of ``indices`` and the dims of ``weights`` other than ``dim``.
      Default: ``indices.shape`` followed by the other dims of ``weights``.
    name: op name.

  Returns:
    A Tensor of ``weights.dtype``.  Out-of-range indices give zeros.

  Raises:
    UnknownNameError: if ``dim`` is not a dim of ``weights``.
    DTypeError: if ``indices`` is not an integer tensor.
    ShapeError: if ``indices`` has ``dim``, a shared dim has different
      sizes, or ``output_shape`` does not hold the right dims.

  Example:
    >>> emb = gather(embedding, token_ids, vocab_dim)  # doctest: +SKIP
  """
  op_name = name or "gather"
  if not isinstance(weights, Tensor):
    raise ShapeError(f"{op_name}: weights must be an mtf Tensor, got "
                     f"{weights!r}")
  dim = resolve_dim(weights, dim, op_name)
  if not isinstance(indices, Tensor):
    from mesh_tf.ops.creation import constant
    if not isinstance(indices, int):
      raise ShapeError(f"{op_name}: indices must be an mtf Tensor or a "
                       f"Python int, got {indices!r}")
    indices = constant(weights.mesh, indices, dtype="int32")
  _check_integer(op_name, indices, "indices")
  if dim.name in indices.shape:
    raise ShapeError(f"{op_name}: indices {indices.name} {indices.shape!r} "
                     f"has the gathered dim {dim.name!r}; rename that dim of "
                     "the indices")
  for d in indices.shape:
    if d.name in weights.shape and d not in weights.shape:
      raise ShapeError(
          f"{op_name}: dim {d.name!r} of indices {indices.name} has size "
          f"{d.size} but size {weights.shape.get_dim_by_name(d.name).size} in "
          f"weights {weights.name}; shared (batch) dims must match")
  default = indices.shape + [d for d in weights.shape
                             if d != dim and d.name not in indices.shape]
  if output_shape is None:
    output_shape = default
  else:
    output_shape = dims_lib.convert_to_shape(output_shape)
    if sorted(output_shape.dims) != sorted(default.dims):
      raise ShapeError(f"{op_name}: output_shape {output_shape!r} must hold "
                       f"exactly the dims {default!r} (in any order)")
  if weights.dtype == "bool":
    from mesh_tf.ops import elementwise as ew
    y = GatherOperation(ew.cast(weights, "int32"), indices, dim, output_shape,
                        name=name).outputs[0]
    return ew.cast(y, "bool")
  return GatherOperation(weights, indices, dim, output_shape,
                         name=name).outputs[0]
