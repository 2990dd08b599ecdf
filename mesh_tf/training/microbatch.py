"""Microbatching (gradient accumulation): one step as ``k`` microbatches.

The graph is built at the *microbatch* size.  :func:`microbatched_update`
adds, for each trained variable, a gradient accumulator (a non-trainable
variable of the variable's shape -- so it is sharded like the variable's
storage -- counted as ``gradients`` memory), an ``assign_add`` of each
microbatch's gradient into it, the optimizer update from the mean of the
accumulators, and their reset.  A step then runs in three phases:

* **pre** (once): what does not depend on the data and is not gathered per
  use -- variables, their compute copies, ZeRO-1/2 gathers, masks;
* **micro** (``k`` times, one microbatch each): forward, backward, ZeRO-3
  gathers (and ZeRO 2-3 reduce-scatters);
* **accumulate** (once): each gradient's sum over the microbatches,
  written to its accumulator.  A gradient whose data-parallel SUM is still
  pending accumulates as per-device partial sums (also through the
  widening cast of a bfloat16 gradient to its float32 master,
  :func:`defer_sums`), so it is all-reduced once per step, not once per
  microbatch, as a pipelined step does (see
  :class:`~mesh_tf.lowering.laid_out.PendingFinish`).  ZeRO 1 still
  all-reduces per microbatch (the layout search prices a deferred one as
  an all-reduce, not a reduce-scatter), ZeRO 2 and 3 reduce-scatter per
  microbatch by design;
* **post** (once): the optimizer update and the reset.

:class:`MicrobatchPlan` says which ops run once per step; the cost model
and the layout search multiply the price of every other op by ``k``
(``repeats``), and :class:`mesh_tf.training.TrainStep` lowers the phases in
that order, so prediction and lowering agree.  With equal microbatches and a
mean loss, the mean of the microbatch gradients is the whole batch's
gradient: the step equals the whole-batch step up to float rounding.

Example:
  >>> import mesh_tf as mtf
  >>> from mesh_tf import models
  >>> from mesh_tf.training import optimize
  >>> model = models.build_model("transformer_tiny", batch=4)
  >>> upd = microbatched_update(model.graph, model.loss,
  ...                           model.graph.trainable_variables,
  ...                           optimize.SgdOptimizer(0.1), 2)
  >>> upd.plan.microbatches, upd.plan.repeats(model.loss.operation.name)
  (2, 2)
"""

from typing import FrozenSet, NamedTuple, Tuple

from mesh_tf.core.errors import MtfError
from mesh_tf.lowering.laid_out import LazyAllreduceSum
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import variables as variable_ops
from mesh_tf.ops.elementwise import BinaryOperation, UnaryOperation
from mesh_tf.ops.storage import StorageScatterOperation

__all__ = ["MicrobatchPlan", "MicrobatchedUpdate", "accumulate_sums",
           "defer_sums", "microbatched_update"]


class MicrobatchPlan(NamedTuple):
  """``microbatches`` per step and the names of the ops that run once per
  step (all others run once per microbatch)."""
  microbatches: int = 1
  per_step: FrozenSet[str] = frozenset()

  def repeats(self, op_name):
    """How often the op ``op_name`` runs in one step."""
    if self.microbatches == 1 or op_name in self.per_step:
      return 1
    return self.microbatches


class MicrobatchedUpdate(NamedTuple):
  """What :func:`microbatched_update` built."""
  plan: MicrobatchPlan
  grads: Tuple[object, ...]
  accumulate_ops: Tuple[object, ...]
  update_ops: Tuple[object, ...]
  pre: Tuple[object, ...]     # ops, in graph order, of each phase (the
  micro: Tuple[object, ...]   # accumulate ops run between micro and post)
  post: Tuple[object, ...]


def defer_sums(grads, scatters=True):
  """Lets each weight gradient's data-parallel sum stay pending through
  its last ops -- the widening cast of a bfloat16 compute copy's gradient
  to the float32 master (of each part of a weight read twice), and with
  ``scatters`` the ZeRO-1 move onto the storage shard -- so that a step
  that accumulates the microbatches' gradients itself sums their partial
  sums and all-reduces once per step."""
  for g in grads:
    stack = [] if g is None else [g.operation]
    while stack:
      op = stack.pop()
      if isinstance(op, BinaryOperation) and op.kind == "add" and len(
          op.inputs) == 2:
        # A weight read twice (a tied embedding): the sum of its parts.
        stack.extend(t.operation for t in op.inputs)
        continue
      if (isinstance(op, UnaryOperation) and op.kind == "cast") or (
          scatters and isinstance(op, StorageScatterOperation)
          and not op.reduce_scatter):
        op.defer_sum = True
        stack.append(op.inputs[0].operation)


def accumulate_sums(impl, total, value, name):
  """``total + value`` of two lowered gradients (None: ``value``) on
  backend ``impl``: pending all-reduces of the same axes and finish stay
  pending (their partial sums added, recorded as ``name``)."""
  if isinstance(value, LazyAllreduceSum) and not value.pending:
    value = value.to_laid_out_tensor()
  if total is None:
    return value

  def add(a, b):
    with impl.recording(name):
      return impl.slicewise(lambda x, y: x + y, a, b,
                            slice_shape=a.slice_shape, dtype=a.dtype)
  if (isinstance(total, LazyAllreduceSum) and isinstance(
      value, LazyAllreduceSum) and total.mesh_axes == value.mesh_axes
      and total.then_key == value.then_key):
    return total.with_partial(add(total.laid_out_input,
                                  value.laid_out_input))
  return add(total.to_laid_out_tensor(), value.to_laid_out_tensor())


def _per_use(op):
  return getattr(op, "per_use", False)


def _phases(graph, first_post):
  """Splits ``graph.operations`` into (pre, micro, post) op tuples."""
  ops = graph.operations
  micro = set()
  for op in ops[:first_post]:
    data = (isinstance(op, creation_ops.ImportOperation) and op.value is None)
    if data or _per_use(op) or any(t.operation in micro for t in op.inputs):
      micro.add(op)
  # Ops that only micro ops need and that read micro values are micro too
  # (covered above); everything else before the update is pre.
  pre = tuple(op for op in ops[:first_post] if op not in micro)
  return pre, tuple(op for op in ops[:first_post] if op in micro), tuple(
      ops[first_post:])


def microbatched_update(graph, loss, variables, optimizer, microbatches):
  """Gradients, accumulators and the update of a ``microbatches``-way step.

  Args:
    graph: the mtf Graph, built at the microbatch size.
    loss: the scalar mean loss of one microbatch.
    variables: the variables to train.
    optimizer: an optimizer of :mod:`mesh_tf.training.optimize`.
    microbatches: ``k >= 1``; 1 builds the plain update.

  Returns:
    A :class:`MicrobatchedUpdate`.

  Raises:
    MtfError: for ``microbatches < 1``.
  """
  from mesh_tf.gradients import gradients  # pylint: disable=g-import-not-at-top
  if not isinstance(microbatches, int) or microbatches < 1:
    raise MtfError(f"microbatches={microbatches!r} must be an integer >= 1")
  variables = [variable_ops._as_variable(v) for v in variables]  # pylint: disable=protected-access
  grads = gradients([loss], [v.outputs[0] for v in variables])
  if microbatches == 1:
    first = len(graph.operations)
    updates = optimizer.apply_grads(grads, variables)
    pre, micro, post = _phases(graph, first)
    return MicrobatchedUpdate(MicrobatchPlan(1, frozenset()), tuple(grads),
                              (), tuple(updates), pre, micro, post)
  # ZeRO 1 keeps its per-microbatch all-reduce here: the layout search
  # prices a pending sum as an all-reduce, not as the reduce-scatter onto
  # the shard that a deferred ZeRO-1 gradient would end in.
  defer_sums(grads, scatters=False)
  accumulate, accs = [], []
  for v, g in zip(variables, grads):
    if g is None:
      accs.append(None)
      continue
    acc = variable_ops.get_variable(
        v.mesh, f"{v.name}/grad_accumulator", v.shape, v.dtype,
        variable_ops.zeros_initializer(), trainable=False,
        memory_category="gradients")
    accs.append(acc)
    op = variable_ops.assign_add(acc, g, name=f"{v.name}/accumulate")
    op.reduces_sums = True
    accumulate.append(op)
  first = len(graph.operations)
  scale = 1.0 / microbatches
  means = [None if a is None else a * scale for a in accs]
  updates = list(optimizer.apply_grads(means, variables))
  for a in accs:
    if a is not None:
      updates.append(variable_ops.assign(
          a, creation_ops.zeros_like(a), name=f"{a.operation.name}/reset"))
  pre, micro, post = _phases(graph, first)
  # The accumulation runs once per step, on the microbatches' sum.
  micro = tuple(op for op in micro if op not in accumulate)
  # The accumulators are variables (pre, where the assign_add finds
  # them); post reads them again, after the accumulation.
  post = tuple(a.operation for a in accs if a is not None) + post
  plan = MicrobatchPlan(microbatches, frozenset(
      op.name for op in pre + tuple(accumulate) + post))
  return MicrobatchedUpdate(plan, tuple(grads), tuple(accumulate),
                            tuple(updates), pre, micro, post)
