"""The work of one pipeline stage, measured from the ShapeMeshImpl trace.

:func:`stage_work` lowers the training step of a model built with one and
with two repeated layers (each a graph of ``k >= 2`` microbatches, so that
the :class:`mesh_tf.microbatch.MicrobatchPlan` says which ops run per
microbatch and which once per step) on :class:`mesh_tf.ShapeMeshImpl`, on
the mesh of one stage (the data and tensor axes), and prices every record
as :func:`costmodels.evaluate` does.  Then

* one layer's work is the two-layer trace less the one-layer trace (the
  same records the lowering of any number of layers repeats);
* the model's ends are the one-layer trace less one layer, and are split
  between the first stage (the records before the first layer and after
  its last gradient: the embedding and its gradient) and the last stage
  (the output layer and the loss);
* a record runs per microbatch if the plan repeats its (source) op; a
  SUM all-reduce or reduce-scatter over a data-parallel axis of a
  per-microbatch gradient (or of the microbatches' summed gradient, by
  the accumulation) is the gradient reduction, which a pipelined
  step runs once per step on the accumulated gradient, exposed in the
  fraction ``sync_exposed`` (the topology's ``overlap`` data, see
  :func:`sync_exposure`).

The result is a :class:`costmodels.pipeline.StageWork`, which
:func:`costmodels.pipeline.price_pipeline` prices for any stage count,
chunk count, microbatch count and schedule.
"""

import math
import re

from costmodels import compute as compute_lib
from costmodels import memory as memory_lib
from costmodels import overlap as overlap_lib
from costmodels.evaluate import _price, trace_graph
from costmodels.pipeline import StageWork
from costmodels.topology import get_topology, map_mesh
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.training.storage import StoragePlan

_SYNC_KINDS = ("allreduce", "reduce_scatter")
_GRADIENT = re.compile(r"_grad\d*(_|/|$)")


def sync_exposure(mapping, axes):
  """The fraction of a once-per-step gradient reduction over ``axes``
  that the step waits for: ``1 - overlap efficiency`` of the slowest link
  (:func:`costmodels.overlap.link_overlap_efficiency`), so a cluster whose
  topology says its gradient reduction does not overlap (efficiency 0)
  exposes all of it."""
  etas = [overlap_lib.link_overlap_efficiency(s.link)
          for a in axes for s in mapping[a].segments]
  return 1.0 - (min(etas) if etas else 0.0)


class _Priced:
  """Seconds of a trace split into per-microbatch, per-step and sync (and
  the sync's bytes per device)."""

  def __init__(self):
    self.mb = 0.0
    self.step = 0.0
    self.sync = 0.0
    self.sync_bytes = 0
    self.flops = 0.0
    self.fwd = 0.0   # of mb, the forward pass's
    self.step_fixed = 0.0   # of step, its records' fixed costs


def _price_trace(trace, plan, mapping, data_axes, first_ops=None,
                 accumulations=frozenset()):
  """``(_Priced total, _Priced of the records whose op is in first_ops)``
  (``accumulations``: the names of the ops that reduce the microbatches'
  summed gradients once per step, :mod:`mesh_tf.training.microbatch`)."""
  chip = mapping.topology.chip
  total, first = _Priced(), _Priced()
  forward = _forward_ops(trace)
  for r in trace.compute:
    t = compute_lib.compute_time(r, chip)
    per_mb = plan.repeats(r.op_name) > 1
    for acc in (total,) + ((first,) if first_ops and r.op_name in first_ops
                           else ()):
      if per_mb:
        acc.mb += t
        acc.flops += r.flops_per_device
        acc.fwd += t if r.op_name in forward else 0.0
      else:
        acc.step += t
        acc.step_fixed += _fixed_time(r, chip)
  for r in trace.collectives:
    src = r.source_op or r.op_name
    axes = tuple(r.mesh_axes)
    per_mb = plan.repeats(src) > 1
    # A SUM over a data-parallel axis of a per-microbatch value is a
    # gradient reduction (or the loss, reported once per step too), and
    # so is an accumulation's reduction of the summed gradient.
    sync = bool((per_mb or src in accumulations) and r.kind in _SYNC_KINDS
                and r.reduction == "SUM" and set(axes) & set(data_axes))
    if sync and math.prod(mapping[a].size for a in axes) != r.group_size:
      t = 0.0   # traced on another data size: price_sync prices its bytes
    else:
      t = _price(r.kind, axes, r.group_size, r.bytes_per_device, mapping)[0]
    for acc in (total,) + ((first,) if first_ops and src in first_ops
                           else ()):
      if sync:
        acc.sync += t
        acc.sync_bytes += r.bytes_per_device
      elif per_mb:
        acc.mb += t
        acc.fwd += t if src in forward else 0.0
      else:
        acc.step += t
  return total, first


def _fixed_time(record, chip):
  """The seconds ``record`` costs whatever its size (its launch and hand-
  off, a fit's latency): its price with no FLOPs and no bytes; 0 on every
  preset."""
  return compute_lib.compute_time(record._replace(
      flops_per_device=0, output_bytes_per_device=0,
      input_bytes_per_device=0), chip)


def _forward_ops(trace):
  """Names of the compute records of the forward pass: those before the
  first record whose name says it is a gradient (the trace is in the
  graph's order; a recomputation runs with the backward): the gradient
  ops' names end in ``_grad``, ``_grad0``, ... or go on after ``_grad_``
  (``stop_gradient`` is the forward pass's)."""
  names = [r.op_name for r in trace.compute]
  end = next((i for i, n in enumerate(names) if _GRADIENT.search(n)),
             len(names))
  return frozenset(names[:end])


def _accumulations(graph):
  return frozenset(op.name for op in graph.operations
                   if getattr(op, "reduces_sums", False))


def price_collective(kind, axes, group, nbytes, mapping):
  """Seconds of one collective of ``nbytes`` per device over ``axes``
  (as :func:`costmodels.collective_time` prices a trace record)."""
  if not nbytes or group == 1:
    return 0.0
  return _price(kind, tuple(axes), group, nbytes, mapping)[0]


def price_sync(work, mapping, data_axes, zero=0):
  """``work`` with its gradient reduction re-priced on the data axes of
  ``mapping`` (a mesh with other data-parallel sizes than the one it was
  measured on), exposed in the fraction of :func:`sync_exposure`.  The
  per-device compute of a stage does not depend on the data-parallel
  size (each replica's microbatch is the same), so one measurement serves
  every size.

  ``zero`` is the ZeRO stage over the data axes (0-3), with data
  size ``D``:

  * 0: one all-reduce of the layer's, and of the ends', gradient bytes
    per device per step (bucketed);
  * 1: the optimizer state and the float32 master weights are sharded
    ``1/D`` (as :mod:`mesh_tf.training.storage` stores them): a
    reduce-scatter of the gradients, the update of a ``1/D`` shard (the
    once-per-step work divided by ``D``) and an all-gather of the updated
    weights' compute copy (the same bytes) once per step, which the step
    then holds whole (with the cast of its shard under mixed precision;
    :func:`costmodels.pipeline.held_copy_bytes`);
  * 2: the gradients are sharded too: the reduce-scatter runs per
    microbatch (in the per-microbatch work, exposed as the step's
    reduction is), the all-gather once per step;
  * 3: as 2, but the compute copy is not held: instead of the once-per-step
    all-gather each microbatch gathers every layer's compute copy twice,
    before its forward and again before its backward (the recompute, if
    any, and the backward share the second; :mod:`mesh_tf.training.storage`
    stage 3), and one layer's gathered copy joins the working set.  The
    gathers are per-microbatch work (``layer_gather_bytes``: the bytes
    each device contributes, the shards, as the lowering's ``allconcat``
    records count them).  A backward without recompute regathers slightly
    fewer bytes than the forward (weights whose gradient does not read
    them, e.g. a bias), so it is priced a little high.

  Only variables whose storage dim ``D`` divides are sharded
  (:meth:`costmodels.pipeline.StageWork.sharded_part`): the lowering
  lays the storage dim over the data axis only where it divides, and
  stores the others whole, with a plain all-reduce of their gradients
  (stage 1: once per step, as stage 0; stages 2 and 3: per microbatch,
  where the storage op reduces them) and no gathers.
  """
  if zero not in (0, 1, 2, 3):
    raise MtfError(f"zero={zero!r}: the pipelined space prices ZeRO "
                   "stages 0, 1, 2 and 3; use one of them")
  group = 1
  for a in data_axes:
    group *= mapping[a].size
  if group == 1:
    return work._replace(layer_sync_s=0.0, base_sync_s=0.0).with_copies()
  exposed = sync_exposure(mapping, data_axes)
  axes = tuple(data_axes)

  def t(kind, nbytes):
    if not nbytes:
      return 0.0
    return exposed * _price(kind, axes, group, nbytes, mapping)[0]
  if zero == 0:
    return work._replace(layer_sync_s=t("allreduce", work.layer_sync_bytes),
                         base_sync_s=t("allreduce", work.base_sync_bytes)
                         ).with_copies()

  def shard(nbytes, base=False):
    # The bytes sharding takes off a device.
    part = work.sharded_part(nbytes, group, base)
    return part - part // group
  opt = shard(work.layer_optimizer_bytes)
  opt_base = shard(work.base_optimizer_bytes, True)
  grad = shard(work.layer_gradient_bytes) if zero >= 2 else 0
  grad_base = shard(work.base_gradient_bytes, True) if zero >= 2 else 0
  # The master weights, the state that is neither optimizer nor gradient:
  # the lowering stores them sharded from stage 1 (the compute copy is
  # gathered from the shard, see held_copy_bytes).
  weights = shard(work.layer_state_bytes - work.layer_optimizer_bytes
                  - work.layer_gradient_bytes)
  weights_base = shard(work.base_state_bytes - work.base_optimizer_bytes
                       - work.base_gradient_bytes, True)
  grad += weights
  grad_base += weights_base
  base_state = work.base_state_bytes - opt_base - grad_base
  # The gradient reduction of the sharded variables, and of the whole ones.
  sync = work.sharded_part(work.layer_sync_bytes, group)
  sync_base = work.sharded_part(work.base_sync_bytes, group, True)
  whole, whole_base = (work.layer_sync_bytes - sync,
                       work.base_sync_bytes - sync_base)

  def update(seconds, base=False):
    # The update of the shards (1/D of the sharded variables) and of the
    # whole variables; a shard runs as many records as the whole variable,
    # so their fixed costs (launch, hand-off) stay whole.
    f = work.sharded_fraction(group, base)
    fixed = work.base_step_fixed_s if base else work.layer_step_fixed_s
    return fixed + (seconds - fixed) * (1.0 - f + f / group)

  def end(held):
    # The first / last stage's part of the ends' state, scaled alike.
    if held is None or not work.base_state_bytes:
      return held
    return int(held * base_state / work.base_state_bytes)
  out = work._replace(
      layer_step_s=update(work.layer_step_s),
      base_step_s=update(work.base_step_s, True),
      layer_state_bytes=work.layer_state_bytes - opt - grad,
      base_state_bytes=base_state,
      first_state_bytes=end(work.first_state_bytes),
      last_state_bytes=end(work.last_state_bytes),
      # An all-gather is priced by the shard each device starts with.
      layer_sync_s=t("allgather", sync // group),
      base_sync_s=t("allgather", sync_base // group)).with_copies(
          zero, group)
  if zero == 1:
    return out._replace(
        layer_sync_s=out.layer_sync_s + t("reduce_scatter", sync)
        + t("allreduce", whole),
        base_sync_s=out.base_sync_s + t("reduce_scatter", sync_base)
        + t("allreduce", whole_base))
  # ZeRO 2: a reduce-scatter of each microbatch's gradients (an all-reduce
  # of the whole variables').
  ends = t("reduce_scatter", sync_base) + t("allreduce", whole_base)
  out = out._replace(
      layer_s=work.layer_s + t("reduce_scatter", sync)
      + t("allreduce", whole),
      first_s=work.first_s + ends / 2, last_s=work.last_s + ends / 2)
  if zero == 2:
    return out
  # ZeRO 3: two gathers of each layer shard per microbatch, none per
  # step; each end stage gathers the shards of the ends' variables it
  # reads, once per pass that reads them (end_gathers).
  piece, piece_base = sync // group, sync_base // group
  first, last = end_gathers(work, group)
  if not work.end_copies:
    first = last = piece_base
  # One of a layer's two gathers runs before its forward pass.
  forward = (None if work.layer_forward_s is None
             else work.layer_forward_s + t("allgather", piece))
  return out._replace(
      layer_s=out.layer_s + 2 * t("allgather", piece),
      layer_forward_s=forward,
      first_s=out.first_s + t("allgather", first),
      last_s=out.last_s + t("allgather", last),
      layer_sync_s=0.0, base_sync_s=0.0,
      working_bytes=work.working_bytes + sync,
      layer_gather_bytes=2 * piece, base_gather_bytes=first + last)


def end_gathers(work, group):
  """``(first, last)``: the bytes each device of the first (last) stage
  contributes per microbatch to the ZeRO-3 gathers of the ends' sharded
  variables (their compute-dtype shards, once per pass that reads them
  there: the embedding lookup's backward does not read its table, the
  output layer's does), as the lowering's ``allconcat`` records count
  them."""
  first = last = 0
  for c in work.end_copies:
    size, compute, uses_first, uses_last = c[1], c[4], c[5], c[6]
    if size and size % group == 0:
      first += compute // group * uses_first
      last += compute // group * uses_last
  return first, last


def _first_stage_ops(trace, layer_prefix, accumulations=frozenset()):
  """Names of the compute records before the first layer's first record
  and after its last one (the embedding and its gradient); the
  once-per-step accumulations (``accumulations``), which finish every
  gradient after the backward pass, do not count as the layer's."""
  names = [r.op_name for r in trace.compute]
  idx = [i for i, n in enumerate(names)
         if n.startswith(layer_prefix) and n not in accumulations]
  if not idx:
    return set()
  return set(names[:idx[0]]) | set(names[idx[-1] + 1:])


def boundary_tensor(graph, layer_prefix="layer_0/"):
  """The activation that crosses a stage boundary: the largest input of
  the first op of the first layer (the residual stream)."""
  for op in graph.operations:
    if op.name.startswith(layer_prefix) and op.inputs:
      return max(op.inputs, key=lambda t: t.shape.size)
  return None


def _state_bytes(graph, mesh_shape, rules, cats=("params", "gradients",
                                                "optimizer")):
  total = 0
  for v in graph.all_variables:
    if memory_lib.tensor_category(v.outputs[0]) in cats:
      total += memory_lib.tensor_bytes_per_device(v.outputs[0], mesh_shape,
                                                  rules)
  return total


def storage_split(graph, mesh_shape, rules, layer_prefix="layer_0/",
                  dims=StoragePlan().dims):
  """``(layer, ends)``: the first layer's and the other trainable
  variables' elements per device (under ``rules``, the tensor-parallel
  split) by the size of their storage dim, the first of ``dims`` each
  has (as :func:`mesh_tf.training.storage.shard_storage` picks it; 0:
  none), as sorted ``(size, elements)`` pairs
  (:attr:`costmodels.pipeline.StageWork.layer_storage`).  ZeRO's
  lowering shards a variable over the data axis only where its size
  divides the storage dim (the storage rule is laid out only then)."""
  layer, ends = {}, {}
  for v in graph.trainable_variables:
    t = v.outputs[0]
    n = (memory_lib.tensor_bytes_per_device(t, mesh_shape, rules)
         // dtypes_lib.size_of(t.dtype))
    dim = next((d for d in t.shape if d.name in dims), None)
    into = layer if v.name.startswith(layer_prefix) else ends
    size = dim.size if dim is not None else 0
    into[size] = into.get(size, 0) + n
  return tuple(sorted(layer.items())), tuple(sorted(ends.items()))


def _casts(consumers, variable):
  """The float casts of ``variable``'s value to another dtype (its
  compute copies under mixed precision; a recomputed layer casts again)."""
  t = variable.outputs[0]
  return [op.outputs[0] for op in consumers.get(t, [])
          if getattr(op, "kind", None) == "cast"
          and op.outputs[0].dtype != t.dtype
          and dtypes_lib.is_floating(op.outputs[0].dtype)]


def _end_holder(consumers, variable, casts, plan, first_ops):
  """``(where, first uses, last uses)``: ``where`` is ``"first"``,
  ``"last"`` or ``"both"``, the stage(s) whose per-microbatch ops read
  ``variable`` (or a cast of it), and the uses are the passes (forward,
  backward: 0-2) that read it there -- the gathers of its shard per
  microbatch under ZeRO 3."""
  readers = [op for t in [variable.outputs[0]] + casts
             for op in consumers.get(t, [])
             if plan.repeats(op.name) > 1 and op.outputs
             and op.outputs[0] not in casts]

  def uses(ops):
    backward = {any(o.gradient_of is not None for o in op.outputs)
                or "_grad" in op.name for op in ops}
    return len(backward)
  first = [op for op in readers if op.name in first_ops]
  last = [op for op in readers if op.name not in first_ops]
  where = ("both" if bool(first) == bool(last)
           else ("first" if first else "last"))
  return where, uses(first), uses(last)


def compute_copies(graph, plan, mesh_shape, rules, first_ops,
                   layer_prefix="layer_0/", dims=StoragePlan().dims):
  """``(layer, ends)``: the first layer's trainable variables' compute
  copies per device, as sorted ``(storage size, casts' bytes, cast bytes,
  compute bytes)`` summed by storage size, and each of the ends'
  variables' ``(where, storage size, cast bytes, cast bytes, compute
  bytes, first uses, last uses)`` (a stage of the pipeline casts an end's
  variable once), ``where`` the stage that holds it (``"first"``: read
  per microbatch by ``first_ops`` only, ``"last"``: by the others only,
  ``"both"``), and the passes that read it on each (``_end_holder``); see
  :attr:`costmodels.pipeline.StageWork.layer_copies`.  ``plan``: the
  graph's :class:`mesh_tf.training.microbatch.MicrobatchPlan`."""
  consumers = graph.consumers()
  layer, ends = {}, []
  for v in graph.trainable_variables:
    t = v.outputs[0]
    n = (memory_lib.tensor_bytes_per_device(t, mesh_shape, rules)
         // dtypes_lib.size_of(t.dtype))
    casts = _casts(consumers, v)
    dtype = casts[0].dtype if casts else t.dtype
    compute = n * dtypes_lib.size_of(dtype)
    cast = compute if casts else 0
    dim = next((d for d in t.shape if d.name in dims), None)
    size = dim.size if dim is not None else 0
    if v.name.startswith(layer_prefix):
      old = layer.get(size, (0, 0, 0))
      layer[size] = (old[0] + len(casts) * cast, old[1] + cast,
                     old[2] + compute)
      continue
    where, first, last = _end_holder(consumers, v, casts, plan, first_ops)
    ends.append((where, size, cast, cast, compute, first, last))
  return (tuple((k,) + layer[k] for k in sorted(layer)),
          tuple(sorted(ends)))


def stage_work(build, mesh_shape, layout_rules, topology, data_axes=(),
               layer_prefix="layer_0/", stash_bytes=None, price_mesh=None,
               *, memo=None):
  """The :class:`~costmodels.pipeline.StageWork` of a model.

  Args:
    build: ``build(layers) -> (graph, microbatch_plan)``: the training
      step with ``layers`` repeated layers, of at least 2 microbatches of
      the pipeline's microbatch size.
    mesh_shape, layout_rules: the layout of one stage (its data and tensor
      axes; typed values or strings).
    topology: the topology the stage's mesh maps onto (the cluster's
      chips of one stage).
    data_axes: the mesh axes over which gradients are reduced.
    layer_prefix: the op-name prefix of the first layer's ops.
    stash_bytes: bytes a layer keeps per microbatch in flight; default:
      what a second layer adds to the traced step's peak memory beyond its
      state, at least the boundary activation (the layer's input, all a
      fully recomputed layer keeps).
    price_mesh: the mesh whose mapping on ``topology`` prices the trace
      (default ``mesh_shape``): the same axes, its non-data axes the same
      sizes, in another order or with another data-parallel size (the
      gradient reduction's time is then only its bytes; see
      :func:`price_sync`).  One trace then prices a tensor axis inside a
      node and across nodes.
    memo: a dict the caller owns, to reuse the graphs, traces and memory
      schedules of one ``(mesh_shape, layout_rules)`` across calls (e.g.
      both placements of a search).
  """
  topology = get_topology(topology)
  mapping = map_mesh(topology, price_mesh or mesh_shape)
  key = (str(mesh_shape), str(layout_rules))
  hit = None if memo is None else memo.get(key)
  if hit is None:
    g1, plan1 = build(1)
    g2, plan2 = build(2)
    hit = (g1, plan1, g2, plan2, trace_graph(g1, mesh_shape, layout_rules),
           trace_graph(g2, mesh_shape, layout_rules),
           memory_lib.liveness(g1), memory_lib.liveness(g2))
    if memo is not None:
      memo[key] = hit
  g1, plan1, g2, plan2, tr1, tr2, live1, live2 = hit
  sums1 = _accumulations(g1)
  first_ops = _first_stage_ops(tr1, layer_prefix, sums1)
  one, first = _price_trace(tr1, plan1, mapping, data_axes, first_ops,
                            sums1)
  two, _ = _price_trace(tr2, plan2, mapping, data_axes,
                        accumulations=_accumulations(g2))
  layer = _Priced()
  for f in ("mb", "step", "sync", "sync_bytes", "flops", "fwd",
            "step_fixed"):
    setattr(layer, f, getattr(two, f) - getattr(one, f))
  base_mb = one.mb - layer.mb
  exposed = sync_exposure(mapping, data_axes) if data_axes else 0.0
  boundary = boundary_tensor(g1, layer_prefix)
  nbytes = (memory_lib.tensor_bytes_per_device(boundary, mesh_shape,
                                               layout_rules)
            if boundary is not None else 0)
  prof1 = memory_lib.memory_profile(g1, mesh_shape, layout_rules,
                                    liveness_plan=live1)
  prof2 = memory_lib.memory_profile(g2, mesh_shape, layout_rules,
                                    liveness_plan=live2)
  # A stage's state: its variables (weights, optimizer slots) and the
  # gradients the step holds (at the traced peak).
  state1 = (_state_bytes(g1, mesh_shape, layout_rules)
            + prof1.breakdown.get("gradients", 0))
  state2 = (_state_bytes(g2, mesh_shape, layout_rules)
            + prof2.breakdown.get("gradients", 0))
  layer_state = state2 - state1
  # What ZeRO shards over the data axis: the optimizer state (stage 1) and
  # the gradients (stage 2).
  opt1 = _state_bytes(g1, mesh_shape, layout_rules, ("optimizer",))
  opt2 = _state_bytes(g2, mesh_shape, layout_rules, ("optimizer",))
  grad1 = (_state_bytes(g1, mesh_shape, layout_rules, ("gradients",))
           + prof1.breakdown.get("gradients", 0))
  grad2 = (_state_bytes(g2, mesh_shape, layout_rules, ("gradients",))
           + prof2.breakdown.get("gradients", 0))
  working = prof1.breakdown.get("activations", 0)
  if stash_bytes is None:
    # The activations one more layer keeps from its forward pass to its
    # backward pass (its input alone under full recompute).
    stash_bytes = max(nbytes, _stash(live2, mesh_shape, layout_rules)
                      - _stash(live1, mesh_shape, layout_rules))
  base_state = max(0, state1 - layer_state)
  layer_storage, base_storage = storage_split(g1, mesh_shape, layout_rules,
                                              layer_prefix)
  layer_copies, end_copies = compute_copies(
      g1, plan1, mesh_shape, layout_rules, first_ops, layer_prefix)
  return StageWork(
      layer_s=layer.mb, first_s=min(first.mb, base_mb),
      last_s=max(0.0, base_mb - first.mb),
      layer_step_s=layer.step, base_step_s=one.step - layer.step,
      layer_sync_s=exposed * layer.sync,
      base_sync_s=exposed * (one.sync - layer.sync),
      boundary_bytes=nbytes,
      boundary_shape="" if boundary is None else ";".join(
          f"{d.name}:{d.size}" for d in boundary.shape.dims),
      boundary_dtype="bfloat16" if boundary is None else str(boundary.dtype),
      layer_state_bytes=layer_state,
      base_state_bytes=base_state,
      layer_stash_bytes=stash_bytes,
      working_bytes=working, layer_sync_bytes=layer.sync_bytes,
      base_sync_bytes=one.sync_bytes - layer.sync_bytes,
      layer_optimizer_bytes=opt2 - opt1,
      base_optimizer_bytes=max(0, opt1 - (opt2 - opt1)),
      layer_gradient_bytes=grad2 - grad1,
      base_gradient_bytes=max(0, grad1 - (grad2 - grad1)),
      first_state_bytes=int(base_state * _held_fraction(end_copies,
                                                        "first")),
      last_state_bytes=int(base_state * _held_fraction(end_copies, "last")),
      flops=layer.flops, layer_storage=layer_storage,
      base_storage=base_storage, layer_copies=layer_copies,
      end_copies=end_copies,
      layer_step_fixed_s=min(max(0.0, layer.step_fixed), layer.step),
      base_step_fixed_s=min(max(0.0, one.step_fixed - layer.step_fixed),
                            max(0.0, one.step - layer.step)),
      layer_forward_s=min(max(0.0, layer.fwd), layer.mb),
      first_forward_s=min(first.fwd, first.mb, base_mb),
      last_forward_s=min(max(0.0, one.fwd - layer.fwd - first.fwd),
                         max(0.0, base_mb - first.mb))).with_copies()


def _stash(live, mesh_shape, rules):
  """Per-device bytes of the activations live when the backward pass
  starts (the first op whose name says it is a gradient), in the
  memory model's schedule ``live`` (a :class:`costmodels.memory.Liveness`):
  what the forward pass keeps for it."""
  start = next((i for i, op in enumerate(live.step_ops)
                if "_grad" in getattr(op, "name", "")), None)
  if start is None:
    return 0
  total = 0
  for t, a, b in live.intervals:
    if a < start <= b and memory_lib.tensor_category(t) == "activations":
      total += memory_lib.tensor_bytes_per_device(t, mesh_shape, rules)
  return total


def _held_fraction(end_copies, stage):
  """The part of the ends' variable elements that the ``stage``
  (``"first"`` or ``"last"``) of a pipeline holds (its own and the tied
  ones), from :func:`compute_copies`' ends (whose compute bytes are
  proportional to the elements: one compute dtype)."""
  total = sum(c[4] for c in end_copies)
  if not total:
    return 0.5
  return sum(c[4] for c in end_copies if c[0] in (stage, "both")) / total
