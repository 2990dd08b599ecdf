"""Reductions over named dims, and the softmax family built on them.

A reduction of a split dim reduces locally, then all-reduces over that dim's
mesh axis (SUM lazily, so that following sums merge their all-reduces).

The softmax is one fused op each way.  Composed from reductions and
elementwise ops it would be six mtf ops forward and seven backward:

* forward ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` over the reduced
  dims (with an ``extra_logit``, a constant entry joins the max and the sum);
* backward ``dx = y * (dy - sum(dy * y))`` over the same dims.

The reduced dims may be split across the mesh: the max and the sums are then
all-reduced over their mesh axes (MAX, then SUM).
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError, UnknownNameError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops import control
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops.base import is_float

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
    axes = list(impl.split_axes([d for d in x.shape if d.name not in keep]))
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

  def cost_params(self):
    return (self.reduction_type,)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    x, y = self.inputs[0], self.outputs[0]
    if g is None or not is_float(x):
      return [None]
    if self.reduction_type == "SUM":
      return [_broadcast_to(g, x.shape)]
    if self.reduction_type in ("MAX", "MIN"):
      # TF splits the gradient evenly between tied extrema; so do we,
      # counting ties over the whole (possibly split) reduced dims.
      hit = ew.cast(ew.equal(x, y), x.dtype)
      count = reduce_sum(hit, output_shape=y.shape)
      return [_broadcast_to(ew.multiply(hit, ew.divide(g, count)), x.shape)]
    return [None]


def _broadcast_to(x, shape):
  return einsum_ops.broadcast(x, shape, name=f"{x.operation.name}_broadcast")


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
  shape = _output_shape(x, None, reduced_dim)
  m = control.stop_gradient(reduce_max(x, output_shape=shape))
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


def _split_axes(impl, dims):
  """The mesh axes (size > 1) that split any of ``dims``, sorted."""
  return list(impl.split_axes(dims))


def _keep_shape(laid, axes):
  shape = list(laid.slice_shape)
  for a in axes:
    shape[a] = 1
  return shape


class SoftmaxOperation(Operation):
  """Softmax of ``x`` over ``dims`` (Dimensions of ``x``), fused.

  ``extra_logit`` (a Python number or None) is one more logit, constant, in
  every softmax: it joins the max and the sum but has no output.
  """

  def __init__(self, x, dims, extra_logit=None, name=None):
    super().__init__([x], name=name or "softmax")
    if isinstance(dims, dims_lib.Dimension):
      dims = [dims]
    for d in dims:
      if d.name not in x.shape:
        raise ShapeError(f"{self.name}: {d} is not a dim of {x.name} "
                         f"{x.shape!r}")
    self.dims = tuple(x.shape.get_dim_by_name(d.name) for d in dims)
    self.extra_logit = None if extra_logit is None else float(extra_logit)
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  @property
  def dim(self):
    """The reduced Dimension, when there is one."""
    return self.dims[0]

  def cost_params(self):
    return (self.dims, self.extra_logit is not None)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    axes = [x.shape.index(d.name) for d in self.dims]
    laid = lowering.laid_out(x)
    mesh_axes = _split_axes(impl, self.dims)
    n = laid.slice_size
    extra = self.extra_logit
    # TF's Softmax kernel takes at most rank 5; larger ranks (2-d local
    # attention) use the unfused form below.
    if (not mesh_axes and extra is None and len(axes) == 1
        and x.shape.ndims <= 5):
      y = impl.slicewise(lambda t: tf.nn.softmax(t, axes[0]), laid,
                         shape=x.shape, flops=5 * n)
      lowering.set_tensor_lowering(out, y)
      return
    keep = _keep_shape(laid, axes)

    def shifted_max(mx):
      return mx if extra is None else tf.maximum(
          mx, tf.constant(extra, mx.dtype))
    m = impl.slicewise(
        lambda t: tf.stop_gradient(tf.reduce_max(t, axes, keepdims=True)),
        laid, slice_shape=keep, flops=n)
    if mesh_axes:
      m = impl.allreduce(m, mesh_axes, "MAX")
    e = impl.slicewise(lambda t, mx: tf.exp(t - shifted_max(mx)), laid, m,
                       shape=x.shape, flops=5 * n)
    s = impl.slicewise(lambda t: tf.reduce_sum(t, axes, keepdims=True), e,
                       slice_shape=keep, flops=n)
    if mesh_axes:
      s = impl.allreduce(s, mesh_axes, "SUM")
    if extra is None:
      y = impl.slicewise(lambda t, z: t / z, e, s, shape=x.shape, flops=n)
    else:
      def normalise(t, z, mx):
        mx = shifted_max(mx)
        return t / (z + tf.exp(tf.constant(extra, mx.dtype) - mx))
      y = impl.slicewise(normalise, e, s, m, shape=x.shape, flops=n)
    lowering.set_tensor_lowering(out, y)

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None:
      return [None]
    # The extra logit is a constant, so dx = y * (dy - sum(dy * y)) still.
    return [SoftmaxGradOperation(self.outputs[0], dy, self.dims,
                                 name=f"{self.name}_grad").outputs[0]]


class SoftmaxGradOperation(Operation):
  """``dx = y * (dy - sum(dy * y))`` over ``dims``."""

  no_gradient_reason = "second derivatives of softmax are not built"

  def __init__(self, y, dy, dims, name=None):
    super().__init__([y, dy], name=name or "softmax_grad")
    self.dims = (dims,) if isinstance(dims, dims_lib.Dimension) else tuple(
        dims)
    self._outputs = [Tensor(self, y.shape, y.dtype)]

  @property
  def dim(self):
    """The reduced Dimension, when there is one."""
    return self.dims[0]

  def cost_params(self):
    return (self.dims,)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    y, dy = self.inputs
    axes = [y.shape.index(d.name) for d in self.dims]
    ly, ldy = lowering.laid_out(y), lowering.laid_out(dy)
    mesh_axes = _split_axes(impl, self.dims)
    n = ly.slice_size
    if not mesh_axes:
      def fused(p, d):
        return p * (d - tf.reduce_sum(p * d, axes, keepdims=True))
      dx = impl.slicewise(fused, ly, ldy, shape=y.shape, flops=4 * n)
    else:
      s = impl.slicewise(
          lambda p, d: tf.reduce_sum(p * d, axes, keepdims=True), ly, ldy,
          slice_shape=_keep_shape(ly, axes), flops=2 * n)
      s = impl.allreduce(s, mesh_axes, "SUM")
      dx = impl.slicewise(lambda p, d, z: p * (d - z), ly, ldy, s,
                          shape=y.shape, flops=2 * n)
    lowering.set_tensor_lowering(self.outputs[0], dx)


def softmax(x, reduced_dim, extra_logit=None, name=None):
  """Softmax of ``x`` over ``reduced_dim``, as one fused op each way.

  Args:
    x: a float Tensor.
    reduced_dim: a Dimension of ``x`` or its name (or a list of them); it
      may be split across the mesh.
    extra_logit: optional Python number, one more (constant) logit in every
      softmax, as in Mesh TensorFlow.  For a Tensor, use
      ``exp(log_softmax(x, reduced_dim, extra_logit))``.
    name: op name.

  Returns:
    Tensor of ``x``'s shape.

  Raises:
    UnknownNameError: if ``reduced_dim`` is not a dim of ``x``.
    MtfError: if ``extra_logit`` is a Tensor.

  Example:
    >>> p = softmax(logits, "vocab")   # doctest: +SKIP
  """
  if isinstance(extra_logit, Tensor):
    raise MtfError(
        f"softmax of {x.name}: extra_logit {extra_logit.name} is a Tensor; "
        "the fused softmax takes a Python number, so use "
        "exp(log_softmax(x, reduced_dim, extra_logit)) instead")
  reduced = [d for d in x.shape
             if d not in _output_shape(x, None, reduced_dim)]
  return SoftmaxOperation(x, reduced, extra_logit, name=name).outputs[0]
