"""The temporaries of an operation's slice kernel, in the memory liveness.

An op's output lives from its step to its last reader's (see
:mod:`costmodels.memory`); its kernel also makes buffers that live only
while it runs: an einsum's transposed operands and product, and a
convolution's padded input (each op declares them
with ``kernel_copy_shapes()``, next to its lowering, from
:mod:`mesh_tf.lowering.kernel_copies`).  Each is a :class:`KernelCopy`: a tensor-like value
with a named shape, live at its op's memory step alone, so that under any
layout its bytes per device are its slice's, as for a tensor (the layout
search's scopes then price it exactly, :mod:`autolayout.search.memory_steps`).
Measured against the BFC allocator's events in
``tests/costmodels/test_kernel_copies.py``; ``docs/calibration_terms.md``
(*Memory truth*) says what the machine does.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class KernelCopy:
  """A buffer ``operation``'s kernel makes while it runs (the ``index``-th
  it declares), of ``shape`` and ``dtype``: priced as an activation.  Equal
  to another of the same op and index (each liveness makes its own)."""
  operation: object
  shape: object = dataclasses.field(compare=False)
  dtype: object = dataclasses.field(compare=False)
  index: int = 0

  #: Not a gradient of any variable (what the memory categories read).
  gradient_of = None

  @property
  def name(self):
    return f"{self.operation.name}/kernel_copy_{self.index}"

  def __repr__(self):
    return f"KernelCopy({self.name}, {self.shape!r})"


def copies_of(op, known=None):
  """The :class:`KernelCopy` values of ``op`` (none for an op that declares
  no ``kernel_copy_shapes``); ``known``: a dict the caller owns, shared by
  the ops of graphs that repeat each other's equations (see
  :meth:`mesh_tf.ops.einsum.EinsumOperation.kernel_copy_shapes`)."""
  shapes = getattr(op, "kernel_copy_shapes", None)
  if shapes is None or not op.outputs:
    return ()
  dtype = op.outputs[0].dtype
  return tuple(KernelCopy(op, s, dtype, i)
               for i, s in enumerate(shapes(known)))


def copy_intervals(step_ops, known=None):
  """``{KernelCopy: (step, step)}`` for every op run at a memory step
  (``known``: as :func:`copies_of`)."""
  out = {}
  for i, op in enumerate(step_ops):
    for c in copies_of(op, known):
      out[c] = (i, i)
  return out


__all__ = ["KernelCopy", "copies_of", "copy_intervals"]
