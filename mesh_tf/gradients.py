"""Reverse-mode autodiff on mtf graphs: ``gradients``, ``custom_gradient``
and ``recompute_grad``.

This module is the engine only.  Each op declares its own gradient next to
its lowering, as the method ``Operation.gradient(grad_ys)``: given one
gradient (or None) per output, it returns one gradient (or None) per input,
each of that input's exact shape, built from ordinary mtf ops.  Ops without
a gradient say why in ``Operation.no_gradient_reason``.

The backward pass is built as ordinary mtf ops, so it is laid out by the same
rules as the forward pass (a gradient has the dims, hence the layout, of its
tensor), is priced by the cost model, and lowers to the same collectives on
every backend.
"""

import copy

from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import variables as variable_ops
from mesh_tf.ops.base import is_float as _is_float

__all__ = ["GradientError", "custom_gradient", "gradients",
           "gradient_function", "recompute_grad", "register_gradient"]


class GradientError(MtfError):
  """An op on the path from ``xs`` to ``ys`` has no gradient, or a gradient
  function returned a wrong shape."""


def register_gradient(op_class):
  """Decorator: makes ``fn(op, grad_ys) -> grads`` the ``gradient`` method
  of ``op_class`` (and of its subclasses that do not declare their own).

  The same as defining ``gradient(self, grad_ys)`` in the class; for op
  classes defined elsewhere.

  Example:
    >>> @register_gradient(MyOperation)               # doctest: +SKIP
    ... def _my_grad(op, grad_ys):
    ...   return [grad_ys[0] * 2.0]
  """
  if not (isinstance(op_class, type) and issubclass(op_class, Operation)):
    raise MtfError(f"register_gradient expects an Operation subclass, got "
                   f"{op_class!r}")

  def decorate(fn):
    op_class.gradient = fn
    return fn
  return decorate


def gradient_function(op):
  """The gradient ``(op, grad_ys) -> grads`` that ``op``'s class declares
  (its ``gradient`` method, unbound), or None if it declares none."""
  fn = type(op).gradient
  return None if fn is Operation.gradient else fn


# --- the backward pass --------------------------------------------------------
def gradients(ys, xs, grad_ys=None, stop_gradients=(), within=None):
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
    within: the ops that can lie on a path from ``xs`` to ``ys``, in graph
      order (default: every op of the graph).  A recompute block passes
      its own copies, so its gradient does not walk the whole graph once
      per block.

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
  forward = list(graph.operations if within is None else within)

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
      why = (f" ({op.no_gradient_reason})" if op.no_gradient_reason
             else "; give its class a gradient(grad_ys) method")
      raise GradientError(
          f"operation {op.name} ({type(op).__name__}) lies between the xs and "
          f"ys of gradients() but has no gradient{why}; or cut the path "
          "with stop_gradient")
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
      r.gradient_of = x
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


def _between(graph, begin, xs):
  """The ops that can lie on a path from ``xs`` to the ops made since
  ``begin`` (a recompute block's copies and the gathers they rebuild), in
  graph order: those copies, and the older ops their inputs come from up
  to ``xs`` (e.g. the forward cast a rebuilt ZeRO-3 gather reads).  The
  block's gradient then walks these, not the whole graph once per block."""
  ops = graph.operations
  new = ops[begin:]
  new_set, stop = set(new), set(xs)
  older, seen = set(), set()
  stack = [t for op in new for t in op.inputs]
  while stack:
    t = stack.pop()
    if t in seen or (t in stop and all(o in stop
                                        for o in t.operation.outputs)):
      continue   # the walk skips an op whose outputs are all stopped
    seen.add(t)
    op = t.operation
    if op in new_set or op in older:
      continue
    older.add(op)
    stack.extend(op.inputs)
  return sorted(older, key=ops.index) + new


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
    begin = len(graph.operations)
    mapping = _clone_ops(inner, {})
    recomputed = mapping[output]
    float_ext = [t for t in external if _is_float(t)]
    within = _between(graph, begin, float_ext)
    # Partial derivatives: the outer pass carries each input's gradient on
    # to whatever made it (without the stop, a block input computed from
    # another block's output would be differentiated through all earlier
    # blocks here too: exponential work in the depth).
    grads = gradients([recomputed], float_ext, [grad_ys[0]],
                      stop_gradients=float_ext, within=within)
    by_tensor = dict(zip(float_ext, grads))
    return [by_tensor.get(t) for t in external]

  return custom_gradient(lambda *unused: output, grad_fn, external,
                         name=name or "recompute_grad")
