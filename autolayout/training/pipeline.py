"""Pipeline parallelism, as one training-decision family: the
:class:`mesh_tf.pipeline.Pipeline` the step runs (stage axis, stages p,
chunks v, microbatches m, schedule, layer split), and what a plan on a
chip count the layout does not fill carries with it: the chips left idle
and the :class:`mesh_tf.training.padding.Padding` of the batch to whole
microbatches (the value the lowering takes).

The value is a :class:`PipelineDecision` (None: no pipeline, the default).
It reuses the language's :class:`~mesh_tf.pipeline.Pipeline` for the split
itself, so the plan, the lowering (:class:`mesh_tf.pipeline.
PipelineTrainStep`) and the cost model (:mod:`costmodels.pipeline`) read
one value.  The pipelined step is not one graph: it is built by
:func:`mesh_tf.pipeline.build_program` (stage graphs) and priced by
:mod:`autolayout.training.pipeline_price`, so :meth:`Pipelined.configure`
refuses :func:`~autolayout.training.build.build_training` (readers take
the pipelined path, :mod:`autolayout.plans.pipelined`).

With a pipeline the step's gradients accumulate over the pipeline's
microbatches, so the ``microbatches`` family stays 1, and ``recompute`` is
all the layers or none (the pipelined space's choices).

Example:
  >>> d = FAMILY.parse("stages=2,microbatches=4,layers=4,padding=6/8")
  >>> FAMILY.describe(d)
  'stage:2 1f1b v=1 m=4 split 2/2, padded rows 2 (batch 6 -> 8)'
  >>> FAMILY.from_json(FAMILY.to_json(d)) == d
  True
"""

import dataclasses
from typing import Optional

from costmodels.arguments import echo
from mesh_tf.pipeline.spec import Pipeline, PipelineError
from mesh_tf.training.padding import Padding, PaddingError
from autolayout.training.family import DecisionFamily, DecisionValueError

__all__ = ["FAMILY", "PipelineDecision", "Pipelined"]

# The JSON fields of a decision besides the Pipeline's own.
EXTRA_FIELDS = ("padding", "idle_chips", "scatter_gather")


@dataclasses.dataclass(frozen=True)
class PipelineDecision:
  """A pipelined step's decisions.

  Attributes:
    pipeline: the :class:`~mesh_tf.pipeline.Pipeline` (stage axis, stages,
      microbatches, layers, chunks, schedule, split).
    padding: the :class:`~mesh_tf.training.padding.Padding` of the batch
      to whole microbatches of every replica (the padded rows are priced
      as work, and the lowering masks them out of the loss), or None.
    idle_chips: the topology's chips the mesh leaves unused.
    scatter_gather: each tensor-parallel rank sends a slice of a stage
      boundary's activation and the receivers all-gather it (Narayanan
      et al., 2021, section 4.1), rather than every rank sending it whole.
  """
  pipeline: Pipeline
  padding: Optional[Padding] = None
  idle_chips: int = 0
  scatter_gather: bool = True

  @property
  def padded_rows(self):
    """The rows the padding adds (0 without one)."""
    return 0 if self.padding is None else self.padding.rows

  def to_dict(self):
    return {**self.pipeline.to_dict(),
            "padding": None if self.padding is None else
            self.padding.to_dict(),
            "idle_chips": self.idle_chips,
            "scatter_gather": self.scatter_gather}


def _count(name, value):
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise DecisionValueError(f"pipeline.{name} is {value!r}",
                             f"use an integer >= 0 for pipeline.{name}")
  return value


class Pipelined(DecisionFamily):
  """``pipeline``: a :class:`PipelineDecision`, or None for no pipeline."""
  name = "pipeline"
  default = None
  flag = "--pipeline"
  description = ("pipeline parallelism: the stage axis, stages, chunks per "
                 "stage, microbatches, schedule and layer split, with the "
                 "idle chips and padded rows (null: no pipeline)")
  example = "stages=2,microbatches=4,layers=8,chunks=2,schedule=" \
            "interleaved_1f1b"

  def check(self, value):
    if value is None:
      return None
    if isinstance(value, Pipeline):
      value = PipelineDecision(value)
    if not isinstance(value, PipelineDecision) or not isinstance(
        value.pipeline, Pipeline):
      raise DecisionValueError(
          f"pipeline is {echo(value, 60)}",
          "give a PipelineDecision (a mesh_tf.pipeline.Pipeline and its "
          "padded rows and idle chips), or None")
    if value.padding is not None:
      try:
        pad = Padding(*value.padding).check()
      except (PaddingError, TypeError) as e:
        raise DecisionValueError(f"pipeline.padding: {e}",
                                 "give the batch's real and padded sizes")
      if pad.dim != "batch":
        raise DecisionValueError(
            f"pipeline.padding pads dim {pad.dim!r}",
            "a pipelined step pads the batch: write dim \"batch\"")
      value = dataclasses.replace(value, padding=pad)
    _count("idle_chips", value.idle_chips)
    if not isinstance(value.scatter_gather, bool):
      raise DecisionValueError(
          f"pipeline.scatter_gather is {value.scatter_gather!r}",
          "use true or false")
    return value

  def to_json(self, value):
    return None if value is None else value.to_dict()

  def from_json(self, data):
    if data is None:
      return None
    if not isinstance(data, dict):
      raise DecisionValueError(
          f"pipeline is {echo(data, 60)}",
          "write an object such as {\"axis\": \"stage\", \"stages\": 2, "
          "\"microbatches\": 4, \"layers\": 8, ...}, or null")
    own = {k: v for k, v in data.items() if k not in EXTRA_FIELDS}
    try:
      pipe = Pipeline.from_dict(own)
    except (PipelineError, TypeError) as e:
      raise DecisionValueError(f"pipeline: {e}",
                               "fix the pipeline's fields (stages >= 2, a "
                               "split summing to the layers)") from None
    extra = {k: data[k] for k in EXTRA_FIELDS if k in data}
    if extra.get("padding") is not None:
      try:
        extra["padding"] = Padding.from_dict(extra["padding"])
      except PaddingError as e:
        raise DecisionValueError(f"pipeline.padding: {e}",
                                 "write {\"dim\": \"batch\", "
                                 "\"real_size\": B, \"padded_size\": P}, "
                                 "or null") from None
    return self.check(PipelineDecision(pipe, **extra))

  def parse(self, text):
    """``stages=2,microbatches=4,layers=8[,chunks=2][,schedule=...]
    [,split=2/2/2/2][,axis=stage][,padding=REAL/PADDED][,idle_chips=0]``
    (``padding``: the batch's real and padded rows)."""
    fields = {}
    for part in str(text).split(","):
      key, sep, value = part.strip().partition("=")
      if not sep:
        raise DecisionValueError(
            f"cannot read {echo(part.strip(), 30)} of pipeline "
            f"{echo(text, 60)}", f"write key=value items, e.g. "
            f"{self.example}")
      if key in ("axis", "schedule"):
        fields[key] = value
      elif key == "scatter_gather":
        fields[key] = value.lower() in ("1", "true", "yes")
      elif key == "padding":
        real, _, padded = value.partition("/")
        try:
          fields[key] = {"dim": "batch", "real_size": int(real),
                         "padded_size": int(padded)}
        except ValueError:
          raise DecisionValueError(f"pipeline padding={value!r} is not "
                                   "two row counts",
                                   "write e.g. padding=13/16") from None
      elif key == "split":
        try:
          fields[key] = [int(n) for n in value.split("/")]
        except ValueError:
          raise DecisionValueError(f"pipeline split={value!r} is not "
                                   "layer counts", "write e.g. split=3/3/2")
      else:
        try:
          fields[key] = int(value)
        except ValueError:
          raise DecisionValueError(f"pipeline {key}={value!r} is not an "
                                   "integer", f"write e.g. {key}=2") from None
    fields.setdefault("axis", "stage")
    return self.from_json(fields)

  def describe(self, value):
    if value is None:
      return "none"
    p = value.pipeline
    text = (f"{p.axis}:{p.stages} {p.schedule.value} v={p.chunks} "
            f"m={p.microbatches} split {'/'.join(map(str, p.split))}")
    if value.idle_chips:
      text += f", idle chips {value.idle_chips}"
    if value.padding is not None and value.padded_rows:
      text += (f", padded rows {value.padded_rows} (batch "
               f"{value.padding.real_size} -> {value.padding.padded_size})")
    return text

  def rank(self, value):
    return 0 if value is None else value.pipeline.stages

  def configure(self, config, value):
    if value is None:
      return config
    raise DecisionValueError(
        "a pipelined step is a program of stage graphs, not one graph",
        "build it with autolayout.plans.pipelined.build_program (or "
        "mesh_tf.pipeline.build_program) and price it with "
        "autolayout.training.pipeline_price")

  def check_with(self, decisions):
    """The checks across families: with a pipeline the microbatches are
    the pipeline's and recompute is every layer or none.

    Raises:
      DecisionValueError: naming both fields and the fix.
    """
    value = decisions.pipeline
    if value is None:
      return
    p = value.pipeline
    if decisions.microbatches != 1:
      raise DecisionValueError(
          f"microbatches={decisions.microbatches} with a pipeline of "
          f"microbatches={p.microbatches}",
          "the pipeline's microbatches carry the gradient accumulation: "
          f"set pipeline microbatches={decisions.microbatches * p.microbatches}"
          " and microbatches=1")
    if decisions.recompute not in (0, p.layers):
      raise DecisionValueError(
          f"recompute={decisions.recompute} with a pipeline of "
          f"layers={p.layers}",
          f"a pipelined plan recomputes every layer or none: use recompute="
          f"{p.layers} or 0")


FAMILY = Pipelined()
