r"""Where each cost factor's instances sit in the overlap schedules.

The cost tables (:mod:`autolayout.search.tables`) price each distinct op once and
count its instances; the overlap of gradient syncs and parameter prefetch
with compute (:mod:`costmodels.overlap`, :mod:`costmodels.prefetch`) also
needs *where* each instance runs:

Counts are instances times their repeats per step (per-microbatch ops run
``k`` times, see :mod:`mesh_tf.training.microbatch`), as the factor counts are.

* an op factor's compute at graph position :math:`p` belongs to segment
  :math:`s(p)`, the number of gradient buckets released before :math:`p`,
  and to prefetch window :math:`w(p)`, the number of prefetch deadlines at
  or before :math:`p`;
* an all-reduce factor's instance is a gradient sync of bucket :math:`b`
  when its pending tensor's producer is a sync source of bucket :math:`b`
  (the same test :meth:`costmodels.overlap.GradientBuckets.sync_bucket`
  makes on the trace) and it runs as often as that producer; otherwise
  (e.g. the once-per-step reduction of a microbatched step's summed
  gradient) it is on the critical path;
* an op factor's own collectives are a gradient sync when the op is a
  storage scatter of a gradient's tail, a prefetched gather (prefetch
  bucket, and the sync segment its deadline falls in) when the op is a
  storage gather, and on the critical path otherwise.

:func:`placements` gives, per factor, how many instances fall in each
slot, so the program's overlap terms are linear in the table choices (see
:func:`autolayout.search.overlap_program.add_overlap_constraints`).
"""

import collections
from typing import Dict, NamedTuple, Tuple

from costmodels import overlap as cm_overlap
from costmodels import prefetch as cm_prefetch
from autolayout.search import formulation


class Placement(NamedTuple):
  """Instances of one factor by schedule slot.

  Attributes:
    segments: ``((segment, count), ...)`` of an op factor's instances.
    sync_buckets: ``((bucket, count), ...)`` of the instances whose
      collectives are gradient syncs.
    plain: instances whose collectives are on the critical path.
    windows: ``((window, count), ...)`` of an op factor's instances (its
      compute hides the prefetch buckets from that window on).
    gathers: ``((prefetch bucket, segment, count), ...)`` of the instances
      that are prefetched gathers.
  """
  segments: Tuple[Tuple[int, int], ...]
  sync_buckets: Tuple[Tuple[int, int], ...]
  plain: int
  windows: Tuple[Tuple[int, int], ...] = ()
  gathers: Tuple[Tuple[int, int, int], ...] = ()


def _items(counter):
  return tuple(sorted(counter.items()))


def placements(graph, tables, buckets, prefetch=None):
  """``{(factor.kind, factor.key): Placement}`` for every factor of
  ``tables`` (a :class:`~autolayout.search.tables.GraphTables`) under ``buckets``
  (:func:`costmodels.overlap.gradient_buckets` of ``graph``) and
  ``prefetch`` (:func:`costmodels.prefetch.prefetch_buckets`, or None)."""
  # Instances are weighed by their repeats per step, as the factor counts
  # are (and as costmodels.evaluate prices per-microbatch records), so that
  # each factor's sync, gather and plain instances add up to its count.
  npf = prefetch.num_buckets if prefetch is not None else 0
  seg = collections.defaultdict(collections.Counter)
  win = collections.defaultdict(collections.Counter)
  sync = collections.defaultdict(collections.Counter)
  gat = collections.defaultdict(collections.Counter)
  plain = collections.Counter()
  for op in graph.operations:
    k, n = tables.op_key[op], tables.repeats(op.name)
    p = buckets.positions[op.name]
    seg[k][buckets.segment(p)] += n
    w = prefetch.window(p) if npf else npf
    if w < npf:
      win[k][w] += n
    b = buckets.sync_ops.get(op.name)
    if b is not None:
      sync[("op", k)][b] += n
    elif npf and op.name in prefetch.bucket_of:
      gat[k][(prefetch.bucket_of[op.name],
              buckets.segment(prefetch.need[op.name]))] += n
    else:
      plain[("op", k)] += n
  for t, akey in tables.ar_key.items():
    n = tables.ar_runs.get(t, tables.repeats(t.operation.name))
    b = buckets.sync_sources.get(t.operation.name)
    if b is None or n < tables.repeats(t.operation.name):
      # A microbatched step's accumulation reduces the summed gradient
      # once per step, after the last microbatch: on the critical path,
      # as costmodels.evaluate prices it (the record is the
      # accumulation's own, not a lazy sum of a gradient's producer).
      plain[("allreduce", akey)] += n
    else:
      sync[("allreduce", akey)][b] += n
  out: Dict[tuple, Placement] = {}
  for f in tables.factors:
    fk = (f.kind, f.key)
    if f.kind == "op":
      out[fk] = Placement(
          _items(seg[f.key]), _items(sync[fk]), plain[fk],
          _items(win[f.key]),
          tuple((b, s, c) for (b, s), c in sorted(gat[f.key].items())))
    else:
      out[fk] = Placement((), _items(sync[fk]), plain[fk])
  return out


def efficiencies(mapping, axes):
  """:math:`\\eta_a` of each mesh axis name in ``axes``."""
  return {a: cm_overlap.axis_efficiency(mapping, a) for a in axes}


def overlap_terms(graph, tables, axes):
  """``(placements, OverlapSpec)`` of ``graph`` on the mesh of ``tables``,
  or None when nothing in it can overlap (no gradient syncs and no
  gathers of sharded weights)."""
  buckets = cm_overlap.gradient_buckets(graph)
  prefetch = cm_prefetch.prefetch_buckets(graph)
  if not buckets.num_buckets and not prefetch.num_buckets:
    return None
  placed = placements(graph, tables, buckets, prefetch)
  return placed, formulation.OverlapSpec(
      buckets.num_buckets, efficiencies(tables.pricer.mapping, axes),
      prefetch.num_buckets)
