"""Training plans leave the process: every decision family, alone and
combined, survives solve -> save -> load -> report with the same costs, and
every reader (report, --hint, diff, export, mtf.load_plan) takes them."""

import json

import pytest

import mesh_tf as mtf
from mesh_tf import models
from autolayout.plans import decision_diff
from autolayout.plans import decisions as plan_decisions
from autolayout.cli import main
from autolayout.errors import PlanMismatchError
from tests.autolayout.cli.test_cli import assert_clean_error

BASE = ["-m", "transformer_tiny", "-t", "dgx-h100", "--mesh",
        "data:2;model:4", "--memory-budget", "70000", "--train"]

# name -> (--set, --zero-stage, --recompute, --microbatches): each family
# moved alone from float32 / stage 0 / no recompute / one microbatch, and
# all of them together.
CASES = {
    "none": ("param_dtype=float32", "0", "0", "1"),
    "param_dtype": (None, "0", "0", "1"),
    "zero_stage": ("param_dtype=float32", "3", "0", "1"),
    "zero_per_group": ("param_dtype=float32", "ffn=3,attention=1", "0", "1"),
    "recompute": ("param_dtype=float32", "0", "1", "1"),
    "microbatches": ("param_dtype=float32", "0", "0", "2"),
    "combined": (None, "ffn=3,attention=1,embedding=2", "1", "2"),
}


def _cli(capsys, *argv):
  code = main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
  folder = tmp_path_factory.mktemp("training_plans")
  paths = {}
  for name, (sets, stage, rec, k) in CASES.items():
    path = str(folder / f"{name}.json")
    argv = ["solve", *BASE, "--zero-stage", stage, "--recompute", rec,
            "--microbatches", k, "--save", path, "-f", "json"]
    if sets:
      argv += ["--set", sets]
    assert main(argv) == 0, name
    paths[name] = path
  return paths


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip_reports_the_same_costs(plans, name, capsys):
  plan = mtf.load_plan(plans[name])
  sets, stage, rec, k = CASES[name]
  d = plan_decisions.decisions_of(plan.decisions)
  assert d.param_dtype == ("float32" if sets else "bfloat16")
  assert (d.recompute, d.microbatches) == (int(rec), int(k))
  code, out, _ = _cli(capsys, "report", "-l", "@" + plans[name], "-f",
                      "json")
  assert code == 0
  rec_ = json.loads(out)["result"]
  assert rec_["step_time_s"] == pytest.approx(plan.costs.step_time_s,
                                               rel=1e-12)
  assert rec_["memory"]["peak_bytes"] == plan.costs.peak_memory_bytes
  assert rec_["rules"] == str(plan.rules) and plan.rules.pairs
  again = plan_decisions.evaluate(plan)
  assert again.step_time_s == pytest.approx(plan.costs.step_time_s,
                                            rel=1e-12)
  assert again.peak_memory_bytes == plan.costs.peak_memory_bytes


def test_a_training_plan_loads_against_its_model_and_refuses_another(plans):
  path = plans["combined"]
  plan_decisions.load_plan(path, models.build_model("transformer_tiny").graph)
  built = plan_decisions.rebuild(mtf.load_plan(path))
  plan_decisions.load_plan(path, built.graph)
  other = models.build_model("transformer_tiny", d_ff=64).graph
  with pytest.raises(PlanMismatchError, match="d_ff=32 -> 64"):
    plan_decisions.load_plan(path, other)


def test_a_forward_plan_asks_its_own_question(tmp_path, capsys):
  path = str(tmp_path / "fwd.json")
  assert main(["solve", "-m", "transformer_tiny", "--forward", "-t",
               "dgx-h100", "--mesh", "data:2;model:4", "--save", path,
               "-f", "json"]) == 0
  capsys.readouterr()
  code, out, err = _cli(capsys, "report", "-m", "transformer_tiny", "-l",
                        "@" + path)
  assert code == 0, err
  assert "the forward pass" in out


def test_report_names_what_changed_in_a_training_plans_model(plans, capsys):
  code, _, err = _cli(capsys, "report", "-m", "transformer_tiny", "--set",
                      "d_ff=64", "-l", "@" + plans["combined"])
  assert_clean_error(err, code, 2, "dim d_ff=32 -> 64", "--hint")
  code, _, err = _cli(capsys, "report", "--forward", "-l",
                      "@" + plans["combined"])
  assert_clean_error(err, code, 2, "holds training decisions",
                     "drop --forward")


def test_diff_of_a_plan_with_itself_is_empty(plans, capsys):
  a = mtf.load_plan(plans["combined"])
  built = plan_decisions.rebuild(a)
  d = decision_diff.diff(a, a, built)
  assert d.rows == () and d.total.step_time_s == 0
  code, out, _ = _cli(capsys, "diff", plans["combined"], plans["combined"])
  assert code == 0 and "the plans make the same decisions" in out


@pytest.mark.parametrize("a, family", [("none", "recompute"),
                                       ("none", "microbatches"),
                                       ("none", "param_dtype"),
                                       ("zero_stage", "zero_stage")])
def test_diff_prices_the_one_decision_that_differs(plans, a, family, capsys):
  b = {"recompute": "recompute", "microbatches": "microbatches",
       "param_dtype": "param_dtype", "zero_stage": "none"}[family]
  code, out, _ = _cli(capsys, "diff", plans[a], plans[b], "-f", "json")
  assert code == 0
  rows = [r for r in json.loads(out)["rows"] if r["kind"] == "decision"]
  assert [r["name"] for r in rows] == [family]
  assert rows[0]["delta"] is not None, rows[0]["note"]
  if a == "none":
    # B's rules are A's where the solver kept them; the decision's delta is
    # B minus B with only that decision as in A.
    assert rows[0]["delta"]["step_time_s"] != 0 or (
        rows[0]["delta"]["peak_memory_bytes"] != 0)


def test_hint_and_export_take_a_training_plan(plans, tmp_path, capsys):
  code, out, err = _cli(capsys, "solve", "-m", "transformer_tiny", "-t",
                        "dgx-h100", "--mesh", "data:2;model:4", "--hint",
                        plans["combined"], "-f", "json")
  assert code == 0, err
  assert json.loads(out)["hint"]["file"] == plans["combined"]
  for to in ("jax", "torch", "dtensor"):
    code, out, err = _cli(capsys, "export", plans["combined"], "--to", to)
    assert code == 0, err
    assert json.loads(out)["params"]
