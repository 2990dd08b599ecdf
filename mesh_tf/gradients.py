"""Reverse-mode autodiff on mtf graphs: ``gradients``, ``custom_gradient``,
``recompute_grad`` and the gradient registry.

The backward pass is built as ordinary mtf ops, so it is laid out by the same
rules as the forward pass (a gradient has the dims, hence the layout, of its
tensor), is priced by the cost model, and lowers to the same collectives on
every backend.

How an op's gradient is found, most specific class first along the op's MRO:
  1. a function registered for that class with :func:`register_gradient`;
  2. the class's own ``gradient(grad_ys)`` method, if it overrides
     ``Operation.gradient``.
A gradient function takes ``(op, grad_ys)`` (one gradient or None per output)
and returns one gradient or None per input, each of that input's exact shape.

Elementwise gradients are fused: the gradient of each input of an elementwise
op is ONE mtf op whose slice kernel computes the derivative (with TF's own
gradient kernels where TF has one, else by differentiating the op's slice
kernel with ``tf.GradientTape``), sums locally over broadcast dims, and
leaves a lazy SUM all-reduce when a broadcast dim is split.  This keeps the
lowered step small: one TF kernel per device per gradient, where a naive
composition would emit three to five.
"""

import copy
import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops import control as control_ops
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import variables as variable_ops
from mesh_tf.ops.base import GenericOperation, align_slice

__all__ = ["GradientError", "custom_gradient", "gradients",
           "gradient_function", "recompute_grad", "register_gradient"]


class GradientError(MtfError):
  """An op on the path from ``xs`` to ``ys`` has no gradient, or a gradient
  function returned a wrong shape."""


_REGISTRY = {}


def register_gradient(op_class):
  """Decorator: registers ``fn(op, grad_ys) -> grads`` for ``op_class``.

  Example:
    >>> @register_gradient(MyOperation)               # doctest: +SKIP
    ... def _my_grad(op, grad_ys):
    ...   return [grad_ys[0] * 2.0]
  """
  if not (isinstance(op_class, type) and issubclass(op_class, Operation)):
    raise MtfError(f"register_gradient expects an Operation subclass, got "
                   f"{op_class!r}")

  def decorate(fn):
    _REGISTRY[op_class] = fn
    return fn
  return decorate


def gradient_function(op):
  """The gradient function ``(op, grad_ys) -> grads`` of ``op``, or None."""
  for cls in type(op).__mro__:
    if cls is Operation:
      break
    fn = _REGISTRY.get(cls)
    if fn is not None:
      return fn
    if "gradient" in cls.__dict__:
      return lambda o, grad_ys: o.gradient(grad_ys)
  return None


def _is_float(t):
  return dtypes_lib.is_floating(t.dtype)


# --- the backward pass --------------------------------------------------------
def gradients(ys, xs, grad_ys=None, stop_gradients=()):
  """Gradients of ``sum(ys)`` with respect to each of ``xs``.

  Walks the ops that lie between ``xs`` and ``ys`` in reverse graph order,
  summing the contributions of every path.  Ops made for gradients that no
  result needs (e.g. the gradient of an input that does not depend on
  ``xs``) are removed from the graph again, so they cost nothing at lowering.

  Args:
    ys: an mtf Tensor or list of them.
    xs: list of mtf Tensors (e.g. ``[v.outputs[0] for v in
      graph.trainable_variables]``).
    grad_ys: optional list of initial gradients, one per y (default: ones).
    stop_gradients: tensors not differentiated through (as in TF): their
      gradients are summed but not passed on to the ops that made them, so
      for ``xs`` among them the results are partial derivatives.

  Returns:
    A list with, for each x, its gradient (same shape) or None when no y
    depends on it.

  Raises:
    GradientError: if an op on a path from ``xs`` to ``ys`` has no gradient.

  Example:
    >>> [dw] = gradients([loss], [w])                  # doctest: +SKIP
  """
  if isinstance(ys, Tensor):
    ys = [ys]
  ys, xs = list(ys), list(xs)
  xs = [x.outputs[0] if isinstance(x, Operation) else x for x in xs]
  if not ys:
    raise MtfError("gradients needs at least one y")
  graph = ys[0].graph
  if grad_ys is None:
    grad_ys = [None] * len(ys)
  grad_ys = list(grad_ys)
  if len(grad_ys) != len(ys):
    raise MtfError(f"gradients got {len(ys)} ys but {len(grad_ys)} grad_ys")
  start = len(graph.operations)
  forward = list(graph.operations)

  downstream = set(xs)
  for op in forward:
    if any(t in downstream for t in op.inputs):
      downstream.update(op.outputs)

  pending = {}
  rebuilt = {}  # forward tensor -> its copy rebuilt for backward uses
  for y, gy in zip(ys, grad_ys):
    if gy is None:
      gy = creation_ops.ones_like(y)
    _check_grad(y, gy, "grad_ys")
    pending.setdefault(y, []).append(gy)

  stop = set(stop_gradients)
  for op in reversed(forward):
    if not any(t in pending for t in op.outputs):
      continue
    if stop and all(t in stop for t in op.outputs):
      continue
    if not any(t in downstream and _is_float(t) for t in op.inputs):
      continue
    out_grads = [_sum_grads(pending.get(t)) for t in op.outputs]
    for t, g in zip(op.outputs, out_grads):
      if g is not None:
        pending[t] = [g]
    fn = gradient_function(op)
    if fn is None:
      raise GradientError(
          f"operation {op.name} ({type(op).__name__}) lies between the xs and "
          f"ys of gradients() but has no gradient; register one with "
          f"mesh_tf.gradients.register_gradient({type(op).__name__}) or cut "
          "the path with stop_gradient")
    in_grads = list(fn(_for_backward(op, rebuilt), out_grads))
    if len(in_grads) != len(op.inputs):
      raise GradientError(
          f"the gradient function of {op.name} ({type(op).__name__}) "
          f"returned {len(in_grads)} gradients for {len(op.inputs)} inputs")
    for t, g in zip(op.inputs, in_grads):
      if g is None or t not in downstream or not _is_float(t):
        continue
      _check_grad(t, g, f"gradient of {op.name} ({type(op).__name__})")
      pending.setdefault(t, []).append(g)

  results = [_sum_grads(pending.get(x)) for x in xs]
  _prune(graph, start, [r for r in results if r is not None])
  for x, r in zip(xs, results):
    if r is not None and isinstance(x.operation, variable_ops.Variable):
      graph.gradient_tensors[r] = x
  return results


def _for_backward(op, rebuilt):
  """``op``, or a detached copy of it reading rebuilt inputs: an input made
  by an op with ``recompute_in_backward`` (a ZeRO-3 gather of a sharded
  weight) is rebuilt once, next to its first backward use, so the forward
  copy need not stay alive until then.  The copy only serves the gradient
  function; gradients still flow to the original inputs."""
  if not any(getattr(t.operation, "recompute_in_backward", False)
             for t in op.inputs):
    return op
  inputs = []
  for t in op.inputs:
    if getattr(t.operation, "recompute_in_backward", False):
      if t not in rebuilt:
        rebuilt[t] = t.operation.rebuild()
      t = rebuilt[t]
    inputs.append(t)
  clone = copy.copy(op)
  clone._inputs = inputs  # pylint: disable=protected-access
  return clone


def _check_grad(t, g, what):
  if not isinstance(g, Tensor):
    raise GradientError(f"{what}: gradient of {t.name} is {g!r}, not an mtf "
                        "Tensor")
  if g.shape != t.shape:
    raise GradientError(f"{what}: gradient of {t.name} {t.shape!r} has shape "
                        f"{g.shape!r}; a gradient has its tensor's dims in "
                        "the same order")


def _sum_grads(gs):
  if not gs:
    return None
  out = gs[0]
  for g in gs[1:]:
    out = ew.add(out, g)
  return out


def _prune(graph, start, keep):
  """Removes ops made since ``start`` that no tensor in ``keep`` needs."""
  new_ops = graph.operations[start:]
  if not new_ops:
    return
  new_set = set(new_ops)
  needed = set()
  stack = [t.operation for t in keep]
  while stack:
    op = stack.pop()
    if op in needed or op not in new_set:
      continue
    needed.add(op)
    stack.extend(t.operation for t in op.inputs)
    stack.extend(getattr(op, "dependency_ops", ()))
  graph.operations[start:] = [op for op in new_ops
                              if op in needed or isinstance(
                                  op, variable_ops.Variable)]


# --- helpers that build gradient ops ----------------------------------------
def broadcast_to(x, shape):
  """``x`` broadcast (and transposed) to ``shape``; a no-op if equal."""
  from mesh_tf.ops import reshape as reshape_ops
  return reshape_ops.broadcast(x, dims_lib.convert_to_shape(shape),
                               name=f"{x.operation.name}_broadcast")


def sum_to(g, shape):
  """Sums ``g`` over its dims not in ``shape`` and orders it like ``shape``.

  A one-operand einsum: one TF kernel per processor, and a lazy SUM
  all-reduce when a summed dim is split.
  """
  shape = dims_lib.convert_to_shape(shape)
  if g.shape == shape:
    return g
  return einsum_ops.einsum([g], output_shape=shape,
                           name=f"{g.operation.name}_sum")


class ElementwiseGradOperation(Operation):
  """The gradient of one input of an elementwise op, as one fused op.

  ``kernel(g, *xs, y)`` gets the output gradient, the op's inputs and its
  output, each slice aligned (transposed, size-1 dims inserted) to the output
  shape, and returns the gradient with respect to input ``index``, either of
  the output's slice shape or already summed to the aligned input's shape.
  The lowering sums over the input's broadcast dims locally, orders the
  result like the input, and leaves a lazy SUM all-reduce over the mesh axes
  of split broadcast dims.
  """

  def __init__(self, op, grad_y, index, kernel, uses_output=False,
               flops_per_element=2):
    inputs = [grad_y] + list(op.inputs)
    if uses_output:
      inputs.append(op.outputs[0])
    super().__init__(inputs, name=f"{op.name}_grad{index}")
    self.forward_name = op.name
    self.index = index
    self.kernel = kernel
    self.uses_output = uses_output
    self.flops_per_element = flops_per_element
    self.n_forward_inputs = len(op.inputs)
    x = op.inputs[index]
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    g = self.inputs[0]
    xs = self.inputs[1:1 + self.n_forward_inputs]
    x = xs[self.index]
    out = self.outputs[0]
    full = g.shape  # the forward output's shape
    sources = self.inputs[1:]
    names = full.dimension_names
    reduce_axes = [i for i, n in enumerate(names) if n not in x.shape]
    kept = [n for n in names if n in x.shape]
    perm = [kept.index(n) for n in x.shape.dimension_names]
    out_slice = impl.slice_shape(out)
    # The kernel closes over values only, so that it can be fused.
    kernel, source_shapes, out_dtype = self.kernel, [s.shape for s in
                                                      sources], out.dtype

    def fn(gs, *ts):
      aligned = [align_slice(tf, t, s, full)
                 for t, s in zip(ts, source_shapes)]
      r = kernel(gs, *aligned)
      if any(r.shape[a] != 1 for a in reduce_axes):
        r = tf.reduce_sum(r, reduce_axes)
      elif reduce_axes:  # already summed (e.g. by GradientTape): drop them
        r = tf.squeeze(r, reduce_axes)
      if perm != list(range(len(perm))):
        r = tf.transpose(r, perm)
      if r.dtype != out_dtype:
        r = tf.cast(r, out_dtype)
      return r
    laid = [lowering.laid_out(t) for t in self.inputs]
    n_out = math.prod(impl.slice_shape(g))
    y = impl.slicewise(fn, *laid, slice_shape=out_slice, dtype=out.dtype,
                       flops=n_out * self.flops_per_element)
    axes = sorted({a for d in full if d.name not in x.shape
                   for a in [impl.tensor_dimension_to_mesh_axis(d)]
                   if a is not None and impl.shape[a].size > 1})
    if axes:
      lowering.set_tensor_lowering(out, LazyAllreduceSum(impl, y, axes))
    else:
      lowering.set_tensor_lowering(out, y)


def _tape_kernel(forward_fn, index, n_inputs):
  """A kernel that differentiates ``forward_fn`` with tf.GradientTape."""
  def kernel(g, *ts):
    xs = list(ts[:n_inputs])
    with tf.GradientTape() as tape:
      tape.watch(xs[index])
      y = forward_fn(*xs)
    r = tape.gradient(y, xs[index], output_gradients=g)
    if r is None:
      r = tf.zeros_like(xs[index])
    return r
  return kernel


def _elementwise_grad(op, g, index, kernel=None, uses_output=False, flops=2):
  if g is None or not _is_float(op.inputs[index]):
    return None
  if kernel is None:
    kernel = _tape_kernel(op._fn, index, len(op.inputs))  # pylint: disable=protected-access
  return ElementwiseGradOperation(op, g, index, kernel, uses_output,
                                  flops).outputs[0]


# --- elementwise --------------------------------------------------------------
def _raw(name):
  return lambda **kw: getattr(tf.raw_ops, name)(**kw)


# kind -> (kernel(g, x, y), uses_output).  TF's own gradient kernels where TF
# has one, so the numbers equal tf.GradientTape's.
_UNARY = {
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
_NONDIFFERENTIABLE = {"sign", "logical_not", "floordiv", "less", "less_equal",
                      "greater", "greater_equal", "equal", "not_equal",
                      "logical_and", "logical_or"}


@register_gradient(ew.UnaryOperation)
def _unary_grad(op, grad_ys):
  g = grad_ys[0]
  kind = op.kind
  x = op.inputs[0]
  if g is None or kind in _NONDIFFERENTIABLE or not _is_float(x):
    return [None]
  if kind == "identity":
    return [g]
  if kind == "negative":
    return [ew.negative(g)]
  if kind == "cast":
    return [ew.cast(g, x.dtype) if _is_float(g) else None]
  if kind == "leaky_relu":
    alpha = op.params["alpha"]
    return [_elementwise_grad(op, g, 0, lambda gg, xx: tf.raw_ops.
                              LeakyReluGrad(gradients=gg, features=xx,
                                            alpha=alpha))]
  if kind in _UNARY:
    kernel, uses_output = _UNARY[kind]
    return [_elementwise_grad(op, g, 0, kernel, uses_output)]
  return [_elementwise_grad(op, g, 0, flops=8)]


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


@register_gradient(ew.BinaryOperation)
def _binary_grad(op, grad_ys):
  # Products and sums are einsums over named dims: one TF kernel each, which
  # broadcasts, sums out and transposes at once (as Mesh TF does).
  g = grad_ys[0]
  kind = op.kind
  if g is None or kind in _NONDIFFERENTIABLE:
    return [None] * len(op.inputs)
  if len(op.inputs) == 1:  # the other operand is a Python scalar
    if kind == "add":
      return [g]
    if kind == "multiply":
      return [ew.multiply(g, op.scalar)]
    return [_elementwise_grad(op, g, 0, flops=4)]
  x, y = op.inputs
  if kind == "add":
    return [sum_to(g, x.shape), sum_to(g, y.shape)]
  if kind == "subtract":
    return [sum_to(g, x.shape), ew.negative(sum_to(g, y.shape))]
  if kind == "multiply":
    return [_float_only(x, lambda: einsum_ops.einsum(
        [g, y], output_shape=x.shape, name=f"{op.name}_grad0")),
            _float_only(y, lambda: einsum_ops.einsum(
                [g, x], output_shape=y.shape, name=f"{op.name}_grad1"))]
  if kind == "divide":
    # d(x/y)/dy = -(x/y)/y: sum g*z over y's broadcast dims first.
    z = op.outputs[0]
    return [sum_to(ew.divide(g, y), x.shape),
            ew.negative(ew.divide(einsum_ops.einsum(
                [g, z], output_shape=y.shape, name=f"{op.name}_grad1"), y))]
  if kind in ("maximum", "minimum"):
    gx, gy = _max_mask(kind == "maximum")
    return [_elementwise_grad(op, g, 0, gx), _elementwise_grad(op, g, 1, gy)]
  return [_elementwise_grad(op, g, i, flops=8) for i in range(2)]


def _float_only(x, make):
  return make() if _is_float(x) else None


@register_gradient(ew.WhereOperation)
def _where_grad(op, grad_ys):
  g = grad_ys[0]
  if g is None:
    return [None, None, None]
  return [None,
          _elementwise_grad(op, g, 1, lambda gg, c, a, b: tf.where(
              c, gg, tf.zeros_like(gg)), flops=1),
          _elementwise_grad(op, g, 2, lambda gg, c, a, b: tf.where(
              c, tf.zeros_like(gg), gg), flops=1)]


@register_gradient(GenericOperation)
def _generic_grad(op, grad_ys):
  """Any other slicewise op: differentiate its kernel with GradientTape."""
  g = grad_ys[0]
  out = op.outputs[0]
  for x in op.inputs:
    if not all(d in out.shape for d in x.shape):
      raise GradientError(
          f"operation {op.name} ({type(op).__name__}) has input {x.name} "
          f"{x.shape!r} with dims its output {out.shape!r} lacks, so it is "
          "not elementwise; give it a gradient with register_gradient")
  return [_elementwise_grad(op, g, i, flops=8) if g is not None else None
          for i in range(len(op.inputs))]


@register_gradient(control_ops.StopGradientOperation)
def _stop_gradient_grad(op, grad_ys):
  del grad_ys
  return [None]


@register_gradient(control_ops.DependOperation)
def _depend_grad(op, grad_ys):
  return [grad_ys[0]] + [None] * (len(op.inputs) - 1)


# --- einsum and reductions ------------------------------------------------------
@register_gradient(einsum_ops.EinsumOperation)
def _einsum_grad(op, grad_ys):
  g = grad_ys[0]
  if g is None:
    return [None] * len(op.inputs)
  out = []
  for i, x in enumerate(op.inputs):
    if not _is_float(x):
      out.append(None)
      continue
    others = [t for j, t in enumerate(op.inputs) if j != i]
    have = set(g.shape.dimension_names)
    for t in others:
      have.update(t.shape.dimension_names)
    target = dims_lib.Shape([d for d in x.shape if d.name in have])
    if not others and g.shape == target:
      gx = g
    else:
      gx = einsum_ops.einsum([g] + others, output_shape=target,
                             name=f"{op.name}_grad{i}")
    out.append(broadcast_to(gx, x.shape))
  return out


@register_gradient(reduce_ops.ReduceOperation)
def _reduce_grad(op, grad_ys):
  g = grad_ys[0]
  x, y = op.inputs[0], op.outputs[0]
  if g is None or not _is_float(x):
    return [None]
  if op.reduction_type == "SUM":
    return [broadcast_to(g, x.shape)]
  if op.reduction_type in ("MAX", "MIN"):
    # TF splits the gradient evenly between tied extrema; so do we, counting
    # ties over the whole (possibly split) reduced dims.
    hit = ew.cast(ew.equal(x, y), x.dtype)
    count = reduce_ops.reduce_sum(hit, output_shape=y.shape)
    return [broadcast_to(ew.multiply(hit, ew.divide(g, count)), x.shape)]
  return [None]


# --- custom gradients and recomputation -----------------------------------------
class CustomGradientOperation(Operation):
  """Marks the outputs of a sub-computation whose gradient is user-given.

  Its inputs are ``forward_inputs`` followed by the sub-computation's
  outputs; its outputs alias those outputs at lowering (no TF ops).  The
  gradient flows only through ``grad_fn``, never into the sub-computation.
  """

  def __init__(self, forward_inputs, forward_outputs, grad_fn, name=None):
    super().__init__(list(forward_inputs) + list(forward_outputs),
                     mesh=forward_outputs[0].mesh,
                     name=name or "custom_gradient")
    self.forward_inputs = list(forward_inputs)
    self.forward_outputs = list(forward_outputs)
    self.grad_fn = grad_fn
    self._outputs = [Tensor(self, t.shape, t.dtype, index=i)
                     for i, t in enumerate(forward_outputs)]

  def lower(self, lowering):
    for src, out in zip(self.forward_outputs, self.outputs):
      lowering.set_tensor_lowering(out, lowering.tensors[src])

  def gradient(self, grad_ys):
    grads = list(self.grad_fn(self, grad_ys))
    if len(grads) != len(self.forward_inputs):
      raise GradientError(
          f"{self.name}: grad_fn returned {len(grads)} gradients for "
          f"{len(self.forward_inputs)} inputs")
    return grads + [None] * len(self.forward_outputs)


def custom_gradient(fn, grad_fn, inputs, name=None):
  """``fn(*inputs)``, differentiated by ``grad_fn`` instead of autodiff.

  Args:
    fn: builds the forward computation; returns a Tensor or list of them.
    grad_fn: ``grad_fn(forward_op, grad_ys)`` returns one gradient (or None)
      per input; ``forward_op.forward_inputs`` and ``forward_op.outputs``
      are the inputs and outputs.
    inputs: list of mtf Tensors.

  Returns:
    The output(s) of ``fn``, as a Tensor or list like ``fn`` returned.

  Example:
    >>> y = custom_gradient(lambda x: x * 2.0,          # doctest: +SKIP
    ...                     lambda op, dy: [dy[0] * 2.0], [x])
  """
  inputs = list(inputs)
  outputs = fn(*inputs)
  single = isinstance(outputs, Tensor)
  outputs = [outputs] if single else list(outputs)
  op = CustomGradientOperation(inputs, outputs, grad_fn, name=name)
  return op.outputs[0] if single else list(op.outputs)


def _clone_ops(ops, mapping):
  """Re-creates ``ops`` reading remapped inputs; returns the new mapping.

  Variables are not cloned: recomputation reads the same variables.
  """
  mapping = dict(mapping)
  for op in ops:
    if isinstance(op, variable_ops.Variable):
      continue
    for t in op.inputs:
      # A ZeRO-3 weight gather outside the block is rebuilt too, so the
      # recomputation does not keep the forward copy alive until backward.
      if t not in mapping and getattr(t.operation, "recompute_in_backward",
                                      False):
        mapping[t] = t.operation.rebuild()
    clone = copy.copy(op)
    clone._inputs = [mapping.get(t, t) for t in op.inputs]  # pylint: disable=protected-access
    clone._name = op.graph.unique_name(op.name + "_recompute")  # pylint: disable=protected-access
    clone._outputs = [Tensor(clone, t.shape, t.dtype, index=t.index)  # pylint: disable=protected-access
                      for t in op.outputs]
    op.graph.operations.append(clone)
    for t, c in zip(op.outputs, clone.outputs):
      mapping[t] = c
  return mapping


def recompute_grad(fn, explicit_inputs, name=None):
  """``fn(*explicit_inputs)``, recomputed during the backward pass.

  The activations inside ``fn`` need not stay alive until the backward pass:
  its gradient re-builds the forward ops of ``fn`` (reading the same
  variables) and differentiates the copies.  Variables that ``fn`` creates or
  reads get their gradients as usual.

  Args:
    fn: builds the computation from the explicit inputs; returns a Tensor.
    explicit_inputs: list of mtf Tensors.

  Returns:
    The Tensor that ``fn`` returned.
  """
  explicit_inputs = list(explicit_inputs)
  graph = explicit_inputs[0].graph
  start = len(graph.operations)
  output = fn(*explicit_inputs)
  if not isinstance(output, Tensor):
    raise MtfError("recompute_grad: fn must return one mtf Tensor")
  inner = graph.operations[start:]
  made = {t for op in inner for t in op.outputs}
  external = list(explicit_inputs)
  for op in inner:
    if isinstance(op, variable_ops.Variable):
      if op.outputs[0] not in external:
        external.append(op.outputs[0])
      continue
    for t in op.inputs:
      if t not in made and t not in external:
        external.append(t)

  def grad_fn(forward_op, grad_ys):
    mapping = _clone_ops(inner, {})
    recomputed = mapping[output]
    float_ext = [t for t in external if _is_float(t)]
    # Partial derivatives: the outer pass carries each input's gradient on
    # to whatever made it (without the stop, a block input computed from
    # another block's output would be differentiated through all earlier
    # blocks here too: exponential work in the depth).
    grads = gradients([recomputed], float_ext, [grad_ys[0]],
                      stop_gradients=float_ext)
    by_tensor = dict(zip(float_ext, grads))
    return [by_tensor.get(t) for t in external]

  return custom_gradient(lambda *unused: output, grad_fn, external,
                         name=name or "recompute_grad")


# --- index ops, order statistics, scans -----------------------------------------
def _register_index_ops():
  from mesh_tf.ops import gather as gather_ops
  from mesh_tf.ops import topk as topk_ops

  @register_gradient(gather_ops.GatherOperation)
  def _gather_grad(op, grad_ys):
    # Scatter-add dy into the gathered rows: a contraction with the one-hot
    # of the indices, laid out (and all-reduced) like any einsum.
    g = grad_ys[0]
    weights, indices = op.inputs
    if g is None or not _is_float(weights):
      return [None, None]
    hot = gather_ops.one_hot(indices, op.dim, dtype=g.dtype,
                             name=f"{op.name}_grad_one_hot")
    return [einsum_ops.einsum([hot, g], output_shape=weights.shape,
                              name=f"{op.name}_grad"), None]

  @register_gradient(topk_ops.TopKOperation)
  def _top_k_grad(op, grad_ys):
    g = grad_ys[0]  # the indices output has no gradient
    x = op.inputs[0]
    if g is None or not _is_float(x):
      return [None]
    hot = gather_ops.one_hot(op.outputs[1], op.reduced_dim, dtype=g.dtype,
                             name=f"{op.name}_grad_one_hot")
    return [einsum_ops.einsum([hot, g], output_shape=x.shape,
                              name=f"{op.name}_grad")]

  @register_gradient(topk_ops.CumsumOperation)
  def _cumsum_grad(op, grad_ys):
    # dx_i = sum_{j >= i} dy_j (inclusive) or sum_{j > i} dy_j (exclusive):
    # the total minus the opposite-exclusivity prefix sum.
    g = grad_ys[0]
    x = op.inputs[0]
    if g is None or not _is_float(x):
      return [None]
    total = reduce_ops.reduce_sum(g, output_shape=g.shape - [op.dim])
    prefix = topk_ops.cumsum(g, op.dim, exclusive=not op.exclusive)
    # -(prefix - total) keeps x's dim order, and equals total - prefix.
    return [ew.negative(ew.subtract(prefix, total))]


_register_index_ops()


# --- reshapes, slicing, shifts ------------------------------------------------------
def _zeros_for(grads, tensors):
  """Output gradients with None replaced by zeros (for ops that glue them)."""
  return [g if g is not None else creation_ops.zeros_like(t)
          for g, t in zip(grads, tensors)]


def _register_layout_ops():
  from mesh_tf.ops import reshape as reshape_ops
  from mesh_tf.ops import shift as shift_ops
  from mesh_tf.ops import slicing

  @register_gradient(reshape_ops.ReshapeOperation)
  def _reshape_grad(op, grad_ys):
    g = grad_ys[0]
    return [None if g is None else reshape_ops.reshape(
        g, op.old_shape, name=f"{op.name}_grad")]

  @register_gradient(reshape_ops.TransposeOperation)
  def _transpose_grad(op, grad_ys):
    g = grad_ys[0]
    return [None if g is None else reshape_ops.transpose(
        g, op.old_shape, name=f"{op.name}_grad")]

  @register_gradient(reshape_ops.BroadcastOperation)
  def _broadcast_grad(op, grad_ys):
    g = grad_ys[0]
    return [None if g is None else sum_to(g, op.old_shape)]

  @register_gradient(slicing.ConcatOperation)
  def _concat_grad(op, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None] * len(op.inputs)
    if len(op.inputs) == 1:
      return [g]
    return list(slicing.split(g, op.dim_name, list(op.sizes),
                              name=f"{op.name}_grad"))

  @register_gradient(slicing.SplitOperation)
  def _split_grad(op, grad_ys):
    if all(g is None for g in grad_ys):
      return [None]
    gs = _zeros_for(grad_ys, op.outputs)
    return [gs[0] if len(gs) == 1 else slicing.concat(
        gs, op.dim_name, name=f"{op.name}_grad")]

  @register_gradient(slicing.StackOperation)
  def _stack_grad(op, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None] * len(op.inputs)
    return list(slicing.unstack(g, op.outputs[0].shape[op.axis],
                                name=f"{op.name}_grad"))

  @register_gradient(slicing.UnstackOperation)
  def _unstack_grad(op, grad_ys):
    if all(g is None for g in grad_ys):
      return [None]
    return [slicing.stack(_zeros_for(grad_ys, op.outputs), op.dim_name,
                          op.axis, name=f"{op.name}_grad")]

  @register_gradient(slicing.SliceOperation)
  def _slice_grad(op, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None]
    after = op.old_size - op.begin - op.size
    if op.begin == 0 and after == 0:
      return [g]
    return [slicing.pad(g, [op.begin, after], op.dim_name,
                        name=f"{op.name}_grad")]

  @register_gradient(slicing.PadOperation)
  def _pad_grad(op, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None]
    size = op.inputs[0].shape.get_dim_by_name(op.dim_name).size
    if not any(op.paddings):
      return [g]
    return [slicing.slice(g, op.paddings[0], size, op.dim_name,
                          name=f"{op.name}_grad")]

  @register_gradient(shift_ops.ShiftOperation)
  def _shift_grad(op, grad_ys):
    g = grad_ys[0]
    return [None if g is None else shift_ops.shift(
        g, -op.offset, op.dim, op.wrap, name=f"{op.name}_grad")]


_register_layout_ops()
