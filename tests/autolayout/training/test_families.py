"""The training-decision families as registered things (issue 38): one
registry gives TrainingDecisions its fields, each family owns its JSON
codec, its command-line syntax, its checks and its graph rewrite, and
TrainingDecisions is the one typed form from the flag to the plan file."""

import pickle

import pytest

from autolayout.training import decisions, zero
from autolayout.training.families import (FAMILIES, TrainingDecisions,
                                          family, fixed_from_texts)
from autolayout.training.family import DecisionFamily, DecisionValueError
from mesh_tf import models
from mesh_tf.core.errors import InvalidArgumentError
from mesh_tf.training import storage

CONFIG = models.get_config("transformer_tiny", layers=2, batch=8)


def test_the_registry_gives_the_value_its_fields():
  assert TrainingDecisions._fields == tuple(f.name for f in FAMILIES)
  assert TrainingDecisions() == TrainingDecisions(
      *(f.default for f in FAMILIES))
  assert all(isinstance(f, DecisionFamily) for f in FAMILIES)
  assert family("zero_stage") is zero.FAMILY
  assert family("pipeline").name == "pipeline"
  with pytest.raises(DecisionValueError, match="'expert_parallel' is not a "
                     "training decision family; use one of param_dtype"):
    family("expert_parallel")


@pytest.mark.parametrize("d", [
    TrainingDecisions(),
    TrainingDecisions("bfloat16", 3, 1, 2),
    TrainingDecisions("bfloat16", {"ffn": 3, "norm": 0}, 0, 4),
])
def test_json_codec_round_trips(d):
  assert TrainingDecisions.from_json(d.as_dict()) == d
  assert pickle.loads(pickle.dumps(d)) == d and hash(d) == hash(
      TrainingDecisions(*d))


def test_values_are_checked_and_normalised_by_their_family():
  # One spelling per choice: a uniform per-group stage is that stage.
  same = {g: 2 for g in storage.GROUPS}
  assert TrainingDecisions(zero_stage=same).zero_stage == 2
  assert TrainingDecisions(zero_stage={"norm": 0, "ffn": 3}).zero_stage == (
      ("ffn", 3), ("norm", 0))
  for kwargs, needle in (({"zero_stage": 5}, "not a ZeRO stage"),
                         ({"recompute": -1}, "recompute is -1; use an "
                          "integer >= 0"),
                         ({"microbatches": 0}, "microbatches is 0; use an "
                          "integer >= 1"),
                         ({"param_dtype": "int8"}, "param_dtype is 'int8'")):
    with pytest.raises(InvalidArgumentError, match=needle):
      TrainingDecisions(**kwargs)
  with pytest.raises(DecisionValueError, match="'expert_parallel' is not"):
    TrainingDecisions.from_json({"expert_parallel": 2})
  with pytest.raises(DecisionValueError, match="pipeline is 2"):
    TrainingDecisions.from_json({"pipeline": 2})


def test_flags_are_parsed_by_their_family():
  fixed = fixed_from_texts({"zero_stage": "ffn=3,norm=0", "recompute": "2",
                            "microbatches": "auto", "param_dtype": None})
  assert fixed == {"zero_stage": (("ffn", 3), ("norm", 0)), "recompute": 2}
  with pytest.raises(DecisionValueError) as e:
    zero.parse("ffn=3,mlp=1")
  assert "names variable group 'mlp'" in e.value.problem
  assert e.value.hint.startswith("e.g. --zero-stage ffn=3")
  with pytest.raises(DecisionValueError, match="--recompute 'x' is not an "
                     "integer or auto"):
    family("recompute").parse("x")


def test_build_training_applies_each_family():
  d = TrainingDecisions("bfloat16", {"ffn": 3}, 1, 2)
  training = decisions.build_training(CONFIG, d)
  names = {dim.name for v in training.graph.all_variables for dim in v.shape}
  # The ZeRO family's rewrite: the ffn group's own storage dim.
  assert any(n.startswith("d_model_storage_ffn") for n in names)
  # The microbatch family's config: the step is built at batch / k.
  assert training.model.config.batch == CONFIG.batch // 2
  assert training.model.config.recompute == 1
  assert training.plan.microbatches == 2
  with pytest.raises(Exception, match="does not split into microbatches=3"):
    decisions.build_training(CONFIG, d._replace(microbatches=3))
