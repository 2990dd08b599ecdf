"""The time limit bounds the whole search: building the program, every
phase and every mesh shape.  What is found when it runs out is returned
(mesh shapes not reached are listed as "time-limit"); with nothing found,
TimeLimitError (the CLI's exit 4)."""

import time

import pytest

import autolayout
from autolayout.errors import SolverError, TimeLimitError
from mesh_tf import models
from tests.autolayout.cli import cli_contract

# Building this program takes seconds (10k ops), far over the limits below.
BIG = models.build_model("transformer_tiny", layers=400)
SLACK_S = 2.0  # the answer's cost-model report (~0.1 ms per op) is not cut short


def test_building_the_program_counts():
  t = time.perf_counter()
  with pytest.raises(TimeLimitError, match="time limit"):
    autolayout.auto_layout(BIG.graph, "data:2;model:4", None, "tpu-v5e-2x4",
                           time_limit_s=0.2)
  assert time.perf_counter() - t < 0.2 + SLACK_S
  assert issubclass(TimeLimitError, SolverError)


def test_mesh_search_returns_the_meshes_solved_in_time():
  small = models.build_model("transformer_tiny", layers=60)
  t = time.perf_counter()
  try:
    results, table = autolayout.auto_mesh_and_layout(
        small.graph, 8, None, "tpu-v5e-2x4", max_axes=3, time_limit_s=1.5)
  except TimeLimitError:
    pytest.skip("this machine solved no mesh shape in 1.5 s")
  elapsed = time.perf_counter() - t
  assert elapsed < 1.5 + SLACK_S
  statuses = list(table["status"])
  assert results and set(statuses) <= {"optimal", "feasible", "time-limit",
                                       "no-fit", "infeasible"}
  if "time-limit" in statuses:
    note = table[table["status"] == "time-limit"]["note"].iloc[0]
    assert note == "not solved within 1.5 s"


def test_mesh_search_shows_each_mesh_and_the_best_so_far():
  small = models.build_model("mlp_tiny")
  seen = []
  autolayout.auto_mesh_and_layout(
      small.graph, 8, None, "tpu-v5e-2x4", max_axes=2,
      progress=lambda mesh, i, n, best: seen.append(
          (mesh, i, n, None if best is None else best.step_time_s)))
  assert [s[0] for s in seen] == autolayout.mesh_factorizations(8, 2)
  assert seen[0][3] is None and all(s[3] is not None for s in seen[1:])
  assert [s[3] for s in seen[1:]] == sorted(
      [s[3] for s in seen[1:]], reverse=True)  # the best only improves


def test_cli_time_limit_is_exit_4_with_one_error_and_hint():
  t = time.perf_counter()
  r = cli_contract.run(["solve", "-m", "transformer_tiny", "-t",
                        "tpu-v5e-2x4", "--set", "layers=400", "--time-limit",
                        "0.2"])
  assert time.perf_counter() - t < 30  # building the model is not searched
  assert cli_contract.problems(r) == []
  assert r.code == 4
  assert "raise --time-limit" in r.err


def test_pareto_keeps_the_points_found_in_time():
  t = time.perf_counter()
  try:
    results, _ = autolayout.pareto(BIG.graph, "data:2;model:4", None,
                                   "tpu-v5e-2x4", max_points=50,
                                   time_limit_s=4)
  except TimeLimitError:
    pytest.skip("this machine found no point in 4 s")
  assert time.perf_counter() - t < 4 + SLACK_S
  assert 1 <= len(results) < 50
  times = [r.step_time_s for r in results]
  assert times == sorted(times)
  with pytest.raises(TimeLimitError, match="before the fastest layout"):
    autolayout.pareto(BIG.graph, "data:2;model:4", None, "tpu-v5e-2x4",
                      time_limit_s=0.1)


def test_training_search_is_bounded_by_the_time_limit():
  """--train searches meshes and training decisions (many graphs): the
  limit bounds all of it, and what was found in time is the answer."""
  t = time.perf_counter()
  r = cli_contract.run(["solve", "-m", "gpt3_175b", "-t", "a100x8-nodes128",
                        "--train", "-f", "json", "--time-limit", "3"])
  elapsed = time.perf_counter() - t
  assert cli_contract.problems(r) == []
  assert r.code in (0, 4)
  # Building GPT-3's 96-layer step graph (about 1 s) is not searched.
  assert elapsed < 3 + 2 * SLACK_S + 2
