"""``compare`` and ``explain`` take a pipelined plan (issue 43 item 2: every
reader takes every plan): ``compare -l @plan`` prices it with the
pipelined cost model beside other layouts, its bubble a column of its own;
``explain -l @plan`` moves each pipeline decision to its neighbours on the
same chips and prices each with that model.  The plans are of the tiny
Transformer (4 layers) on one 8-GPU node, two stages."""

import contextlib
import io
import json

import pytest

from autolayout.cli import main
from autolayout.plans import pipelined
from autolayout.plans.decisions import load_plan
from autolayout.training import pipeline_price as pp
from mesh_tf import models

TINY = ["-m", "transformer_tiny", "--set", "layers=4", "-t", "dgx-h100"]


def _json(*argv):
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    assert main(list(argv)) == 0
  return json.loads(buf.getvalue())


def _text(capsys, *argv):
  code = main(list(argv))
  out, err = capsys.readouterr()
  assert code == 0, err
  return out


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
  """A pipelined plan and an unpipelined plan of the same model."""
  d = tmp_path_factory.mktemp("explain")
  piped, flat = str(d / "piped.json"), str(d / "flat.json")
  _json("solve", *TINY, "--pipeline", "--pipeline-stages", "2",
        "--save", piped, "-f", "json")
  _json("solve", *TINY, "--mesh", "data:8", "--save", flat, "-f", "json")
  return piped, flat


def test_compare_prices_a_pipelined_plan_beside_an_unpipelined_one(plans):
  piped, flat = plans
  plan = load_plan(piped)
  assert pipelined.is_pipelined(plan)
  got = _json("compare", "-l", f"@{piped}", "-l", f"@{flat}", "-f", "json")
  rows = {r["label"]: r for r in got["layouts"]}
  assert set(rows) == {"piped.json", "flat.json"}
  # The pipelined row is the plan priced again: what its file says, and
  # the bubble is a term of its step.
  p = rows["piped.json"]
  assert p["step_time_s"] == pytest.approx(plan.costs.step_time_s, rel=1e-9)
  assert p["memory"]["peak_bytes"] == plan.costs.peak_memory_bytes
  assert p["bubble_time_s"] == pytest.approx(
      plan.costs.pipeline_terms["bubble_s"], rel=1e-9)
  assert p["step_time_s"] == pytest.approx(
      p["compute_time_s"] + p["comm_time_s"] + p["bubble_time_s"],
      rel=1e-9)
  # The unpipelined row is the other plan's own costs.
  f = rows["flat.json"]
  assert f["step_time_s"] == pytest.approx(
      load_plan(flat).costs.step_time_s, rel=1e-9)
  assert "bubble_time_s" not in f


def test_compare_table_names_the_bubble_and_breaks_no_word(plans, capsys):
  piped, flat = plans
  out = _text(capsys, "compare", "-l", f"@{piped}", "-l", f"@{flat}")
  words = " ".join(out.split())
  assert "bubble" in words and "pipelined plan's stages waiting" in words
  lines = out.splitlines()
  assert any(line.startswith("piped.json ") for line in lines)
  assert any(line.startswith("flat.json ") for line in lines)
  assert max(len(line.rstrip()) for line in lines) <= 80


def test_compare_of_pipelined_plans_alone_needs_no_model(plans):
  piped, _ = plans
  got = _json("compare", "-l", f"a=@{piped}", "-l", f"b=@{piped}", "-f",
              "json")
  assert got["model"]["name"] == "transformer_tiny"
  a, b = got["layouts"]
  assert (a["label"], b["label"]) == ("a", "b")
  assert a["step_time_s"] == b["step_time_s"]


def test_compare_of_a_pipelined_plan_and_rules_asks_for_the_model(
    plans, capsys):
  piped, _ = plans
  code = main(["compare", "-l", f"@{piped}", "-l", "batch:data"])
  _, err = capsys.readouterr()
  assert code == 2
  assert "--model is required" in err and "-m transformer_tiny" in err


def test_explain_prices_each_decision_moved_on_the_same_chips(plans):
  piped, _ = plans
  plan = load_plan(piped)
  config = models.get_config("transformer_tiny", layers=4)
  lay = pipelined.layout_of(plan, config)
  got = _json("explain", "-l", f"@{piped}", "-f", "json")
  assert got["result"]["step_time_s"] == pytest.approx(
      plan.costs.step_time_s, rel=1e-9)
  rows = got["decisions"]
  moved = {(r["decision"], r["alternative"]): r for r in rows}
  # Every ZeRO stage but the plan's, the other recompute choice, and
  # twice the stages with half the data replicas.
  for z in set(range(4)) - {lay.zero}:
    assert ("ZeRO stage", str(z)) in moved
  other = "none" if lay.recompute == "full" else "full"
  r = moved[("recompute", other)]
  want = pp.price_layout(config, plan.topology,
                         lay._replace(recompute=other))
  assert r["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)
  assert r["peak_memory_bytes"] == want.peak_memory_bytes
  twice = moved[("stages", str(2 * lay.stages))]
  want = pp.price_layout(config, plan.topology, lay._replace(
      stages=2 * lay.stages, data=lay.data // 2))
  assert twice["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)
  # A layout that does not exist says why in words; no number is NaN.
  one = moved[("stages", "1")]
  assert one["step_time_s"] is None and "no pipeline" in one[
      "why_not_priced"]
  for r in rows:
    assert (r["step_time_s"] is None) == (r["why_not_priced"] is not None)


def test_explain_table_says_each_decision_in_words(plans, capsys):
  piped, _ = plans
  out = " ".join(_text(capsys, "explain", "-l", f"@{piped}").split())
  assert "Each decision vs. its neighbours" in out
  assert "nan" not in out.lower().split(" ")
  assert "recompute " in out and "ZeRO stage " in out
  assert "no such layout here (one stage is no pipeline" in out
