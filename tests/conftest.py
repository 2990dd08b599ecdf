"""Test setup: 8 TF logical CPU devices, and OR-Tools imported before TF.

Importing ``ortools.sat.python.cp_model`` before TensorFlow avoids the
protobuf clash that segfaults CP-SAT when TF comes first.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import ortools.sat.python.cp_model  # noqa: F401,E402  (must precede TF)
import tensorflow as tf  # noqa: E402

NUM_DEVICES = 8


def _configure():
  cpus = tf.config.list_physical_devices("CPU")
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_DEVICES)
  except RuntimeError:
    pass  # Already initialised with the same configuration.
  tf.config.threading.set_inter_op_parallelism_threads(2)
  tf.config.threading.set_intra_op_parallelism_threads(1)


_configure()
