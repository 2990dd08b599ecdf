"""The pipeline value: its split and its typed errors."""

import dataclasses

import pytest

from mesh_tf import models, optimize
from mesh_tf.core.errors import MtfError
from mesh_tf.pipeline import (Pipeline, PipelineAxisError, PipelineBatchError,
                              PipelineError,
                              PipelineScheduleError, PipelineSplitError,
                              Schedule, build_program, expected_boundary_bytes)


def test_even_split_and_locations():
  p = Pipeline("stage", 2, 4, 8, chunks=2, schedule="interleaved_1f1b")
  assert p.schedule is Schedule.INTERLEAVED_1F1B
  assert p.split == (2, 2, 2, 2)
  # Chunk 0 of every stage first, then chunk 1 (Megatron's interleaving).
  assert [list(p.layers_of(s, c)) for c in range(2) for s in range(2)] == [
      [0, 1], [2, 3], [4, 5], [6, 7]]
  assert [p.location(j) for j in range(4)] == [(0, 0), (1, 0), (0, 1),
                                               (1, 1)]


def test_explicit_uneven_split():
  p = Pipeline("stage", 2, 2, 5, split=(2, 3))
  assert list(p.layers_of(0)) == [0, 1] and list(p.layers_of(1)) == [2, 3, 4]


def test_value_is_frozen_and_hashable():
  p = Pipeline("stage", 2, 2, 4)
  assert hash(p) == hash(Pipeline("stage", 2, 2, 4, schedule="1f1b"))
  with pytest.raises(dataclasses.FrozenInstanceError):
    p.stages = 3


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(layers=5), PipelineSplitError,
     r"5 layers do not split evenly into 2 stages x 1 chunks on mesh axis "
     r"stage=2; give a layer count divisible by 2"),
    (dict(layers=4, split=(1, 2)), PipelineSplitError,
     r"split=\(1, 2\) must give 2 layer counts .* summing to layers=4"),
    (dict(stages=1), PipelineScheduleError, r"stages=1 on mesh axis stage=1 "
     "is no pipeline"),
    (dict(chunks=2), PipelineScheduleError,
     r"schedule 1f1b on mesh axis stage=2 runs one chunk per stage, got "
     r"chunks=2; use schedule interleaved_1f1b"),
    (dict(schedule="interleaved_1f1b"), PipelineScheduleError,
     r"needs chunks >= 2, got chunks=1"),
    (dict(schedule="interleaved_1f1b", chunks=2, microbatches=3, layers=8),
     PipelineScheduleError, r"multiple of the stages, got microbatches=3; "
     r"use e.g. microbatches=4"),
    (dict(schedule="zigzag"), PipelineScheduleError,
     r"unknown pipeline schedule 'zigzag'"),
    (dict(microbatches=0), PipelineScheduleError,
     r"microbatches=0 must be an integer >= 1"),
])
def test_bad_pipelines_raise_typed_errors(kwargs, error, match):
  args = dict(axis="stage", stages=2, microbatches=2, layers=4)
  args.update(kwargs)
  with pytest.raises(error, match=match) as e:
    Pipeline(**args)
  assert isinstance(e.value, MtfError)


@pytest.mark.parametrize("mesh,rules,match", [
    ("data:2;model:4", "batch:data", r"stage axis 'stage' is not in mesh "
     r"Shape\[data=2, model=4\]; add stage:2"),
    ("stage:4;data:2", "batch:data", r"stage axis stage=4 has 4 device "
     r"groups but the pipeline has stages=2"),
    ("stage:2;data:4", "batch:data;d_ff:stage", r"layout rule d_ff:stage "
     r"splits d_ff over the pipeline stage axis stage=2"),
])
def test_mesh_checks_name_the_axis(mesh, rules, match):
  with pytest.raises(PipelineAxisError, match=match):
    Pipeline("stage", 2, 2, 4).check_mesh(mesh, rules)


def test_batch_not_divisible_by_microbatches():
  parts = models.transformer_parts(models.TransformerConfig(layers=2,
                                                            batch=6))
  with pytest.raises(PipelineBatchError, match=r"batch=6 does not split into "
                     r"microbatches=4 on pipeline axis stage=2"):
    build_program(parts, Pipeline("stage", 2, 4, 2),
                  optimize.SgdOptimizer(0.1))


def test_layer_count_must_match_the_model():
  parts = models.mlp_parts(models.MLPConfig(layers=2))
  with pytest.raises(PipelineSplitError, match=r"splits layers=4, but the "
                     r"model has 2 repeated layers"):
    build_program(parts, Pipeline("stage", 2, 2, 4),
                  optimize.SgdOptimizer(0.1))


def test_program_places_embedding_first_and_head_last():
  parts = models.transformer_parts(models.TransformerConfig(layers=4))
  prog = build_program(parts, Pipeline("stage", 2, 2, 4),
                       optimize.SgdOptimizer(0.1))
  names = [{v.name for v in c.variables} for c in prog.chunks]
  assert "positional_embedding" in names[0]
  assert not any(n.startswith("final_norm") for n in names[0])
  assert any(n.startswith("final_norm") for n in names[1])
  assert all(n.startswith(("layer_0", "layer_1", "embedding", "positional"))
             for n in names[0])
  # The embedding table is tied to the softmax on the last stage.
  assert prog.tied == {"embedding/weights": (0, 1)}
  assert prog.chunks[0].x_in is None and prog.chunks[-1].dy is None


def test_boundary_bytes_count_both_directions():
  p = Pipeline("stage", 2, 4, 8, chunks=2, schedule="interleaved_1f1b")
  # 4 rows x 8 x 16 floats, batch split over data=2: 1024 bytes a slice.
  # Stage 0 sends chunk 0's and chunk 1's activations and chunk 1's
  # gradient; stage 1 sends chunk 0's activation and both gradients.
  assert expected_boundary_bytes(
      p, "batch:4;length:8;d_model:16", "float32", "stage:2;data:2",
      "batch:data") == (3 * 1024, 3 * 1024)


def test_dict_round_trip_and_bad_dict():
  p = Pipeline("stage", 4, 8, 10, split=(1, 3, 3, 3))
  assert Pipeline.from_dict(p.to_dict()) == p
  with pytest.raises(PipelineError, match=r"a pipeline is a dict of .*got "
                     r"\{'axis': 'stage'\}"):
    Pipeline.from_dict({"axis": "stage"})


def test_configs_declare_their_parts():
  prog = build_program(models.get_config("transformer_tiny", layers=2),
                       Pipeline("stage", 2, 2, 2), optimize.SgdOptimizer(0.1))
  assert prog.microbatch_size == 4
  with pytest.raises(MtfError, match=r"MoETransformerConfig's; that model "
                     r"declares no repeated layers"):
    models.get_config("moe_tiny").parts()
  with pytest.raises(MtfError, match=r"Conv3DConfig declares no repeated "
                     r"layers; give a RepeatedLayers"):
    build_program(models.get_config("conv3d_tiny"),
                  Pipeline("stage", 2, 2, 2), optimize.SgdOptimizer(0.1))
