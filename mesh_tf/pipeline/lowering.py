"""Lowering a pipelined step: stage device groups, sends, the schedule.

:func:`stage_impls` splits a backend (a
:class:`~mesh_tf.lowering.PlacementMeshImpl` or a
:class:`~mesh_tf.lowering.ShapeMeshImpl`) along the pipeline's stage axis:
stage ``s`` gets a backend of the same kind on the rest of the mesh, over
the devices whose stage coordinate is ``s``, with the same layout rules
(so tensor and data parallelism run inside each stage as usual).

:func:`lower_pipeline` then lowers a
:class:`~mesh_tf.pipeline.program.PipelineProgram` on them: each stage's
``pre`` ops once; every forward and backward step in the schedule's order
(:func:`~mesh_tf.pipeline.schedule.schedule_order`), each chained after the
previous step of its stage; the activation a step makes is *sent* to the
next stage's devices and its input gradient back to the previous one,
device by device (the boundary tensor has the same layout on both
groups); the gradients accumulate over the microbatches (a gradient whose
data-parallel all-reduce is still pending accumulates as partial sums, so
it is all-reduced once per step, not once per microbatch -- also through
the widening cast of a bfloat16 gradient to its float32 master and the
ZeRO-1 move onto the storage shard, which the program lets run after the
reduction, see :class:`~mesh_tf.lowering.laid_out.PendingFinish`); tied
variables' gradients are exchanged between their holders; then each
stage's update.

Every send is a pair of records in the stage backends' traces:
``CollectiveRecord(kind="send")`` in the sender's and ``kind="recv"`` in
the receiver's, over ``mesh_axes=(stage axis,)`` with ``group_size=2``
and the bytes each device sends.  :class:`PipelineTrace` also cuts the
traces into one :class:`Segment` per step, so that the cost model can
price a microbatch's work, its sends and the update apart.
"""

import contextlib
import dataclasses
from typing import NamedTuple, Optional, Tuple

from mesh_tf.core.dims import Shape
from mesh_tf.lowering.laid_out import LaidOutTensor, LazyAllreduceSum
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.lowering import Lowering
from mesh_tf.lowering.placement import PlacementMeshImpl
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.lowering.trace import CollectiveRecord
from mesh_tf.pipeline.schedule import (BACKWARD, FORWARD, Step,
                                       schedule_order)
from mesh_tf.pipeline.spec import PipelineError
from mesh_tf.training.microbatch import accumulate_sums

__all__ = ["PipelineTrace", "Segment", "lower_pipeline", "stage_groups",
           "stage_impls"]

SEND, RECV = "send", "recv"


class Segment(NamedTuple):
  """The trace records stage ``stage`` made in one part of the step.

  ``step`` is a :class:`~mesh_tf.pipeline.schedule.Step`, or one of
  ``"setup"`` (the pre ops), ``"tied"`` (the tied gradients' exchange) and
  ``"update"``.
  """
  stage: int
  step: object
  collectives: Tuple[CollectiveRecord, ...]
  compute: Tuple[object, ...]


class PipelineTrace(NamedTuple):
  """What :func:`lower_pipeline` recorded: ``stages`` are the stage
  backends' whole traces, ``segments`` cut them per step, in the order
  lowered."""
  pipeline: object
  stages: Tuple[object, ...]
  segments: Tuple[Segment, ...]


class LoweredPipeline(NamedTuple):
  """The result of :func:`lower_pipeline`: ``losses`` (one laid-out scalar
  per microbatch, on the last stage), ``update_ops`` (the TF ops of every
  stage's update; None entries on the shape-only backend) and ``trace``."""
  losses: Tuple[object, ...]
  update_ops: Tuple[object, ...]
  trace: PipelineTrace


def stage_groups(impl, pipeline):
  """The pnums of each stage's device group, in row-major order of the
  other axes (the stage backend's processor order)."""
  pipeline.check_mesh(impl.shape, impl.layout_rules)
  a = impl.shape.dimension_names.index(pipeline.axis)
  groups = [[] for _ in range(pipeline.stages)]
  for pnum in range(impl.size):
    groups[impl.pnum_to_processor_coordinates(pnum)[a]].append(pnum)
  return tuple(tuple(g) for g in groups)


def stage_impls(impl, pipeline):
  """One backend per stage, of ``impl``'s kind, on the mesh without the
  stage axis (a PlacementMeshImpl's stages fuse kernels as it does).

  Raises:
    PipelineAxisError: see :meth:`Pipeline.check_mesh`.
    PipelineError: for a backend other than the two above.
  """
  groups = stage_groups(impl, pipeline)
  sub = Shape([d for d in impl.shape.dims if d.name != pipeline.axis])
  if isinstance(impl, PlacementMeshImpl):
    return tuple(PlacementMeshImpl(sub, impl.layout_rules,
                                   [impl.devices[p] for p in g],
                                   fuse=impl.fuser is not None)
                 for g in groups)
  if isinstance(impl, ShapeMeshImpl):
    return tuple(ShapeMeshImpl(sub, impl.layout_rules) for _ in groups)
  raise PipelineError(
      f"pipeline stages on axis {pipeline.axis}={pipeline.stages} run on a "
      f"PlacementMeshImpl or a ShapeMeshImpl, not {type(impl).__name__}")


def send(src, dst, x, axis, name):
  """Sends LaidOutTensor ``x`` from backend ``src``'s devices to ``dst``'s,
  device ``k`` to device ``k``; records the send and the receive."""
  for impl, kind in ((src, SEND), (dst, RECV)):
    impl.trace.collectives.append(CollectiveRecord(
        name, kind, (axis,), 2, x.slice_bytes))
  if x.tensor_list is None:
    return LaidOutTensor(x.slice_shape, x.dtype)
  out = []
  for device, t in zip(dst.devices, x.tensor_list):
    with tf.device(device):
      out.append(tf.identity(t))
  return LaidOutTensor(x.slice_shape, x.dtype, out)


def _add(impl, a, b, name):
  with impl.recording(name):
    return impl.slicewise(lambda x, y: x + y, a, b, slice_shape=a.slice_shape,
                          dtype=a.dtype)


class _Marks:
  """Cuts a stage backend's trace into segments."""

  def __init__(self, impls):
    self.impls, self.segments = impls, []

  @contextlib.contextmanager
  def segment(self, stage, step):
    trace = self.impls[stage].trace
    n_c, n_k = len(trace.collectives), len(trace.compute)
    yield
    self.segments.append(Segment(stage, step,
                                 tuple(trace.collectives[n_c:]),
                                 tuple(trace.compute[n_k:])))


def _flush(impl):
  """Runs the kernels a fusing backend still defers, so that they join the
  step being lowered (its control dependencies), not a later one."""
  fuser = getattr(impl, "fuser", None)
  if fuser is not None and not tf.executing_eagerly():
    fuser.flush(tf.compat.v1.get_default_graph())


def _tensor_lists(values):
  out = []
  for v in values:
    if v is not None and getattr(v, "tensor_list", None) is not None:
      out.extend(v.tensor_list)
  return out


class _Run:
  """The state of one pipelined lowering."""

  def __init__(self, program, impls, feeds, pipeline):
    self.program, self.impls = program, impls
    self.pipeline = pipeline
    self.feeds = feeds
    self.marks = _Marks(impls)
    self.lowerings = [Lowering.empty(c.graph, {c.mesh: impls[c.stage]})
                      for c in program.chunks]
    self.activations, self.grads_in = {}, {}  # (j, mb) -> LaidOutTensor
    self.saved = {}      # (j, mb) -> forward tensors
    self.acc = [dict() for _ in impls]   # stage -> var name -> gradient
    self.losses = [None] * self.pipeline.microbatches
    self.deps = [[] for _ in impls]    # TF tensors a stage's next step waits on

  def _ordered(self, stage):
    deps = self.deps[stage]
    if not deps:
      return contextlib.nullcontext()
    return tf.control_dependencies(deps)

  def _feed(self, chunk, lw, mb):
    if self.feeds is not None:
      lw.feeds = {t: self.feeds[name][mb] for name, t in chunk.inputs.items()}

  def setup(self):
    for c, lw in zip(self.program.chunks, self.lowerings):
      with self.marks.segment(c.stage, "setup"):
        lw.lower_operations(c.pre)
        _flush(self.impls[c.stage])

  def _locate(self, step):
    """``(virtual stage j, its chunk, its lowering, the stage's backend,
    the microbatch)`` of one schedule step."""
    j = self.pipeline.virtual_stage(step.stage, step.chunk)
    return (j, self.program.chunks[j], self.lowerings[j],
            self.impls[step.stage], step.microbatch)

  def forward(self, step):
    p = self.pipeline
    j, chunk, lw, impl, mb = self._locate(step)
    with self.marks.segment(step.stage, step), self._ordered(step.stage):
      self._feed(chunk, lw, mb)
      if chunk.x_in is not None:
        lw.set_tensor_lowering(chunk.x_in, self.activations.pop((j, mb)))
      lw.lower_operations(chunk.forward)
      y = lw.laid_out(chunk.output)
      self.saved[(j, mb)] = {t: lw.tensors[t] for op in chunk.forward
                             for t in op.outputs}
      if chunk.x_in is not None:
        self.saved[(j, mb)][chunk.x_in] = lw.tensors[chunk.x_in]
      if j + 1 < p.virtual_stages:
        nxt, c = p.location(j + 1)
        with self.marks.segment(nxt, Step(nxt, c, mb, FORWARD)):
          self.activations[(j + 1, mb)] = send(
              impl, self.impls[nxt], y, p.axis,
              f"pipeline/activation/{j}->{j + 1}")
      else:
        self.losses[mb] = y
      _flush(impl)
    self.deps[step.stage] = _tensor_lists([y])

  def backward(self, step):
    p = self.pipeline
    j, chunk, lw, impl, mb = self._locate(step)
    with self.marks.segment(step.stage, step), self._ordered(step.stage):
      lw.tensors.update(self.saved.pop((j, mb)))
      if chunk.dy is not None:
        lw.set_tensor_lowering(chunk.dy, self.grads_in.pop((j, mb)))
      lw.lower_operations(chunk.backward)
      acc, made = self.acc[step.stage], []
      for v, g in zip(chunk.variables, chunk.grads):
        if g is None:
          continue
        acc[v.name] = accumulate_sums(impl, acc.get(v.name), lw.tensors[g],
                                  f"pipeline/accumulate/{v.name}")
        made.append(getattr(acc[v.name], "laid_out_input", acc[v.name]))
      if chunk.dx is not None:
        dx = lw.laid_out(chunk.dx)
        made.append(dx)
        prv, c = p.location(j - 1)
        with self.marks.segment(prv, Step(prv, c, mb, BACKWARD)):
          self.grads_in[(j - 1, mb)] = send(
              impl, self.impls[prv], dx, p.axis,
              f"pipeline/activation_grad/{j}->{j - 1}")
      _flush(impl)
    self.deps[step.stage] = _tensor_lists(made)

  def exchange_tied(self):
    """Each holder of a tied variable adds the others' gradients."""
    p = self.pipeline
    for name, stages in sorted(self.program.tied.items()):
      parts = {}
      for s in stages:
        g = self.acc[s][name]
        lazy = isinstance(g, LazyAllreduceSum)
        parts[s] = (g.laid_out_input if lazy else g,
                    lazy and (g.mesh_axes, g.then_key))
      if len({axes for _, axes in parts.values()}) > 1:
        parts = {s: (self.acc[s][name].to_laid_out_tensor(), False)
                 for s in stages}
      received = {s: [] for s in stages}
      with contextlib.ExitStack() as segments:
        for s in stages:
          segments.enter_context(self.marks.segment(s, "tied"))
        for s in stages:
          for t in stages:
            if t != s:
              received[t].append(send(self.impls[s], self.impls[t],
                                      parts[s][0], p.axis,
                                      f"pipeline/tied/{name}/{s}->{t}"))
        for t in stages:
          total = parts[t][0]
          for r in received[t]:
            total = _add(self.impls[t], total, r,
                         f"pipeline/tied/{name}/sum")
          g = self.acc[t][name]
          self.acc[t][name] = (
              LazyAllreduceSum(self.impls[t], total, g.mesh_axes,
                               then=g.then)
              if parts[t][1] is not False else total)

  def update(self):
    ops = []
    for u in self.program.updates:
      impl = self.impls[u.stage]
      lw = Lowering.empty(u.graph, {u.mesh: impl})
      with self.marks.segment(u.stage, "update"), self._ordered(u.stage):
        for name, t in u.grad_inputs.items():
          lw.set_tensor_lowering(t, self.acc[u.stage][name])
        lw.lower_operations(u.operations)
        _flush(impl)
      for op in u.update_ops:
        ops.extend(lw.lowered_operation(op) or [])
    return tuple(ops)


def lower_pipeline(program, impls, feeds=None, microbatches=None):
  """Lowers a pipelined training step on the stage backends ``impls``.

  Args:
    program: a :class:`~mesh_tf.pipeline.program.PipelineProgram`.
    impls: one backend per stage (:func:`stage_impls`).
    feeds: input name -> list of ``m`` microbatch values (TF tensors); None
      on the shape-only backend.
    microbatches: lower the schedule of only this many microbatches (of
      the program's size) instead of ``m``: every microbatch records the
      same, so a shape-only trace for :func:`~mesh_tf.pipeline.costs.
      stage_costs` needs one (``p`` for interleaving), at ``1/m`` of the
      time.  The trace's ``pipeline`` is then the shortened one.

  Returns:
    A :class:`LoweredPipeline`.

  Raises:
    PipelineError: if ``impls`` has not one backend per stage.
  """
  p = program.pipeline
  if len(impls) != p.stages:
    raise PipelineError(f"the pipeline on axis {p.axis}={p.stages} needs one "
                        f"backend per stage, got {len(impls)}")
  if microbatches is not None:
    p = dataclasses.replace(p, microbatches=microbatches)
  run = _Run(program, tuple(impls), feeds, p)
  run.setup()
  for step in schedule_order(p):
    if step.phase == FORWARD:
      run.forward(step)
    else:
      run.backward(step)
  run.exchange_tied()
  update_ops = run.update()
  trace = PipelineTrace(p, tuple(i.trace for i in impls),
                        tuple(run.marks.segments))
  return LoweredPipeline(tuple(run.losses), update_ops, trace)


def last_stage_losses(lowered, impls, program) -> Optional[list]:
  """The microbatch losses as TF scalars (None on the shape-only backend)."""
  impl = impls[program.pipeline.stages - 1]
  if not isinstance(impl, PlacementMeshImpl):
    return None
  loss = program.chunks[-1].output
  return [impl.export_to_tf_tensor(x, loss.shape) for x in lowered.losses]
