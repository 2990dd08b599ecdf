"""``GenericGradOperation``: Mesh TensorFlow's gradient "that follows
regular TF": it differentiates the TF computation that another op lowered
to, slice by slice.

For each processor ``p`` it re-runs the forward op's lowering on the same
input slices under a ``tf.GradientTape`` and takes the gradient of
``sum_j <y_j[p], dy_j[p]>`` with respect to processor ``p``'s own input
slices, as the original's per-slice ``tf.gradients`` did.  That is the true
gradient for ops whose slice ``p`` of each output depends on slice ``p`` of
the inputs, directly or through an all-reduce (slicewise ops, reductions,
einsums), once the parts are summed over the mesh axes that split an output
but not the input (a lazy SUM all-reduce, which Mesh TF left out); for ops
that move data between processors (shifts, all-to-alls) it is not, so give
those a ``gradient`` method.

The re-run forward computation is part of this op's cost: its collectives
and compute are recorded again (attributed to this op), plus a backward
pass priced at twice the forward FLOPs.
"""

from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.laid_out import LaidOutTensor, LazyAllreduceSum
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["GenericGradOperation"]


class GenericGradOperation(Operation):
  """The gradients of ``forward_op``'s inputs given ``grad_ys``, by TF's
  autodiff of its lowered slices (Mesh TF's class and constructor).

  Args:
    forward_op: an mtf Operation (already in the graph).
    grad_ys: one gradient Tensor (or None) per output of ``forward_op``.
    name: the op name.

  Outputs one Tensor per input of ``forward_op``, of its shape and dtype
  (zeros for integer inputs).

  Example:
    >>> @mtf.register_gradient(MyOperation)             # doctest: +SKIP
    ... def _grad(op, grad_ys):
    ...   return GenericGradOperation(op, grad_ys).outputs

  Raises:
    ShapeError: if ``grad_ys`` does not match the outputs.
  """

  no_gradient_reason = ("second derivatives are not built: it "
                        "differentiates another op's TF slices")

  def __init__(self, forward_op, grad_ys, name=None):
    if not isinstance(forward_op, Operation):
      raise MtfError(f"GenericGradOperation takes an mtf Operation, got "
                     f"{forward_op!r}")
    grad_ys = list(grad_ys)
    outs = list(forward_op.outputs)
    if len(grad_ys) != len(outs):
      raise ShapeError(f"GenericGradOperation: {forward_op.name} has "
                       f"{len(outs)} outputs but {len(grad_ys)} grad_ys")
    for y, g in zip(outs, grad_ys):
      if g is not None and (not isinstance(g, Tensor) or g.shape != y.shape):
        raise ShapeError(f"GenericGradOperation: the gradient of {y.name} "
                         f"{y.shape!r} is {g!r}; it must be a Tensor of "
                         "that shape")
    self._given = [i for i, g in enumerate(grad_ys) if g is not None]
    super().__init__(list(forward_op.inputs) + outs
                     + [grad_ys[i] for i in self._given],
                     mesh=forward_op.mesh,
                     name=name or f"{forward_op.name}/generic_grad")
    self.forward_op = forward_op
    self._outputs = [Tensor(self, x.shape, x.dtype, index=i)
                     for i, x in enumerate(forward_op.inputs)]

  @property
  def unsplittable_dims(self):
    """None, as Mesh TF defines it."""
    return frozenset()

  @property
  def lowering_unsplittable_dims(self):
    return self.forward_op.lowering_unsplittable_dims

  def cost_params(self):
    return (self.forward_op.signature, tuple(self._given))

  def lower(self, lowering):
    from mesh_tf.lowering.lowering import lower_operation  # pylint: disable=g-import-not-at-top
    from mesh_tf.lowering.shape_impl import ShapeMeshImpl  # pylint: disable=g-import-not-at-top
    impl = lowering.mesh_impl(self)
    fwd = self.forward_op
    n_in, n_out = len(fwd.inputs), len(fwd.outputs)
    laid_x = [lowering.laid_out(t) for t in fwd.inputs]
    laid_dy = [lowering.laid_out(t) for t in self.inputs[n_in + n_out:]]
    # What is priced: the forward op's own records again (it is re-run)
    # and a backward pass of twice its FLOPs.  Both backends take them
    # from a shape-only run, so they record the same.
    twin = ShapeMeshImpl(impl.shape, impl.layout_rules)
    result = lower_operation(fwd, twin)
    for y in result.outputs:
      y.to_laid_out_tensor()
    impl.trace.collectives.extend(
        r._replace(op_name=self.name, source_op=self.name)
        for r in twin.trace.collectives)
    impl.trace.compute.extend(r._replace(op_name=self.name)
                              for r in twin.trace.compute)
    with impl.recording(self.name):
      impl.record_compute(
          2 * twin.trace.total_flops_per_device,
          sum(x.slice_bytes for x in laid_x),
          sum(x.slice_bytes for x in laid_x + laid_dy))
    if not laid_x or laid_x[0].tensor_list is None:
      grads = [LaidOutTensor(x.slice_shape, x.dtype) for x in laid_x]
    else:
      grads = self._tape_gradients(lower_operation, impl, laid_x, laid_dy)
    # Along a mesh axis that splits an output but not input x, each
    # processor's slice of x got only its own outputs' part: sum them.
    out_axes = set(impl.split_axes([d for i in self._given
                                    for d in fwd.outputs[i].shape]))
    for x, out, g in zip(fwd.inputs, self.outputs, grads):
      axes = out_axes - set(impl.split_axes(list(x.shape)))
      lowering.set_tensor_lowering(
          out, LazyAllreduceSum(impl, g, sorted(axes)) if axes else g)

  def _tape_gradients(self, lower_operation, impl, laid_x, laid_dy):
    """A re-run of the forward op under a tape, on the same devices but
    unfused: TF differentiates plain kernels, not fused function calls."""
    from mesh_tf.lowering.placement import PlacementMeshImpl  # pylint: disable=g-import-not-at-top
    fwd = self.forward_op
    impl = PlacementMeshImpl(impl.shape, impl.layout_rules, impl.devices,
                             fuse=False)
    watched = [dtypes_lib.is_floating(x.dtype) for x in laid_x]
    with tf.GradientTape(persistent=True) as tape:
      for x, w in zip(laid_x, watched):
        if w:
          for t in x.tensor_list:
            tape.watch(t)
      result = lower_operation(fwd, impl, inputs=laid_x)
      ys = [result.outputs[i].to_laid_out_tensor().tensor_list
            for i in self._given]
      targets = []
      for p in range(impl.size):
        with tf.device(impl.devices[p]):
          terms = [tf.reduce_sum(tf.cast(y[p], tf.float32)
                                 * tf.cast(dy.tensor_list[p], tf.float32))
                   for y, dy in zip(ys, laid_dy)]
          targets.append(tf.add_n(terms) if terms else tf.constant(0.0))
    grads = []
    for x, w in zip(laid_x, watched):
      slices = []
      for p, t in enumerate(x.tensor_list):
        with tf.device(impl.devices[p]):
          g = tape.gradient(targets[p], t) if w else None
          slices.append(tf.zeros_like(t) if g is None else tf.cast(g,
                                                                  t.dtype))
      grads.append(LaidOutTensor(x.slice_shape, x.dtype, slices))
    del tape
    return grads
