"""Tests of the ``mtf-layout`` CLI.

The CLI runs as a real subprocess (the installed ``mtf-layout`` console
script when setup.py provides it, else ``python -m autolayout.cli``) for the
happy path of every subcommand and output format and for the common bad
inputs; the full list of bad inputs also runs in-process through
``main(argv)``, which is what the console script calls, to keep the suite
fast.
"""

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest

import costmodels
from autolayout import cli
from autolayout.cli.inputs import default_mesh, parse_layout_spec
from autolayout.cli.models import load_model, parse_overrides
from autolayout.cli.output import fmt_bytes, fmt_time, parse_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
TOPO = "tpu-v5e-2x4"
MESH = "data:2;model:4"
TINY = ["--model", "transformer_tiny", "--topology", TOPO, "--mesh", MESH]

MODEL_FILE = """
import mesh_tf as mtf

def build(batch=64, d_model=256, d_ff=1024):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, f"batch:{batch},d_model:{d_model}")
  w = mtf.get_variable(mesh, "w", f"d_model:{d_model},d_ff:{d_ff}")
  y = mtf.relu(mtf.einsum([x, w], reduced_dims=[w.shape[0]]))
  return g, [mtf.reduce_sum(y)]

def returns_int():
  return 3
"""


def _command():
  """The installed ``mtf-layout`` script of this environment, if setup.py
  installed one, else ``python -m autolayout.cli`` (the same ``main``)."""
  script = os.path.join(os.path.dirname(sys.executable), "mtf-layout")
  if os.path.exists(script):
    return [script]
  return [sys.executable, "-m", "autolayout.cli"]


def run_cli(*args, timeout=120):
  """Runs ``mtf-layout ARGS`` in a subprocess; returns the
  CompletedProcess."""
  env = dict(os.environ, COLUMNS="80", PYTHONPATH=ROOT)
  return subprocess.run([*_command(), *args], capture_output=True, text=True,
                        cwd=ROOT, env=env, timeout=timeout)


def assert_clean_error(stderr, code, expected_code, *needles):
  """One error line, one hint line, no traceback, the right exit code."""
  lines = [l for l in stderr.splitlines() if l.strip()]
  assert code == expected_code, stderr
  assert "Traceback" not in stderr
  assert len(lines) == 2, stderr
  assert lines[0].startswith("mtf-layout: error: "), stderr
  assert lines[1].startswith("hint: "), stderr
  for n in needles:
    assert n in stderr, (n, stderr)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
  d = tmp_path_factory.mktemp("models")
  good = d / "my_model.py"
  good.write_text(MODEL_FILE)
  bad = d / "broken.py"
  bad.write_text("import a_module_that_does_not_exist_xyz\n")
  return str(good), str(bad)


# --- happy paths, as subprocesses --------------------------------------------
def test_solve_table_fits_80_columns_and_names_every_section():
  p = run_cli("solve", *TINY)
  assert p.returncode == 0, p.stderr
  out = p.stdout
  for section in ("Layout rules", "Memory per device", "params",
                  "gradients", "optimizer", "activations", "peak", "hbm",
                  "Communication per mesh axis", "ici", "compute time",
                  "step time", "status", "optimal", "solve time"):
    assert section in out, section
  assert max(len(l) for l in out.splitlines()) <= 80
  assert "Traceback" not in p.stderr


def test_solve_json_equals_cost_model_and_never_imports_tensorflow():
  code = ("import sys, io, contextlib, json\n"
          "from autolayout.cli import main\n"
          "buf = io.StringIO()\n"
          "with contextlib.redirect_stdout(buf):\n"
          f"  rc = main(['solve', *{TINY!r}, '--format', 'json'])\n"
          "assert rc == 0\n"
          "with contextlib.redirect_stdout(io.StringIO()):\n"
          f"  assert main(['solve', *{TINY!r}, '--train']) == 0\n"
          "assert 'tensorflow' not in sys.modules, 'TF was imported'\n"
          "print(buf.getvalue())\n")
  p = subprocess.run([sys.executable, "-c", code], capture_output=True,
                     text=True, cwd=ROOT, timeout=120,
                     env=dict(os.environ, PYTHONPATH=ROOT))
  assert p.returncode == 0, p.stderr
  data = json.loads(p.stdout)
  assert data["schema"] == "mtf-layout/1" and data["command"] == "solve"
  res = data["result"]
  assert res["solver"]["status"] == "optimal"
  model = load_model("transformer_tiny")
  report = costmodels.evaluate(model.graph, MESH, res["rules"], TOPO)
  _assert_record_equals_report(res, report)
  assert res["solver"]["objective_value"] == report.step_time_s


def _assert_record_equals_report(rec, report):
  assert rec["step_time_s"] == report.step_time_s
  assert rec["compute_time_s"] == report.compute_time_s
  assert rec["comm_time_s"] == report.comm_time_s
  assert rec["comm_time_by_axis_s"] == report.comm_time_by_axis
  assert rec["flops_per_device"] == report.flops_per_device
  mem = rec["memory"]
  assert mem["peak_bytes"] == report.peak_memory_bytes
  assert mem["hbm_bytes"] == report.hbm_bytes
  for cat in ("params", "gradients", "optimizer", "activations"):
    assert mem[f"{cat}_bytes"] == report.memory_by_category[cat]
  assert [a["axis"] for a in rec["axes"]] == [
      d.name for d in report.mesh_shape.dims]


def test_report_json_numbers_equal_costmodels_evaluate(model_file):
  good, _ = model_file
  rules = "batch:data;d_ff:model"
  p = run_cli("report", "--model", f"{good}:build", "--set", "batch=32",
              "--topology", TOPO, "--mesh", MESH, "--layout", rules,
              "--format", "json")
  assert p.returncode == 0, p.stderr
  data = json.loads(p.stdout)
  model = load_model(f"{good}:build", {"batch": 32})
  report = costmodels.evaluate(model.graph, MESH, rules, TOPO,
                               outputs=model.outputs)
  _assert_record_equals_report(data["result"], report)
  assert data["result"]["solver"] is None
  ops = {o["op"]: o for o in data["ops"]}
  df = report.to_dataframe("ops")
  for name, row in df.iterrows():
    assert ops[name]["time_s"] == row["time_s"]
  assert len(data["collectives"]) == len(report.collectives)


def test_solve_csv_and_devices_search():
  p = run_cli("solve", "--model", "transformer_tiny", "--topology", TOPO,
              "--devices", "8", "--format", "csv")
  assert p.returncode == 0, p.stderr
  rows = list(csv.DictReader(io.StringIO(p.stdout)))
  assert len(rows) == 1
  assert rows[0]["status"] == "optimal"
  assert float(rows[0]["step_time_s"]) > 0


def test_compare_marks_the_best_and_writes_a_plot(tmp_path):
  png = tmp_path / "compare.png"
  p = run_cli("compare", *TINY, "-l", "dp=batch:data", "-l",
              "mp=d_ff:model;heads:model", "-l", "one=batch:data@data:8",
              "-l", "auto", "--plot", str(png))
  assert p.returncode == 0, p.stderr
  out = p.stdout
  for name in ("dp", "mp", "one", "auto", "data:8", "d_ff:model"):
    assert name in out
  assert "*" in out
  assert max(len(l) for l in out.splitlines()) <= 80
  assert png.stat().st_size > 10000


def test_compare_json_lists_every_layout_and_auto_is_best():
  p = run_cli("compare", *TINY, "-l", "batch:data", "-l", "", "-l", "auto",
              "--format", "json")
  assert p.returncode == 0, p.stderr
  layouts = json.loads(p.stdout)["layouts"]
  assert [l["label"] for l in layouts] == ["L1", "replicated", "auto"]
  assert layouts[1]["rules"] == ""
  assert layouts[2]["solver"]["status"] == "optimal"
  # The solver's optimum is no slower than any other layout of the mesh.
  assert layouts[2]["step_time_s"] <= min(l["step_time_s"]
                                          for l in layouts[:2])


def test_report_table():
  p = run_cli("report", *TINY, "--layout", "batch:data;vocab:model",
              "--top", "5")
  assert p.returncode == 0, p.stderr
  assert "Top 5 of" in p.stdout and "Communication per mesh axis" in p.stdout


def test_report_csv_views(capsys):
  assert cli.main(["report", *TINY, "--layout", "batch:data", "--format",
                   "csv", "--view", "collectives"]) == 0
  rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
  assert rows and {"kind", "mesh_axes", "bytes_per_device",
                   "time_s"} <= set(rows[0])


def test_mesh_ranks_every_factorisation(tmp_path):
  png = tmp_path / "mesh.png"
  p = run_cli("mesh", "--model", "transformer_tiny", "--topology", TOPO,
              "--format", "json", "--plot", str(png))
  assert p.returncode == 0, p.stderr
  ranking = json.loads(p.stdout)["ranking"]
  meshes = [r["mesh"] for r in ranking]
  # Axes are named after the physical dims they lie on (#14).
  assert set(meshes) == {"chips:8", "ici_x:2;ici_y:4", "ici_xy:4;ici_y:2"}
  steps = [r["step_time_s"] for r in ranking if r["step_time_s"] is not None]
  assert steps == sorted(steps)
  assert ranking[0]["rank"] == 1 and ranking[0]["result"]["rules"] is not None
  assert png.stat().st_size > 5000


def test_pareto_front_is_monotone(tmp_path):
  png = tmp_path / "pareto.png"
  p = run_cli("pareto", "--model", "transformer", "--set",
              "layers=1,batch=32,length=128,vocab=4096", "--topology", TOPO,
              "--mesh", MESH, "--format", "csv", "--plot", str(png))
  assert p.returncode == 0, p.stderr
  rows = list(csv.DictReader(io.StringIO(p.stdout)))
  assert len(rows) >= 2
  mem = [int(r["peak_memory_bytes"]) for r in rows]
  step = [float(r["step_time_s"]) for r in rows]
  assert mem == sorted(mem, reverse=True) and len(set(mem)) == len(mem)
  assert step == sorted(step)
  assert png.stat().st_size > 5000


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_pareto_table_and_json(fmt):
  p = run_cli("pareto", *TINY, "--format", fmt)
  assert p.returncode == 0, p.stderr
  assert "Traceback" not in p.stderr and "internal error" not in p.stderr
  if fmt == "json":
    points = json.loads(p.stdout)["points"]
    assert len(points) >= 1 and all("rules" in q for q in points)
  else:
    assert "Pareto front" in p.stdout
    assert max(len(l) for l in p.stdout.splitlines()) <= 80


def test_topologies_table():
  p = run_cli("topologies")
  assert p.returncode == 0
  for name in costmodels.list_topologies():
    assert name in p.stdout
  assert max(len(l) for l in p.stdout.splitlines()) <= 80


def test_topologies_json(capsys):
  assert cli.main(["topologies", "-f", "json"]) == 0
  data = json.loads(capsys.readouterr().out)
  v5e = {t["topology"]: t for t in data["topologies"]}["tpu-v5e-16x16"]
  assert v5e["chips"] == 256 and len(v5e["dims"]) == 2
  assert v5e["hbm_bytes"] == costmodels.get_topology(
      "tpu-v5e-16x16").chip.hbm_bytes


def test_explain_gives_counterfactuals():
  p = run_cli("explain", "--model", "transformer", "--set",
              "layers=1,batch=32,length=128,vocab=4096", "--topology", TOPO,
              "--mesh", MESH)
  assert p.returncode == 0, p.stderr
  assert "without it" in p.stdout and "runner-up" in p.stdout
  assert "dropping it" in p.stdout


def test_explain_json_for_a_given_layout(capsys):
  assert cli.main(["explain", *TINY, "--layout", "batch:data;d_ff:model",
                   "--format", "json"]) == 0
  rules = json.loads(capsys.readouterr().out)["rules"]
  assert [(r["dim"], r["axis"]) for r in rules] == [("batch", "data"),
                                                   ("d_ff", "model")]
  assert all(r["without_step_time_s"] is not None for r in rules)


# --- bad input, as subprocesses ----------------------------------------------
def test_bad_inputs_as_subprocess(model_file):
  _, bad = model_file
  p = run_cli("solve", "--model", "transformer_tiny", "--topology", TOPO,
              "--mesh", "data=2;model:4")
  assert_clean_error(p.stderr, p.returncode, 2, "malformed mesh",
                     "data=2")
  p = run_cli("solve", "--model", f"{bad}:build", "--topology", TOPO)
  assert_clean_error(p.stderr, p.returncode, 2, "failed to import",
                     "a_module_that_does_not_exist_xyz")


# --- every bad input, in-process through main() -----------------------------
BAD = [
    ("malformed mesh", ["solve", "-m", "transformer_tiny", "-t", TOPO,
                        "--mesh", "data:2;model"], 2, "malformed mesh"),
    ("mesh size 0", ["solve", "-m", "transformer_tiny", "-t", TOPO,
                     "--mesh", "data:0;model:4"], 2, "at least 1"),
    ("repeated axis", ["solve", "-m", "transformer_tiny", "-t", TOPO,
                       "--mesh", "data:2;data:4"], 2, "distinct name"),
    ("unknown topology", ["solve", "-m", "transformer_tiny", "-t",
                          "tpu-v9-2x2"], 2, "unknown topology"),
    ("unknown model", ["solve", "-m", "gpt9", "-t", TOPO], 2,
     "unknown model 'gpt9'"),
    ("mesh too big", ["solve", "-m", "transformer_tiny", "-t", TOPO,
                      "--mesh", "data:4;model:4"], 2,
     "does not fit topology"),
    ("mesh does not embed", ["solve", "-m", "transformer_tiny", "-t",
                             "tpu-v4-4x4x4", "--mesh", "a:3;b:2"], 2,
     "does not fit topology"),
    ("indivisible dim", ["report", *TINY, "--set", "heads=3", "-l",
                         "heads:model"], 2, "heads=3"),
    ("dim twice", ["report", *TINY, "-l", "batch:data;batch:model"], 2,
     "both mesh axis"),
    ("unknown dim", ["report", *TINY, "-l", "nodim:data"], 2,
     "names dim 'nodim'"),
    ("unknown axis", ["report", *TINY, "-l", "batch:rows"], 2,
     "names mesh axis 'rows'"),
    ("malformed rules", ["report", *TINY, "-l", "batch=data"], 2,
     "malformed layout rules"),
    ("bad override", ["solve", *TINY, "--set", "layers"], 2, "name=value"),
    ("unknown field", ["solve", *TINY, "--set", "depth=3"], 2, "depth"),
    ("bad budget", ["solve", *TINY, "--memory-budget", "lots"], 2,
     "--memory-budget"),
    # Below what the variables need spread over every device: said at
    # once, without the training search.
    ("infeasible budget", ["solve", *TINY, "--memory-budget", "2KiB"], 3,
     "variables (parameters and optimizer state) alone need at least"),
    ("infeasible peak", ["solve", *TINY, "--memory-budget", "9KiB"], 3,
     "smallest feasible peak"),
    ("infeasible mesh search", ["mesh", "-m", "transformer_tiny", "-t", TOPO,
                                "--memory-budget", "2KiB"], 3,
     "smallest feasible peak"),
    ("devices mismatch", ["mesh", "-m", "transformer_tiny", "-t", TOPO,
                          "--devices", "6"], 2, "differs from the 8 chips"),
    ("missing model", ["solve", "-t", TOPO], 2, "--model"),
    ("unknown command", ["frobnicate"], 2, "invalid choice"),
    ("duplicate names", ["compare", *TINY, "-l", "a=batch:data", "-l",
                         "a=d_ff:model"], 2, "two layouts"),
]


@pytest.mark.parametrize("argv,code,needle", [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_every_bad_input_is_one_line_with_a_hint(argv, code, needle, capsys):
  rc = cli.main(argv)
  captured = capsys.readouterr()
  assert_clean_error(captured.err, rc, code, needle)


def test_model_file_errors(model_file, tmp_path, capsys):
  good, bad = model_file
  cases = [
      (f"{bad}:build", "failed to import"),
      (f"{good}:nope", "has no function 'nope'"),
      (f"{good}:returns_int", "returned int"),
      (str(tmp_path / "missing.py") + ":build", "does not exist"),
      (f"{good}", "does not end in :function"),
  ]
  for spec, needle in cases:
    rc = cli.main(["solve", "-m", spec, "-t", TOPO])
    assert_clean_error(capsys.readouterr().err, rc, 2, needle)
  rc = cli.main(["solve", "-m", f"{good}:build", "--set", "nope=1", "-t",
                 TOPO])
  assert_clean_error(capsys.readouterr().err, rc, 2, "nope")


def test_infeasible_error_states_the_smallest_feasible_memory(capsys):
  # --layout-only: the step as built, without the fallback to training
  # decisions that a bare solve takes when nothing fits.
  one = [*TINY, "--layout-only"]
  rc = cli.main(["solve", *one, "--memory-budget", "2KiB"])
  err = capsys.readouterr().err
  assert rc == 3
  peak = int(re.search(r"\((\d+) bytes\)", err).group(1))
  # That budget is feasible, one byte less is not.
  assert cli.main(["solve", *one, "--memory-budget", str(peak),
                   "-f", "json"]) == 0
  assert json.loads(capsys.readouterr().out)["result"]["memory"][
      "peak_bytes"] == peak
  assert cli.main(["solve", *one, "--memory-budget", str(peak - 1)]) == 3


# --- small pure helpers -------------------------------------------------------
def test_parsers_and_formatters():
  assert parse_overrides(["layers=2,d_model=64", "activation=gelu",
                          "pad_id=none,dropout=0.1"]) == {
                              "layers": 2, "d_model": 64,
                              "activation": "gelu", "pad_id": None,
                              "dropout": 0.1}
  assert parse_bytes("16GB") == 16 * 10**9
  assert parse_bytes("1.5GiB") == 3 * 2**29
  assert parse_bytes("50%", hbm_bytes=1000) == 500
  assert parse_bytes("hbm", hbm_bytes=7) == 7
  assert parse_bytes("none") is None
  with pytest.raises(ValueError):
    parse_bytes("-3GB")
  assert fmt_time(0.02892) == "28.92 ms" and fmt_time(3e-5) == "30 us"
  assert fmt_bytes(1.5 * 2**30) == "1.5 GiB" and fmt_bytes(12) == "12 B"
  assert parse_layout_spec("dp=batch:data@data:8", 1) == ("dp", "batch:data",
                                                          "data:8")
  assert parse_layout_spec("auto", 2) == ("auto", "auto", None)
  assert parse_layout_spec("batch:data", 3) == ("L3", "batch:data", None)
  assert default_mesh(costmodels.get_topology("tpu-v5e-16x16")) == \
      "data:16;model:16"
  assert default_mesh(costmodels.get_topology("tpu-v5p-4x4x4")) == \
      "data:16;model:4"
  assert default_mesh(costmodels.get_topology("dgx-h100")) == "data:8"
  assert default_mesh(costmodels.get_topology("h100x8-nodes4")) == \
      "data:4;model:8"


def test_help_and_main_return_codes(capsys):
  assert cli.main(["--help"]) == 0
  assert "solve" in capsys.readouterr().out
  assert cli.main(["topologies", "-f", "csv"]) == 0
  rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
  assert {r["topology"] for r in rows} == set(costmodels.list_topologies())


def test_live_progress_shows_best_objective_and_bound():
  import io
  from rich.console import Console
  from autolayout.cli.context import Context
  ctx = Context("table")
  buf = io.StringIO()
  ctx.err = Console(file=buf, force_terminal=True, width=100)
  with ctx.progress("solving", "s") as update:
    update(0.0123, 0.011, 0.05)
    import time
    time.sleep(0.3)  # let the live display refresh at least once
  text = buf.getvalue()
  assert "solving: best 12.3 ms, bound 11 ms" in text, text


@pytest.mark.parametrize("value", ["layers=abc", "heads=0", "d_ff=-4"])
def test_bad_override_values_are_input_errors(value):
  p = run_cli("solve", *TINY, "--set", value)
  assert p.returncode == 2, p.stderr
  assert "is not an integer >= 1" in p.stderr and "hint:" in p.stderr
  assert "internal error" not in p.stderr and "Traceback" not in p.stderr


def test_per_token_latency_of_a_decoding_preset():
  args = ("solve", "--model", "decode:gpt2_small", "--set", "batch=1",
          "--topology", "dgx-h100", "--mesh", "x:2;y:4", "--objective",
          "latency")
  p = run_cli(*args, "--format", "json")
  assert p.returncode == 0, p.stderr
  result = json.loads(p.stdout)["result"]
  assert result["solver"]["objective"] == "latency"
  split = {r["dim"] for r in result["rules_list"]}
  # Batch 1: the model dims are split, never the batch.
  assert "batch" not in split and split & {"heads", "d_ff", "vocab"}
  t = run_cli(*args)
  assert t.returncode == 0 and "token latency" in t.stdout
