"""Hostile inputs to ``mtf-layout`` (the issue's examples and more): each
ends in the documented exit code with exactly one ``error:`` line and one
``hint:`` line, the hint naming an option or a valid value, never an
internal error, a traceback or a hang.  In-process through ``main()``."""

import json
import os
import sys

import pytest

from tests.autolayout.cli import cli_contract

T = ["-t", "tpu-v5e-2x4"]
TINY = ["-m", "transformer_tiny"] + T

USER_MODELS = '''
import sys
import mesh_tf as mtf

def build(batch=64, d_model=256, d_ff=1024):
  g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, f"batch:{batch},d_model:{d_model}")
  w = mtf.get_variable(mesh, "w", f"d_model:{d_model},d_ff:{d_ff}")
  y = mtf.einsum([x, w], reduced_dims=[w.shape[0]])
  return g, [mtf.reduce_sum(mtf.relu(y))]

def exits():
  sys.exit(7)

def interrupts():
  raise KeyboardInterrupt()

def recurses(n=0):
  return recurses(n + 1)

def prints():
  print("hello from the model")
  return build()

def empty():
  return mtf.Graph(), []

def no_outputs():
  g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  mtf.zeros(mesh, "batch:8")
  return g, []

def empty_graph():
  return mtf.Graph(), None

def returns_int():
  return 3

def raises():
  raise RuntimeError("boom")

def zero_dim():
  g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  mtf.zeros(mesh, "batch:0")
  return g, None

def huge():
  g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:1000000000000,d_model:1000000")
  return g, [mtf.reduce_sum(x)]

not_callable = 3
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("hostile")
  (d / "m.py").write_text(USER_MODELS)
  (d / "noisy.py").write_text('print("import noise")\n' + USER_MODELS)
  (d / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
  (d / "syntax.py").write_text("def f(:\n")
  (d / "empty.py").write_text("")
  return str(d)


# (expected exit code, argv); "{d}" is the model files' directory.
CASES = [
    # The examples.
    (2, ["solve", "-m", "transformer", "--set", "batch=1000000000000"]),
    (2, ["solve", *TINY, "--memory-budget", "1e99"]),
    (2, ["pareto", *TINY, "--max-points", "0"]),
    (2, ["pareto", *TINY, "--max-points", "-1"]),
    (2, ["mesh", *TINY, "--max-axes", "0"]),
    (2, ["mesh", "-m", "transformer_tiny", "-t", "tpu-v5e-1000000x1000000"]),
    (2, ["solve", *TINY, "--mesh", ""]),
    (2, ["solve", *TINY, "--workers", "0"]),
    (2, ["solve", *TINY, "--workers", "-3"]),
    (2, ["solve", "-m", "transformer_tiny", "-t", "h100x8-nodes0"]),
    (2, ["solve", *TINY, "--set", "layers=1", "--set", "layers=2"]),
    (2, ["solve", *TINY, "--set", "layers=1,layers=2"]),
    (2, ["solve", *TINY, "--set", "dtype=int32"]),
    (2, ["solve", *TINY, "--train", "--objective", "latency"]),
    (2, ["solve", "-m", "mlp_tiny", *T, "--objective", "latency"]),
    (2, ["solve", *TINY, "--max-axes", "3"]),
    (2, ["solve", "-m", "{d}/m.py:exits", *T]),
    (0, ["solve", "-m", "{d}/m.py:prints", "-t", "dgx-h100", "-f", "json"]),
    (2, ["solve", *TINY, "--plot", "/nonexistent/x.png"]),
    # User model files, fenced.
    (2, ["solve", "-m", "{d}/m.py:interrupts", *T]),
    (2, ["solve", "-m", "{d}/m.py:recurses", *T]),
    (2, ["solve", "-m", "{d}/m.py:empty", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:no_outputs", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:empty_graph", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:returns_int", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:raises", "-t", "dgx-h100", "-f", "json"]),
    (2, ["solve", "-m", "{d}/m.py:zero_dim", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:huge", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:not_callable", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:missing", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/m.py:build", "-t", "dgx-h100", "--set", "no=1"]),
    (2, ["solve", "-m", "{d}/exits_on_import.py:f", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/syntax.py:f", "-t", "dgx-h100"]),
    (2, ["solve", "-m", "{d}/empty.py:f", "-t", "dgx-h100"]),
    (0, ["solve", "-m", "{d}/noisy.py:build", "-t", "dgx-h100", "-f", "json"]),
    (2, ["solve", "-m", "/nonexistent/x.py:build"]),
    (2, ["solve", "-m", "{d}/m.py"]),
    (2, ["solve", "-m", "{d}/m.py:"]),
    # Output paths, checked before any work.
    (2, ["solve", *TINY, "--plot", "{d}/x.txt"]),
    (2, ["solve", *TINY, "--plot", "{d}"]),
    (2, ["solve", *TINY, "--plot", "/nonexistent/x.png", "-f", "json"]),
    (2, ["solve", *TINY, "--save", "/nonexistent/plan.json"]),
    (2, ["solve", *TINY, "--save", "{d}"]),
    (2, ["export", "{d}/none.json", "--to", "jax"]),
    (2, ["export", "{d}/none.json", "--to", "jax", "-o", "/nonexistent/x"]),
    (2, ["diff", "{d}/none.json", "{d}/none2.json"]),
    # Numbers: range and overflow.
    (2, ["solve", *TINY, "--time-limit", "0"]),
    (2, ["solve", *TINY, "--time-limit", "nan"]),
    (2, ["solve", *TINY, "--time-limit", "inf"]),
    (2, ["solve", *TINY, "--time-limit", "1e308"]),
    (2, ["solve", *TINY, "--time-limit", "abc"]),
    (2, ["solve", *TINY, "--workers", "1000000"]),
    (2, ["solve", *TINY, "--workers", "2.5"]),
    (2, ["solve", *TINY, "--seed", "-1"]),
    (2, ["solve", *TINY, "--seed", "99999999999999999999"]),
    (2, ["solve", *TINY, "--memory-budget", "0"]),
    (2, ["solve", *TINY, "--memory-budget", "-1GB"]),
    (2, ["solve", *TINY, "--memory-budget", "16XB"]),
    (2, ["solve", *TINY, "--memory-budget", "nan"]),
    (2, ["solve", *TINY, "--memory-budget", "0%"]),
    (3, ["solve", *TINY, "--memory-budget", "1B"]),
    (0, ["solve", *TINY, "--memory-budget", "50%"]),
    (0, ["solve", *TINY, "--memory-budget", "none", "-f", "json"]),
    # Meshes and topologies.
    (2, ["solve", *TINY, "--mesh", "data:0"]),
    (2, ["solve", *TINY, "--mesh", "data:8;data:1"]),
    (2, ["solve", *TINY, "--mesh", "data=8"]),
    (2, ["solve", *TINY, "--mesh", "data:16"]),
    (2, ["solve", *TINY, "--mesh", ";;;"]),
    (2, ["solve", *TINY, "--mesh", "x" * 5000 + ":16"]),
    (2, ["solve", *TINY, "--mesh", "data:99999999999999999999999"]),
    (2, ["solve", "-m", "nope", *T]),
    (2, ["solve", "-m", "y" * 5000, *T]),
    (2, ["solve", "-m", "transformer_tiny", "-t", "nope"]),
    (2, ["solve", "-m", "transformer_tiny", "-t", "z" * 3000]),
    (2, ["solve", "-m", "transformer_tiny", "-t", "tpu-v4-0x8x8"]),
    (2, ["solve", "-m", "transformer_tiny", "-t", "h100x8-nodes99999999"]),
    # --set.
    (2, ["solve", *TINY, "--set", "layers=0"]),
    (2, ["solve", *TINY, "--set", "layers=1.5"]),
    (2, ["solve", *TINY, "--set", "layers=100000"]),
    (2, ["solve", *TINY, "--set", "layers"]),
    (2, ["solve", *TINY, "--set", "bogus=3"]),
    (2, ["solve", *TINY, "--set", "activation=nope"]),
    (2, ["solve", *TINY, "--set", "d_model=99999999999999999999"]),
    (2, ["solve", *TINY, "--set", "batch=true"]),
    # Counts and options that do not apply.
    (2, ["solve", *TINY, "--devices", "0"]),
    (2, ["solve", *TINY, "--devices", "16"]),
    (2, ["solve", *TINY, "-n", "8", "--mesh", "data:8"]),
    (2, ["solve", *TINY, "-n", "8", "--max-axes", "99"]),
    (0, ["solve", *TINY, "-n", "8", "--max-axes", "3"]),
    (2, ["mesh", *TINY, "--devices", "7"]),
    (2, ["pareto", *TINY, "--max-points", "100000"]),
    (2, ["pareto", *TINY, "--memory-budget", "16GB"]),
    (2, ["compare", *TINY]),
    (2, ["compare", *TINY, "-l", "batch:nope"]),
    (2, ["compare", *TINY, "-l", "nodim:data"]),
    (2, ["compare", *TINY, "-l", "a=batch:data", "-l", "a=auto"]),
    (2, ["compare", *TINY, "-l", "batch:data@"]),
    (2, ["compare", *TINY, "-l", "=auto"]),
    (2, ["report", *TINY, "--layout", "batch:data", "--top", "0"]),
    (2, ["report", *TINY, "--layout", "batch:data;batch:data"]),
    (2, ["report", *TINY, "--layout", "batch:data", "--view", "nope"]),
    (2, ["explain", *TINY, "--layout", "zzz:data"]),
    (2, ["topologies", "-m", "x"]),
    (2, ["solve", "-f", "json"]),
    (2, []),
    (2, ["frobnicate"]),
    (2, ["solve", *TINY, "--objective", "speed", "-f", "json"]),
    (2, ["solve", "-m", "decode:nope", *T]),
    (2, ["solve", "-m", "decode:transformer_tiny", *T, "--train"]),
    # The variables alone exceed 8 chips (a few seconds, not the walk).
    (3, ["solve", "-m", "gpt3_175b", "-t", "tpu-v5e-2x4", "-f", "json"]),
    # #13's training-decision flags, checked at the edge.
    (2, ["solve", *TINY, "--zero-stage", "7"]),
    (2, ["solve", *TINY, "--zero-stage", "x", "-f", "json"]),
    (2, ["solve", *TINY, "--microbatches", "0"]),
    (2, ["solve", *TINY, "--recompute", "-1"]),
    (2, ["solve", *TINY, "--recompute", "2", "--forward"]),
    (2, ["solve", *TINY, "--zero-stage", "2", "--layout-only"]),
]


@pytest.mark.parametrize("code,argv", CASES,
                         ids=[" ".join(a)[:60] for _, a in CASES])
def test_hostile_input_keeps_the_contract(files, code, argv):
  argv = [a.replace("{d}", files) for a in argv]
  r = cli_contract.run(argv)
  assert cli_contract.problems(r) == [], (r.code, r.err)
  assert r.code == code, r.err
  if code:
    hint = [l for l in r.err.splitlines() if l.startswith("hint: ")][0]
    assert "--" in hint or "e.g." in hint or "mtf-layout" in hint, hint


def test_model_stdout_goes_to_stderr_and_json_stays_clean(files, capsys):
  r = cli_contract.run(["solve", "-m", f"{files}/m.py:prints", "-t",
                        "dgx-h100", "-f", "json"])
  assert r.code == 0
  assert json.loads(r.out)["command"] == "solve"
  assert "hello from the model" in r.err


def test_sys_exit_in_a_model_names_the_file_and_function(files):
  r = cli_contract.run(["solve", "-m", f"{files}/m.py:exits", *T])
  assert r.code == 2
  assert f"{files}/m.py:exits called sys.exit(7)" in r.err


def test_json_error_object(files):
  r = cli_contract.run(["solve", *TINY, "--workers", "0", "-f", "json"])
  doc = json.loads(r.out)
  assert doc == {"schema": "mtf-layout/1", "error": doc["error"],
                 "hint": doc["hint"], "exit_code": 2}
  assert doc["error"].startswith("--workers 0 is out of range")
  assert "--workers 2" in doc["hint"]


def test_long_inputs_are_cut_in_messages():
  r = cli_contract.run(["solve", "-m", "y" * 5000, *T])
  error = r.err.splitlines()[0]
  assert len(error) < 400 and "...<" in error


def test_topology_too_large_answers_at_once():
  import time
  t = time.monotonic()
  r = cli_contract.run(["mesh", "-m", "transformer_tiny", "-t",
                        "tpu-v5e-1000000x1000000"])
  assert time.monotonic() - t < 5
  assert "1000000000000 chips, over the 1048576" in r.err


def test_zoo_preset_failing_with_its_defaults_is_a_bug(monkeypatch):
  """A preset that cannot build with its own defaults is mesh-tf's fault:
  exit 1 and "report it", not "check the arguments"."""
  from mesh_tf.models import configs
  broken = configs.PRESETS["mlp_tiny"].__class__(d_model=0)
  monkeypatch.setitem(configs.PRESETS, "mlp_tiny", broken)
  r = cli_contract.run(["solve", "-m", "mlp_tiny", *T])
  assert r.code == 1
  assert "zoo preset 'mlp_tiny' fails with its own defaults" in r.err
  assert "bug in mesh-tf" in r.err
  assert sys.modules  # (the process survived)
  assert os.path.exists(os.path.dirname(__file__))
