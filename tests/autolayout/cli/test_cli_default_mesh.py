"""Without a plan or --mesh, ``explain``, ``report -l auto`` and
``compare``'s auto layouts answer on the mesh ``solve`` chooses for the
same arguments, and say so."""

import json

from autolayout.cli import main

ARGS = ["-m", "transformer_tiny", "-t", "dgx-h100", "--forward"]


def _json(capsys, *argv):
  assert main([*argv, "-f", "json"]) == 0
  return json.loads(capsys.readouterr().out)


def test_reports_use_the_mesh_solve_chooses(capsys):
  solved = _json(capsys, "solve", *ARGS)["result"]
  report = _json(capsys, "report", *ARGS, "-l", "auto")["result"]
  assert report["mesh"] == solved["mesh"]
  assert report["step_time_s"] == solved["step_time_s"]
  assert main(["explain", *ARGS]) == 0
  out = capsys.readouterr().out
  assert (f"mesh {solved['mesh']} (the mesh `solve` chooses for these "
          "arguments)") in out
  assert "nan" not in out


def test_given_rules_without_a_mesh_say_which_mesh(capsys):
  assert main(["report", *ARGS, "-l", "batch:data"]) == 0
  assert "the topology's data x model mesh" in capsys.readouterr().out


def test_compare_auto_is_solves_answer(capsys):
  solved = _json(capsys, "solve", *ARGS)["result"]
  got = _json(capsys, "compare", *ARGS, "-l", "best=auto", "-l",
              "dp=batch:data")
  layouts = {l["label"]: l for l in got["layouts"]}
  assert layouts["best"]["mesh"] == solved["mesh"]


def test_solve_hint_alone_asks_the_plans_question(tmp_path, capsys):
  path = str(tmp_path / "fwd.json")
  assert main(["solve", *ARGS, "--mesh", "data:2;model:4", "--set",
               "d_ff=64", "--memory-budget", "60000", "--objective", "comm",
               "--save", path, "-f", "json"]) == 0
  first = json.loads(capsys.readouterr().out)
  again = _json(capsys, "solve", "--hint", path)
  assert again["question"] == "forward"
  assert again["result"]["mesh"] == "data:2;model:4"
  assert again["result"]["topology"] == "dgx-h100"
  assert again["model"]["overrides"] == {"d_ff": 64}
  assert again["result"]["step_time_s"] == first["result"]["step_time_s"]
  assert again["result"]["solver"]["memory_budget_bytes"] == 60000
  assert again["result"]["solver"]["objective"] == "comm"
