"""``mtf-layout`` with plan files: ``solve --save/--hint``, ``-l @plan.json``,
``diff`` and ``export``, and two-line errors for bad plan files.

Most run in-process through ``main(argv)`` (what the console script calls);
one error path runs as a real subprocess.
"""

import json

import pytest

import mesh_tf as mtf
from mesh_tf import models
from autolayout.plans import export
from autolayout.cli import main
from tests.autolayout.cli.test_cli import assert_clean_error, run_cli

# The forward pass (--forward; the default question is the training step).
MODEL = ["-m", "transformer_tiny", "--forward"]
TINY = [*MODEL, "-t", "dgx-h100", "--mesh",
        "data:2;model:4", "--memory-budget", "20000"]


def _run(capsys, *argv):
  code = main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  path = tmp_path_factory.mktemp("plans") / "a.json"
  assert main(["solve", *TINY, "--save", str(path), "-f", "json"]) == 0
  return str(path)


def test_solve_save_writes_a_plan_of_the_model(saved, capsys):
  plan = mtf.load_plan(saved, models.build_model("transformer_tiny").graph)
  assert plan.model.name == "transformer_tiny"
  assert json.loads(plan.model.source) == {
      "model": "transformer_tiny", "overrides": {}, "train": False}
  assert plan.solver.memory_budget_bytes == 20000 and plan.rules
  code, out, _ = _run(capsys, "solve", *TINY, "--save", saved)
  assert code == 0 and f"saved the plan to {saved}" in out


def test_solve_hint_reports_what_changed(saved, capsys):
  code, out, _ = _run(capsys, "solve", *MODEL, "--set",
                      "d_ff=64,batch=16", "-t", "dgx-h100", "--mesh",
                      "data:2;model:4", "--memory-budget", "24000",
                      "--hint", saved, "-f", "json")
  assert code == 0
  hint = json.loads(out)["hint"]
  assert hint["file"] == saved and hint["hinted"]
  assert any("over the memory budget" in w for w in hint["why"])
  assert hint["changes"]["rows"]
  code, out, _ = _run(capsys, "solve", *MODEL, "-t",
                      "dgx-h100", "--mesh", "x:8", "--memory-budget",
                      "60000", "--hint", saved)
  assert code == 0
  assert "Warm start from" in out and "is not in the mesh" in out
  # With --devices, every mesh shape of the search starts from the hint.
  code, out, _ = _run(capsys, "solve", *MODEL, "-t",
                      "dgx-h100", "-n", "8", "--memory-budget", "20000",
                      "--hint", saved, "-f", "json")
  assert code == 0 and json.loads(out)["hint"]["file"] == saved


def test_layouts_from_a_plan_file(saved, capsys):
  plan = mtf.load_plan(saved)
  code, out, _ = _run(capsys, "report", *MODEL, "-t",
                      "dgx-h100", "-l", "@" + saved, "-f", "json")
  assert code == 0
  assert json.loads(out)["result"]["rules"] == str(plan.rules)
  code, out, _ = _run(capsys, "compare", *MODEL, "-t",
                      "dgx-h100", "--mesh", "data:2;model:4", "-l",
                      "old=@" + saved, "-l", "batch:data", "-f", "json")
  assert code == 0
  layouts = {l["label"]: l for l in json.loads(out)["layouts"]}
  assert layouts["old"]["rules"] == str(plan.rules)
  code, out, _ = _run(capsys, "explain", *MODEL, "-t",
                      "dgx-h100", "-l", "@" + saved)
  assert code == 0 and "dropping it" in out


def test_a_plan_for_a_changed_model_is_refused(saved, capsys):
  code, _, err = _run(capsys, "report", *MODEL, "--set",
                      "d_ff=64", "-t", "dgx-h100", "-l", "@" + saved)
  assert_clean_error(err, code, 2, "dim d_ff=32 -> 64", "--hint")
  code, _, err = _run(capsys, "report", *MODEL, "-t", "tpu-v5e-16x16",
                      "-l", "@" + saved)
  assert_clean_error(err, code, 2, "does not fit topology tpu-v5e-16x16",
                     "-t dgx-h100")
  # Without -t the plan's own topology is the default.
  code, _, _ = _run(capsys, "report", *MODEL, "-l", "@" + saved)
  assert code == 0
  code, _, err = _run(capsys, "report", *MODEL, "-t",
                      "dgx-h100", "--mesh", "data:4;model:2", "-l",
                      "@" + saved)
  assert_clean_error(err, code, 2, "differs from the mesh")


def test_diff_prices_each_rule(saved, tmp_path, capsys):
  b = tmp_path / "b.json"
  assert main(["solve", *MODEL, "-t", "dgx-h100",
               "--mesh", "data:2;model:4", "--memory-budget", "none",
               "--objective", "memory", "--save", str(b), "-f",
               "json"]) == 0
  capsys.readouterr()
  code, out, _ = _run(capsys, "diff", saved, str(b), "-f", "json")
  assert code == 0
  d = json.loads(out)
  assert d["priced"] and d["rows"]
  a_plan, b_plan = mtf.load_plan(saved), mtf.load_plan(str(b))
  names = {r["name"] for r in d["rows"] if r["kind"] == "rule"}
  a_rules, b_rules = a_plan.rules.as_dict(), b_plan.rules.as_dict()
  assert names == {k for k in set(a_rules) | set(b_rules)
                   if a_rules.get(k) != b_rules.get(k)}
  assert d["total"]["step_time_s"] == pytest.approx(
      b_plan.costs.step_time_s - a_plan.costs.step_time_s)
  code, out, _ = _run(capsys, "diff", saved, str(b))
  assert code == 0 and "Differences" in out and "total" in out
  code, out, _ = _run(capsys, "diff", saved, str(b), "-f", "csv")
  assert code == 0 and out.startswith("kind,name,a,b,")


@pytest.mark.parametrize("to", ["jax", "torch", "dtensor"])
def test_export_writes_the_python_export(saved, tmp_path, capsys, to):
  path = tmp_path / f"{to}.json"
  code, _, err = _run(capsys, "export", saved, "--to", to, "-o", str(path))
  assert code == 0 and f"wrote {path}" in err
  want = export.export(mtf.load_plan(saved), to)
  assert json.loads(path.read_text()) == json.loads(json.dumps(want))
  code, out, _ = _run(capsys, "export", saved, "--to", to)
  assert code == 0 and json.loads(out) == json.loads(json.dumps(want))


def test_export_rename_map(saved, tmp_path, capsys):
  m = tmp_path / "names.json"
  m.write_text(json.dumps({"embedding/weights": "wte",
                           "positional_embedding": None}))
  code, out, _ = _run(capsys, "export", saved, "--to", "jax", "--rename",
                      str(m))
  assert code == 0
  params = json.loads(out)["params"]
  assert "wte" in params and "positional_embedding" not in params
  m.write_text("[1]")
  code, _, err = _run(capsys, "export", saved, "--to", "jax", "--rename",
                      str(m))
  assert_clean_error(err, code, 2, "not a JSON object")


def _edited(saved, tmp_path, edit):
  data = json.loads(open(saved, encoding="utf-8").read())
  edit(data)
  p = tmp_path / "edited.json"
  p.write_text(json.dumps(data))
  return str(p)


def test_malformed_plan_files_get_two_line_errors(saved, tmp_path, capsys):
  bad = tmp_path / "bad.json"
  bad.write_text("{oops")
  p = run_cli("export", str(bad), "--to", "jax")
  assert_clean_error(p.stderr, p.returncode, 2, "is not valid JSON",
                     "--save plan.json")
  cases = [
      (lambda d: d.update(schema_version=9), "schema_version 9"),
      (lambda d: d["rules"].update(d_ff="rows"), "mesh axis 'rows'"),
  ]
  for edit, needle in cases:
    path = _edited(saved, tmp_path, edit)
    code, _, err = _run(capsys, "export", path, "--to", "torch")
    assert_clean_error(err, code, 2, needle)
    code, _, err = _run(capsys, "report", *MODEL, "-t",
                        "dgx-h100", "-l", "@" + path)
    assert_clean_error(err, code, 2, needle)
  code, _, err = _run(capsys, "diff", saved, str(tmp_path / "none.json"))
  assert_clean_error(err, code, 2, "cannot read plan file")
  code, _, err = _run(capsys, "report", "-m", "mlp_tiny", "-t", "dgx-h100",
                      "-l", "@" + saved)
  assert_clean_error(err, code, 2, "shares no variable")
