"""``mtf-layout solve --pipeline``: the pipelined plan, with a published
layout as the starting hint."""

import json

import pytest

from autolayout import cli
from autolayout.cli.errors import CliInputError
from autolayout.cli.pipeline import parse_layout_hint
from autolayout.training.pipeline_price import PipelineLayout

SMALL = ["-m", "gpt3_175b", "--set",
         "layers=8,d_model=1024,heads=16,d_kv=64,d_ff=4096,batch=96",
         "-t", "a100x8-nodes3-cal", "--pipeline"]


def test_pipeline_solve_with_a_published_layout_hint(capsys):
  assert cli.main(["solve", *SMALL, "--hint", "tp=8,pp=2,dp=1,v=2",
                   "--format", "json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["status"] == "optimal" and out["gap"] == 0.0
  plan, hint = out["plans"]
  assert hint["which"] == "hint" and "PP 2 (v=2" in hint["layout"]
  # The answer is never slower than its hint; both placements compared.
  assert plan["step_s"] <= hint["step_s"]
  assert set(out["by_placement"]) == {"inner", "outer"}
  # 24 chips: whatever the plan, used + idle chips add up.
  assert plan["idle_chips"] >= 0


def test_pipeline_solve_table(capsys):
  assert cli.main(["solve", *SMALL]) == 0
  text = capsys.readouterr().out
  assert "tensor axis inside a node" in text and "across nodes" in text
  assert "optimal" in text


def test_layout_hint_parsing():
  assert parse_layout_hint("tp=8,pp=64,dp=6,v=2,mb=1") == PipelineLayout(
      8, 64, 6, 2, 1)
  with pytest.raises(CliInputError, match="cannot read 'tensor=8'") as e:
    parse_layout_hint("tensor=8")
  assert "tp=8,pp=64" in e.value.hint
  with pytest.raises(CliInputError, match="not an integer"):
    parse_layout_hint("tp=eight")


# 12.9B parameters (its training state does not fit one A100) on three
# 8-GPU nodes: the default ``solve --train`` plans it with both searches.
LARGE = ["-m", "gpt3_175b", "--set",
         "layers=16,d_model=8192,heads=64,d_kv=128,d_ff=32768,batch=18,"
         "vocab=8192", "-t", "a100x8-nodes3", "--train"]


# GPT-3 175B on 992 A100s (124 nodes; 992 = 2^5 * 31, and no dim of the
# model divides by 31): the pipelined space plans it in about 2 s, with idle
# chips and a padded batch; the unpipelined search finds no plan within the
# default limit (and, with more time, none as fast).
AT_992 = ["-m", "gpt3_175b", "-t", "a100x8-nodes124", "--train"]


def _steps(compared):
  """``({space: predicted step s}, chosen space)`` of the comparison lines."""
  steps = {}
  for line in compared[1:-1]:
    if "step " in line:
      steps[line.strip().split(" ")[0]] = float(
          line.split("step ")[1].split(" s")[0])
  return steps, compared[-1].strip().removeprefix("chosen: ")


def test_default_solve_at_scale_chooses_the_faster_space(capsys):
  # Which space wins here depends on how far CP-SAT gets in its time: the
  # law is that the faster of the plans found is the answer.
  assert cli.main(["solve", *LARGE, "--time-limit", "8",
                   "--format", "json"]) == 0
  out = json.loads(capsys.readouterr().out)
  compared = out["spaces_compared"]
  assert compared[0].startswith("compared the pipelined and the "
                                "unpipelined plan spaces")
  assert any(line.strip().startswith("pipelined (optimal")
             for line in compared)
  assert any(line.strip().startswith("unpipelined") for line in compared)
  steps, chosen = _steps(compared)
  assert steps[chosen] == min(steps.values())
  assert "idle chips" in compared[1] and "padded sequences" in compared[1]


def test_default_solve_on_992_chips_returns_and_saves_the_pipelined_plan(
    tmp_path, capsys):
  path = str(tmp_path / "p.json")
  assert cli.main(["solve", *AT_992, "--format", "json", "--save",
                   path]) == 0
  out = json.loads(capsys.readouterr().out)
  compared = out["spaces_compared"]
  steps, chosen = _steps(compared)
  assert chosen == "pipelined"
  assert steps["pipelined"] == min(steps.values())
  plan = out["plans"][0]
  # 992 chips cannot all be used: the plan says how many idle, and pads.
  assert plan["idle_chips"] > 0 and plan["padded_sequences"] >= 0
  assert plan["step_s"] == pytest.approx(steps["pipelined"], rel=1e-3)
  # The pipelined plan is a plan file: its pipeline, idle chips and
  # padding are decisions, and it loads back with the costs printed.
  from autolayout.plans.decisions import load_plan
  saved = load_plan(path)
  assert out["plan_file"] == path
  d = saved.training.pipeline
  assert d.idle_chips == plan["idle_chips"]
  assert d.padded_rows == plan["padded_sequences"]
  assert saved.costs.step_time_s == pytest.approx(plan["step_s"], rel=1e-12)


def test_small_models_and_opt_out_keep_the_unpipelined_search():
  from autolayout.meshes.pipeline_search import pipelining_applies
  from costmodels.topology import get_topology
  from mesh_tf import models
  big = models.get_config("gpt3_175b")
  tiny = models.get_config("transformer_tiny")
  assert pipelining_applies(big, get_topology("a100x8-nodes4"))
  assert not pipelining_applies(tiny, get_topology("a100x8-nodes4"))
  assert not pipelining_applies(big, get_topology("dgx-h100"))   # one node
  assert not pipelining_applies(big, get_topology("tpu-v5e-4x4"))
  assert not pipelining_applies(big, get_topology("a100x8-nodes4"), 16)


def test_scale_applies_only_to_the_open_training_question():
  import argparse
  from autolayout.cli import scale
  from costmodels.topology import get_topology
  from mesh_tf import models

  class Model:
    config = models.get_config("gpt3_175b")
  topo = get_topology("a100x8-nodes4")
  base = dict(no_pipeline=False, hint=None, fixed_decisions={},
              objective="time", save=None)
  assert scale.applies(argparse.Namespace(**base), Model, topo, 32)
  for change in (dict(no_pipeline=True), dict(hint="plan.json"),
                 dict(fixed_decisions={"zero_stage": 3}),
                 dict(objective="memory")):
    args = argparse.Namespace(**{**base, **change})
    assert not scale.applies(args, Model, topo, 32), change
