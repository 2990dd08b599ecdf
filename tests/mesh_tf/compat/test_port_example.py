"""The Mesh TensorFlow-style program in examples/ runs end to end: a
tf.compat.v1 MonitoredTrainingSession with MtfRestoreHook and
MtfCheckpointSaverListener trains, checkpoints its master variables, and
resumes from the checkpoint -- under another mesh and layout -- with the very
losses an uninterrupted run has."""

import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "examples", "port_from_mesh_tensorflow.py")
SMALL = ["--num_layers", "1", "--d_model", "64", "--d_ff", "128",
         "--vocab", "64", "--length", "16"]


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  proc = subprocess.run([sys.executable, EXAMPLE, *SMALL, *args],
                        capture_output=True, text=True, timeout=600, env=env,
                        check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  steps = re.findall(r"^step (\d+) loss ([0-9.]+)", proc.stdout, re.M)
  return [int(s) for s, _ in steps], [float(v) for _, v in steps]


def test_trains_checkpoints_and_resumes_under_another_layout(tmp_path):
  steps, straight = _run("--model_dir", str(tmp_path / "a"), "--steps", "6")
  assert steps == [1, 2, 3, 4, 5, 6]
  assert all(b < a for a, b in zip(straight, straight[1:])), straight
  assert straight[-1] < 0.8 * straight[0]

  resumed_dir = str(tmp_path / "b")
  _, first = _run("--model_dir", resumed_dir, "--steps", "3")
  assert os.path.exists(os.path.join(resumed_dir, "model.ckpt-3.index"))
  steps, second = _run("--model_dir", resumed_dir, "--steps", "3",
                       "--mesh_shape", "x:4", "--layout", "d_ff:x;vocab:x",
                       "--num_devices", "4")
  assert steps == [4, 5, 6]  # the global step was restored too
  np.testing.assert_allclose(first + second, straight, rtol=2e-4)


