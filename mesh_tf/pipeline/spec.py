"""The pipeline split as a value: :class:`Pipeline` and its errors.

A mesh axis carries the pipeline's ``stages``: the devices with coordinate
``s`` on that axis (a *device group*: the rest of the mesh) run stage
``s``.  The ``layers`` repeated layers are split into ``stages * chunks``
contiguous groups; group ``j`` (a *virtual stage*) runs on stage
``j % stages`` as its chunk ``j // stages`` (Megatron's interleaving:
chunk 0 of every stage, then chunk 1...).  The first virtual stage also
runs what precedes the layers (the embedding), the last what follows them
(the output layer and the loss).  A step runs ``microbatches``
microbatches through the stages in the order of the ``schedule``.

Example:
  >>> p = Pipeline("stage", stages=2, microbatches=4, layers=8, chunks=2,
  ...              schedule=Schedule.INTERLEAVED_1F1B)
  >>> p.split
  (2, 2, 2, 2)
  >>> p.layers_of(1, 0), p.location(3)
  (range(2, 4), (1, 1))
  >>> Pipeline.from_dict(p.to_dict()) == p
  True
"""

import dataclasses
import enum
from typing import Optional, Tuple

from mesh_tf.core.dims import convert_to_shape
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import convert_to_layout_rules

__all__ = ["Pipeline", "PipelineAxisError", "PipelineBatchError",
           "PipelineError", "PipelineScheduleError", "PipelineSplitError",
           "Schedule"]


class PipelineError(MtfError):
  """A pipeline that cannot run as asked."""


class PipelineAxisError(PipelineError):
  """The stage axis is missing, of the wrong size, or used by a rule."""


class PipelineSplitError(PipelineError):
  """The layers do not split into the stages and chunks asked for."""


class PipelineScheduleError(PipelineError):
  """The schedule cannot run these stages, chunks and microbatches."""


class PipelineBatchError(PipelineError):
  """The batch does not split into the microbatches."""


class Schedule(str, enum.Enum):
  """The order of a stage's forward and backward microbatch steps.

  * ``GPIPE``: every forward, then every backward (Huang et al., 2019):
    a stage holds the activations of all ``m`` microbatches.
  * ``ONE_F_ONE_B``: ``p - s - 1`` forwards to fill the pipeline, then one
    forward and one backward in turn (PipeDream-flush, Narayanan et al.,
    2021): stage ``s`` holds at most ``p - s`` microbatches.
  * ``INTERLEAVED_1F1B``: 1F1B over ``v`` chunks per stage (Megatron-LM's
    interleaved schedule): the bubble shrinks by ``v``.
  """
  GPIPE = "gpipe"
  ONE_F_ONE_B = "1f1b"
  INTERLEAVED_1F1B = "interleaved_1f1b"


@dataclasses.dataclass(frozen=True)
class Pipeline:
  """Pipeline parallelism over a mesh axis.

  Attributes:
    axis: the mesh axis that carries the stages.
    stages: ``p``, the stage count (the axis's size), at least 2.
    microbatches: ``m``, microbatches per step.
    layers: the model's repeated layers.
    chunks: ``v``, layer groups per stage (more than 1 only for
      ``INTERLEAVED_1F1B``).
    schedule: a :class:`Schedule` (or its value, e.g. ``"1f1b"``).
    split: layers of each virtual stage ``j = chunk * p + stage``
      (``p * v`` counts summing to ``layers``); default: even.

  Raises:
    PipelineSplitError: layers that do not split evenly (with no
      ``split``), or a ``split`` of the wrong length or sum.
    PipelineScheduleError: fewer than 2 stages, chunks that the schedule
      cannot run, or for interleaving microbatches not a multiple of the
      stages.
  """
  axis: str
  stages: int
  microbatches: int
  layers: int
  chunks: int = 1
  schedule: Schedule = Schedule.ONE_F_ONE_B
  split: Optional[Tuple[int, ...]] = None

  def __post_init__(self):
    try:
      object.__setattr__(self, "schedule", Schedule(self.schedule))
    except ValueError:
      raise PipelineScheduleError(
          f"unknown pipeline schedule {self.schedule!r}; use one of "
          f"{[s.value for s in Schedule]}") from None
    for name in ("stages", "microbatches", "layers", "chunks"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineScheduleError(
            f"pipeline {name}={value!r} must be an integer >= 1")
    p, v, m = self.stages, self.chunks, self.microbatches
    where = f"on mesh axis {self.axis}={p}"
    if p < 2:
      raise PipelineScheduleError(
          f"stages={p} {where} is no pipeline; give the axis 2 or more "
          "devices, or drop the pipeline")
    if self.schedule == Schedule.INTERLEAVED_1F1B:
      if v < 2:
        raise PipelineScheduleError(
            f"schedule interleaved_1f1b {where} needs chunks >= 2, got "
            f"chunks={v}; use schedule 1f1b for one chunk per stage")
      if m % p:
        raise PipelineScheduleError(
            f"schedule interleaved_1f1b {where} needs microbatches a "
            f"multiple of the stages, got microbatches={m}; use e.g. "
            f"microbatches={p * max(1, -(-m // p))}")
    elif v != 1:
      raise PipelineScheduleError(
          f"schedule {self.schedule.value} {where} runs one chunk per "
          f"stage, got chunks={v}; use schedule interleaved_1f1b")
    if self.split is None:
      if self.layers % (p * v):
        raise PipelineSplitError(
            f"{self.layers} layers do not split evenly into {p} stages x "
            f"{v} chunks {where}; give a layer count divisible by {p * v}, "
            "other stages or chunks, or an explicit split")
      object.__setattr__(self, "split", (self.layers // (p * v),) * (p * v))
    else:
      split = tuple(self.split)
      object.__setattr__(self, "split", split)
      if (len(split) != p * v or sum(split) != self.layers
          or any(not isinstance(n, int) or n < 0 for n in split)):
        raise PipelineSplitError(
            f"split={split} must give {p * v} layer counts >= 0 (one per "
            f"stage x chunk {where}) summing to layers={self.layers}")

  # --- the split --------------------------------------------------------
  @property
  def virtual_stages(self):
    """``p * v``: the layer groups, in the order data flows through them."""
    return self.stages * self.chunks

  def virtual_stage(self, stage, chunk):
    """The layer group of ``chunk`` on ``stage``: ``chunk * p + stage``."""
    return chunk * self.stages + stage

  def location(self, virtual_stage):
    """``(stage, chunk)`` of a virtual stage."""
    return virtual_stage % self.stages, virtual_stage // self.stages

  def layers_of(self, stage, chunk=0):
    """The repeated layers chunk ``chunk`` of ``stage`` runs (a range)."""
    j = self.virtual_stage(stage, chunk)
    start = sum(self.split[:j])
    return range(start, start + self.split[j])

  # --- as data -----------------------------------------------------------
  def to_dict(self):
    """A JSON-ready dict (see :meth:`from_dict`)."""
    return {"axis": self.axis, "stages": self.stages,
            "microbatches": self.microbatches, "layers": self.layers,
            "chunks": self.chunks, "schedule": self.schedule.value,
            "split": list(self.split)}

  @classmethod
  def from_dict(cls, d):
    """The Pipeline of :meth:`to_dict`'s dict (validated again).

    Raises:
      PipelineError: for missing or unknown keys, or an invalid pipeline.
    """
    fields = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(d, dict) or set(d) - fields or not {
        "axis", "stages", "microbatches", "layers"} <= set(d):
      raise PipelineError(
          f"a pipeline is a dict of {sorted(fields)} (axis, stages, "
          f"microbatches and layers required), got {d!r}")
    d = dict(d)
    if d.get("split") is not None:
      d["split"] = tuple(d["split"])
    return cls(**d)

  # --- checks against a mesh and a batch ---------------------------------
  def check_mesh(self, mesh_shape, layout_rules):
    """Checks that ``mesh_shape`` has the stage axis at size ``stages`` and
    that no layout rule splits a dim over it.

    Raises:
      PipelineAxisError: naming the axis (``name=size``) and the rule.
    """
    shape = convert_to_shape(mesh_shape)
    rules = convert_to_layout_rules(layout_rules)
    if self.axis not in shape.dimension_names:
      raise PipelineAxisError(
          f"pipeline stage axis {self.axis!r} is not in mesh {shape!r}; "
          f"add {self.axis}:{self.stages} to the mesh or use one of "
          f"{shape.dimension_names}")
    size = shape.get_dim_by_name(self.axis).size
    if size != self.stages:
      raise PipelineAxisError(
          f"pipeline stage axis {self.axis}={size} has {size} device groups"
          f" but the pipeline has stages={self.stages}; make them equal")
    for dim_name, axes in rules.rules:
      if self.axis in axes:
        raise PipelineAxisError(
            f"layout rule {dim_name}:{'+'.join(axes)} splits {dim_name} over"
            f" the pipeline stage axis {self.axis}={size}; a stage axis "
            "carries stages only: map the dim to another axis")

  def microbatch_size(self, batch):
    """Rows per microbatch of a ``batch``-row step.

    Raises:
      PipelineBatchError: if ``batch`` does not divide by the microbatches.
    """
    if batch % self.microbatches:
      raise PipelineBatchError(
          f"batch={batch} does not split into microbatches="
          f"{self.microbatches} on pipeline axis {self.axis}={self.stages}; "
          "give a batch divisible by the microbatches, or other "
          "microbatches")
    return batch // self.microbatches
