"""Control ops: stop_gradient and depend."""

from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops.base import GenericOperation


class StopGradientOperation(GenericOperation):
  """Identity whose gradient is zero."""

  def __init__(self, x, name=None):
    super().__init__(lambda t: tf.stop_gradient(t), [x], x.shape, x.dtype,
                     name=name or "stop_gradient", flops_per_element=0)

  def gradient(self, grad_ys):
    del grad_ys
    return [None]


def stop_gradient(x, name=None):
  return StopGradientOperation(x, name=name).outputs[0]


class DependOperation(Operation):
  """``x``, available only after ``dependencies`` (ops or tensors) ran."""

  def __init__(self, x, dependencies, name=None):
    deps = list(dependencies)
    tensors = [d for d in deps if isinstance(d, Tensor)]
    super().__init__([x] + tensors, name=name or "depend")
    self.dependency_ops = [d for d in deps if isinstance(d, Operation)]
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def cost_params(self):
    return tuple((type(op).__name__,
                  tuple((t.shape, t.dtype) for t in op.outputs))
                 for op in self.dependency_ops)

  def gradient(self, grad_ys):
    """``x``'s gradient passes through; the dependencies get none."""
    return [grad_ys[0]] + [None] * (len(self.inputs) - 1)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    laid = [lowering.laid_out(t) for t in self.inputs]
    extra = []
    for op in self.dependency_ops:
      lowered = lowering.lowered_operation(op)
      if lowered:
        extra.extend(lowered)

    def fn(p, x, *deps):
      with tf.control_dependencies(list(deps) + extra):
        return tf.identity(x)
    lowering.set_tensor_lowering(self.outputs[0], impl.slicewise_pnum(
        fn, *laid, shape=self.outputs[0].shape, flops=0))


def depend(x, dependencies, name=None):
  return DependOperation(x, dependencies, name=name).outputs[0]
