"""Mesh TensorFlow's reversible residual block (RevNet,
https://arxiv.org/abs/1707.04585): ``reversible_half_residual_and_swap``.

The forward pass is ``y1 = x1 + f(x2), y2 = x2``, and the outputs are
swapped for the next block.  Because ``x1 = y1 - f(y2)``, the backward pass
can rebuild each block's inputs from its outputs instead of keeping them:
each block's gradient function recomputes ``f`` on the rebuilt ``x2`` and
hands the rebuilt ``x1, x2`` to the block below through the
``*_backwards`` tensors' gradient slots.  So neither the blocks' inputs nor
the insides of ``f`` stay alive until the backward pass; only the last
block's outputs do.
"""

from mesh_tf.gradients import _clone_ops, custom_gradient, gradients
from mesh_tf.ops import creation
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import variables as var_lib
from mesh_tf.ops.base import is_float

__all__ = ["reversible_half_residual_and_swap"]


def _external_inputs(inner, x2):
  """Tensors that the ops of ``f`` read but did not make (its variables
  included), besides ``x2``."""
  made = {t for op in inner for t in op.outputs}
  external = []
  for op in inner:
    if isinstance(op, var_lib.Variable):
      external.append(op.outputs[0])
      continue
    for t in op.inputs:
      if t not in made and t is not x2 and t not in external:
        external.append(t)
  return external


def reversible_half_residual_and_swap(x1, x1_backwards, x2, x2_backwards, f,
                                      recompute_grads=True):
  """One block of a reversible network.

  All tensors have one shape and dtype.  Pass None for both ``*_backwards``
  into the first block, then each block's four outputs into the next::

    x1, x1_backwards, x2, x2_backwards = x, None, x, None
    for f in fns:
      x1, x1_backwards, x2, x2_backwards = (
          mtf.layers.reversible_half_residual_and_swap(
              x1, x1_backwards, x2, x2_backwards, f))
    y = (x1 + x2) / 2

  Args:
    x1, x2: the block's two halves.
    x1_backwards, x2_backwards: the previous block's ``*_backwards``
      outputs, or None.
    f: a function from Tensor to Tensor of the same shape (it may create
      and read variables).
    recompute_grads: rebuild the inputs in the backward pass (the memory
      saving); False gives plain autodiff of the same function.

  Returns:
    ``(y2, y2_backwards, y1, y1_backwards)`` = ``(x2, x2_backwards,
    x1 + f(x2), x1_backwards)``.
  """
  if not recompute_grads:
    return x2, x2_backwards, ew.add(x1, f(x2)), x1_backwards
  if x1_backwards is None:
    x1_backwards = creation.zeros_like(x1)
  if x2_backwards is None:
    x2_backwards = creation.zeros_like(x2)
  graph = x1.graph
  start = len(graph.operations)
  fx2 = f(x2)
  inner = graph.operations[start:]
  y1 = ew.add(x1, fx2)
  external = _external_inputs(inner, x2)

  def grad_fn(forward_op, grad_ys):
    del forward_op
    dy2, dy2_backwards, dy1, dy1_backwards = grad_ys
    # The block above rebuilt our outputs; the last block reads its own.
    x2_now = x2 if dy2_backwards is None else dy2_backwards
    y1_now = y1 if dy1_backwards is None else dy1_backwards
    fx2_again = _clone_ops(inner, {x2: x2_now})[fx2]
    x1_now = ew.subtract(y1_now, fx2_again)
    if dy1 is None:
      dy1 = creation.zeros_like(y1)
    wrt = [x2_now] + [t for t in external if is_float(t)]
    grads = gradients([fx2_again], wrt, [dy1], stop_gradients=wrt)
    dx2 = grads[0]
    if dy2 is not None:
      dx2 = dy2 if dx2 is None else ew.add(dy2, dx2)
    by_tensor = dict(zip(wrt[1:], grads[1:]))
    return [dy1, x1_now, dx2, x2_now] + [by_tensor.get(t) for t in external]

  return tuple(custom_gradient(
      lambda *unused: [x2, x2_backwards, y1, x1_backwards], grad_fn,
      [x1, x1_backwards, x2, x2_backwards] + external,
      name="reversible_half_residual"))
