r"""Parameter all-gathers prefetched under earlier compute (ZeRO / FSDP).

With sharded storage (:mod:`mesh_tf.training.storage`) every read of a weight is a
:class:`~mesh_tf.ops.storage.StorageGatherOperation`: under stage 3 one
before each use in forward and again in backward.  Nothing but its readers
waits for a gather, so a runtime issues it ahead of time, while the
compute before its first reader runs (FSDP's forward and backward
prefetch; XLA's collective pipelining), on the links of its mesh axes.

**The queue.**  This is the time-mirror of the gradient-sync queue of
:mod:`costmodels.overlap`: syncs have *release* times and must finish by
the end of the step; gathers have *deadlines* (the position of their first
reader in the lowering's op order) and may start from the beginning.  As
gradient syncs are launched in buckets, gathers are fetched in buckets: in
deadline order they are cut into at most ``max_buckets`` runs of equal
counts (a property of the graph, not of the layout), and a bucket must be
complete at its first deadline :math:`d_b`.  On each mesh axis :math:`a`
the gathers form one FIFO queue on that axis's links, and compute stalls
only when the queue is late, so the exposed prefetch time is

.. math::
   P_a = \max\Bigl(0,\; \max_b \bigl(\textstyle\sum_{b' \le b} g_{b',a}
         - \eta_a \sum_{w \le b} C_w\bigr)\Bigr)

where :math:`g_{b,a}` is bucket :math:`b`'s gather time on axis :math:`a`,
:math:`C_w` the compute time of the ops in window :math:`w`, the positions
:math:`[d_{w-1}, d_w)` (window 0 starts with the step), and :math:`\eta_a`
the axis's overlap efficiency (:func:`costmodels.overlap.axis_efficiency`).
The sums are the *prefix sums of compute per block* that let a block's
gathers run under the previous blocks' compute; the bucket's first deadline
makes it conservative (a whole bucket is due when its first weight is).

Times are totals per step (per-microbatch work is priced ``k`` times), as
for the syncs.  The search writes :math:`P_a` in CP-SAT as prefix
variables and one max equality (see
:func:`autolayout.search.overlap_program.add_overlap_constraints`).
"""

import bisect
import math
from typing import Dict, NamedTuple, Tuple

from mesh_tf.ops.storage import StorageGatherOperation

#: At most this many prefetch buckets.  The first bucket has no compute
#: before it and is exposed whole, so more buckets expose less (1/32 of a
#: stage-3 step's gathers at most); each adds one prefix variable per axis
#: to the CP-SAT program, which stays small (the gradient syncs' 8 buckets
#: cost more because their work terms sum suffixes of compute).
MAX_PREFETCH_BUCKETS = 32


class PrefetchBuckets(NamedTuple):
  """The prefetch schedule of a graph (layout independent).

  Attributes:
    bucket_of: name of each gather op -> its bucket.
    need: name of each gather op -> the position of its first reader.
    deadlines: :math:`d_b` of each bucket (ascending).
  """
  bucket_of: Dict[str, int]
  need: Dict[str, int]
  deadlines: Tuple[int, ...]

  def window(self, position):
    """The window of the op at ``position``: its compute hides the gathers
    of buckets ``window ..`` (``num_buckets``: after the last deadline, it
    hides none)."""
    return bisect.bisect_right(self.deadlines, position)

  @property
  def num_buckets(self):
    return len(self.deadlines)


def prefetch_buckets(graph, max_buckets=MAX_PREFETCH_BUCKETS):
  """The :class:`PrefetchBuckets` of ``graph`` (none without sharded
  storage).

  Example:
    >>> import mesh_tf as mtf
    >>> from mesh_tf.training import storage
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> w = mtf.get_variable(mesh, "w", "d_model:4")
    >>> loss = mtf.reduce_sum(w * w)
    >>> _ = storage.shard_storage(g, 3)
    >>> prefetch_buckets(g).num_buckets
    1
  """
  positions = {op.name: i for i, op in enumerate(graph.operations)}
  first = {}
  for i, op in enumerate(graph.operations):
    for t in op.inputs:
      p = t.operation
      if isinstance(p, StorageGatherOperation) and p.name not in first:
        first[p.name] = i
  gathers = sorted(first, key=lambda n: (first[n], positions[n]))
  n = len(gathers)
  k = min(int(max_buckets), n)
  bucket_of, deadlines = {}, []
  for b in range(k):
    part = gathers[b * n // k:(b + 1) * n // k]
    for name in part:
      bucket_of[name] = b
    deadlines.append(first[part[0]])
  return PrefetchBuckets(bucket_of, first, tuple(deadlines))


def is_prefetch(cost, pf):
  """True for a priced collective (an ``OpCost``) that a gather of ``pf``
  records itself: it can run ahead of its readers."""
  return (cost.category == "comm" and cost.op_name in pf.bucket_of
          and cost.source_op == cost.op_name)


def exposed_prefetch_time(gather_s, window_s, efficiency):
  """:math:`P_a` of one axis.

  Args:
    gather_s: per bucket, the seconds of its gathers on this axis.
    window_s: per window ``0 .. B-1``, the compute seconds in it.
    efficiency: :math:`\\eta_a`.

  Example:
    >>> exposed_prefetch_time([1.0, 3.0], [0.0, 2.0], 1.0)   # 1, then 4-2
    2.0
  """
  best = 0.0
  for b in range(len(gather_s)):
    # fsum of each prefix: with no compute to hide under, P_a is exactly
    # the fsum of the gathers, and the hidden time exactly 0.
    best = max(best, math.fsum(gather_s[:b + 1])
               - efficiency * math.fsum(window_s[:b + 1]))
  return best
