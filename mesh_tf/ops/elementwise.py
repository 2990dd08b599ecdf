"""Elementwise ops: unary maps and binary ops that broadcast by dim name.

Elementwise ops split every dim, need no communication, and cost one FLOP
per output element (a few for transcendental functions, as rooflines count).

Gradients are fused (see :mod:`mesh_tf.ops.base`): one op per input, using
TF's own gradient kernels where TF has one, so the numbers equal
``tf.GradientTape``'s.  Products and sums are einsums over named dims: one TF
kernel each, which broadcasts, sums out and transposes at once.
"""

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.laid_out import PendingFinish
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops.base import (GenericOperation, broadcast_shapes,
                              elementwise_grad, is_float)

# kind -> (kernel(g, x[, y]), uses_output): the derivative of a unary op.
_UNARY_GRADS = {
    "abs": (lambda g, x: g * tf.sign(x), False),
    "square": (lambda g, x: g * (2.0 * x), False),
    "sqrt": (lambda g, x, y: tf.raw_ops.SqrtGrad(y=y, dy=g), True),
    "rsqrt": (lambda g, x, y: tf.raw_ops.RsqrtGrad(y=y, dy=g), True),
    "reciprocal": (lambda g, x, y: tf.raw_ops.ReciprocalGrad(y=y, dy=g), True),
    "exp": (lambda g, x, y: g * y, True),
    "log": (lambda g, x: g * tf.math.reciprocal(x), False),
    "sin": (lambda g, x: g * tf.cos(x), False),
    "cos": (lambda g, x: g * -tf.sin(x), False),
    "tanh": (lambda g, x, y: tf.raw_ops.TanhGrad(y=y, dy=g), True),
    "sigmoid": (lambda g, x, y: tf.raw_ops.SigmoidGrad(y=y, dy=g), True),
    "relu": (lambda g, x, y: tf.raw_ops.ReluGrad(gradients=g, features=y),
             True),
    "elu": (lambda g, x, y: tf.raw_ops.EluGrad(gradients=g, outputs=y), True),
    "selu": (lambda g, x, y: tf.raw_ops.SeluGrad(gradients=g, outputs=y),
             True),
    "softplus": (lambda g, x: tf.raw_ops.SoftplusGrad(gradients=g,
                                                      features=x), False),
}
# Piecewise-constant or boolean ops: their gradient is zero (None).
_NONDIFFERENTIABLE = frozenset((
    "sign", "logical_not", "floordiv", "less", "less_equal", "greater",
    "greater_equal", "equal", "not_equal", "logical_and", "logical_or"))


def _lowered_on(op, lowering, partials):
  """The output of ``op`` lowered as usual (the same kernels, fusion and
  records) on the per-device partial sums ``partials`` (input -> the
  LaidOutTensor of a pending sum) instead of its pending inputs, which
  stay as they were: a deferred sum's op on its partial sums."""
  kept = {t: lowering.tensors[t] for t in partials}
  lowering.tensors.update(partials)
  try:
    GenericOperation.lower(op, lowering)
  finally:
    lowering.tensors.update(kept)
  return lowering.tensors[op.outputs[0]]


class UnaryOperation(GenericOperation):
  """``y = fn(x)`` elementwise; ``kind`` names the function for gradients."""

  def __init__(self, kind, fn, x, output_dtype=None, name=None, flops=1,
               **params):
    if not isinstance(x, Tensor):
      raise ShapeError(f"{name or kind} expects an mtf Tensor, got {x!r}")
    self.kind = kind
    self.params = params
    # A widening cast of a gradient in a step that accumulates gradients
    # itself (a pipeline; set by its program): a pending sum stays pending,
    # its partial sums widened, and is reduced in the narrow dtype when
    # forced, so the accumulated gradient all-reduces once per step.
    self.defer_sum = False
    super().__init__(fn, [x], x.shape, output_dtype or x.dtype,
                     name=name or kind, flops_per_element=flops)

  def cost_params(self):
    return super().cost_params() + (
        self.kind, tuple(sorted(self.params.items())), self.defer_sum)

  def lower(self, lowering):
    x, out = self.inputs[0], self.outputs[0]
    value = lowering.tensors.get(x)
    if not (self.defer_sum and self.kind == "cast"
            and isinstance(value, LazyAllreduceSum) and value.pending
            and is_float(x) and is_float(out)
            and dtypes_lib.size_of(out.dtype) > dtypes_lib.size_of(x.dtype)):
      super().lower(lowering)
      return
    impl = lowering.mesh_impl(self)

    def to(dtype):
      return lambda laid: impl.slicewise(
          lambda t: tf.cast(t, dtype), laid, slice_shape=laid.slice_shape,
          dtype=dtype)
    if value.laid_out_input.slice_shape == impl.slice_shape(out):
      partial = _lowered_on(self, lowering, {x: value.laid_out_input})
    else:   # partial sums in another layout (of a deferred ZeRO-1 scatter)
      partial = to(out.dtype)(value.laid_out_input)
    key = ("cast", str(x.dtype), str(out.dtype))
    finish = (PendingFinish(key, to(x.dtype), to(out.dtype))
              if value.then is None
              else value.then.then(key, to(x.dtype), to(out.dtype)))
    lowering.set_tensor_lowering(out, LazyAllreduceSum(
        impl, partial, value.mesh_axes, value.source_op, finish))

  def gradient(self, grad_ys):
    g = grad_ys[0]
    kind, x = self.kind, self.inputs[0]
    if g is None or kind in _NONDIFFERENTIABLE or not is_float(x):
      return [None]
    if kind == "identity":
      return [g]
    if kind == "negative":
      return [negative(g)]
    if kind == "cast":
      return [cast(g, x.dtype) if is_float(g) else None]
    if kind == "leaky_relu":
      alpha = self.params["alpha"]
      return [elementwise_grad(self, g, 0, lambda gg, xx: tf.raw_ops.
                               LeakyReluGrad(gradients=gg, features=xx,
                                             alpha=alpha))]
    if kind in _UNARY_GRADS:
      kernel, uses_output = _UNARY_GRADS[kind]
      return [elementwise_grad(self, g, 0, kernel, uses_output)]
    return [elementwise_grad(self, g, 0, flops=8)]


def _unary(kind, tf_fn, flops=1, out_dtype=None):
  def op(x, name=None):
    return UnaryOperation(kind, tf_fn, x, output_dtype=out_dtype, name=name,
                          flops=flops).outputs[0]
  op.__name__ = kind
  op.__doc__ = f"Elementwise ``{kind}`` of an mtf Tensor."
  return op


identity = _unary("identity", lambda x: tf.identity(x), flops=0)
negative = _unary("negative", lambda x: tf.negative(x))
abs = _unary("abs", lambda x: tf.abs(x))  # pylint: disable=redefined-builtin
sign = _unary("sign", lambda x: tf.sign(x))
square = _unary("square", lambda x: tf.square(x))
sqrt = _unary("sqrt", lambda x: tf.sqrt(x), flops=4)
rsqrt = _unary("rsqrt", lambda x: tf.math.rsqrt(x), flops=4)
reciprocal = _unary("reciprocal", lambda x: tf.math.reciprocal(x), flops=4)
exp = _unary("exp", lambda x: tf.exp(x), flops=4)
log = _unary("log", lambda x: tf.math.log(x), flops=4)
sin = _unary("sin", lambda x: tf.sin(x), flops=4)
cos = _unary("cos", lambda x: tf.cos(x), flops=4)
tanh = _unary("tanh", lambda x: tf.tanh(x), flops=4)
sigmoid = _unary("sigmoid", lambda x: tf.sigmoid(x), flops=4)
relu = _unary("relu", lambda x: tf.nn.relu(x))
elu = _unary("elu", lambda x: tf.nn.elu(x), flops=4)
selu = _unary("selu", lambda x: tf.nn.selu(x), flops=4)
softplus = _unary("softplus", lambda x: tf.nn.softplus(x), flops=8)
swish = _unary("swish", lambda x: x * tf.sigmoid(x), flops=5)
logical_not = _unary("logical_not", lambda x: tf.logical_not(x))


def gelu(x, name=None):
  """Gaussian error linear unit (tanh approximation, as in GPT-2/BERT)."""
  return UnaryOperation(
      "gelu", lambda t: tf.nn.gelu(t, approximate=True), x, name=name,
      flops=8).outputs[0]


def leaky_relu(x, alpha=0.2, name=None):
  return UnaryOperation("leaky_relu",
                        lambda t: tf.nn.leaky_relu(t, alpha=alpha), x,
                        name=name, alpha=alpha).outputs[0]


def cast(x, dtype, name=None):
  dtype = dtypes_lib.as_dtype(dtype)
  if dtype == x.dtype:
    return x
  return UnaryOperation("cast", lambda t: tf.cast(t, dtype), x,
                        output_dtype=dtype, name=name or "cast").outputs[0]


def to_float(x, name=None):
  return cast(x, "float32", name=name)


def to_int32(x, name=None):
  return cast(x, "int32", name=name)


def to_bfloat16(x, name=None):
  return cast(x, "bfloat16", name=name)


class BinaryOperation(GenericOperation):
  """``fn(x, y)`` broadcast by dim name; scalars are folded into ``fn``."""

  def __init__(self, kind, fn, x, y, output_dtype=None, name=None, flops=1):
    self.kind = kind
    inputs = [t for t in (x, y) if isinstance(t, Tensor)]
    shape = broadcast_shapes(*[t.shape for t in inputs])
    if isinstance(x, Tensor) and isinstance(y, Tensor):
      kernel = fn
    elif isinstance(x, Tensor):
      kernel = lambda a: fn(a, tf.constant(y, a.dtype))
    else:
      kernel = lambda b: fn(tf.constant(x, b.dtype), b)
    self.scalar = None if len(inputs) == 2 else (y if inputs[0] is x else x)
    self.scalar_first = not isinstance(x, Tensor)  # for host evaluation
    super().__init__(kernel, inputs, shape, output_dtype or inputs[0].dtype,
                     name=name or kind, flops_per_element=flops)

  def lower(self, lowering):
    # A sum of pending SUM all-reduces over the same axes (and finish)
    # stays pending.
    if (self.kind in ("add", "subtract") and len(self.inputs) == 2
        and self.inputs[0].shape == self.inputs[1].shape):
      a, b = (lowering.tensors[t] for t in self.inputs)
      if (isinstance(a, LazyAllreduceSum) and isinstance(b, LazyAllreduceSum)
          and a.mesh_axes == b.mesh_axes and a.then_key == b.then_key):
        impl = lowering.mesh_impl(self)
        fn = ((lambda u, v: tf.add(u, v)) if self.kind == "add"
              else (lambda u, v: tf.subtract(u, v)))
        if a.then is None or (a.laid_out_input.slice_shape
                              != impl.slice_shape(self.outputs[0])):
          partial = impl.slicewise(fn, a.laid_out_input, b.laid_out_input,
                                   shape=self.outputs[0].shape)
        else:
          partial = _lowered_on(self, lowering, dict(zip(
              self.inputs, (a.laid_out_input, b.laid_out_input))))
        # Sums that finish alike (deferred casts of a gradient's parts,
        # see mesh_tf.training.microbatch.defer_sums) finish once, summed.
        lowering.set_tensor_lowering(
            self.outputs[0], LazyAllreduceSum(impl, partial, a.mesh_axes,
                                              then=a.then))
        return
    super().lower(lowering)

  def cost_params(self):
    return super().cost_params() + (self.kind, self.scalar)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    kind = self.kind
    if g is None or kind in _NONDIFFERENTIABLE:
      return [None] * len(self.inputs)
    if len(self.inputs) == 1:  # the other operand is a Python scalar
      if kind == "add":
        return [g]
      if kind == "multiply":
        return [multiply(g, self.scalar)]
      return [elementwise_grad(self, g, 0, flops=4)]
    x, y = self.inputs
    sum_to = einsum_ops.sum_to
    if kind == "add":
      return [sum_to(g, x.shape), sum_to(g, y.shape)]
    if kind == "subtract":
      return [sum_to(g, x.shape), negative(sum_to(g, y.shape))]
    if kind == "multiply":
      return [self._product(g, y, x, 0), self._product(g, x, y, 1)]
    if kind == "divide":
      # d(x/y)/dy = -(x/y)/y: sum g*z over y's broadcast dims first.
      z = self.outputs[0]
      return [sum_to(divide(g, y), x.shape),
              negative(divide(einsum_ops.einsum(
                  [g, z], output_shape=y.shape, name=f"{self.name}_grad1"),
                  y))]
    if kind in ("maximum", "minimum"):
      gx, gy = _max_mask(kind == "maximum")
      return [elementwise_grad(self, g, 0, gx),
              elementwise_grad(self, g, 1, gy)]
    return [elementwise_grad(self, g, i, flops=8) for i in range(2)]

  def _product(self, g, other, x, index):
    if not is_float(x):
      return None
    return einsum_ops.einsum([g, other], output_shape=x.shape,
                             name=f"{self.name}_grad{index}")


def _max_mask(greater):
  """Kernels for maximum/minimum: ties send the gradient to x, as in TF."""
  # A lambda, not ``tf.greater_equal``: graph building must not load TF.
  cmp = ((lambda a, b: tf.greater_equal(a, b)) if greater
         else (lambda a, b: tf.less_equal(a, b)))

  def gx(g, x, y):
    return tf.where(cmp(x, y), g, tf.zeros_like(g))

  def gy(g, x, y):
    return tf.where(cmp(x, y), tf.zeros_like(g), g)
  return gx, gy


def _binary(kind, tf_fn, bool_out=False, flops=1):
  def op(x1, x2, output_shape=None, name=None):
    if not isinstance(x1, Tensor) and not isinstance(x2, Tensor):
      raise ShapeError(f"{kind} needs at least one mtf Tensor, got "
                       f"{x1!r} and {x2!r}")
    out = BinaryOperation(kind, tf_fn, x1, x2,
                          output_dtype="bool" if bool_out else None,
                          name=name, flops=flops).outputs[0]
    if output_shape is not None:
      out = einsum_ops.broadcast(out, output_shape)
    return out
  op.__name__ = kind
  op.__doc__ = f"Elementwise ``{kind}``, broadcasting by dim name."
  return op


add = _binary("add", lambda a, b: tf.add(a, b))
subtract = _binary("subtract", lambda a, b: tf.subtract(a, b))
multiply = _binary("multiply", lambda a, b: tf.multiply(a, b))
divide = _binary("divide", lambda a, b: tf.divide(a, b))
floordiv = _binary("floordiv", lambda a, b: tf.math.floordiv(a, b))
mod = _binary("mod", lambda a, b: tf.math.floormod(a, b))
minimum = _binary("minimum", lambda a, b: tf.minimum(a, b))
maximum = _binary("maximum", lambda a, b: tf.maximum(a, b))
pow = _binary("pow", lambda a, b: tf.pow(a, b), flops=8)  # pylint: disable=redefined-builtin
less = _binary("less", lambda a, b: tf.less(a, b), bool_out=True)
less_equal = _binary("less_equal", lambda a, b: tf.less_equal(a, b),
                     bool_out=True)
greater = _binary("greater", lambda a, b: tf.greater(a, b), bool_out=True)
greater_equal = _binary("greater_equal", lambda a, b: tf.greater_equal(a, b),
                        bool_out=True)
equal = _binary("equal", lambda a, b: tf.equal(a, b), bool_out=True)
not_equal = _binary("not_equal", lambda a, b: tf.not_equal(a, b),
                    bool_out=True)
logical_and = _binary("logical_and", lambda a, b: tf.logical_and(a, b),
                      bool_out=True)
logical_or = _binary("logical_or", lambda a, b: tf.logical_or(a, b),
                     bool_out=True)


def add_n(xs, name=None):
  """Sum of a list of tensors, broadcasting by dim name."""
  xs = list(xs)
  if not xs:
    raise ShapeError("add_n needs at least one tensor")
  out = xs[0]
  for x in xs[1:]:
    out = add(out, x, name=name)
  return out


class WhereOperation(GenericOperation):
  """``x`` where ``condition`` holds, else ``y``, broadcast by dim name."""

  def __init__(self, condition, x, y, name=None):
    shape = broadcast_shapes(condition.shape, x.shape, y.shape)
    super().__init__(lambda c, a, b: tf.where(c, a, b), [condition, x, y],
                     shape, x.dtype, name=name or "where")

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None, None, None]
    return [None,
            elementwise_grad(self, g, 1, lambda gg, c, a, b: tf.where(
                c, gg, tf.zeros_like(gg)), flops=1),
            elementwise_grad(self, g, 2, lambda gg, c, a, b: tf.where(
                c, tf.zeros_like(gg), gg), flops=1)]


def where(condition, x, y, output_shape=None, name=None):
  """Elementwise select: ``x`` where ``condition`` is true, else ``y``."""
  mesh = condition.mesh
  from mesh_tf.ops.creation import constant
  if not isinstance(x, Tensor):
    x = constant(mesh, x, dtype=y.dtype if isinstance(y, Tensor)
                 else "float32")
  if not isinstance(y, Tensor):
    y = constant(mesh, y, dtype=x.dtype)
  out = WhereOperation(condition, x, y, name=name).outputs[0]
  if output_shape is not None:
    out = einsum_ops.broadcast(out, output_shape)
  return out

