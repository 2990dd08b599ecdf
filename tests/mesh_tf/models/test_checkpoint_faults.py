"""A checkpoint save is atomic: killed at any point, the previous
checkpoint stays restorable.

In-process, a hook stops a save after each stage of the commit (raising,
which leaves the files as a kill would); in child processes, a real
SIGKILL lands while TensorFlow writes the values and in the middle of the
renames.  The child blocks on a pipe at the chosen stage, so the kill
point is deterministic.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import checkpoint, training
from mesh_tf.checkpoint import files as checkpoint_files
from mesh_tf.training import optimize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
D, F = mtf.Dimension("d_model", 8), mtf.Dimension("d_ff", 16)


class _Stop(Exception):
  pass


def _build(mesh):
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([D]), dtype="float32")
  w = mtf.get_variable(mesh, "w", mtf.Shape([D, F]),
                       initializer=mtf.random_normal_initializer())
  return mtf.reduce_mean(mtf.square(mtf.einsum([x, w], reduced_dims=[D]))), [
      x]


def _values(step):
  return {k: v.copy() for k, v in step.variable_values().items()}


def _assert_same(got, want):
  assert sorted(got) == sorted(want)
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def _leftovers(directory):
  return sorted(f for f in os.listdir(directory)
                if ".saving" in f or ".previous" in f)


@pytest.mark.parametrize("stage", ["writing"] + list(checkpoint_files.STAGES))
def test_save_stopped_at_any_stage_leaves_a_whole_checkpoint(tmp_path, stage):
  step = training.make_train_step(_build, "x:2", "d_ff:x",
                                  mtf.logical_cpu_devices(2),
                                  optimize.SgdOptimizer(0.5))
  x = np.ones([8], np.float32)
  step(x)
  path = str(tmp_path / "m")
  step.save(path)
  old = _values(step)
  step(x)
  new = _values(step)

  def stop(name):
    if name == stage:
      raise _Stop(name)
  with pytest.raises(_Stop):
    checkpoint.save(path, step.mesh_impl, step.graph, on_stage=stop)
  _assert_same(checkpoint.load_values(path),
               new if stage == "committed" else old)
  assert _leftovers(tmp_path) == []
  # A restore after the interrupted save, then a clean save, both work.
  step.restore(path)
  checkpoint.save(path, step.mesh_impl, step.graph)
  assert _leftovers(tmp_path) == []


def test_first_save_stopped_leaves_no_checkpoint(tmp_path):
  step = training.make_train_step(_build, "x:2", "", mtf.logical_cpu_devices(2),
                                  optimize.SgdOptimizer(0.5))
  step(np.ones([8], np.float32))
  path = str(tmp_path / "m")

  def stop(name):
    if name == "new-data-moved":
      raise _Stop(name)
  with pytest.raises(_Stop):
    checkpoint.save(path, step.mesh_impl, step.graph, on_stage=stop)
  with pytest.raises(checkpoint.CheckpointError, match="cannot read"):
    checkpoint.load_values(path)
  step.save(path)  # the orphaned data file does not get in the way
  _assert_same(checkpoint.load_values(path), _values(step))


def _kill_child_at(tmp_path, stage):
  """Runs checkpoint_child, SIGKILLs it at ``stage`` of its second save;
  returns how much of the staged data file existed at the kill."""
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get(
      "PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
  child = subprocess.Popen(
      [sys.executable, "-m", "tests.mesh_tf.models.checkpoint_child",
       str(tmp_path), stage], cwd=ROOT, env=env, stdin=subprocess.PIPE,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    line = child.stdout.readline()  # bounded: the child blocks before commit
    assert line.strip() == f"STAGE {stage}", (line, child.stderr.read()[-3000:]
                                              if child.poll() is not None
                                              else "")
    staged = checkpoint_files.staged_prefix(str(tmp_path / "ckpt"))
    seen = 0
    if stage == "writing":  # kill as soon as TF has begun writing the values
      deadline = time.monotonic() + 60
      while not seen and time.monotonic() < deadline:
        seen = sum(os.path.getsize(f)
                   for f in checkpoint_files.data_files(staged)
                   if os.path.exists(f))
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    return seen
  finally:
    if child.poll() is None:
      child.kill()
      child.wait(timeout=30)
    child.stdout.close()
    child.stderr.close()
    child.stdin.close()


@pytest.mark.parametrize("stage", ["writing", "old-data-moved"])
def test_child_killed_mid_save_leaves_previous_checkpoint(tmp_path, stage):
  """SIGKILL while TF writes 32 MiB of values, and between moving the old
  data out and the new data in (when neither prefix holds a whole set)."""
  seen = _kill_child_at(tmp_path, stage)
  path = str(tmp_path / "ckpt")
  if stage == "old-data-moved":
    assert not os.path.exists(path + ".index")  # really mid-commit
  else:
    assert seen > 0
  _assert_same(checkpoint.load_values(path),
               checkpoint.load_values(str(tmp_path / "ref")))
  assert _leftovers(tmp_path) == []
