"""Reductions over named dims, and the softmax family built on them.

A reduction of a split dim reduces locally, then all-reduces over that dim's
mesh axis (SUM lazily, so that following sums merge their all-reduces).
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError, UnknownNameError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops import elementwise as ew

_TF_REDUCE = {
    "SUM": lambda t, axes: tf.reduce_sum(t, axes),
    "MAX": lambda t, axes: tf.reduce_max(t, axes),
    "MIN": lambda t, axes: tf.reduce_min(t, axes),
    "ANY": lambda t, axes: tf.reduce_any(t, axes),
    "ALL": lambda t, axes: tf.reduce_all(t, axes),
}


class ReduceOperation(Operation):
  """Reduces ``x`` to ``output_shape`` (a subset of its dims, any order)."""

  def __init__(self, x, output_shape, reduction_type, name=None):
    super().__init__([x], name=name or f"reduce_{reduction_type.lower()}")
    for d in output_shape:
      if d not in x.shape:
        raise ShapeError(f"{self.name}: output dim {d} is not a dim of input "
                         f"{x.name} {x.shape!r}")
    self.reduction_type = reduction_type
    self._outputs = [Tensor(self, output_shape, x.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    keep = set(out.shape.dimension_names)
    local_axes = [i for i, d in enumerate(x.shape) if d.name not in keep]
    kept = [d.name for d in x.shape if d.name in keep]
    perm = [kept.index(n) for n in out.shape.dimension_names]
    reducer = _TF_REDUCE[self.reduction_type]

    def fn(t):
      y = reducer(t, local_axes) if local_axes else t
      if perm != list(range(len(perm))):
        y = tf.transpose(y, perm)
      return y
    laid_x = lowering.laid_out(x)
    y = impl.slicewise(fn, laid_x, shape=out.shape,
                       flops=max(1, laid_x.slice_size))
    axes = [a for d in x.shape if d.name not in keep
            for a in [impl.tensor_dimension_to_mesh_axis(d)] if a is not None]
    axes = [a for a in axes if impl.shape[a].size > 1]
    if not axes:
      lowering.set_tensor_lowering(out, y)
    elif self.reduction_type == "SUM":
      lowering.set_tensor_lowering(out, LazyAllreduceSum(impl, y, axes))
    elif self.reduction_type in ("ANY", "ALL"):
      red = "MAX" if self.reduction_type == "ANY" else "MIN"
      yi = impl.slicewise(lambda t: tf.cast(t, tf.int32), y, shape=out.shape,
                          dtype="int32")
      yi = impl.allreduce(yi, axes, red)
      lowering.set_tensor_lowering(out, impl.slicewise(
          lambda t: tf.cast(t, tf.bool), yi, shape=out.shape, dtype="bool"))
    else:
      lowering.set_tensor_lowering(out, impl.allreduce(y, axes,
                                                       self.reduction_type))


def _output_shape(x, output_shape, reduced_dim):
  if output_shape is not None:
    return dims_lib.convert_to_shape(output_shape)
  if reduced_dim is None:
    return dims_lib.Shape([])
  if isinstance(reduced_dim, (dims_lib.Dimension, str)):
    reduced_dim = [reduced_dim]
  reduced = list(reduced_dim)
  reduced = [dims_lib.convert_to_dimension(d) if not isinstance(d, str)
             else x.shape.get_dim_by_name(d) for d in reduced]
  for d in reduced:
    if d not in x.shape:
      raise UnknownNameError(f"reduced dim {d} is not a dim of {x.name} "
                             f"{x.shape!r}")
  return x.shape - reduced


def _reduce(kind):
  def op(x, disable_positional_args=None, output_shape=None, reduced_dim=None,
         name=None):
    assert disable_positional_args is None, "use keyword arguments"
    shape = _output_shape(x, output_shape, reduced_dim)
    if kind in ("ANY", "ALL") and x.dtype != "bool":
      x = ew.cast(x, "bool")
    return ReduceOperation(x, shape, kind, name=name).outputs[0]
  op.__name__ = f"reduce_{kind.lower()}"
  op.__doc__ = (f"Reduces ({kind}) over the dims not in ``output_shape`` "
                "(or over ``reduced_dim``; default: all dims).")
  return op


reduce_sum = _reduce("SUM")
reduce_max = _reduce("MAX")
reduce_min = _reduce("MIN")
reduce_any = _reduce("ANY")
reduce_all = _reduce("ALL")


def reduce_mean(x, disable_positional_args=None, output_shape=None,
                reduced_dim=None, name=None):
  """Mean over the dims not in ``output_shape`` (or over ``reduced_dim``)."""
  assert disable_positional_args is None, "use keyword arguments"
  shape = _output_shape(x, output_shape, reduced_dim)
  n = x.shape.size // max(1, shape.size)
  return ew.multiply(reduce_sum(x, output_shape=shape, name=name), 1.0 / n)


def reduce_logsumexp(x, reduced_dim, extra_logit=None, name=None):
  """``log(sum(exp(x)))`` over ``reduced_dim``, computed stably."""
  from mesh_tf.ops.control import stop_gradient
  shape = _output_shape(x, None, reduced_dim)
  m = stop_gradient(reduce_max(x, output_shape=shape))
  if extra_logit is not None:
    m = ew.maximum(m, extra_logit)
  s = reduce_sum(ew.exp(x - m), output_shape=shape)
  if extra_logit is not None:
    s = s + ew.exp(ew.subtract(extra_logit, m))
  return ew.add(ew.log(s), m, name=name)


def log_softmax(x, reduced_dim, extra_logit=None, name=None):
  """``x - logsumexp(x)`` over ``reduced_dim``."""
  return ew.subtract(x, reduce_logsumexp(x, reduced_dim, extra_logit),
                     name=name)


def softmax(x, reduced_dim, extra_logit=None, name=None):
  """Softmax over ``reduced_dim`` (which may be split across the mesh)."""
  return ew.exp(log_softmax(x, reduced_dim, extra_logit), name=name)
