"""Pending sums of a deferred widening cast, for lowering one op alone.

A microbatched step lets a bfloat16 gradient's data-parallel sum stay
pending through its cast to the float32 master
(:func:`mesh_tf.training.microbatch.defer_sums`): the partial sums are
widened, and the sum is reduced in bfloat16 when forced, with a cast there
and back (a :class:`~mesh_tf.lowering.laid_out.PendingFinish`).  The cost
tables (:mod:`autolayout.search.tables`) lower each op alone on stand-ins
of its inputs' pending states ``(mesh axes, bytes per device)``;
:func:`deferred_cast` gives such a stand-in the finish of a deferred cast,
so that an op that adds two of them stays pending in the narrow dtype and
an op that forces one runs its casts, as the whole lowering does;
:func:`pending_allreduce_record` is the record forcing a pending sum makes.
"""

import math

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.lowering.laid_out import LaidOutTensor, PendingFinish

__all__ = ["deferred_cast", "pending_allreduce_record"]


def deferred_cast(impl, t, state):
  """The :class:`PendingFinish` of ``t``'s pending ``state`` when it is a
  deferred widening cast's (see :func:`mesh_tf.training.microbatch.
  defer_sums`): its state's bytes are those of the narrow dtype it is
  reduced in, and forcing it casts there and back; None otherwise."""
  n = math.prod(impl.slice_shape(t))
  size = dtypes_lib.size_of(t.dtype)
  if not (n and dtypes_lib.is_floating(t.dtype) and size == 4
          and state[1] * 2 == n * size):
    return None
  narrow, wide = dtypes_lib.as_dtype("bfloat16"), t.dtype

  def to(dtype):
    return lambda laid: impl.slicewise(
        lambda x: x, laid, slice_shape=laid.slice_shape, dtype=dtype)
  return PendingFinish(("cast", str(narrow), str(wide)), to(narrow),
                       to(wide))


def pending_allreduce_record(mesh_impl, state):
  """The CollectiveRecord that forcing a pending sum in ``state`` makes
  (None if its axes all have size 1), as ``mesh_impl`` (a
  :class:`~mesh_tf.ShapeMeshImpl` of the mesh) records it: a stand-in of
  the state's bytes per device, all-reduced over its axes."""
  trace = mesh_impl.trace.collectives
  before = len(trace)
  mesh_impl.allreduce(LaidOutTensor((state[1],), "int8"), state[0], "SUM")
  return trace.pop() if len(trace) > before else None
