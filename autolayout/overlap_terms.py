r"""Where each cost factor's instances sit in the gradient-sync schedule.

The cost tables (:mod:`autolayout.tables`) price each distinct op once and
count its instances; the overlap of gradient syncs with compute
(:mod:`costmodels.overlap`) also needs *where* each instance runs:

Counts are instances times their repeats per step (per-microbatch ops run
``k`` times, see :mod:`mesh_tf.microbatch`), as the factor counts are.

* an op factor's compute at graph position :math:`p` belongs to segment
  :math:`s(p)`, the number of gradient buckets released before :math:`p`;
* an all-reduce factor's instance is a gradient sync of bucket :math:`b`
  when its pending tensor's producer is a gradient-producing op of bucket
  :math:`b` (the same test :func:`costmodels.overlap.is_gradient_sync`
  makes on the trace); otherwise it is on the critical path.

:func:`placements` gives, per factor, how many instances fall in each
segment or bucket, so the program's overlap terms are linear in the table
choices (see :func:`autolayout.formulation.add_overlap_constraints`).
"""

import collections
from typing import Dict, NamedTuple, Tuple

from costmodels import overlap as cm_overlap


class Placement(NamedTuple):
  """Instances of one factor by schedule slot.

  Attributes:
    segments: ``((segment, count), ...)`` of an op factor's instances.
    sync_buckets: ``((bucket, count), ...)`` of an all-reduce factor's
      instances that are gradient syncs.
    plain: instances on the critical path (all-reduce factors) or every
      instance (op factors: their own collectives never overlap).
  """
  segments: Tuple[Tuple[int, int], ...]
  sync_buckets: Tuple[Tuple[int, int], ...]
  plain: int


def placements(graph, tables, buckets):
  """``{(factor.kind, factor.key): Placement}`` for every factor of
  ``tables`` (a :class:`~autolayout.tables.GraphTables`) under ``buckets``
  (:func:`costmodels.overlap.gradient_buckets` of ``graph``)."""
  # Instances are weighed by their repeats per step, as the factor counts
  # are (and as costmodels.evaluate prices per-microbatch records), so that
  # an op factor's segments and an all-reduce factor's buckets and plain
  # instances add up to its count.
  seg = collections.defaultdict(collections.Counter)
  for op in graph.operations:
    k = tables.op_key[op]
    seg[k][buckets.segment(buckets.positions[op.name])] += tables.repeats(
        op.name)
  sync = collections.defaultdict(collections.Counter)
  plain = collections.Counter()
  for t, akey in tables.ar_key.items():
    n = tables.repeats(t.operation.name)
    b = buckets.bucket_of.get(t.operation.name)
    if b is None:
      plain[akey] += n
    else:
      sync[akey][b] += n
  out: Dict[tuple, Placement] = {}
  for f in tables.factors:
    if f.kind == "op":
      out[(f.kind, f.key)] = Placement(tuple(sorted(seg[f.key].items())), (),
                                       f.count)
    else:
      out[(f.kind, f.key)] = Placement((), tuple(sorted(sync[f.key].items())),
                                       plain[f.key])
  return out


def efficiencies(mapping, axes):
  """:math:`\\eta_a` of each mesh axis name in ``axes``."""
  return {a: cm_overlap.axis_efficiency(mapping, a) for a in axes}
