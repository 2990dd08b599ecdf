"""Thread pools for logical CPU devices that share the host's cores
(``placement.cpu_thread_pools``), checked in fresh processes: pools are
fixed once per process, before TensorFlow starts."""

import doctest
import json
import os
import subprocess
import sys

from mesh_tf.lowering import placement

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

CHILD = """
import json, sys
import mesh_tf as mtf
tf = mtf.set_logical_cpu_devices(int(sys.argv[1]),
                                 share_cores=sys.argv[2] == "share")
tf.constant(1.0) + 1.0  # TensorFlow starts with these pools
from mesh_tf.lowering.placement import host_cores
print(json.dumps([tf.config.threading.get_inter_op_parallelism_threads(),
                  tf.config.threading.get_intra_op_parallelism_threads(),
                  len(tf.config.list_logical_devices("CPU")), host_cores()]))
"""


def _pools(n, share, **env):
  out = subprocess.run(
      [sys.executable, "-c", CHILD, str(n), share], capture_output=True,
      text=True, check=True, cwd=ROOT,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env))
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_pools_give_each_core_one_kernel():
  assert placement.cpu_thread_pools(8, 2) == (2, 1)
  assert placement.cpu_thread_pools(4, 16) == (16, 4)
  assert placement.cpu_thread_pools(1, 2) == (2, 2)
  assert placement.cpu_thread_pools(0, 0) == (1, 1)
  result = doctest.testmod(placement)
  assert result.failed == 0 and result.attempted > 0


def test_set_logical_cpu_devices_sizes_the_pools_unless_told_not_to():
  inter, intra, devices, cores = _pools(8, "share")
  assert devices == 8
  assert (inter, intra) == placement.cpu_thread_pools(8, cores)
  # TensorFlow's own pools (0: one thread per core, chosen by TF).
  assert _pools(8, "keep")[:3] == [0, 0, 8]
  # A user's environment variable wins.
  assert _pools(8, "share", TF_NUM_INTRAOP_THREADS="3")[:2] == [0, 0]
