"""The README's commands and code run as written, in a fresh interpreter."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _python_blocks():
  return re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)


def test_api_tour_and_training_snippet_run_in_a_fresh_interpreter():
  blocks = _python_blocks()
  tour = next(b for b in blocks if "mtf.Lowering(graph, {mesh: impl})" in b)
  training = next(b for b in blocks if "train_step_for_model" in b)
  script = tour + "\n" + training + "\nprint('README-OK', float(loss))\n"
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
  p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr[-3000:]
  assert "README-OK" in p.stdout


def test_quick_start_commands_are_the_ci_commands():
  text = README.read_text(encoding="utf-8")
  ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
  test_cmd = ('pip install -e ".[test,interop]" && python -m pytest -q '
              '-n 2 tests')
  assert test_cmd in text and test_cmd in ci
  assert "pip install -e . && mtf-layout solve" in text


def _shell_block(marker):
  blocks = re.findall(r"```bash\n(.*?)```", README.read_text("utf-8"), re.S)
  return next(b for b in blocks if marker in b)


def test_plan_files_example_runs_as_written(tmp_path):
  """The plan example, training plan included, in a fresh folder: every
  command exits 0, and the plan it saves holds training decisions that
  every reader took."""
  block = _shell_block("--save a.json")
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
  p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block],
                     cwd=tmp_path, env=env, capture_output=True, text=True,
                     timeout=600)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  import json  # pylint: disable=g-import-not-at-top
  plan = json.loads((tmp_path / "a.json").read_text())
  assert plan["decisions"], "the README's plan is a training plan"
  assert json.loads((tmp_path / "a.jax.json").read_text())["training"]
  assert "loss:" in p.stdout and "going down" in p.stdout
  assert "decision" in p.stdout  # diff priced the decisions
