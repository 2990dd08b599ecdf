r"""Communication hidden under compute, from the schedule.

Real training does not wait for every collective.  A gradient's SUM
all-reduce (or reduce-scatter) is issued as soon as the backward pass has
produced the gradient, and runs on its mesh axes' links while the rest of
the step computes.  The cost model prices that from the lowering's own op
order, the order in which :class:`mesh_tf.Lowering` runs the graph.

**Which collectives overlap.**  A *gradient sync* is a lazy SUM all-reduce
(recorded when a later op, or the export of an output, forces it) whose
source op produces a gradient that :func:`mesh_tf.gradients` returned for a
variable (``Tensor.gradient_of``), or one of that gradient's *tail*: under
mixed precision each use's bf16 contribution is cast to the float32 master
(the sum is forced, and reduced in bf16, by the cast), and under ZeRO a
storage scatter moves the gradient onto the shard (its reduce-scatter is
its own collective).  The all-gathers of sharded weights are prefetched
(:mod:`costmodels.prefetch`).  Every other collective (tensor-parallel
all-reduces, all-to-alls, ...) is on the critical path and fully exposed.

**Barriers.**  A collective's barrier (``LinkSpec.barrier_s``, the
group's members waiting for each other; calibrated, 0 on the presets) is
paid in full by every critical-path collective: the next compute waits for
the slowest member.  Nothing waits for a gradient sync until the step's
end, which waits for every device anyway, so a sync's barrier
(``OpCost.wait_by_axis``) is hidden whatever the overlap efficiency, and
takes neither link nor compute time (:math:`c_{b,a}` below is its time
without it).  Measured on 8 logical CPU devices of a 2-core machine, in
steps of a tiny MLP interleaved in shuffled rounds: a gradient sync over 8
devices cost 55 us in a step, a blocking all-reduce of the activations
102, 123-130 and 151 us over 2, 4 and 8 devices.

**Buckets.**  As in PyTorch DDP, gradient syncs are launched in buckets:
the gradient-producing ops, in graph order, are cut into at most
``max_buckets`` runs of consecutive ops (equal counts, a property of the
graph, not of the layout); a bucket's syncs start when its last gradient is
ready, at position :math:`r_b`.

**Exposed time.**  On each mesh axis :math:`a` the syncs form one FIFO queue
on that axis's links (each sync's time is split over axes by the phases of
its algorithm, as ``OpCost.time_by_axis`` does).  Compute never waits for
them until the step ends, so the queue finishes

.. math::
   E_a = \max\Bigl(0,\; \max_b \bigl(\textstyle\sum_{b' \ge b} c_{b',a}
         - \eta_a W_b\bigr)\Bigr)

after the last compute, where :math:`c_{b,a}` is bucket :math:`b`'s sync
time on axis :math:`a`, :math:`W_b` the compute time of the ops after
:math:`r_b`, and :math:`\eta_a` the axis's *overlap efficiency*: how many
seconds of that link's communication one second of concurrent compute
hides (collectives and kernels share memory bandwidth, and on GPUs NCCL
kernels take SMs).  :math:`\eta_a` is data: the ``overlap_efficiency`` of
the :class:`~costmodels.hardware.LinkSpec` if set (calibration writes it),
else :data:`DEFAULT_OVERLAP_EFFICIENCY` of the link kind; an axis spanning
several kinds of link takes the smallest.

Prefetched gathers due after release :math:`r_b` hold the same links
under the same compute first (the step waits for them): their time
:math:`T_{b,a}` is added to each suffix, and :math:`E_a` is then at most
the syncs' total.

**Interference.**  Hiding is not free: while a collective runs beside
compute, it takes part of what the compute needs (HBM bandwidth, and on
GPUs the SMs of NCCL's kernels), so the compute it overlaps runs slower.
The same :math:`\eta_a` prices that: each second of axis :math:`a`'s
communication hidden under compute costs the compute :math:`1 - \eta_a`
seconds,

.. math::
   I_a = (1 - \eta_a) H_a, \qquad H_a = S_a + G_a - E_a - P_a,

where :math:`S_a` and :math:`G_a` are the axis's sync and prefetched
gather totals and :math:`H_a` its hidden time.  (With :math:`\eta_a = 1`
overlap is free; with :math:`\eta_a = 0` nothing hides and nothing
interferes.)

The step time is then ``compute + exposed critical-path comm + sum_a (E_a +
P_a + I_a)`` (:math:`P_a`: the exposed prefetch); the hidden time is the
rest of the syncs and gathers.  With ``enabled=False`` every
collective is exposed (the conservative figure, ``--no-overlap``).

The layout search writes :math:`E_a` in CP-SAT as :math:`e_a \ge 0`,
:math:`e_a \ge Z_{b,a}` with :math:`Z_{b,a}` linear in the table choices
(see :mod:`autolayout.search.formulation`), which is exact because it minimises.
"""

import bisect
import collections
import math
from typing import Dict, NamedTuple, Tuple

from mesh_tf.ops.storage import StorageScatterOperation
from costmodels import prefetch as prefetch_lib

#: Seconds of a link's communication that one second of concurrent compute
#: hides, by link kind.  These are modelling assumptions with the evidence
#: they rest on, to be replaced by calibration (set
#: ``LinkSpec.overlap_efficiency``):
DEFAULT_OVERLAP_EFFICIENCY = {
    # TPU ICI collectives run on the chip's DMA engines, asynchronously
    # with the MXUs (XLA's async all-reduce / collective pipelining); what
    # they steal is HBM bandwidth.  Assumed 0.9.
    "ici": 0.9,
    # NCCL on NVLink runs as CUDA kernels on a few SMs and competes for HBM:
    # overlapped GEMMs slow by roughly 10-25% (e.g. Wang et al., "Overlap
    # Communication with Dependent Computation via Decomposition", ASPLOS
    # 2023).  Assumed 0.8.
    "nvlink": 0.8,
    # InfiniBand with GPUDirect RDMA needs fewer SMs than NVLink rings; the
    # NIC moves the data.  Assumed 0.85.
    "infiniband": 0.85,
    # PCIe traffic crosses the host bridge and contends with other DMA.
    # Assumed 0.7.
    "pcie": 0.7,
}

#: At most this many gradient buckets (PyTorch DDP's default bucket cap of
#: 25 MB gives tens of buckets for billion-parameter models; a few per step
#: capture the schedule and keep the CP-SAT program small: on the 3-D mesh
#: of benchmarks/solve.py, 8 buckets solve in 0.3-0.4 s, 16 in 0.7-1.4 s).
MAX_GRADIENT_BUCKETS = 8


def link_overlap_efficiency(link):
  """:math:`\\eta` of one :class:`~costmodels.hardware.LinkSpec`."""
  eta = getattr(link, "overlap_efficiency", None)
  if eta is None:
    eta = DEFAULT_OVERLAP_EFFICIENCY.get(link.kind, 0.0)
  return float(eta)


def axis_efficiency(mapping, axis):
  """:math:`\\eta_a` of mesh axis ``axis`` under a
  :class:`~costmodels.MeshMapping`: the smallest over its links (0.0 for an
  axis of size 1, which never communicates)."""
  segs = mapping[axis].segments
  if not segs:
    return 0.0
  return min(link_overlap_efficiency(s.link) for s in segs)


def interference_time(hidden_s, efficiency):
  """:math:`I_a = (1 - \\eta_a) H_a`: the compute seconds that
  ``hidden_s`` seconds of communication hidden under it cost.

    >>> interference_time(2.0, 0.75)
    0.5
  """
  return (1.0 - efficiency) * hidden_s if hidden_s > 0 else 0.0


class GradientBuckets(NamedTuple):
  """The gradient-sync schedule of a graph (layout independent).

  Attributes:
    positions: op name -> position in graph (= lowering) order.
    bucket_of: name of each gradient-producing op -> its bucket.
    releases: position :math:`r_b` of each bucket (ascending).
    sync_sources: op name -> bucket, for the ops whose pending SUM is a
      gradient sync when forced: each gradient producer, and up its
      *tail* (the casts and storage scatters that move a gradient to its
      variable's dtype and storage layout) each op whose only reader is
      the tail.
    sync_ops: storage scatters of a tail -> bucket: their own collectives
      (the reduce-scatter onto the shard and its relayout) are syncs.
  """
  positions: Dict[str, int]
  bucket_of: Dict[str, int]
  releases: Tuple[int, ...]
  sync_sources: Dict[str, int] = {}
  sync_ops: Dict[str, int] = {}

  def segment(self, position):
    """Number of buckets released strictly before ``position``: compute at
    ``position`` hides the syncs of buckets ``0 .. segment - 1``."""
    return bisect.bisect_left(self.releases, position)

  @property
  def num_buckets(self):
    return len(self.releases)

  def sync_bucket(self, cost):
    """The bucket of a priced collective that is a gradient sync, else
    None (see :func:`is_gradient_sync`)."""
    if cost.category != "comm":
      return None
    return self._bucket(cost.op_name, cost.source_op, cost.kind,
                        cost.reduction)

  def record_bucket(self, record):
    """:meth:`sync_bucket` of a trace's
    :class:`~mesh_tf.lowering.trace.CollectiveRecord`, before pricing."""
    return self._bucket(record.op_name, record.source_op or record.op_name,
                        record.kind, record.reduction)

  def _bucket(self, op_name, source_op, kind, reduction):
    if source_op == op_name:
      return self.sync_ops.get(op_name)
    if kind == "allreduce" and reduction == "SUM":
      return self.sync_sources.get(source_op)
    return None


def _moves_gradient(op):
  """A cast, storage scatter or sum of contributions: an op of a
  gradient's tail."""
  if isinstance(op, StorageScatterOperation):
    return True
  kind = getattr(op, "kind", None)
  return ((kind == "cast" and len(op.inputs) == 1)
          or (kind == "add" and len(op.inputs) == 2))


def _tails(graph, bucket_of):
  """``(sync_sources, sync_ops)`` of :class:`GradientBuckets`."""
  readers = collections.Counter(t for op in graph.operations
                                for t in op.inputs)
  sources, ops = {}, {}
  for op in graph.operations:
    b = bucket_of.get(op.name)
    if b is None:
      continue
    sources[op.name] = b
    # Mixed precision casts a gradient to its master's dtype (each use's
    # contribution, before they are added), ZeRO moves it onto the storage
    # layout: the sum the backward pass left pending is forced there, and
    # it is as much a sync as one forced by the optimizer (the lowering
    # reduces it in the compute dtype).
    stack = [op]
    while stack:
      o = stack.pop()
      if not _moves_gradient(o):
        continue
      if isinstance(o, StorageScatterOperation):
        ops.setdefault(o.name, b)
      for t in o.inputs:
        if readers[t] == 1 and t.operation.name not in sources:
          sources[t.operation.name] = b
          stack.append(t.operation)
  return sources, ops


def gradient_buckets(graph, max_buckets=MAX_GRADIENT_BUCKETS):
  """The :class:`GradientBuckets` of ``graph``.

  Example:
    >>> import mesh_tf as mtf
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> w = mtf.get_variable(mesh, "w", "d:4")
    >>> loss = mtf.reduce_sum(w * w)
    >>> [gw] = mtf.gradients([loss], [w])
    >>> gradient_buckets(g).num_buckets
    1
  """
  positions, producers = {}, []
  for i, op in enumerate(graph.operations):
    positions[op.name] = i
    if any(t.gradient_of is not None for t in op.outputs):
      producers.append((op.name, i))
  n = len(producers)
  k = min(int(max_buckets), n)
  bucket_of, releases = {}, []
  for b in range(k):
    part = producers[b * n // k:(b + 1) * n // k]
    for name, _ in part:
      bucket_of[name] = b
    releases.append(part[-1][1])
  return GradientBuckets(positions, bucket_of, tuple(releases),
                         *_tails(graph, bucket_of))


def is_gradient_sync(cost, buckets):
  """True for a priced collective (an ``OpCost``) that overlaps: a lazy
  SUM all-reduce of a gradient, or a storage scatter's reduce-scatter of
  one (see the module docstring)."""
  return buckets.sync_bucket(cost) is not None


def exposed_sync_time(sync_s, work_s, efficiency, taken_s=None):
  """:math:`E_a` of one axis.

  Args:
    sync_s: per bucket, the seconds of its syncs on this axis.
    work_s: per segment ``0 .. B``, the compute seconds of the ops in it
      (segment ``s`` holds the ops after ``s`` bucket releases).
    efficiency: :math:`\\eta_a`.
    taken_s: per segment, the seconds of prefetched gathers on this axis
      due in it (:mod:`costmodels.prefetch`): they hold the same links
      under the same compute first, as the step waits for them, so they
      take that much of the compute's capacity to hide syncs.  The result
      is then at most the syncs' total.

  Example:
    >>> exposed_sync_time([3.0, 1.0], [9.0, 1.0, 0.5], 1.0)   # 4 - 1.5
    2.5
    >>> exposed_sync_time([1.0], [0.0, 3.0], 1.0, [0.0, 2.5])  # 1 - 0.5
    0.5
  """
  best = 0.0
  for b in range(len(sync_s)):
    # fsum of each suffix (B is small): with nothing hidden, E_a is then
    # exactly the fsum of the syncs, and hidden time exactly 0.
    z = math.fsum(sync_s[b:]) - efficiency * math.fsum(work_s[b + 1:])
    if taken_s is not None:
      z += math.fsum(taken_s[b + 1:])
    best = max(best, z)
  if taken_s is not None:
    best = min(best, math.fsum(sync_s))
  return best


class AxisOverlap(NamedTuple):
  """Communication on one mesh axis, split by what the step waits for.

  ``exposed_s + hidden_s == total_s`` (up to rounding).
  """
  axis: str
  total_s: float
  exposed_s: float
  hidden_s: float
  sync_s: float        # of the total, gradient syncs (overlappable)
  efficiency: float
  prefetch_s: float = 0.0   # of the total, prefetchable parameter gathers
  exposed_sync_s: float = 0.0      # E_a
  exposed_prefetch_s: float = 0.0  # P_a
  interference_s: float = 0.0      # I_a: compute lost to the hidden part
  # Of hidden_s, the gradient syncs' barriers (no compute lost to them).
  sync_wait_s: float = 0.0


class Overlap(NamedTuple):
  """What overlaps in one priced step (see :func:`overlap`)."""
  enabled: bool
  by_axis: Tuple[AxisOverlap, ...]
  exposed_parts: Tuple[float, ...]   # fsum(...) is the exposed comm time

  @property
  def exposed_comm_s(self):
    return math.fsum(self.exposed_parts)

  @property
  def hidden_comm_s(self):
    return math.fsum(a.hidden_s for a in self.by_axis)

  @property
  def interference_s(self):
    """:math:`\\sum_a I_a`: compute time lost to the hidden
    communication (part of the step time, not of its communication)."""
    return math.fsum(a.interference_s for a in self.by_axis)

  @property
  def total_comm_s(self):
    return math.fsum(a.total_s for a in self.by_axis)


def overlap(op_costs, buckets, mapping, enabled=True, prefetch=None):
  """Splits the collectives of ``op_costs`` into exposed and hidden time.

  Args:
    op_costs: the priced records (``costmodels.evaluate.op_costs``).
    buckets: the graph's :class:`GradientBuckets`.
    mapping: the :class:`~costmodels.MeshMapping` (for :math:`\\eta_a`).
    enabled: False to expose everything.
    prefetch: the graph's :class:`~costmodels.prefetch.PrefetchBuckets`
      (None: parameter gathers are exposed).

  Returns:
    An :class:`Overlap`.  Its ``exposed_parts`` are the times of the
    critical-path collectives followed by each axis's :math:`E_a` and
    :math:`P_a`, so that with nothing to overlap their ``math.fsum`` is
    exactly the sum of all collective times.
  """
  axes = [a.name for a in mapping.mesh_shape.dims]
  nb = buckets.num_buckets
  npf = prefetch.num_buckets if (enabled and prefetch is not None) else 0
  sync = {a: [[] for _ in range(nb)] for a in axes}
  gath = {a: [[] for _ in range(npf)] for a in axes}
  taken = {a: [[] for _ in range(nb + 1)] for a in axes}
  work = [[] for _ in range(nb + 1)]
  window = [[] for _ in range(npf)]
  plain, plain_axis, total_axis = [], {a: [] for a in axes}, {
      a: [] for a in axes}
  waited = {a: [] for a in axes}
  any_sync = any_pf = False
  for c in op_costs:
    if c.category == "compute":
      p = buckets.positions[c.op_name]
      if nb:
        work[buckets.segment(p)].append(c.time_s)
      w = prefetch.window(p) if npf else npf
      if w < npf:
        window[w].append(c.time_s)
      continue
    for a, t in c.time_by_axis:
      total_axis.setdefault(a, []).append(t)
    b = buckets.sync_bucket(c) if enabled else None
    if b is not None:
      any_sync = True
      wait = dict(c.wait_by_axis)
      for a, t in c.time_by_axis:
        # Nothing waits for a sync's barrier but the step's end, which
        # waits for every device anyway: it is hidden, and takes no link.
        sync[a][b].append(t - wait.get(a, 0.0))
        waited.setdefault(a, []).append(wait.get(a, 0.0))
    elif npf and prefetch_lib.is_prefetch(c, prefetch):
      any_pf = True
      b = prefetch.bucket_of[c.op_name]
      seg = buckets.segment(prefetch.need[c.op_name])
      for a, t in c.time_by_axis:
        gath[a][b].append(t)
        taken[a][seg].append(t)
    else:
      plain.append(c.time_s)
      for a, t in c.time_by_axis:
        plain_axis.setdefault(a, []).append(t)
  work_s = [math.fsum(w) for w in work]
  window_s = [math.fsum(w) for w in window]
  parts, by_axis = list(plain), []
  for a in axes:
    total = math.fsum(total_axis.get(a, ()))
    exposed_plain = math.fsum(plain_axis.get(a, ()))
    eta = axis_efficiency(mapping, a)
    sync_s = [math.fsum(s) for s in sync[a]]
    gather_s = [math.fsum(s) for s in gath[a]]
    taken_s = ([math.fsum(s) for s in taken[a]] if any(gather_s)
               else None)
    e = (exposed_sync_time(sync_s, work_s, eta, taken_s) if any_sync
         else 0.0)
    p = (prefetch_lib.exposed_prefetch_time(gather_s, window_s, eta)
         if any_pf else 0.0)
    if any_sync:
      parts.append(e)
    if any_pf:
      parts.append(p)
    sync_total, gather_total = math.fsum(sync_s), math.fsum(gather_s)
    hidden = max(0.0, sync_total - e) + max(0.0, gather_total - p)
    wait = math.fsum(waited.get(a, ()))
    by_axis.append(AxisOverlap(
        a, total, exposed_plain + e + p, hidden + wait, sync_total + wait,
        eta, gather_total, e, p, interference_time(hidden, eta), wait))
  return Overlap(bool(enabled), tuple(by_axis), tuple(parts))
