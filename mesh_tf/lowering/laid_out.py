"""The values a lowering passes around: tensors and variables as
per-processor slices.

They are apart from the backend contract (:mod:`mesh_tf.lowering.mesh_impl`):
a backend makes and reads them, op lowering code holds them.
"""

import math

from mesh_tf.core import dtypes as dtypes_lib

__all__ = ["LaidOutTensor", "LazyAllreduceSum", "LaidOutVariable",
           "PendingFinish"]


class LaidOutTensor:
  """One tensor as per-processor slices.

  ``tensor_list`` holds one backend value per processor (TF tensors for
  :class:`PlacementMeshImpl`); it is None for the shape-only backend.  A
  slicewise result may be *pending* (see :mod:`mesh_tf.lowering.fusion`):
  reading ``tensor_list`` then runs the deferred kernels it needs.
  """
  __slots__ = ("slice_shape", "dtype", "_tensor_list", "_producer")

  def __init__(self, slice_shape, dtype, tensor_list=None):
    self.slice_shape = tuple(int(s) for s in slice_shape)
    self.dtype = dtypes_lib.as_dtype(dtype)
    self._tensor_list = tensor_list
    self._producer = None

  @property
  def tensor_list(self):
    if self._producer is not None:
      self._producer.materialize()
    return self._tensor_list

  @tensor_list.setter
  def tensor_list(self, value):
    self._tensor_list = value
    self._producer = None

  @property
  def slice_size(self):
    return math.prod(self.slice_shape)

  @property
  def slice_bytes(self):
    return self.slice_size * dtypes_lib.size_of(self.dtype)

  def to_laid_out_tensor(self):
    return self

  def __repr__(self):
    return f"LaidOutTensor({self.slice_shape}, {self.dtype})"


class LazyAllreduceSum:
  """A SUM all-reduce that has not happened yet.

  Adding two lazy sums over the same axes adds the partial sums locally and
  stays lazy, so that ``einsum(...) + einsum(...)`` all-reduces once.

  Args:
    mesh_impl: the backend that will all-reduce.
    laid_out_input: the LaidOutTensor of per-processor partial sums.
    mesh_axes: the mesh-axis indices to sum over.
    source_op: the name of the op that left the partial sums, recorded as
      the all-reduce's ``source_op`` (default: the op being lowered).
    then: None, or a :class:`PendingFinish`: what runs on the partial sums
      just before the all-reduce and on the reduced value before anyone
      reads it (a ZeRO-1 gradient keeps its shard of the reduced sum; a
      float32 master's gradient is reduced in its bfloat16 compute dtype),
      so that a sum accumulated over microbatches still all-reduces once;
      ``slice_shape`` is then the finished value's.
  """

  def __init__(self, mesh_impl, laid_out_input, mesh_axes, source_op=None,
               then=None):
    self.mesh_impl = mesh_impl
    self.laid_out_input = laid_out_input
    self.mesh_axes = tuple(sorted(mesh_axes))
    self.source_op = (mesh_impl.current_op_name if source_op is None
                      else source_op)
    self.then = then
    self._reduced = None

  @property
  def then_key(self):
    """What :attr:`then` does (None: nothing), to tell whether two pending
    sums may be added before their all-reduce."""
    return None if self.then is None else self.then.key

  def with_partial(self, laid_out_input, source_op=None):
    """The same pending sum (axes, what follows) of other per-processor
    partial sums, recorded as ``source_op``'s when forced (default: this
    sum's source)."""
    return LazyAllreduceSum(self.mesh_impl, laid_out_input, self.mesh_axes,
                            source_op or self.source_op, self.then)

  @property
  def slice_shape(self):
    if self.then is not None and self.then.slice_shape is not None:
      return self.then.slice_shape
    return self.laid_out_input.slice_shape

  @property
  def dtype(self):
    return self.laid_out_input.dtype

  @property
  def pending(self):
    """True until something forces the all-reduce."""
    return self._reduced is None

  def to_laid_out_tensor(self):
    if self._reduced is None:
      laid = self.laid_out_input
      if self.then is not None:
        laid = self.then.before(laid)
      if self.then is not None and self.then.reduce is not None:
        reduced = self.then.reduce(laid, self.source_op)
      else:
        reduced = self.mesh_impl.allreduce(laid, self.mesh_axes, "SUM",
                                           source_op=self.source_op)
      self._reduced = (reduced if self.then is None
                       else self.then.after(reduced))
    return self._reduced

  def __repr__(self):
    return f"LazyAllreduceSum({self.laid_out_input}, axes={self.mesh_axes})"


class PendingFinish:
  """What a :class:`LazyAllreduceSum` runs when forced, around its
  all-reduce: ``before(partial) -> partial`` (e.g. a cast to the dtype it
  is reduced in) and ``after(reduced) -> laid_out`` (e.g. a move to
  another layout, a cast back); ``key`` says what they do (equal keys,
  equal work); ``reduce(partial, source_op) -> laid_out``: None, or what
  reduces instead of the plain all-reduce (e.g. a reduce-scatter onto a
  shard), recording its collectives as ``source_op``'s;
  ``slice_shape``: the finished value's, if it differs."""
  __slots__ = ("before", "after", "key", "reduce", "slice_shape")

  def __init__(self, key, before=None, after=None, reduce=None,
               slice_shape=None):
    self.key = key
    self.before = before or (lambda laid: laid)
    self.after = after or (lambda laid: laid)
    self.reduce = reduce
    self.slice_shape = None if slice_shape is None else tuple(slice_shape)

  def then(self, key, before=None, after=None):
    """This finish followed by one that only casts or moves (its
    ``before`` runs after this one's, its ``after`` last)."""
    first = self
    return PendingFinish(
        (first.key, key),
        lambda laid: (before or (lambda x: x))(first.before(laid)),
        lambda laid: (after or (lambda x: x))(first.after(laid)),
        first.reduce, first.slice_shape)


class LaidOutVariable:
  """Per-processor variable slices owned by a backend.

  ``value()`` reads them as a LaidOutTensor; ``assign(laid_out)`` writes.
  ``slices`` is None on the shape-only backend.
  """

  def __init__(self, name, shape, slice_shape, dtype, slices=None):
    self.name = name
    self.shape = shape
    self.slice_shape = tuple(slice_shape)
    self.dtype = dtype
    self.slices = slices

  def value(self):
    if self.slices is None:
      return LaidOutTensor(self.slice_shape, self.dtype)
    # ``value()`` is a bare ReadVariableOp; ``read_value()`` would add an
    # Identity per slice to every lowered step.
    return LaidOutTensor(self.slice_shape, self.dtype,
                         [v.value() for v in self.slices])

  def assign(self, laid_out, mode="assign"):
    """Writes ``laid_out``'s slices (``mode``: assign, assign_add, assign_sub).

    Returns the list of assign ops (None for the shape-only backend).
    """
    laid_out = laid_out.to_laid_out_tensor()
    if self.slices is None:
      return None
    return [getattr(v, mode)(t) for v, t in zip(self.slices,
                                                  laid_out.tensor_list)]

  def apply_gradient_descent(self, grad, alpha):
    """``slice -= alpha * grad`` per slice, as TF's fused
    ``ResourceApplyGradientDescent`` (one op per slice instead of a multiply
    and a subtract).  ``alpha`` is a LaidOutTensor of scalars.

    Returns the list of update ops (None for the shape-only backend).
    """
    grad = grad.to_laid_out_tensor()
    if self.slices is None:
      return None
    from mesh_tf.lowering.lazy_tf import tf  # pylint: disable=g-import-not-at-top
    return [tf.raw_ops.ResourceApplyGradientDescent(var=v.handle, alpha=a,
                                                    delta=g)
            for v, a, g in zip(self.slices, alpha.tensor_list,
                               grad.tensor_list)]


class PendingInput(LazyAllreduceSum):
  """A stand-in input whose SUM all-reduce over ``mesh_axes`` is pending,
  for lowering one op alone (the layout search's cost tables): whether the
  op forces it is :attr:`forced`, and forcing it records nothing, since the
  all-reduce belongs to the op that left the sum and is priced there.

  Args:
    mesh_impl: the backend the op is lowered on.
    laid_out_input: the LaidOutTensor of per-processor partial sums.
    mesh_axes: the mesh-axis indices the sum is pending over.
    then: a :class:`PendingFinish` without a ``reduce`` (e.g. the casts
      around a deferred cast's all-reduce), run when forced.
  """

  def __init__(self, mesh_impl, laid_out_input, mesh_axes, then=None):
    super().__init__(mesh_impl, laid_out_input, mesh_axes, then=then)
    self._forced = False

  @property
  def forced(self):
    """True once the op being lowered needed the reduced value."""
    return self._forced

  def to_laid_out_tensor(self):
    self._forced = True
    if self._reduced is None:
      # The reduced value has the partial sums' slice shape and dtype; a
      # finish (a deferred cast) runs around the all-reduce as when forced.
      laid = self.laid_out_input
      if self.then is not None:
        laid = self.then.after(self.then.before(laid))
      self._reduced = laid
    return self._reduced

  def __repr__(self):
    return f"PendingInput({self.laid_out_input}, axes={self.mesh_axes})"

