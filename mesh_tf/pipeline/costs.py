"""What the cost model reads off a pipeline's trace, per stage.

:func:`stage_costs` takes a :class:`~mesh_tf.pipeline.spec.Pipeline` and
the :class:`~mesh_tf.pipeline.lowering.PipelineTrace` of its step (on
:class:`~mesh_tf.lowering.ShapeMeshImpl`, see
:func:`~mesh_tf.pipeline.step.trace_pipeline`; the device lowering records
the same) and returns one :class:`StageCost` per stage: the bytes each
device of the stage sends and receives per microbatch across the stage
boundaries, the activations one microbatch leaves on it, how many
microbatches it holds at the schedule's peak and what those hold, and the
tied gradients it exchanges once per step.  :func:`expected_boundary_bytes`
predicts the boundary bytes from the boundary tensor's shape and the
layout alone; the tests hold the two equal.

Example:
  >>> from mesh_tf import models, optimize
  >>> from mesh_tf.pipeline.spec import Pipeline
  >>> from mesh_tf.pipeline.step import trace_pipeline
  >>> parts = models.transformer_parts(models.TransformerConfig(layers=2))
  >>> pipe = Pipeline("stage", 2, 2, 2)
  >>> t = trace_pipeline(parts, pipe, "stage:2;data:2", "batch:data",
  ...                    optimize.SgdOptimizer(0.1))
  >>> [c.sent_bytes_per_microbatch for c in stage_costs(pipe, t)]
  [1024, 1024]
  >>> expected_boundary_bytes(pipe, "batch:4;length:8;d_model:16",
  ...                         "float32", "stage:2;data:2", "batch:data")
  (1024, 1024)
"""

from typing import NamedTuple, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.lowering.mesh_impl import MeshImpl
from mesh_tf.pipeline.schedule import FORWARD, Step, stage_steps, max_in_flight

__all__ = ["StageCost", "expected_boundary_bytes", "stage_costs"]


class StageCost(NamedTuple):
  """One stage's pipeline costs, in bytes per device of the stage.

  Attributes:
    stage: the stage.
    sent_bytes_per_microbatch: sent across stage boundaries per microbatch
      (its chunks' activations forward, their input gradients backward).
    received_bytes_per_microbatch: received likewise.
    activation_bytes_per_microbatch: what one microbatch's forward passes
      of all the stage's chunks write (an upper bound of what the backward
      keeps; recompute keeps less).
    max_in_flight: the most (chunk, microbatch) forwards whose backward has
      not run, under the schedule.
    peak_activation_bytes: what those hold at the peak (per chunk, its
      forward's bytes).
    tied_bytes: tied variables' gradients sent, once per step.
    flops_per_microbatch: the stage's forward and backward FLOPs (all
      chunks) for one microbatch: its share of the steady time.
    collective_bytes_per_microbatch: the stage's own collectives (tensor
      parallel all-reduces, ZeRO-3 gathers...) for one microbatch.
    step_collective_bytes: its collectives once per step (setup and
      update: ZeRO-1/2 gathers, the data-parallel gradient reduction).
  """
  stage: int
  sent_bytes_per_microbatch: int
  received_bytes_per_microbatch: int
  activation_bytes_per_microbatch: int
  max_in_flight: int
  peak_activation_bytes: int
  tied_bytes: int
  flops_per_microbatch: int = 0
  collective_bytes_per_microbatch: int = 0
  step_collective_bytes: int = 0


def _own(collectives):
  return sum(c.bytes_per_device for c in collectives
             if c.kind not in ("send", "recv"))


def stage_costs(pipeline, trace) -> Tuple[StageCost, ...]:
  """Per-stage costs read off ``trace`` (microbatch 0's segments; every
  microbatch records the same).

  Args:
    pipeline: the :class:`~mesh_tf.pipeline.spec.Pipeline`.
    trace: its :class:`~mesh_tf.pipeline.lowering.PipelineTrace`.

  Returns:
    One :class:`StageCost` per stage.
  """
  p = pipeline.stages
  sent, received, tied = [0] * p, [0] * p, [0] * p
  flops, own, once = [0] * p, [0] * p, [0] * p
  fwd = {}   # (stage, chunk) -> forward output bytes of one microbatch
  for seg in trace.segments:
    s = seg.stage
    if seg.step == "tied":
      tied[s] += sum(c.bytes_per_device for c in seg.collectives
                     if c.kind == "send")
    if seg.step in ("setup", "update"):
      once[s] += _own(seg.collectives)
    if not isinstance(seg.step, Step) or seg.step.microbatch != 0:
      continue
    flops[s] += sum(r.flops_per_device for r in seg.compute)
    own[s] += _own(seg.collectives)
    sent[s] += sum(c.bytes_per_device for c in seg.collectives
                   if c.kind == "send")
    received[s] += sum(c.bytes_per_device for c in seg.collectives
                       if c.kind == "recv")
    if seg.step.phase == FORWARD:
      key = (s, seg.step.chunk)
      fwd[key] = fwd.get(key, 0) + sum(r.output_bytes_per_device
                                       for r in seg.compute)
  out = []
  for s, steps, flight in zip(range(p), stage_steps(pipeline),
                              max_in_flight(pipeline)):
    held = peak = 0
    for step in steps:
      b = fwd.get((s, step.chunk), 0)
      held += b if step.phase == FORWARD else -b
      peak = max(peak, held)
    act = sum(fwd.get((s, c), 0) for c in range(pipeline.chunks))
    out.append(StageCost(s, sent[s], received[s], act, flight, peak,
                         tied[s], flops[s], own[s], once[s]))
  return tuple(out)


def expected_boundary_bytes(pipeline, boundary_shape, dtype, mesh_shape,
                            layout_rules) -> Tuple[int, ...]:
  """Per stage, the bytes each device sends across stage boundaries per
  microbatch, predicted from the boundary tensor alone.

  Every chunk but the model's last sends its activation on, every chunk
  but the first sends its input gradient back; both are one slice of the
  boundary tensor under the rules on the stage's mesh (the whole mesh
  without the stage axis).

  Args:
    pipeline: the :class:`~mesh_tf.pipeline.spec.Pipeline`.
    boundary_shape: the activation between layers (a Shape or string), at
      the microbatch size.
    dtype: its dtype.
    mesh_shape: the whole mesh, the stage axis included.
    layout_rules: the layout rules.

  Returns:
    One byte count per stage.
  """
  whole = dims_lib.convert_to_shape(mesh_shape)
  pipeline.check_mesh(whole, layout_rules)
  sub = dims_lib.Shape([d for d in whole.dims if d.name != pipeline.axis])
  impl = MeshImpl(sub, layout_rules)
  nbytes = impl.slice_size(dims_lib.convert_to_shape(boundary_shape)) * \
      dtypes_lib.size_of(dtype)
  last = pipeline.virtual_stages - 1
  out = []
  for s in range(pipeline.stages):
    js = [pipeline.virtual_stage(s, c) for c in range(pipeline.chunks)]
    sends = sum(j < last for j in js) + sum(j > 0 for j in js)
    out.append(sends * nbytes)
  return tuple(out)
