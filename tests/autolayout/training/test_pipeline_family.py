"""The pipeline as a training-decision family (issue 43 item 1 for the
pipeline decisions of issue 45): its value reuses mesh_tf.pipeline's
Pipeline, with the idle chips and padded rows; its JSON codec, command-line
syntax and checks across families."""

import pytest

from autolayout.training import pipeline as pipeline_family
from autolayout.training.families import TrainingDecisions, family
from autolayout.training.family import DecisionValueError
from autolayout.training.pipeline import PipelineDecision
from mesh_tf.pipeline import Pipeline, Schedule
from mesh_tf.training.padding import Padding

PIPE = Pipeline("stage", 2, 4, 8, 2, Schedule.INTERLEAVED_1F1B)


def test_the_family_is_registered_with_the_languages_value():
  assert family("pipeline") is pipeline_family.FAMILY
  assert TrainingDecisions().pipeline is None
  d = TrainingDecisions("bfloat16", 1, 8, 1, PipelineDecision(
      PIPE, Padding("batch", 14, 16), 3))
  assert d.pipeline.padded_rows == 2
  assert d.pipeline.pipeline is PIPE
  # A bare Pipeline is a decision with no idle chips or padding.
  assert TrainingDecisions(pipeline=PIPE).pipeline == PipelineDecision(PIPE)


def test_json_codec_round_trips_and_no_pipeline_is_left_out():
  d = TrainingDecisions("bfloat16", 2, 0, 1, PipelineDecision(
      PIPE, Padding("batch", 14, 16), 3, False))
  data = d.as_dict()
  assert data["pipeline"] == {
      "axis": "stage", "stages": 2, "microbatches": 4, "layers": 8,
      "chunks": 2, "schedule": "interleaved_1f1b", "split": [2, 2, 2, 2],
      "padding": {"dim": "batch", "real_size": 14, "padded_size": 16},
      "idle_chips": 3, "scatter_gather": False}
  assert TrainingDecisions.from_json(data) == d
  assert "pipeline" not in TrainingDecisions().as_dict()
  assert TrainingDecisions.from_json({"pipeline": None}).pipeline is None


def test_command_line_syntax():
  f = pipeline_family.FAMILY
  d = f.parse("stages=2,microbatches=4,layers=8,chunks=2,"
              "schedule=interleaved_1f1b,split=3/1/2/2,idle_chips=1,"
              "padding=13/16")
  assert d.pipeline.split == (3, 1, 2, 2) and d.idle_chips == 1
  assert d.padding == Padding("batch", 13, 16)
  assert f.describe(d) == ("stage:2 interleaved_1f1b v=2 m=4 split "
                           "3/1/2/2, idle chips 1, padded rows 3 (batch 13 "
                           "-> 16)")
  with pytest.raises(DecisionValueError, match="cannot read 'stages' of "
                     "pipeline"):
    f.parse("stages")
  with pytest.raises(DecisionValueError, match="pipeline split='a/b' is not"):
    f.parse("stages=2,microbatches=2,layers=2,split=a/b")


def test_bad_values_name_the_field_and_the_fix():
  f = pipeline_family.FAMILY
  with pytest.raises(DecisionValueError, match=r"pipeline.idle_chips is -1;"
                     r" use an integer >= 0"):
    f.check(PipelineDecision(PIPE, None, -1))
  with pytest.raises(DecisionValueError, match=r"pipeline.padding: padding "
                     r"batch=8 to 6: the padded size must be"):
    f.check(PipelineDecision(PIPE, Padding("batch", 8, 6)))
  with pytest.raises(DecisionValueError, match="pipeline.padding pads dim "
                     "'length'"):
    f.check(PipelineDecision(PIPE, Padding("length", 8, 16)))
  with pytest.raises(DecisionValueError, match="stages=1 on mesh axis "
                     "stage=1 is no pipeline"):
    f.from_json({**PIPE.to_dict(), "stages": 1})
  with pytest.raises(DecisionValueError, match="pipeline is 'x'"):
    f.check("x")
  # Across families: the pipeline's microbatches carry the accumulation,
  # and recompute is every layer or none.
  with pytest.raises(DecisionValueError, match="microbatches=2 with a "
                     "pipeline of microbatches=4.*set pipeline "
                     "microbatches=8 and microbatches=1"):
    TrainingDecisions(microbatches=2, pipeline=PIPE)
  with pytest.raises(DecisionValueError, match="recompute=3 with a pipeline"
                     " of layers=8.*use recompute=8 or 0"):
    TrainingDecisions(recompute=3, pipeline=PIPE)


def test_build_training_refuses_a_pipeline_naming_the_pipelined_path():
  from autolayout.training.decisions import build_training
  from mesh_tf import models
  cfg = models.get_config("transformer_tiny", layers=8)
  with pytest.raises(DecisionValueError, match="build_program"):
    build_training(cfg, TrainingDecisions(pipeline=PIPE))
