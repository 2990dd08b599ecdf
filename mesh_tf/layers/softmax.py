"""A fused softmax op with its gradient (used by attention).

Composed from reductions and elementwise ops, a softmax is six mtf ops
forward and seven backward; fused it is one each way:

* forward ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` over ``dim``;
* backward ``dx = y * (dy - sum(dy * y))`` over ``dim``.

``dim`` may be split across the mesh: the max and the sums are then
all-reduced over its mesh axis (MAX, then SUM).
"""

from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf


def _split_axis(impl, dim):
  a = impl.tensor_dimension_to_mesh_axis(dim)
  return a if a is not None and impl.shape[a].size > 1 else None


def _keep_shape(laid, axis):
  shape = list(laid.slice_shape)
  shape[axis] = 1
  return shape


class SoftmaxOperation(Operation):
  """Softmax of ``x`` over ``dim``."""

  def __init__(self, x, dim, name=None):
    super().__init__([x], name=name or "softmax")
    if dim.name not in x.shape:
      raise ShapeError(f"{self.name}: {dim} is not a dim of {x.name} "
                       f"{x.shape!r}")
    self.dim = x.shape.get_dim_by_name(dim.name)
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    axis = x.shape.index(self.dim.name)
    laid = lowering.laid_out(x)
    mesh_axis = _split_axis(impl, self.dim)
    n = laid.slice_size
    if mesh_axis is None:
      y = impl.slicewise(lambda t: tf.nn.softmax(t, axis), laid,
                         shape=x.shape, flops=5 * n)
    else:
      keep = _keep_shape(laid, axis)
      m = impl.slicewise(
          lambda t: tf.stop_gradient(tf.reduce_max(t, axis, keepdims=True)),
          laid, slice_shape=keep, flops=n)
      m = impl.allreduce(m, [mesh_axis], "MAX")
      e = impl.slicewise(lambda t, mx: tf.exp(t - mx), laid, m,
                         shape=x.shape, flops=5 * n)
      s = impl.slicewise(lambda t: tf.reduce_sum(t, axis, keepdims=True), e,
                         slice_shape=keep, flops=n)
      s = impl.allreduce(s, [mesh_axis], "SUM")
      y = impl.slicewise(lambda t, z: t / z, e, s, shape=x.shape, flops=n)
    lowering.set_tensor_lowering(out, y)

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None:
      return [None]
    return [SoftmaxGradOperation(self.outputs[0], dy, self.dim,
                                 name=f"{self.name}_grad").outputs[0]]


class SoftmaxGradOperation(Operation):
  """``dx = y * (dy - sum(dy * y))`` over ``dim``."""

  def __init__(self, y, dy, dim, name=None):
    super().__init__([y, dy], name=name or "softmax_grad")
    self.dim = dim
    self._outputs = [Tensor(self, y.shape, y.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    y, dy = self.inputs
    axis = y.shape.index(self.dim.name)
    ly, ldy = lowering.laid_out(y), lowering.laid_out(dy)
    mesh_axis = _split_axis(impl, self.dim)
    n = ly.slice_size
    if mesh_axis is None:
      def fused(p, d):
        return p * (d - tf.reduce_sum(p * d, axis, keepdims=True))
      dx = impl.slicewise(fused, ly, ldy, shape=y.shape, flops=4 * n)
    else:
      s = impl.slicewise(
          lambda p, d: tf.reduce_sum(p * d, axis, keepdims=True), ly, ldy,
          slice_shape=_keep_shape(ly, axis), flops=2 * n)
      s = impl.allreduce(s, [mesh_axis], "SUM")
      dx = impl.slicewise(lambda p, d, z: p * (d - z), ly, ldy, s,
                          shape=y.shape, flops=2 * n)
    lowering.set_tensor_lowering(self.outputs[0], dx)


def softmax(x, reduced_dim, name=None):
  """Softmax of ``x`` over ``reduced_dim`` as one fused op (with gradient).

  Args:
    x: a float Tensor.
    reduced_dim: a Dimension of ``x`` or its name; may be split.

  Returns:
    Tensor of ``x``'s shape.
  """
  if isinstance(reduced_dim, str):
    if reduced_dim not in x.shape:
      raise ShapeError(f"softmax: {x.name} {x.shape!r} has no dim "
                       f"{reduced_dim!r}")
    reduced_dim = x.shape.get_dim_by_name(reduced_dim)
  return SoftmaxOperation(x, reduced_dim, name=name).outputs[0]
