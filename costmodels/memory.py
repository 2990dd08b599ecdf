"""Per-device memory under a layout: tensor bytes, a schedule, liveness, peak.

The model, which the layout optimizer reproduces exactly:

* **Schedule.** :func:`schedule` orders the graph's operations once, for
  every layout, so that memory stays low (see its docstring).
* **Liveness.** Each operation of the schedule runs at one memory step,
  except a ``while_loop`` (below).  A tensor is live from the step that
  produces it through the last step that reads it; a tensor nobody reads is
  live at its own step only.  Graph outputs stay live until the last step.
  Variables are live at every step (they are resident before the program
  starts and after it ends).
* **While loops.** A :class:`~mesh_tf.ops.while_loop.WhileLoopOperation`
  takes one step per op of its condition, then one per op of its body (in
  build order, as it lowers; a nested loop expands alike), then, with
  accumulators, one step where the new sums are made (else at least one
  step).  Those steps are one iteration: iterations reuse the same memory,
  so the body's temporaries peak once, whatever the trip count.  The
  loop's outputs are its carried tensors (the loop values, then the
  accumulators' sums): they are live through all of the loop's steps.  An
  initial value that only the loop reads becomes the first iteration's
  carried value, so it dies just before the loop; one read later (or a
  variable, or a graph output) keeps its own buffer.  Outer tensors the
  sub-graphs read stay live through the loop.  Inside, a tensor lives from
  its op's step to its last reader's; the condition's result until the
  condition ends, and what the body returns (next values, accumulator
  terms) until the iteration ends; at the accumulate step the new sums
  (:attr:`~mesh_tf.ops.while_loop.WhileLoopOperation.accumulator_sums`)
  are live too.
* **Kernel copies.** The buffers an op's kernel makes besides its output
  (an einsum's transposed operands and product, a convolution's padded
  input: :mod:`costmodels.kernel_copies`) are live at its step alone.
* **Bytes.** A tensor takes ``tensor_bytes_per_device`` on every device: its
  slice under the layout rules (the size of the slice the lowering creates).
* **Peak.** ``peak = max_i sum_{t live at i} bytes(t)``, each tensor counted
  once.  Categories: trainable variables are ``params``, and so are their
  compute copies (a cast of a variable's value: the bfloat16 copy of a
  float32 master under mixed precision); the gradients that
  ``mtf.gradients`` returned for variables are ``gradients``; non-trainable
  variables (optimizer slots, step counters) are ``optimizer``, except
  those made with another ``memory_category`` (a decoding step's key/value
  caches are ``kv_cache``); every other tensor is ``activations``.
* **Devices not in lockstep.** ``costmodels.evaluate`` prices this
  liveness as it is on a chip whose devices run in lockstep; on one whose
  devices do not (logical CPU devices), each gradient that waits for a
  sync stays live until the backward pass ends
  (:mod:`costmodels.sync_hold`), which the layout search does not model.

Example:
  >>> import mesh_tf as mtf
  >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  >>> x = mtf.zeros(mesh, "b:8,d:4")
  >>> y = mtf.exp(x)
  >>> peak_memory(g, "rows:2", "b:rows")[0]   # x and y, 4*4 floats each
  128
"""

import dataclasses
import heapq
import itertools
import math
from typing import Optional, Tuple

import numpy as np

from costmodels import kernel_copies
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import convert_to_layout_rules
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from mesh_tf.ops.variables import Variable
from mesh_tf.ops.while_loop import WhileLoopOperation

CATEGORIES = ("params", "gradients", "optimizer", "activations")
#: Categories that a breakdown lists only when the graph has such tensors.
EXTRA_CATEGORIES = ("kv_cache",)


def tensor_bytes_per_device(tensor, mesh_shape, layout_rules):
  """Bytes of ``tensor``'s slice on each device under ``layout_rules``.

  Each dim mapped to a mesh axis is divided by that axis' size.

  Raises:
    mesh_tf.LayoutError: subclasses, for a layout invalid for this tensor.
    mesh_tf.UnknownNameError: if a rule names an axis not in the mesh.

  Example:
    >>> import mesh_tf as mtf
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> w = mtf.get_variable(mesh, "w", "d_model:8,d_ff:32")
    >>> tensor_bytes_per_device(w, "model:4", "d_ff:model")
    256
  """
  return _slice_bytes(tensor, convert_to_mesh_shape(mesh_shape),
                      convert_to_layout_rules(layout_rules))


def _slice_bytes(tensor, mesh_shape, rules):
  layout = rules.tensor_layout(tensor.shape, mesh_shape, tensor.name)
  return (math.prod(layout.slice_sizes(tensor.shape, mesh_shape))
          * dtypes_lib.size_of(tensor.dtype))


def full_bytes(tensor):
  """Bytes of the whole (unsplit) tensor."""
  return tensor.shape.size * dtypes_lib.size_of(tensor.dtype)


def _variable_ops(graph):
  return list(graph.all_variables)


def default_outputs(graph):
  """The tensors that no operation reads, in graph order."""
  consumed = set()
  for op in graph.operations:
    consumed.update(op.inputs)
  return [t for op in graph.operations for t in op.outputs
          if t not in consumed]


def _predecessors(op, producer):
  preds = []
  for t in op.inputs:
    p = producer.get(t)
    if p is not None and p is not op and p not in preds:
      preds.append(p)
  for d in getattr(op, "dependency_ops", ()) or ():
    if d not in preds:
      preds.append(d)
  return preds


def _key(delta, index):
  # Free memory first (most freed first); otherwise follow build order.
  return (0, delta, index) if delta <= 0 else (1, index, 0)


def schedule(graph, outputs=None, check=None):
  """A memory-minimising topological order of ``graph.operations``.

  Variables come first (they are live throughout anyway).  Then a greedy
  list scheduler repeatedly picks, among the operations whose inputs are all
  computed:

  1. the one that frees the most memory, if any frees memory or is neutral
     (*memory delta* = bytes of its outputs minus bytes of the inputs it is
     the last reader of, outputs and variables excepted, is <= 0);
  2. otherwise the one built first (programs are usually written in a
     sensible order; running growing ops early only lengthens lifetimes).

  Ties go to the operation built first.  Finally the result is compared with
  the build order itself and the one with the lower peak is returned, so the
  schedule is never worse than the program order.  Bytes are whole-tensor
  bytes, so one schedule serves every layout.  Deterministic;
  ``O((ops + edges) log ops)``.

  Args:
    graph: an mtf Graph.
    outputs: tensors that stay live to the end (default: the tensors no
      operation reads, see :func:`default_outputs`).
    check: None, or a function of no arguments called every few hundred
      operations and between the phases; whatever it raises stops the
      schedule (a caller's time limit: the schedule of a 10k-op graph takes
      seconds).

  Returns:
    A list of every operation of the graph, in execution order.
  """
  return _scheduled(graph, outputs, check)[0]


def _scheduled(graph, outputs, check):
  """``(order, (step_ops, intervals))``: :func:`schedule`'s order and its
  :func:`_step_intervals`, found while comparing the two orders."""
  check = check or _no_check
  greedy = _greedy_schedule(graph, outputs, check)
  build = list(graph.operations)
  check()
  build_laid = _step_intervals(graph, build, outputs)
  check()
  greedy_laid = _step_intervals(graph, greedy, outputs)
  if _whole_peak(*build_laid) < _whole_peak(*greedy_laid):
    return build, build_laid
  return greedy, greedy_laid


def _whole_peak(step_ops, intervals):
  steps = len(step_ops)
  if not steps:
    return 0
  diff = [0] * (steps + 1)   # Python ints: no per-element numpy indexing
  for t, (a, b) in intervals.items():
    n = full_bytes(t)
    diff[a] += n
    diff[b + 1] -= n
  return max(itertools.accumulate(diff[:steps]))


_CHECK_EVERY = 256  # operations scheduled between two calls of ``check``


def _no_check():
  pass


def _greedy_schedule(graph, outputs, check):
  ops = list(graph.operations)
  index = {op: i for i, op in enumerate(ops)}
  producer = {t: op for op in ops for t in op.outputs}
  keep = set(default_outputs(graph) if outputs is None else outputs)
  variables = set(_variable_ops(graph))
  keep.update(t for v in variables for t in v.outputs)
  nbytes = {t: full_bytes(t) for t in producer}
  # Each op's distinct inputs and its outputs' bytes, found once (a set
  # built once iterates as one built anew each time would).
  ins = {op: set(op.inputs) for op in ops}
  out_bytes = {op: sum(nbytes[t] for t in op.outputs) for op in ops}
  when_needed = {op for op in ops
                 if getattr(op, "schedule_when_needed", False)}
  readers = {}
  for op in ops:
    for t in ins[op]:
      readers.setdefault(t, []).append(op)
  remaining = {t: len(r) for t, r in readers.items()}
  successors = {op: [] for op in ops}
  waiting = {}
  for op in ops:
    preds = _predecessors(op, producer)
    waiting[op] = len(preds)
    for p in preds:
      successors[p].append(op)

  def delta(op):
    if op in when_needed:
      # A weight gathered again for its backward use (ZeRO-3): its storage
      # copy has the same whole bytes, so it would look free to run at once
      # and then hold the full copy from forward to backward.
      return 1
    freed = sum(nbytes[t] for t in ins[op]
                if t not in keep and remaining.get(t) == 1)
    return out_bytes[op] - freed

  order, done, heap, score = [], set(), [], {}

  def run(op):
    order.append(op)
    done.add(op)
    for t in ins[op]:
      remaining[t] -= 1
      if remaining[t] == 1 and t not in keep:
        # Its last reader now frees it: that reader became more attractive.
        for r in readers[t]:
          if r not in done and waiting[r] == 0:
            score[r] = _key(delta(r), index[r])
            heapq.heappush(heap, (score[r], index[r]))
    for s in successors[op]:
      waiting[s] -= 1
      if waiting[s] == 0 and s not in variables:
        score[s] = _key(delta(s), index[s])
        heapq.heappush(heap, (score[s], index[s]))

  for op in ops:
    if op in variables and waiting[op] == 0:
      run(op)
  for op in ops:
    if op not in done and waiting[op] == 0 and op not in variables:
      score[op] = _key(delta(op), index[op])
      heapq.heappush(heap, (score[op], index[op]))
  while heap:
    s, i = heapq.heappop(heap)
    op = ops[i]
    if op in done or score.get(op) != s:
      continue
    run(op)
    if len(order) % _CHECK_EVERY == 0:
      check()
  if len(order) != len(ops):
    missing = [op.name for op in ops if op not in done][:5]
    raise AssertionError(f"schedule: operations {missing} were never ready; "
                         "the graph has a cycle")
  return order


def live_intervals(graph, schedule_ops, outputs=None):
  """``{tensor: (first_step, last_step)}`` under ``schedule_ops`` (inclusive).

  See the module docstring for the rules: steps are memory steps (one per
  operation, several per while loop, see :func:`memory_steps`).  Every
  output of every scheduled operation appears, and inside while loops every
  output of their condition and body ops, and the accumulators' new sums.
  """
  return _step_intervals(graph, schedule_ops, outputs)[1]


def memory_steps(schedule_ops):
  """The operation that runs at each memory step of ``schedule_ops``: the
  operation itself, except that a while loop is its condition's ops, its
  body's ops and, with accumulators (or when it has no inner op), the loop
  itself (see the module docstring)."""
  return _lay_out(schedule_ops)[0]


def _lay_out(schedule_ops):
  """``(step_ops, spans, cond_ends)``: each op's ``(first, last)`` memory
  step, and each loop's last condition step."""
  step_ops, spans, cond_ends = [], {}, {}

  def visit(ops):
    for op in ops:
      first = len(step_ops)
      if isinstance(op, WhileLoopOperation):
        visit(op.cond_operations)
        cond_ends[op] = len(step_ops) - 1
        visit(op.body_operations)
        if op.accumulator_sums or len(step_ops) == first:
          step_ops.append(op)
        spans[op] = (first, len(step_ops) - 1)
      else:
        step_ops.append(op)
        spans[op] = (first, first)
  visit(schedule_ops)
  return step_ops, spans, cond_ends


def _inner_reads(loop):
  """Every tensor the loop's sub-graphs (nested ones too) read or return."""
  out = {loop.cond_output, *loop.body_outputs}
  for op in loop.cond_operations + loop.body_operations:
    out.update(op.inputs)
    if isinstance(op, WhileLoopOperation):
      out |= _inner_reads(op)
  return out


def _step_intervals(graph, schedule_ops, outputs):
  """``(step_ops, {tensor: (first, last)})`` (see :func:`live_intervals`)."""
  step_ops, spans, cond_ends = _lay_out(schedule_ops)
  last = len(step_ops) - 1
  keep = set(default_outputs(graph) if outputs is None else outputs)
  variables = {t for v in _variable_ops(graph) for t in v.outputs}
  until = {}

  def read(t, step):
    if until.get(t, -1) < step:
      until[t] = step
  for op, (a, b) in spans.items():
    if not isinstance(op, WhileLoopOperation):
      for t in op.inputs:
        read(t, b)
      continue
    inner = _inner_reads(op)
    for i, t in enumerate(op.inputs):
      # An initial value only the loop reads is the first iteration's
      # carried value (counted as the loop's output) from the loop's start.
      carried = i < op.num_loop_vars and t not in inner
      read(t, a - 1 if carried else b)
    read(op.cond_output, max(cond_ends[op], a))
    for t in op.body_outputs:
      read(t, b)
  out = {}
  for op, (a, b) in sorted(spans.items(), key=lambda kv: kv[1]):
    for t in op.outputs:
      out[t] = (a, max(b, until.get(t, -1)))
    if isinstance(op, WhileLoopOperation):
      for t in op.accumulator_sums:
        out[t] = (b, b)
  for t, (a, _) in out.items():
    if t in variables:
      out[t] = (0, last)
    elif t in keep:
      out[t] = (a, last)
  return step_ops, out


def live_sets(graph, schedule_ops, outputs=None):
  """For each step, the list of tensors live then (graph order within a step),
  and the buffers the step's kernel makes (:mod:`costmodels.kernel_copies`).

  ``O(steps x live tensors)``; :func:`peak_memory` uses
  :func:`live_intervals` and a sweep instead.
  """
  live = liveness(graph, outputs, schedule_ops)
  sets = [[] for _ in live.step_ops]
  for t, a, b in live.intervals:
    for i in range(a, b + 1):
      sets[i].append(t)
  return sets


def _variable_of_copy(op):
  """The Variable whose value ``op`` copies, or None.

  Copies are casts of a variable's value (its compute copy in another
  dtype) and ops that declare ``weight_copy`` (the all-gathered compute copy
  of a sharded variable), or chains of them."""
  while op is not None and len(op.inputs) == 1 and (
      getattr(op, "kind", None) == "cast" or getattr(op, "weight_copy",
                                                    False)):
    op = op.inputs[0].operation
    if isinstance(op, Variable):
      return op
  return None


def tensor_category(tensor):
  """One of :data:`CATEGORIES` (see the module docstring).

  A variable counts as its ``memory_category`` (``params`` if trainable,
  ``optimizer`` otherwise, or e.g. ``kv_cache``), and so does a cast of its
  value (its compute copy in another dtype); the gradients
  ``mtf.gradients`` returned for variables are gradients; every other
  tensor is an activation.
  """
  op = tensor.operation
  if isinstance(op, Variable):
    return op.memory_category
  src = _variable_of_copy(op)
  if src is not None:
    return src.memory_category
  if tensor.gradient_of is not None:
    return "gradients"
  return "activations"


@dataclasses.dataclass(frozen=True, eq=False)
class Liveness:
  """The layout-independent half of the memory model of one graph: its
  schedule and each tensor's live steps.  Build it once with
  :func:`liveness` and pass it to :func:`memory_profile` (or
  ``costmodels.evaluate(..., liveness=...)``) for every layout of the graph.

  Attributes:
    schedule: the operations in execution order.
    intervals: ``((tensor, first_step, last_step), ...)``, inclusive, over
      memory steps.
    num_operations: ``len(graph.operations)`` when it was built (graphs only
      grow; a plan of fewer operations is out of date).
    step_ops: the operation run at each memory step (:func:`memory_steps`:
      ``schedule`` itself unless the graph has while loops).
  """
  schedule: Tuple[object, ...]
  intervals: Tuple[Tuple[object, int, int], ...]
  num_operations: int
  step_ops: Tuple[object, ...]

  def check_current(self, graph):
    """Raises MtfError if ``graph`` has grown since this was built."""
    if len(graph.operations) != self.num_operations:
      raise MtfError(
          f"this Liveness was built for {self.num_operations} operations but "
          f"{graph!r} now has {len(graph.operations)}; build a new one with "
          "costmodels.memory.liveness(graph) after adding operations")


def liveness(graph, outputs=None, schedule_ops=None, check=None,
             known_copies=None):
  """The :class:`Liveness` of ``graph``: ``schedule_ops`` (default
  :func:`schedule`) and :func:`live_intervals` under it, with ``outputs``
  (default: unread tensors) kept live to the end, and the buffers each
  op's kernel makes while it runs (:mod:`costmodels.kernel_copies`), live
  at its step.  ``check``: as
  :func:`schedule`, also called before the intervals.  ``known_copies``:
  a dict the caller owns, shared by graphs that repeat each other's
  products (:func:`costmodels.kernel_copies.copies_of`)."""
  check = check or _no_check
  if schedule_ops is None:
    schedule_ops, (step_ops, intervals) = _scheduled(graph, outputs, check)
    check()
  else:
    check()
    step_ops, intervals = _step_intervals(graph, schedule_ops, outputs)
  intervals = {**intervals, **kernel_copies.copy_intervals(step_ops,
                                                          known_copies)}
  return Liveness(tuple(schedule_ops),
                  tuple((t, a, b) for t, (a, b) in intervals.items()),
                  len(graph.operations), tuple(step_ops))


@dataclasses.dataclass(frozen=True, eq=False)
class MemoryProfile:
  """Per-step memory of one layout: what :func:`peak_memory` computes.

  Attributes:
    peak_bytes: the largest per-device total over the steps.
    peak_step: the first memory step where it is reached.
    peak_op: the operation run at that step (inside a while loop, the
      condition or body op; None for an empty graph).
    breakdown: bytes per category at the peak step.
    bytes_by_step: numpy int64 array of the per-device total at each step.
    tensor_bytes: ``{tensor: bytes per device}``.
    bytes_by_category_step: ``{category: numpy int64 array}``, each
      category's bytes at each step (they sum to ``bytes_by_step``): the
      memory over the step that the HTML report draws.
  """
  peak_bytes: int
  peak_step: int
  peak_op: Optional[object]
  breakdown: dict
  bytes_by_step: np.ndarray
  tensor_bytes: dict
  bytes_by_category_step: dict = dataclasses.field(default_factory=dict,
                                                   repr=False)

  def __repr__(self):
    return (f"MemoryProfile(peak {self.peak_bytes} B at step {self.peak_step}"
            f" ({getattr(self.peak_op, 'name', None)}), {self.breakdown})")


def memory_profile(graph, mesh_shape, layout_rules, schedule_ops=None,
                   outputs=None, liveness_plan=None):
  """The :class:`MemoryProfile` of ``graph`` under a layout.

  Args:
    graph, mesh_shape, layout_rules, outputs: as :func:`peak_memory`.
    schedule_ops: an operation order (default :func:`schedule`); ignored
      when ``liveness_plan`` is given.
    liveness_plan: a :class:`Liveness` of ``graph`` built by
      :func:`liveness` with the same ``outputs``; pass one when pricing
      many layouts of one graph, so that the schedule is computed once.

  Raises:
    MtfError: if ``liveness_plan`` is out of date (the graph grew).
  """
  mesh_shape = convert_to_mesh_shape(mesh_shape)
  rules = convert_to_layout_rules(layout_rules)
  if liveness_plan is None:
    liveness_plan = liveness(graph, outputs, schedule_ops)
  else:
    liveness_plan.check_current(graph)
  step_ops = liveness_plan.step_ops
  steps = len(step_ops)
  tensor_bytes, by_shape = {}, {}
  cats = list(CATEGORIES) + sorted(
      {v.memory_category for v in graph.all_variables} - set(CATEGORIES),
      key=lambda c: (c not in EXTRA_CATEGORIES, c))
  diffs = {c: np.zeros(steps + 1, dtype=np.int64) for c in cats}
  for t, a, b in liveness_plan.intervals:
    key = (t.shape, t.dtype)
    n = by_shape.get(key)
    if n is None:
      n = by_shape[key] = _slice_bytes(t, mesh_shape, rules)
    tensor_bytes[t] = n
    d = diffs[tensor_category(t)]
    d[a] += n
    d[b + 1] -= n
  per_cat = {c: np.cumsum(diffs[c])[:steps] for c in cats}
  total = sum(per_cat.values()) if steps else np.zeros(0, dtype=np.int64)
  if steps == 0:
    return MemoryProfile(0, 0, None, {c: 0 for c in cats}, total,
                         tensor_bytes, per_cat)
  peak_step = int(np.argmax(total))
  breakdown = {c: int(per_cat[c][peak_step]) for c in cats}
  return MemoryProfile(int(total[peak_step]), peak_step,
                       step_ops[peak_step], breakdown, total, tensor_bytes,
                       per_cat)


def peak_memory(graph, mesh_shape, layout_rules, schedule=None, outputs=None):
  """Peak per-device bytes of ``graph`` under a layout.

  Args:
    graph: an mtf Graph.
    mesh_shape: mesh Shape or string.
    layout_rules: LayoutRules or string.
    schedule: an operation order (default :func:`schedule`).
    outputs: tensors that stay live to the end (default: unread tensors).

  Returns:
    ``(peak_bytes, step_index, breakdown)`` with ``breakdown`` the bytes per
    category (``params``, ``optimizer``, ``activations``) at that step.
  """
  p = memory_profile(graph, mesh_shape, layout_rules, schedule, outputs)
  return p.peak_bytes, p.peak_step, p.breakdown
