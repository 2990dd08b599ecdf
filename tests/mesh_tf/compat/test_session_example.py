"""examples/train_transformer_session.py, a Mesh TF training loop in the
original's order (initializer built after lowering and before
``copy_masters_to_slices()``), runs unmodified and its loss falls (issue
40)."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "examples", "train_transformer_session.py")


def test_original_order_trains_and_loss_falls():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run(
      [sys.executable, EXAMPLE, "--steps", "4", "--num_layers", "1"],
      capture_output=True, text=True, timeout=300, env=env, check=False)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  losses = [float(v) for v in re.findall(r"^step \d+ loss ([0-9.]+)",
                                         proc.stdout, re.M)]
  assert len(losses) == 4
  assert all(b < a for a, b in zip(losses, losses[1:])), losses
  assert losses[-1] < 0.9 * losses[0], losses
