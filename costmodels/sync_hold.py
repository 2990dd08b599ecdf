"""Gradients held for their sync on devices that do not run in lockstep.

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

:func:`hold_for_syncs` extends the liveness accordingly.  Whether a chip's
devices run in lockstep is data:
:attr:`costmodels.hardware.ChipSpec.devices_in_lockstep` (True for every
preset; False for a topology calibrated on logical CPU devices).
"""

import dataclasses

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


def liveness_on_chip(graph, trace, chip, liveness):
  """The liveness the memory model prices on ``chip``: ``liveness`` itself
  when its devices run in lockstep, else with the gradients that wait for
  a sync held (:func:`hold_for_syncs`)."""
  if chip.devices_in_lockstep:
    return liveness
  return hold_for_syncs(liveness, synced_gradient_ops(graph, trace))


__all__ = ["SYNC_KINDS", "hold_for_syncs", "liveness_on_chip",
           "synced_gradient_ops"]
