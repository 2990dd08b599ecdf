"""Buffers held longer on devices that do not run in lockstep.

What the machine does (measured with the BFC allocator's own allocation
events, attributed to devices through the ops' placement; see
``docs/calibration_terms.md``, *Memory truth*): a gradient whose weight-grad
einsum reduces a split dim (data parallelism) leaves a partial sum on every
device, and its sync -- the lowering's all-reduce (``tf.add_n`` on the
group's first device, which TF runs in place in one of its inputs, then the
sum shared by the others) or the storage scatter's reduce-scatter -- can run
only once *every* member of the group has produced its part.

* On devices that run in lockstep (a GPU or TPU each with its own engine,
  syncs issued as the backward produces the gradients), every member
  produces a gradient at about the same moment, the sync follows, and the
  update can free the gradient soon after: the memory model's schedule,
  where each update runs as soon as its gradient exists, holds.
* On devices that share the host's cores (TF logical CPU devices), TF's
  executor runs one device's ready ops ahead of the others: each device
  runs the whole of its backward pass -- everything that does not wait for
  a sync -- before the last member of its group reaches the first sync.
  So every device but the last holds *all* its gradient partials that wait
  for a sync at once, from when it made each until it made the last one
  (measured on the MLP of the truth benchmark, data parallel on 8 devices:
  every weight-grad partial of every device live at the end of the
  backward, 8 MiB per device, where the schedule said 1 MiB).

Two more effects of the same executor (measured alike, on the truth
benchmark's layouts):

* **Sums shared with lagging peers.**  The all-reduced sum lives in one
  buffer, the group's first device's (``tf.add_n`` in place there, the
  peers' copies ``tf.identity`` reads of it), and it is freed when the last
  peer has read it.  That device runs ahead of its peers to the next
  collective, which waits for them, so the sum stays live on it until
  that collective's step, whatever its own last read (the conv net with
  ``channels:x``: its second convolution's 1 MiB sum was live at the end
  of device 0's backward pass; the schedule freed it in the forward).
* **Readers that one tensor makes ready run side by side.**  When a
  tensor is made, TF's executor runs every op that only waited for it at
  once on its inter-op threads: a convolution's input and filter
  gradients both wait for the output's gradient, and their zero-padded
  copies were live together at the device's peak.

:func:`hold_for_syncs`, :func:`hold_shared_sums` and
:func:`overlap_ready_copies` extend the liveness accordingly.  Whether a chip's
devices run in lockstep is data:
:attr:`costmodels.hardware.ChipSpec.devices_in_lockstep` (True for every
preset; False for a topology calibrated on logical CPU devices).
"""

import bisect
import dataclasses

from costmodels.kernel_copies import KernelCopy
from mesh_tf.core.dims import Dimension, Shape
from mesh_tf.ops.variables import Variable

#: Collective kinds that sync a gradient (see the module docstring).
SYNC_KINDS = ("allreduce", "reduce_scatter")


def synced_gradient_ops(graph, trace):
  """Names of the operations whose gradient output a sync of ``trace``
  (the layout's lowering record) reduces: the ops whose partial sums each
  device holds until the sync runs."""
  producers = {op.name for op in graph.operations
               if any(t.gradient_of is not None for t in op.outputs)}
  return {c.source_op for c in trace.collectives
          if c.kind in SYNC_KINDS and c.source_op in producers}


def hold_for_syncs(liveness, synced_ops):
  """``liveness`` (a :class:`costmodels.memory.Liveness`) with every
  gradient made by one of ``synced_ops`` live until the step that makes
  the last of them: the end of the backward pass, where the device that
  ran ahead waits for its group (see the module docstring).

  Example:
    >>> import mesh_tf as mtf
    >>> from costmodels import memory
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> w = mtf.get_variable(mesh, "w", "d:4")
    >>> v = mtf.get_variable(mesh, "v", "d:4")
    >>> loss = mtf.reduce_sum(w * w + v * v)
    >>> gw, gv = mtf.gradients([loss], [w, v])
    >>> live = memory.liveness(g)
    >>> held = hold_for_syncs(live, {gw.operation.name, gv.operation.name})
    >>> [b for t, a, b in held.intervals if t is gw] >= [
    ...     a for t, a, b in live.intervals if t is gv]
    True
  """
  held = [(t, a) for t, a, _ in liveness.intervals
          if t.gradient_of is not None and t.operation.name in synced_ops]
  if not held:
    return liveness
  last = max(a for _, a in held)
  ids = {id(t) for t, _ in held}
  intervals = tuple((t, a, max(b, last) if id(t) in ids else b)
                    for t, a, b in liveness.intervals)
  return dataclasses.replace(liveness, intervals=intervals)


def hold_shared_sums(liveness, trace):
  """``liveness`` with every all-reduced tensor live until the first step
  after its sum that issues a collective: the group's first device, which
  sums in place and shares the sum with its peers, runs ahead to that
  collective while the lagging peers have yet to read the sum (see the
  module docstring).  ``trace``: the layout's lowering record (its
  collectives, with the step's op that issued each and the op whose
  output an all-reduce sums).
  """
  steps = {}
  for i, op in enumerate(liveness.step_ops):
    steps.setdefault(getattr(op, "name", None), i)
  syncs = sorted({steps[c.op_name] for c in trace.collectives
                  if c.op_name in steps})
  made = {}
  for c in trace.collectives:
    if c.kind == "allreduce" and c.source_op and c.op_name in steps:
      made[c.source_op] = min(made.get(c.source_op, steps[c.op_name]),
                              steps[c.op_name])
  if not made:
    return liveness
  out = []
  for t, a, b in liveness.intervals:
    at = made.get(getattr(t.operation, "name", None))
    if at is not None and not isinstance(t.operation, Variable):
      nxt = bisect.bisect_right(syncs, at)
      if nxt < len(syncs):
        b = max(b, syncs[nxt])
      else:
        b = max(b, len(liveness.step_ops) - 1)
    out.append((t, a, b))
  return dataclasses.replace(liveness, intervals=tuple(out))


def overlap_ready_copies(liveness):
  """``liveness`` with the kernel copies (:mod:`costmodels.kernel_copies`)
  made ahead of their op's kernel, by kernels of their own, live together
  for the operations that one tensor makes ready: each such copy is made
  as soon as that tensor exists (TF's executor runs every ready kernel
  at once, one inline and the others on its inter-op threads) and waits
  for its op's kernel.  A convolution's input and filter gradients both
  wait for the output's gradient alone, and their ``Pad`` copies were
  live together at the busiest device's peak.  The copies of a group of
  two or more are live from the group's first step to its last.  Copies
  made inside the kernel (an einsum's transposes: ops without
  ``copies_made_ahead``) exist only while it runs and keep their step;
  two such kernels were not seen to overlap.

  Example:
    >>> import mesh_tf as mtf
    >>> from costmodels import memory
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> x = mtf.zeros(mesh, "b:2,d:8,c:1")
    >>> w = mtf.get_variable(mesh, "w", "fd:3,c:1,f:2")
    >>> y = mtf.conv1d(x, w)
    >>> dx, dw = mtf.gradients([mtf.reduce_sum(y)], [x, w])
    >>> live = memory.liveness(g)
    >>> steps = lambda lv: sorted({(a, b) for t, a, b in lv.intervals
    ...     if t.operation is dw.operation and t is not dw})
    >>> steps(live)[0][0] == steps(live)[0][1]
    True
    >>> wide = steps(overlap_ready_copies(live))
    >>> wide[0][1] > wide[0][0]
    True
  """
  born = {t: a for t, a, _ in liveness.intervals}
  variables = {t for t in born if isinstance(t.operation, Variable)}
  at = {}
  for t, a, _ in liveness.intervals:
    if isinstance(t, KernelCopy) and getattr(t.operation,
                                             "copies_made_ahead", False):
      at.setdefault(t.operation, a)
  ready_on, groups = {}, {}
  for op, step in at.items():
    made = [(born[t], i) for i, t in enumerate(op.inputs)
            if t in born and t not in variables]
    if made:   # the input made last: the op is ready once it exists
      last = op.inputs[max(made)[1]]
      ready_on[op] = last
      groups.setdefault(last, []).append(step)
  span = {}
  for op, last in ready_on.items():
    steps = groups[last]
    if len(steps) > 1:
      span[op] = (min(steps), max(steps))
  if not span:
    return liveness
  out = tuple((t, *span[t.operation]) if isinstance(t, KernelCopy)
              and t.operation in span else (t, a, b)
              for t, a, b in liveness.intervals)
  return dataclasses.replace(liveness, intervals=out)


#: The dim of a buffer known by its bytes alone (no layout rule names it).
HALO_DIM = "halo_rows_bytes"


def hold_halo_rows(liveness, trace):
  """``liveness`` with the edge rows that each convolution cuts out of
  its padded input for a neighbour (one ``receive`` of the layout's
  ``trace`` each, of its ``bytes_per_device``) live with the op's copies
  made ahead (:func:`overlap_ready_copies`): the rows are made with the
  ``Pad`` and wait, like it, for the kernel, then for the lagging
  neighbour that writes them into its own padding.  A device cuts rows
  for each neighbour it has: both of a split dim's receives on a mesh
  axis of three devices or more, the larger one on an axis of two (each
  device has one neighbour there).  Each is a
  :class:`~costmodels.kernel_copies.KernelCopy` of one unsplit dim
  (:data:`HALO_DIM`) of that many bytes."""
  span = {}
  for t, a, b in liveness.intervals:
    if isinstance(t, KernelCopy) and getattr(t.operation,
                                             "copies_made_ahead", False):
      lo, hi = span.get(t.operation, (a, b))
      span[t.operation] = (min(lo, a), max(hi, b))
  by_name = {getattr(op, "name", None): op for op in span}
  sent = {}
  for c in trace.collectives:
    op = by_name.get(c.op_name) if c.kind == "receive" else None
    if op is not None and c.bytes_per_device:
      sent.setdefault((op, c.mesh_axes, c.group_size), []).append(
          c.bytes_per_device)
  extra = []
  for (op, _, size), rows in sent.items():
    if size <= 2:
      # Two devices on the axis: each one's rows go one way only.
      rows = [max(rows)]
    for n in rows:
      shape = Shape([Dimension(HALO_DIM, n)])
      extra.append((KernelCopy(op, shape, "uint8", -1 - len(extra)),
                    *span[op]))
  if not extra:
    return liveness
  return dataclasses.replace(liveness,
                             intervals=liveness.intervals + tuple(extra))


def liveness_on_chip(graph, trace, chip, liveness):
  """The liveness the memory model prices on ``chip``: ``liveness`` itself
  when its devices run in lockstep, else with the gradients that wait for
  a sync held (:func:`hold_for_syncs`) and the sums the run-ahead device
  shares held for its peers (:func:`hold_shared_sums`)."""
  if chip.devices_in_lockstep:
    return liveness
  held = hold_for_syncs(liveness, synced_gradient_ops(graph, trace))
  return hold_halo_rows(overlap_ready_copies(hold_shared_sums(held, trace)),
                        trace)


__all__ = ["SYNC_KINDS", "hold_for_syncs", "liveness_on_chip",
           "synced_gradient_ops"]
