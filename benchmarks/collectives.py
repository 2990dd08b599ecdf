"""Benchmark: three ways to all-reduce across 8 TF logical CPU devices.

Run:  python benchmarks/collectives.py

Inside one ``tf.function``, side by side:
- ``copies``: each device adds its peers' slices (what PlacementMeshImpl does);
- ``reduce+bcast``: one device adds, the others copy the sum;
- ``tf-collective``: TensorFlow's own CollectiveReduceV2 ops (through TF's
  internal replica launcher, as MultiWorkerMirroredStrategy uses them).
TF's collectives must run concurrently, so they also cannot be used from
eager mode, where ops on the 8 devices run one after another and a
collective would wait for peers forever.  The script prints times and
the ratio of each method to ``copies``.
"""

import os
import statistics
import sys
import time


def main():
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf
  from tensorflow.python.distribute import collective_util  # pylint: disable=g-direct-tensorflow-import
  from tensorflow.python.distribute import cross_device_utils as cdu  # pylint: disable=g-direct-tensorflow-import
  cpus = tf.config.list_physical_devices("CPU")
  n = 8
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
  devs = [d.name for d in tf.config.list_logical_devices("CPU")]
  keys = cdu.CollectiveKeys()
  launchers = [cdu.CollectiveReplicaLauncher(
      group_key=keys.get_group_key(devs), group_size=n, collective_keys=keys,
      device=d, options=collective_util.Options()) for d in devs]

  def copies(xs):
    out = []
    for d in devs:
      with tf.device(d):
        out.append(tf.add_n(xs))
    return out

  def reduce_bcast(xs):
    with tf.device(devs[0]):
      s = tf.add_n(xs)
    out = []
    for d in devs:
      with tf.device(d):
        out.append(tf.identity(s))
    return out

  def collective(xs):
    out = []
    for i, d in enumerate(devs):
      with tf.device(d):
        out.append(launchers[i].all_reduce(xs[i]))
    return out

  methods = {"copies": copies, "reduce+bcast": reduce_bcast,
             "tf-collective": collective}
  print(f"all-reduce over {n} logical CPU devices, median of 30 steps")
  print(f"{'elements/device':>16} " + " ".join(f"{m:>14}" for m in methods)
        + "   ratio to copies")
  for size in (1024, 65536, 1 << 20):
    xs = []
    for d in devs:
      with tf.device(d):
        xs.append(tf.random.normal([size]))
    times = {}
    for name, fn in methods.items():
      f = tf.function(fn)
      f(xs)
      ts = []
      for _ in range(30):
        t = time.perf_counter()
        r = f(xs)
        _ = r[-1].numpy()
        ts.append(time.perf_counter() - t)
      times[name] = statistics.median(ts)
    ratios = " ".join(f"{times[m] / times['copies']:.2f}" for m in methods)
    print(f"{size:>16} " + " ".join(f"{times[m] * 1e3:>11.2f} ms"
                                    for m in methods) + f"   {ratios}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
