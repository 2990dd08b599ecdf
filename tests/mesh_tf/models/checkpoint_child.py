"""A child process for the checkpoint fault tests
(test_checkpoint_faults.py).

``python -m tests.mesh_tf.models.checkpoint_child DIR STAGE``: trains a
model with a large variable on 2 logical CPU devices, saves checkpoint
``DIR/ckpt`` (and the same values to ``DIR/ref``, the expected state after
a killed save), takes one more step and saves ``DIR/ckpt`` again.  At ``STAGE`` of
that second save it prints ``STAGE <name>`` and blocks on stdin, so that
the parent kills it there, deterministically.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import mesh_tf as mtf  # noqa: E402  (before TensorFlow)
import tensorflow as tf  # noqa: E402

ROWS = 4096  # the variable "big" is ROWS x 2048 float32: 32 MiB


def build(mesh):
  """A loss over one large variable, so that a save takes a while."""
  r, c = mtf.Dimension("rows", ROWS), mtf.Dimension("cols", 2048)
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([c]), dtype="float32")
  w = mtf.get_variable(mesh, "big", mtf.Shape([r, c]),
                       initializer=mtf.random_normal_initializer())
  return mtf.reduce_mean(mtf.square(mtf.einsum([w, x], reduced_dims=[c]))), [x]


def main(directory, stage):
  from mesh_tf import checkpoint, training
  from mesh_tf.training import optimize
  cpus = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
  step = training.make_train_step(build, "x:2", "rows:x",
                                  mtf.logical_cpu_devices(2),
                                  optimize.SgdOptimizer(0.1))
  x = np.ones([2048], np.float32)
  step(x)
  path = os.path.join(directory, "ckpt")
  step.save(path)
  step.save(os.path.join(directory, "ref"))
  step(x)

  def hook(name):
    if name == stage:
      sys.stdout.write(f"STAGE {name}\n")
      sys.stdout.flush()
      if stage == "writing":
        return  # the parent kills us while TensorFlow writes the values
    if name == stage or (stage == "writing" and name == "staged"):
      sys.stdin.readline()  # the parent kills us while we wait here
  checkpoint.save(path, step.mesh_impl, step.graph, on_stage=hook)
  sys.stdout.write("DONE\n")
  sys.stdout.flush()


if __name__ == "__main__":
  main(*sys.argv[1:])
