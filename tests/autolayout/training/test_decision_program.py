"""The ZeRO stage and the recompute count as decision families of one CP-SAT
program (autolayout.training.decision_program): on a small graph its optimum equals
brute force over stages x recompute counts x microbatch counts x layout
rules under several memory budgets, and its objective equals
costmodels.evaluate of the chosen graph and rules (issue 13)."""

import itertools
import math

import pytest

import costmodels
from autolayout.training import decision_program, decisions
from autolayout.search import infeasible
from autolayout.errors import InfeasibleLayoutError, SolverError
from mesh_tf import models
from tests.autolayout import graphs

MESH, TOPOLOGY = "x:8", "dgx-h100"
DIMS = ("batch", "d_ff", "heads", "d_model_storage")
CONFIG = models.get_config("transformer_tiny", layers=2, batch=16)
KS = (1, 2)
RECOMPUTES = decisions.recompute_choices(CONFIG.layers)


def _forbid():
  training = decisions.build_training(
      CONFIG, decisions.TrainingDecisions("bfloat16", 3, 0, 1))
  names = {d.name for t in training.graph.tensors for d in t.shape}
  return [(d, "x") for d in sorted(names - set(DIMS))]


@pytest.fixture(scope="module")
def every():
  """``(step, peak, decisions, rules)`` of every candidate x rules."""
  return [(r.step_time_s, r.peak_memory_bytes, d, rules)
          for r, d, rules in graphs.decision_candidates(
              CONFIG, DIMS, MESH, TOPOLOGY, (0, 1, 2, 3), RECOMPUTES, KS)]


def test_recompute_choices_are_even_steps_of_the_layers():
  assert decisions.recompute_choices(96) == (0, 24, 48, 72, 96)
  assert decisions.recompute_choices(2) == (0, 1, 2)
  assert decisions.recompute_choices(0) == (0,)


def test_program_equals_brute_force_over_decisions_and_rules(every):
  peaks = sorted({p for _, p, _, _ in every})
  fastest = min(every, key=lambda e: e[0])
  # Budgets from no limit down to the smallest peak: each one moves the
  # optimum to other decisions.
  budgets = [None, fastest[1] - 1, peaks[len(peaks) // 2], peaks[2],
             peaks[0]]
  chosen = set()
  for budget in budgets:
    fits = [e for e in every if budget is None or e[1] <= budget]
    best = min(e[0] for e in fits)
    plan = decisions.search_training(CONFIG, MESH, TOPOLOGY, budget,
                                     microbatch_choices=KS,
                                     forbid=_forbid(), time_limit_s=60,
                                     group_stages="uniform")
    r = plan.result
    assert r.status == "optimal"
    assert math.isclose(r.report.step_time_s, best, rel_tol=1e-9), budget
    assert math.isclose(r.objective_value, r.report.step_time_s,
                        rel_tol=1e-9)
    assert budget is None or r.report.peak_memory_bytes <= budget
    assert r.decisions == plan.decisions
    # The chosen graph re-evaluated from scratch gives the same step.
    training = decisions.build_training(CONFIG, plan.decisions)
    again = costmodels.evaluate(training.graph, MESH, r.rules, TOPOLOGY,
                                microbatches=training.plan)
    assert math.isclose(again.step_time_s, best, rel_tol=1e-9)
    chosen.add(plan.decisions)
  assert len(chosen) >= 3  # the budgets exercised several decisions


def test_stage_and_recompute_are_program_variables():
  cands = decisions.Candidates(CONFIG)
  pairs = [decisions.TrainingDecisions("bfloat16", s, r, 1)
           for s in (0, 3) for r in RECOMPUTES]
  problems = [decision_program.Candidate(
      d, cands.get(d)[1].problem(MESH, TOPOLOGY, 10**9)) for d in pairs]
  program = decision_program.build_program(problems, 10**9)
  assert sorted(program.stage) == [0, 3]
  assert sorted(program.recompute) == list(RECOMPUTES)
  assert len(program.chosen) == len(pairs)
  with pytest.raises(SolverError, match="every \\(stage, recompute\\)"):
    decision_program.build_program(problems[:-1], 10**9)


def test_fixed_stage_stays_fixed_and_infeasible_names_the_peak():
  plan = decisions.search_training(CONFIG, MESH, TOPOLOGY, None,
                                   fixed={"zero_stage": 2},
                                   microbatch_choices=(1,))
  assert plan.decisions.zero_stage == 2
  # Above the variables' floor (below it the search stops at once), below
  # any peak.
  training = decisions.build_training(CONFIG, decisions.TrainingDecisions())
  _, floor = infeasible.state_floor_bytes(training.graph, 8)
  with pytest.raises(InfeasibleLayoutError, match="smallest peak"):
    decisions.search_training(CONFIG, MESH, TOPOLOGY,
                              memory_budget=floor + 1,
                              microbatch_choices=(1,))


def test_train_without_a_mesh_searches_meshes_and_decisions():
  # Item 2 of issue 13's follow-up: --train with no mesh searches mesh
  # shapes (named after the physical dims) and the training decisions.
  import json
  from tests.autolayout.cli.test_cli import run_cli
  p = run_cli("solve", "-m", "transformer_tiny", "-t", "tpu-v5e-2x4",
              "--train", "--workers", "2", "-f", "json", timeout=900)
  assert p.returncode == 0, p.stderr
  data = json.loads(p.stdout)
  res = data["result"]
  assert res["training"]["decisions"]["param_dtype"] == "bfloat16"
  tried = data["meshes_tried"]
  assert {r["mesh"] for r in tried} == {"chips:8", "ici_x:2;ici_y:4", "ici_xy:4;ici_y:2"}
  assert res["step_time_s"] == min(r["step_time_s"] for r in tried)
  assert res["mesh"] == tried[0]["mesh"]
  assert {r["searched"] for r in tried} == {"screen", "decisions"}


# --- the stage per variable group -----------------------------------------
GROUP_CONFIG = models.get_config("transformer_tiny", layers=1, batch=16)
GROUP_STAGES = (0, 1)


def _group_choices():
  from autolayout.training import zero
  probe = decisions.build_training(
      GROUP_CONFIG, decisions.TrainingDecisions("bfloat16", 0, 0, 1))
  return zero.vectors(zero.groups_of(probe.graph),
                              GROUP_STAGES)


def _storage_dims(graph):
  return sorted({d.name for t in graph.tensors for d in t.shape
                 if "_storage" in d.name})


@pytest.fixture(scope="module")
def every_group_choice():
  """``(step, peak, decisions, rules)`` of every per-group stage choice x
  recompute count x rules over ``batch`` and the storage dims."""
  out = []
  recs = decisions.recompute_choices(GROUP_CONFIG.layers)
  for zs, rc in itertools.product(_group_choices(), recs):
    d = decisions.TrainingDecisions("bfloat16", zs, rc, 1)
    training = decisions.build_training(GROUP_CONFIG, d)
    present = ["batch"] + _storage_dims(training.graph)
    for combo in itertools.product((None, "x"), repeat=len(present)):
      rules = ";".join(f"{n}:{a}" for n, a in zip(present, combo) if a)
      r = costmodels.evaluate(training.graph, MESH, rules, TOPOLOGY,
                              microbatches=training.plan)
      out.append((r.step_time_s, r.peak_memory_bytes, d, rules))
  return out


def test_per_group_stages_equal_brute_force(every_group_choice):
  """Stage 0 or 1 for each of the four groups (16 choices) x recompute x
  rules: the program's optimum equals brute force under budgets, and some
  budget's optimum gives the groups different stages."""
  every = every_group_choice
  choices = _group_choices()
  assert len(choices) == 2 ** 4
  training = decisions.build_training(
      GROUP_CONFIG, decisions.TrainingDecisions("bfloat16", 3, 0, 1))
  allowed = {"batch"} | set(_storage_dims(training.graph))
  forbid = []
  for zs in choices:
    tg = decisions.build_training(
        GROUP_CONFIG, decisions.TrainingDecisions("bfloat16", zs, 0, 1))
    names = {d.name for t in tg.graph.tensors for d in t.shape}
    forbid += [(n, "x") for n in names - allowed - set(_storage_dims(
        tg.graph))]
  forbid = sorted(set(forbid))
  peaks = sorted({p for _, p, _, _ in every})
  fastest = min(every, key=lambda e: e[0])
  budgets = [None, fastest[1] - 1, peaks[len(peaks) // 3],
             peaks[len(peaks) // 6], peaks[0]]
  mixed = 0
  for budget in budgets:
    fits = [e for e in every if budget is None or e[1] <= budget]
    best = min(e[0] for e in fits)
    plan = decisions.search_training(
        GROUP_CONFIG, MESH, TOPOLOGY, budget, microbatch_choices=(1,),
        forbid=forbid, time_limit_s=60, stage_choices=choices)
    r = plan.result
    assert r.status == "optimal"
    assert math.isclose(r.report.step_time_s, best, rel_tol=1e-9), budget
    assert budget is None or r.report.peak_memory_bytes <= budget
    mixed += not isinstance(plan.decisions.zero_stage, int)
    # The brute-force optimum itself is a per-group choice here.
    if not isinstance(plan.decisions.zero_stage, int):
      assert isinstance(min(fits, key=lambda e: e[0])[2].zero_stage, tuple)
  assert mixed >= 1


def test_program_has_one_stage_per_group():
  cands = decisions.Candidates(GROUP_CONFIG)
  choices = _group_choices()[:4]
  probs = [decision_program.Candidate(
      decisions.TrainingDecisions("bfloat16", zs, 0, 1),
      cands.get(decisions.TrainingDecisions("bfloat16", zs, 0, 1))[1]
      .problem(MESH, TOPOLOGY, 10**9)) for zs in choices]
  program = decision_program.build_program(probs, 10**9)
  groups = {g for g, _ in program.group_stage}
  assert groups == {"attention", "embedding", "ffn", "norm"}
  assert {s for _, s in program.group_stage} == {0, 1}
