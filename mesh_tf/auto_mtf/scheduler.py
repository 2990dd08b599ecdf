"""Mesh TensorFlow's ``auto_mtf.scheduler``: an order of a graph's
operations that keeps peak memory low.

The original's layout optimizer priced a layout by the peak of live tensors
under one such order.  mesh-tf's optimizer (:mod:`autolayout`) prices memory
with its own cost model (:mod:`costmodels.memory`: the peak of live
activations under mesh-tf's lowering, plus weights and optimizer state), so
this module serves the original's public function only: it orders the ops of
a :class:`~mesh_tf.auto_mtf.graph_interface.GraphInterface` (an mtf graph).

* ``"NAIVE"``: the graph's own order (mtf ops are recorded in a topological
  order).
* ``"LIST"``: a greedy list schedule: among the ops whose inputs are all
  computed, run the one that frees the most memory (the bytes of the inputs
  it reads last, less the bytes it allocates), ties to the earliest op.
  Only tensors marked with ``set_tensor_final`` stay live to the end; a
  tensor no op reads is otherwise freed as soon as it is made.
"""

from mesh_tf.core.errors import InvalidArgumentError

__all__ = ["minimize_peak_memory", "UnknownSchedulerError"]


class UnknownSchedulerError(InvalidArgumentError):
  """``scheduler_alg`` names no scheduler."""


def minimize_peak_memory(graph, scheduler_alg):
  """Op indices (into ``graph.get_all_operation_names()``) in an order that
  keeps peak memory low.

  Args:
    graph: a :class:`~mesh_tf.auto_mtf.graph_interface.GraphInterface`.
    scheduler_alg: ``"NAIVE"`` or ``"LIST"`` (see the module docstring).

  Returns:
    A list of op indices, every op once, each after its inputs' producers.

  Raises:
    UnknownSchedulerError: if ``scheduler_alg`` is neither.
  """
  if scheduler_alg == "NAIVE":
    return list(range(len(graph.get_all_operation_names())))
  if scheduler_alg == "LIST":
    return _list_schedule(graph)
  raise UnknownSchedulerError(
      f"scheduler_alg={scheduler_alg!r} names no scheduler; use 'NAIVE' or"
      " 'LIST'")


def _list_schedule(graph):
  names = graph.get_all_operation_names()
  inputs = [graph.get_operation_input_names(n) for n in names]
  outputs = [graph.get_operation_output_names(n) for n in names]
  producer = {t: i for i, outs in enumerate(outputs) for t in outs}
  readers_left = {t: 0 for outs in outputs for t in outs}
  for ins in inputs:
    for t in set(ins):
      readers_left[t] += 1
  kept = {t for t in readers_left if graph.marked_final(t)}
  size = {t: graph.get_tensor_size(t) for t in readers_left}
  waiting = [len({producer[t] for t in ins}) for ins in inputs]
  dependents = [set() for _ in names]
  for i, ins in enumerate(inputs):
    for t in ins:
      dependents[producer[t]].add(i)

  def freed(i):
    last = {t for t in set(inputs[i])
            if readers_left[t] == 1 and t not in kept}
    made = sum(size[t] for t in outputs[i]
               if t in kept or readers_left[t] > 0)
    return sum(size[t] for t in last) - made

  ready = {i for i, w in enumerate(waiting) if w == 0}
  order = []
  while ready:
    best = min(ready, key=lambda i: (-freed(i), i))
    ready.discard(best)
    order.append(best)
    for t in set(inputs[best]):
      readers_left[t] -= 1
    for j in dependents[best]:
      waiting[j] -= 1
      if waiting[j] == 0:
        ready.add(j)
  return order
