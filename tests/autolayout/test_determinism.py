"""Determinism: the same question gives the same plan and the same JSON
bytes across runs (in-process and in fresh processes with other hash
seeds) and across CP-SAT worker counts 1 and 2.

Only the measured times (``solve_time_s``, ``build_time_s`` and the
training search's solve times) differ from run to run; they are masked
before comparing bytes.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from autolayout.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TIMES = re.compile(r'"(\w*(?:solve|build)\w*_s)": [0-9.e+-]+')

QUESTIONS = [
    ["solve", "-m", "transformer_tiny", "-t", "tpu-v5e-2x4", "--train"],
    ["solve", "-m", "moe_tiny", "-t", "tpu-v5e-2x4", "--memory-budget",
     "2MiB"],
    ["solve", "-m", "gpt2_small", "-t", "tpu-v5e-16x16"],
    ["mesh", "-m", "mlp_tiny", "-t", "dgx-h100"],
    ["pareto", "-m", "conv3d_tiny", "-t", "tpu-v5e-2x4", "--max-points", "4"],
    ["explain", "-m", "transformer_tiny", "-t", "tpu-v5e-2x4"],
]


def masked(text):
  """The JSON text with the measured times replaced by 0."""
  return TIMES.sub(lambda m: f'"{m.group(1)}": 0', text)


def _in_process(capsys, argv, workers):
  code = main(argv + ["-f", "json", "--workers", str(workers)])
  out, err = capsys.readouterr()
  assert code == 0, err
  return out


@pytest.mark.parametrize("argv", QUESTIONS, ids=[" ".join(q[:3])
                                                 for q in QUESTIONS])
def test_same_json_bytes_across_runs_and_worker_counts(capsys, argv):
  # Two runs of one worker count (across runs) and one of the other.
  runs = [_in_process(capsys, argv, w) for w in (2, 1, 2)]
  assert len({masked(r) for r in runs}) == 1, "\n---\n".join(runs)
  doc = json.loads(runs[0])
  assert doc["schema"] == "mtf-layout/1"


def test_same_json_bytes_in_fresh_processes_with_other_hash_seeds(capsys):
  argv = QUESTIONS[0] + ["-f", "json", "--workers", "2"]
  want = masked(_in_process(capsys, QUESTIONS[0], 2))
  # A seed other than this process's (random unless PYTHONHASHSEED is set).
  seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
  env = dict(os.environ, PYTHONHASHSEED=seed,
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  p = subprocess.run([sys.executable, "-m", "autolayout.cli"] + argv,
                     capture_output=True, text=True, timeout=120, env=env,
                     cwd=ROOT)
  assert p.returncode == 0, p.stderr
  assert masked(p.stdout) == want


def test_same_plan_from_the_api_for_both_worker_counts():
  import mesh_tf as mtf
  from mesh_tf import models
  model = models.build_model("moe_tiny")
  plans = {(str(r.rules), r.step_time_s, r.peak_memory_bytes, r.status)
           for w in (1, 2)
           for r in [mtf.auto_layout(model.graph, "x:2;y:4", [model.loss],
                                     topology="tpu-v5e-2x4", num_workers=w)]}
  assert len(plans) == 1, plans
