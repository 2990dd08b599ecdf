"""Pricing a layout: lower on the shape-only backend, price the trace.

``evaluate(graph, mesh_shape, layout_rules, topology)`` runs the graph's own
lowering code on :class:`mesh_tf.ShapeMeshImpl` (no TensorFlow), so the
collectives, FLOPs and variable slices it prices are exactly those a real
lowering would produce.  There is no second description of what each op
communicates.

**Step time.**  Every trace record gets a price: compute records by the
roofline of :mod:`costmodels.compute`, collectives by the alpha-beta
formulas of :mod:`costmodels.collectives` on the links
:func:`costmodels.map_mesh` assigns to their mesh axes.  Collectives on the
critical path are exposed in full; gradient syncs run under the rest of the
backward pass and sharded parameters' all-gathers are prefetched under the
compute before their readers, and only the part compute does not hide is
exposed (:mod:`costmodels.overlap` and :mod:`costmodels.prefetch`, from the
lowering's op order).  So

    ``step_time_s == compute_time_s + comm_time_s``  (exposed comm)

and, with ``overlap=False`` or a graph without gradient syncs or sharded
weights,
``step_time_s == math.fsum(c.time_s for c in op_costs(trace, mapping))``
exactly.  The layout optimizer reproduces both exactly.
"""

import math
from typing import NamedTuple, Tuple

from mesh_tf.core.errors import MtfError
from mesh_tf.lowering.lowering import lower
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.lowering.trace import CollectiveRecord
from mesh_tf.ops.creation import ImportOperation
from costmodels import arguments
from costmodels import collectives as coll
from costmodels import compute as compute_lib
from costmodels import hardware
from costmodels import memory as memory_lib
from costmodels import overlap as overlap_lib
from costmodels import sync_hold
from costmodels import prefetch as prefetch_lib
from costmodels.report import CostReport
from costmodels.topology import get_topology, map_mesh


_NO_VALUE = object()


class OpCost(NamedTuple):
  """The price of one trace record.

  Attributes:
    op_name: the op being lowered when the record was made.
    source_op: the op whose layout caused it (differs from ``op_name`` for a
      lazy SUM all-reduce, which runs when a later op reads the value).
    category: ``"compute"`` or ``"comm"``.
    kind: ``"compute"`` or the collective kind (``allreduce``...).
    mesh_axes: the collective's mesh axes (``()`` for compute).
    group_size: participants per group (1 for compute).
    flops_per_device: FLOPs (0 for collectives).
    bytes_per_device: bytes read + written (compute) or the input slice
      bytes (comm).
    time_s: seconds.
    time_by_axis: ``((axis, seconds), ...)``: ``time_s`` split over the mesh
      axes whose links each phase uses (a phase on a physical dimension
      shared by several axes is split evenly between them).
    reduction: the collective's reduction, if any.
    wait_by_axis: of ``time_by_axis``, the barrier's part
      (:attr:`costmodels.hardware.LinkSpec.barrier_s`: the group's members
      waiting for each other), on the axes that pay it; ``()`` without one.
      The step waits for it on the critical path, not for a gradient sync
      (:mod:`costmodels.overlap`).
    repeats: how often the record runs per step (the microbatch count for
      per-microbatch work, see :mod:`mesh_tf.training.microbatch`); ``time_s``,
      ``time_by_axis``, ``flops_per_device`` and ``bytes_per_device`` are
      totals over the repeats.
  """
  op_name: str
  source_op: str
  category: str
  kind: str
  mesh_axes: Tuple[str, ...]
  group_size: int
  flops_per_device: int
  bytes_per_device: int
  time_s: float
  time_by_axis: Tuple[Tuple[str, float], ...] = ()
  reduction: str = None
  repeats: int = 1
  wait_by_axis: Tuple[Tuple[str, float], ...] = ()


def _unpack(record):
  if isinstance(record, CollectiveRecord):
    return (record.kind, tuple(record.mesh_axes), record.group_size,
            record.bytes_per_device, record.reduction)
  record = tuple(record)
  if len(record) == 4:
    record = record + (None,)
  kind, axes, group, nbytes, reduction = record
  if isinstance(axes, str):
    axes = (axes,)
  return kind, tuple(axes), int(group), nbytes, reduction


def _links(mapping, axes, group):
  links = mapping.link_params(axes)
  size = math.prod(l.size for l in links)
  if size != group:
    expected = math.prod(mapping[a].size for a in axes)
    raise MtfError(
        f"collective over mesh axes {axes} has group size {group}, but on "
        f"mesh {mapping.mesh_shape!r} those axes have {expected} processors;"
        " price a trace with the mapping of the mesh it was lowered on")
  return links


def collective_time(record, mapping):
  """Seconds of one collective on the links of ``mapping``.

  Args:
    record: a :class:`mesh_tf.CollectiveRecord`, or a tuple
      ``(kind, mesh_axes, group_size, bytes_per_device[, reduction])``.
    mapping: the :class:`costmodels.MeshMapping` of the mesh.

  Example:
    >>> from costmodels import map_mesh
    >>> m = map_mesh("dgx-h100", "model:8")
    >>> t = collective_time(("allreduce", ("model",), 8, 2**20, "SUM"), m)
    >>> round(t * 1e6, 2)   # 14 steps of 1 us + 2*7/8 MiB at 450 GB/s
    18.08
  """
  return collective_price(record, mapping)[0]


def collective_time_by_axis(record, mapping):
  """``{axis: seconds}``; the values add up to :func:`collective_time`."""
  return collective_price(record, mapping)[1]


def collective_wait_by_axis(record, mapping):
  """``{axis: seconds}`` of the barrier part of
  :func:`collective_time_by_axis` (see ``OpCost.wait_by_axis``); empty
  when the links have no barrier."""
  return collective_price(record, mapping)[2]


def collective_price(record, mapping):
  """``(seconds, {axis: seconds}, {axis: barrier seconds})`` of one
  collective: :func:`collective_time`, :func:`collective_time_by_axis` and
  :func:`collective_wait_by_axis` at once."""
  kind, axes, group, nbytes, _ = _unpack(record)
  t, by_axis, waits = _price(kind, axes, group, nbytes, mapping)
  return t, dict(by_axis), dict(waits)


def _owners(link, axes):
  """The mesh axes among ``axes`` a phase on ``link`` is charged to."""
  return [o for o in link.owners if o in axes] or list(axes)


def _price(kind, axes, group, nbytes, mapping):
  """``(seconds, ((axis, seconds), ...), ((axis, barrier seconds),
  ...))`` of one collective."""
  links = _links(mapping, axes, group)
  phases = coll.phase_times(kind, nbytes, links)
  by_axis = {a: 0.0 for a in axes}
  for link, t in phases:
    owners = _owners(link, axes)
    for o in owners:
      by_axis[o] += t / len(owners)
  wait = coll.barrier_phase(links)
  waits = ()
  if wait is not None:
    owners = _owners(wait[0], axes)
    waits = tuple((o, wait[1] / len(owners)) for o in owners)
  return sum(t for _, t in phases), tuple(by_axis.items()), waits


def op_costs(trace, mapping, microbatches=None):
  """A price for every record of ``trace``: compute records first (in trace
  order), then collectives (in trace order).

  ``sum`` (or ``math.fsum``) of their ``time_s`` is the step time of
  :func:`evaluate`; see the module docstring.  With a
  :class:`mesh_tf.training.microbatch.MicrobatchPlan`, each record's price is times
  the repeats of the op whose layout caused it (``source_op``).
  """
  chip = mapping.topology.chip
  rep = (lambda name: 1) if microbatches is None else microbatches.repeats
  out = []
  for r in trace.compute:
    k = rep(r.op_name)
    out.append(OpCost(r.op_name, r.op_name, "compute", "compute", (), 1,
                      k * r.flops_per_device,
                      k * (r.output_bytes_per_device
                           + r.input_bytes_per_device),
                      k * compute_lib.compute_time(r, chip), repeats=k))
  for r in trace.collectives:
    t, by_axis, waits = _price(r.kind, tuple(r.mesh_axes), r.group_size,
                               r.bytes_per_device, mapping)
    src = r.source_op or r.op_name
    k = rep(src)
    out.append(OpCost(r.op_name, src, "comm", r.kind,
                      tuple(r.mesh_axes), r.group_size, 0,
                      k * r.bytes_per_device, k * t,
                      tuple((a, k * x) for a, x in by_axis), r.reduction, k,
                      tuple((a, k * x) for a, x in waits)))
  return out


def _single_mesh(graph):
  meshes = []
  for op in graph.operations:
    if op.mesh not in meshes:
      meshes.append(op.mesh)
  if len(meshes) > 1:
    raise MtfError(
        f"graph uses meshes {[m.name for m in meshes]}; the cost model "
        "prices one mesh at a time, so build the graph on one mesh")
  return meshes[0] if meshes else None


def trace_graph(graph, mesh_shape, layout_rules, outputs=None):
  """Lowers ``graph`` on :class:`mesh_tf.ShapeMeshImpl` and returns its trace.

  ``outputs`` (default: every tensor no op reads) are forced, so that lazy
  SUM all-reduces still pending on them are recorded, as when a real
  lowering exports them.

  Raises:
    mesh_tf.MtfError: subclasses, for a layout the graph cannot take.
  """
  impl = ShapeMeshImpl(mesh_shape, layout_rules)
  mesh = _single_mesh(graph)
  if mesh is None:
    return impl.trace
  # Inputs imported without a value (fed at run time) need none here: the
  # shape-only backend ignores values.
  feeds = {op.outputs[0]: _NO_VALUE for op in graph.operations
           if isinstance(op, ImportOperation) and op.value is None}
  lowering = lower(graph, {mesh: impl}, feeds=feeds)
  if outputs is None:
    outputs = memory_lib.default_outputs(graph)
  for t in outputs:
    lowering.laid_out(t)
  return impl.trace


def evaluate(graph, mesh_shape, layout_rules, topology, outputs=None,
             schedule=None, liveness=None,
             memory_reserve_fraction=hardware.DEFAULT_MEMORY_RESERVE_FRACTION,
             *, microbatches=None, overlap=True):
  """Predicts the step time and peak memory of ``graph`` under a layout.

  Args:
    graph: an mtf Graph (one mesh).
    mesh_shape: e.g. ``"data:16;model:8"``.
    layout_rules: e.g. ``"batch:data;d_ff:model"``.
    topology: a :class:`costmodels.Topology` or name (``"tpu-v4-4x4x8"``).
    outputs: tensors that are results of the step (forced, and kept live);
      default: every tensor no op reads.  The memory model is
      ``memory.schedule(graph, outputs)`` and ``memory.live_intervals(graph,
      that schedule, outputs)`` with these same outputs.  Inputs imported
      without a value (fed at run time) need no feed here.
    schedule: an operation order for the memory model (default
      :func:`costmodels.memory.schedule`).
    liveness: a :class:`costmodels.memory.Liveness` of ``graph`` with these
      ``outputs`` (from :func:`costmodels.memory.liveness`), to reuse one
      schedule over many layouts; replaces ``schedule``.
    memory_reserve_fraction: the part of the chip's HBM kept free for the
      runtime and fragmentation (the report's ``usable_memory_bytes``).
    microbatches: a :class:`mesh_tf.training.microbatch.MicrobatchPlan` when the
      graph is one microbatch of a step (per-microbatch work is priced
      ``k`` times; memory is that of one microbatch plus the
      accumulators).
    overlap: hide gradient syncs under the rest of the backward pass
      (:mod:`costmodels.overlap`) and prefetch the all-gathers of sharded
      weights (:mod:`costmodels.prefetch`); False: every collective is
      exposed (the conservative figure).

  Returns:
    A :class:`costmodels.CostReport`.

  Raises:
    mesh_tf.InvalidArgumentError: for a misused argument (named, with a
      valid value).
    costmodels.TopologyError: if the mesh does not fit the topology.
    mesh_tf.LayoutError: subclasses, for a layout the graph cannot take.

  Example:
    >>> import mesh_tf as mtf
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> x = mtf.zeros(mesh, "batch:64,d_model:1024")
    >>> w = mtf.get_variable(mesh, "w", "d_model:1024,d_ff:4096")
    >>> y = mtf.einsum([x, w], reduced_dims=[w.shape[0]])
    >>> r = evaluate(g, "data:2;model:4", "batch:data;d_model:model",
    ...              "dgx-h100")
    >>> [(c.kind, c.mesh_axes) for c in r.collectives]
    [('allreduce', ('model',))]
  """
  # The edge: names and strings are checked and resolved here, once; below
  # this point only typed values travel.
  graph = arguments.check_graph(graph)
  topology = get_topology(topology)
  mesh_shape = arguments.check_mesh_shape(mesh_shape)
  rules = arguments.check_rules(layout_rules)
  mapping = map_mesh(topology, mesh_shape)
  outputs = arguments.check_outputs(graph, outputs)
  trace = trace_graph(graph, mesh_shape, rules, outputs)
  costs = op_costs(trace, mapping, microbatches)
  if liveness is None:
    liveness = memory_lib.liveness(graph, outputs, schedule)
  profile = memory_lib.memory_profile(
      graph, mesh_shape, rules, liveness_plan=sync_hold.liveness_on_chip(
          graph, trace, topology.chip, liveness))
  hidden = overlap_lib.overlap(costs, overlap_lib.gradient_buckets(graph),
                               mapping, enabled=overlap,
                               prefetch=prefetch_lib.prefetch_buckets(graph))
  return CostReport(graph=graph, mesh_shape=mesh_shape, layout_rules=rules,
                    topology=topology, mapping=mapping, trace=trace,
                    op_costs=costs, memory=profile,
                    memory_reserve_fraction=memory_reserve_fraction,
                    overlap=hidden)
