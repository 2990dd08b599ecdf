"""Reading variables whose *storage* layout differs from their *compute*
layout (the ZeRO / FSDP family).

A sharded variable is stored with one dim renamed to a storage dim (see
:mod:`mesh_tf.training.storage`), e.g. ``d_model`` -> ``d_model_storage``, so the
layout rules can split its storage over a data-parallel axis
(``d_model_storage:data``) while every computation sees ``d_model``
replicated there.  Two ops move values between the two:

* :class:`StorageGatherOperation` (forward): storage -> compute dims; under
  such rules an **all-gather** (all-concat) over the storage axes.  With
  ``regather`` (ZeRO stage 3) the backward pass does not keep its output:
  :func:`mesh_tf.gradients` rebuilds the gather next to each gradient that
  reads it, so the gathered copy is freed after its forward use and fetched
  again in backward.
* :class:`StorageScatterOperation` (its gradient): compute -> storage dims.
  A weight gradient arrives as a *pending* SUM over the data axes (the
  batch was split there); with ``reduce_scatter`` (stages 2 and 3) each
  pending axis that the storage splits is **reduce-scattered** straight
  onto the shard, and only the other pending axes are all-reduced.  Without
  it (stage 1) the gradient is all-reduced whole and each device keeps its
  shard (a free all-split); with ``defer_sum`` (set by a step that
  accumulates the microbatches' gradients itself) a pending sum stays
  pending, the split to run after its all-reduce, so the accumulated
  gradient is all-reduced once per step.

Both run the same code on every backend, so the cost model's trace is the
lowering's.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.laid_out import LazyAllreduceSum, PendingFinish
from mesh_tf.ops import reshape as reshape_lib

__all__ = ["StorageGatherOperation", "StorageScatterOperation",
           "storage_gather"]


def _check_renaming(x, new_shape, what):
  if [d.size for d in x.shape] != [d.size for d in new_shape]:
    raise ShapeError(f"{what}: {x.name} {x.shape!r} and {new_shape!r} must "
                     "have the same dim sizes in the same order (only names "
                     "change between storage and compute dims)")


def _relayout(impl, laid, in_shape, out_shape, in_layout, out_layout):
  """Moves ``laid`` (in ``in_layout``) to ``out_layout`` with the reshape
  planner (the dims only change names, so it all-gathers, all-to-alls or
  all-splits as the two layouts need)."""
  return reshape_lib.relayout(impl, laid, in_shape, out_shape, in_layout,
                              out_layout)


class StorageGatherOperation(Operation):
  """The compute copy of a variable stored under other dims (see the module
  docstring).

  Attributes:
    regather: ZeRO stage 3: the backward pass gathers again instead of
      keeping this output alive (``recompute_in_backward``).
    reduce_scatter: whether the gradient reduce-scatters onto the shard
      (stages 2 and 3) or all-reduces whole (stage 1).
    weight_copy: always True: the memory model counts the output as
      parameter memory (a copy of a weight), not as an activation.
  """

  def __init__(self, x, compute_shape, regather=False, reduce_scatter=True,
               name=None):
    super().__init__([x], name=name or f"{x.operation.name}/gather")
    compute_shape = dims_lib.convert_to_shape(compute_shape)
    _check_renaming(x, compute_shape, self.name)
    self.regather = bool(regather)
    self.reduce_scatter = bool(reduce_scatter)
    self.weight_copy = True
    self.rebuilt = False
    self._outputs = [Tensor(self, compute_shape, x.dtype)]

  @property
  def schedule_when_needed(self):
    """Read by the memory schedule: a backward re-gather runs next to its
    use, never early (it only looks memory-neutral in whole bytes)."""
    return self.rebuilt

  @property
  def per_use(self):
    """Gathered at each use (stage 3, forward and backward), so once per
    microbatch, rather than once per step."""
    return self.regather or self.rebuilt

  @property
  def recompute_in_backward(self):
    """Read by :func:`mesh_tf.gradients`: rebuild me for backward uses."""
    return self.regather

  def rebuild(self):
    """A fresh gather of the same storage (for a backward use)."""
    op = StorageGatherOperation(
        self.inputs[0], self.outputs[0].shape, regather=False,
        reduce_scatter=self.reduce_scatter, name=f"{self.name}_backward")
    op.rebuilt = True
    return op.outputs[0]

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None]
    return [StorageScatterOperation(g, self.inputs[0].shape,
                                    self.reduce_scatter,
                                    name=f"{self.name}_grad").outputs[0]]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    laid = _relayout(impl, lowering.laid_out(x), x.shape, out.shape,
                     impl.tensor_layout(x), impl.tensor_layout(out))
    lowering.set_tensor_lowering(out, laid)


class StorageScatterOperation(Operation):
  """A compute-layout gradient moved onto its variable's storage layout,
  reduce-scattering pending sums where it can (see the module docstring)."""

  def __init__(self, g, storage_shape, reduce_scatter=True, name=None):
    super().__init__([g], name=name or "storage_scatter")
    storage_shape = dims_lib.convert_to_shape(storage_shape)
    _check_renaming(g, storage_shape, self.name)
    self.reduce_scatter = bool(reduce_scatter)
    # Stage 1 in a step that accumulates its gradients itself (a pipeline):
    # a pending sum stays pending (the move to the shard runs after its
    # all-reduce), so the accumulated gradient all-reduces once per step.
    self.defer_sum = False
    self._outputs = [Tensor(self, storage_shape, g.dtype)]

  def cost_params(self):
    # Stage 1 all-reduces what stages 2 and 3 reduce-scatter: equal shapes,
    # other collectives.
    return (self.reduce_scatter, self.defer_sum)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None]
    return [reshape_lib.reshape(g, self.inputs[0].shape,
                                name=f"{self.name}_grad")]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    g, out = self.inputs[0], self.outputs[0]
    value = lowering.tensors[g]
    # One tuple of mesh axes per dim (a dim may span several axes).
    in_layout = list(impl.tensor_layout(g).tensor_axis_to_mesh_axes)
    out_layout = impl.tensor_layout(out).tensor_axis_to_mesh_axes
    if self.reduce_scatter and isinstance(value, LazyAllreduceSum):
      # Recorded as this op's own collectives: the pending sum is consumed
      # here, not forced (so the search prices it in this op's table).
      lowering.set_tensor_lowering(out, _scatter(
          impl, value.laid_out_input, value.mesh_axes, g, out))
      return
    first = getattr(value, "then", None)
    if (self.defer_sum and isinstance(value, LazyAllreduceSum)
        and value.pending and (first is None or first.reduce is None)):
      # Stage 1 in a step that accumulates its gradients: reduce-scattered
      # onto the shard once, when the accumulated sum is forced (before
      # the update of the shard); a pending cast (the parts of a weight
      # read twice, widened) runs around the reduce-scatter.
      key = ("scatter", g.shape, out.shape)
      lowering.set_tensor_lowering(out, LazyAllreduceSum(
          impl, value.laid_out_input, value.mesh_axes, value.source_op,
          PendingFinish(key if first is None else (first.key, key),
                        None if first is None else first.before,
                        None if first is None else first.after,
                        reduce=lambda laid, source: _scatter(
                            impl, laid, value.mesh_axes, g, out, source),
                        slice_shape=impl.slice_shape(out))))
      return
    laid = lowering.laid_out(g)
    lowering.set_tensor_lowering(
        out, _relayout(impl, laid, g.shape, out.shape, in_layout,
                       out_layout))


def _scatter(impl, laid, mesh_axes, g, out, source_op=None):
  """The partial sums ``laid`` of gradient ``g`` over ``mesh_axes``,
  summed onto the storage layout of ``out``: each pending axis the storage
  splits is reduce-scattered, the others all-reduced (``source_op``: the
  op that left the sums, when forced later than it ran)."""
  # One tuple of mesh axes per dim (a dim may span several axes).
  in_layout = list(impl.tensor_layout(g).tensor_axis_to_mesh_axes)
  out_layout = impl.tensor_layout(out).tensor_axis_to_mesh_axes
  pending = [a for a in mesh_axes if impl.shape[a].size > 1]
  used = {a for axes in in_layout for a in axes}
  for i, (a, b) in enumerate(zip(in_layout, out_layout)):
    if (not a and b and set(b) <= set(pending)
        and used.isdisjoint(b)):
      laid = impl.reduce_scatter(laid, b, i, source_op=source_op)
      in_layout[i] = b
      used.update(b)
      for m in b:
        pending.remove(m)
  if pending:
    laid = impl.allreduce(laid, pending, "SUM", source_op=source_op)
  return _relayout(impl, laid, g.shape, out.shape, in_layout, out_layout)


def storage_gather(x, compute_shape, regather=False, reduce_scatter=True,
                   name=None):
  """The compute copy of the stored value ``x`` (see
  :class:`StorageGatherOperation`)."""
  return StorageGatherOperation(x, compute_shape, regather, reduce_scatter,
                                name).outputs[0]
