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
