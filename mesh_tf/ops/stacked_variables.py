"""Stacked variables: Mesh TensorFlow's ``autostack``.

Many variables of the same shape (the weights of identical layers) can be
stored as ONE variable with a leading ``stacked`` dim, which the graph
reads by unstacking: fewer TF variables per device, fewer ops to create and
run.  :func:`rewrite_stack_variables` rewrites a graph that way, and
``Lowering(graph, mesh_to_impl, autostack=True)`` calls it before lowering.

Which variables stack (as in Mesh TF): those on the same mesh with the same
shape, dtype, trainability and memory category that the same assign ops
write (or none does), up to the combined size caps; none on a
one-processor mesh.  An assign (or a gradient-descent update) of several of
them at once becomes one of their stack, its values stacked
(:func:`~mesh_tf.ops.variables.combine_assignments` makes such updates
from an optimizer's ``apply_grads``).  Variables written by an assign
with a custom ``assign_fn`` stay apart: the stack's rows are not separate
TF variables.

Results do not change: every reader of a variable's value reads the same
Tensor, now an output of the unstack op.  What changes is the set of TF
variables, so a checkpoint written by a stacked lowering (``stacked/<first
variable's name>``) restores into a graph stacked the same way.
"""

import collections

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import slicing
from mesh_tf.ops import variables as variable_ops

__all__ = ["StackedVariable", "is_stacked", "rewrite_stack_variables"]

#: Mesh TF's default caps: elements of one stacked variable, and of one
#: processor's slice of it.
MAX_COMBINED_VARIABLE_SIZE = 2 ** 29
MAX_COMBINED_SLICE_SIZE = 2 ** 27


class _StackedInitializer(variable_ops.Initializer):
  """Each row of the stack is its variable's own initial value."""

  def __init__(self, members):
    self.members = list(members)

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    del seed
    rows = range(begin[0], begin[0] + slice_shape[0])
    return tf.stack([self.members[i].initializer(
        tuple(full_shape[1:]), tuple(begin[1:]), tuple(slice_shape[1:]),
        dtype, self.members[i].seed) for i in rows])

  def numpy(self, full_shape, dtype, seed):
    import numpy as np  # pylint: disable=g-import-not-at-top
    del seed
    return np.stack([v.initializer.numpy(tuple(full_shape[1:]), dtype, v.seed)
                     for v in self.members])


class StackedVariable(variable_ops.Variable):
  """One variable holding several same-shape variables ``vs`` as rows of a
  leading ``stacked`` dim (Mesh TF's class: ``StackedVariable(vs)``).

  Named ``stacked/<first name>``; each row starts as its variable's own
  initial value.

  Attributes:
    original_names: the names of the stacked variables, in row order.
    original_variables: the stacked Variable ops themselves.

  Raises:
    ShapeError: if ``vs`` is empty or its variables differ in mesh, shape,
      dtype or trainability.
  """

  def __init__(self, vs):
    vs = list(vs)
    if not vs:
      raise ShapeError("StackedVariable needs at least one variable")
    first = vs[0]
    for v in vs[1:]:
      if (v.mesh, v.shape, v.dtype, v.trainable) != (
          first.mesh, first.shape, first.dtype, first.trainable):
        raise ShapeError(
            f"StackedVariable: {v.name} {v.shape!r} {v.dtype} differs from "
            f"{first.name} {first.shape!r} {first.dtype} in shape, dtype, "
            "mesh or trainability; only like variables stack")
    shape = dims_lib.Shape([dims_lib.Dimension("stacked", len(vs))]
                           + list(first.shape.dims))
    super().__init__(first.mesh, f"stacked/{first.name}", shape,
                     first.dtype, _StackedInitializer(vs), first.trainable,
                     memory_category=first.memory_category)
    self.original_variables = vs
    self.original_names = [v.name for v in vs]


# The state updates a stack can take (each has ``variables``, ``written``,
# ``assign_fn`` and ``rewritten``).
_UPDATES = (variable_ops.AssignOperation,
            variable_ops.ApplyGradientDescentOperation)


def _writers(graph):
  """Variable -> names of the assign ops writing it; None if an op writes
  it in a way a stack cannot take."""
  out = collections.defaultdict(list)
  for op in graph.operations:
    if isinstance(op, _UPDATES):
      for v in op.variables:
        if out[v] is not None:
          out[v] = (None if op.assign_fn is not None
                    else out[v] + [op.name])
  return out


def is_stacked(graph):
  """Whether :func:`rewrite_stack_variables` has rewritten ``graph``."""
  return any(isinstance(op, StackedVariable) for op in graph.operations)


def rewrite_stack_variables(graph, mesh_to_impl=None,
                            max_combined_variable_size=MAX_COMBINED_VARIABLE_SIZE,
                            max_combined_slice_size=MAX_COMBINED_SLICE_SIZE):
  """Stacks like variables of ``graph`` into :class:`StackedVariable` ops,
  in place (Mesh TF's ``Graph.rewrite_stack_variables``).

  Args:
    graph: the mtf Graph.
    mesh_to_impl: optional ``{mesh: MeshImpl}``: caps each stack's slice
      size, and leaves variables of one-processor meshes alone.
    max_combined_variable_size: most elements in one stacked variable.
    max_combined_slice_size: most elements in one processor's slice of it.

  Returns:
    The list of StackedVariables made.

  Raises:
    MtfError: if the graph was stacked already.
  """
  ops = graph.operations
  if is_stacked(graph):
    raise MtfError("rewrite_stack_variables: this graph is stacked already")
  writers = _writers(graph)
  groups = collections.OrderedDict()
  for op in ops:
    if not isinstance(op, variable_ops.Variable):
      continue
    w = writers.get(op, [])
    if w is None:
      continue
    key = (op.mesh, op.shape, op.dtype, op.trainable, op.memory_category,
           tuple(w))
    groups.setdefault(key, []).append(op)
  made = []
  for members in groups.values():
    first = members[0]
    cap = max(1, max_combined_variable_size // max(first.shape.size, 1))
    impl = (mesh_to_impl or {}).get(first.mesh)
    if impl is not None:
      cap = 1 if impl.size == 1 else min(
          cap, max(1, max_combined_slice_size // max(
              impl.slice_size(first.shape), 1)))
    for i in range(0, len(members), cap):
      chunk = members[i:i + cap]
      if len(chunk) > 1:
        made.append(_stack(graph, chunk))
  if made:
    _rewrite_assigns(graph, made)
  return made


def _stack(graph, chunk):
  """Replaces the Variable ops ``chunk`` by a stack and its unstack op."""
  ops = graph.operations
  at = min(ops.index(v) for v in chunk)
  stacked = StackedVariable(chunk)
  unstack_op = slicing.UnstackOperation(stacked.outputs[0], "stacked",
                                        name=f"{stacked.name}/unstack")
  # The unstack op yields the variables' own output Tensors, so every
  # reader of a variable's value is left as it is.
  unstack_op._outputs = []  # pylint: disable=protected-access
  for i, v in enumerate(chunk):
    t = v.outputs[0]
    t.operation, t.index = unstack_op, i
    unstack_op._outputs.append(t)  # pylint: disable=protected-access
  for lst in (ops, graph.all_variables, graph.trainable_variables):
    lst[:] = [op for op in lst if op not in chunk]
  ops.remove(stacked)
  ops.remove(unstack_op)
  at = min(at, len(ops))
  ops[at:at] = [stacked, unstack_op]
  return stacked


def _rewrite_assigns(graph, made):
  """Makes each assign of stacked variables assign their stacks."""
  row = {v: (s, i) for s in made for i, v in enumerate(s.original_variables)}
  for op in list(graph.operations):
    if not isinstance(op, _UPDATES):
      continue
    if not any(v in row for v in op.variables):
      continue
    written = op.written
    new_vars, new_vals, done = [], [], set()
    for v, x in zip(op.variables, written):
      if v not in row:
        new_vars.append(v)
        new_vals.append(x)
        continue
      s = row[v][0]
      if s in done:
        continue
      done.add(s)
      values = dict(zip(op.variables, written))
      missing = [m.name for m in s.original_variables if m not in values]
      if missing:
        raise MtfError(f"rewrite_stack_variables: {op.name} writes part of "
                       f"{s.name} but not {missing}")
      stacked_value = slicing.stack([values[m] for m in s.original_variables],
                                    "stacked", 0, name=f"{op.name}/stack")
      ops = graph.operations
      ops.remove(stacked_value.operation)
      ops.insert(ops.index(op), stacked_value.operation)
      new_vars.append(s)
      new_vals.append(stacked_value)
    readers = graph._consumers  # pylint: disable=protected-access
    for x in written:
      if op in readers.get(x, []):
        readers[x].remove(op)
    for x in new_vals:
      readers.setdefault(x, []).append(op)
    op.rewritten(new_vars, new_vals)
