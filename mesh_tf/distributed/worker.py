"""``mtf-worker``: one task of the TensorFlow cluster a multi-host mesh runs on.

Start one worker per host (or several per host, on different ports), all with
the same cluster; then a client connects with
:func:`mesh_tf.distributed.connect` and lowers graphs onto the workers'
devices.  The worker is a plain ``tf.distribute.Server`` (gRPC): slices and
collectives move through TensorFlow's own runtime.

Example (two hosts, four logical CPU devices each)::

  host-a$ mtf-worker --cluster host-a:2222,host-b:2222 --task 0 --cpu-devices 4
  host-b$ mtf-worker --cluster host-a:2222,host-b:2222 --task 1 --cpu-devices 4

or, with a TF_CONFIG-style JSON (``--tf-config`` or the ``TF_CONFIG``
environment variable)::

  host-b$ mtf-worker --tf-config '{"cluster": {"worker": ["host-a:2222",
      "host-b:2222"]}, "task": {"type": "worker", "index": 1}}'
"""

import argparse
import dataclasses
import os
import sys
import time

from mesh_tf.core.errors import MtfError
from mesh_tf.distributed import (Cluster, ClusterSpecError, convert_to_cluster,
                                 parse_tf_config, set_fail_fast_default)

__all__ = ["WorkerConfig", "main", "parse_args", "start_server"]


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
  """What one worker serves: its cluster, task index and device count."""
  cluster: Cluster
  task: int
  cpu_devices: int = 1

  @property
  def address(self):
    return self.cluster.addresses[self.task]


def _parser():
  p = argparse.ArgumentParser(
      prog="mtf-worker",
      description="Start one TensorFlow gRPC server task of the cluster that "
                  "a multi-host mesh-tf mesh runs on, and serve until killed.")
  src = p.add_mutually_exclusive_group()
  src.add_argument("--cluster", metavar="HOST:PORT,...",
                   help="addresses of every task of the job, in task order")
  src.add_argument("--tf-config", metavar="JSON",
                   help="TF_CONFIG-style JSON: {\"cluster\": {job: [addresses]}"
                        ", \"task\": {\"type\": job, \"index\": i}}; default: "
                        "the TF_CONFIG environment variable")
  p.add_argument("--task", type=int, metavar="INDEX",
                 help="this worker's task index (default: TF_CONFIG's)")
  p.add_argument("--job", default=None,
                 help="job name (default: TF_CONFIG's task type, or 'worker')")
  p.add_argument("--cpu-devices", type=int, default=1, metavar="N",
                 help="number of logical CPU devices to expose (default 1)")
  return p


def parse_args(argv=None):
  """Parses ``mtf-worker`` arguments into a :class:`WorkerConfig`.

  Raises:
    ClusterSpecError: if the cluster, job or task index is invalid, or no
      cluster is given at all.
  """
  args = _parser().parse_args(argv)
  task, job = args.task, args.job
  if args.cluster is not None:
    cluster = convert_to_cluster(args.cluster, job=job or "worker")
  else:
    text = args.tf_config
    if text is None:
      text = os.environ.get("TF_CONFIG")
    if not text:
      raise ClusterSpecError(
          "mtf-worker needs the cluster: pass --cluster host:port,host:port, "
          "--tf-config JSON, or set the TF_CONFIG environment variable")
    cluster, tf_task = parse_tf_config(text, job=job)
    if task is None:
      task = tf_task
  if task is None:
    raise ClusterSpecError(
        "mtf-worker needs its task index: pass --task INDEX (0 to "
        f"{cluster.num_tasks - 1} for job {cluster.job!r})")
  if not 0 <= task < cluster.num_tasks:
    raise ClusterSpecError(
        f"task index {task} is out of range: job {cluster.job!r} has "
        f"{cluster.num_tasks} tasks ({', '.join(cluster.addresses)}); pass "
        f"--task between 0 and {cluster.num_tasks - 1}")
  if args.cpu_devices < 1:
    raise ClusterSpecError(
        f"--cpu-devices must be at least 1, got {args.cpu_devices}")
  return WorkerConfig(cluster, task, args.cpu_devices)


def start_server(config):
  """Starts the TensorFlow gRPC server of ``config``'s task; returns it.

  The server exposes ``config.cpu_devices`` CPU devices named
  ``/job:<job>/replica:0/task:<task>/device:CPU:<i>`` and serves in
  background threads until the process exits.
  """
  set_fail_fast_default()
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  # Thread pools sized for cpu_devices logical devices on this host's
  # cores, as set_logical_cpu_devices sizes them in one process.
  from mesh_tf.lowering.placement import cpu_thread_pools, host_cores  # pylint: disable=import-outside-toplevel
  inter, intra = cpu_thread_pools(config.cpu_devices, host_cores())
  session_config = tf.compat.v1.ConfigProto(
      device_count={"CPU": config.cpu_devices},
      inter_op_parallelism_threads=inter,
      intra_op_parallelism_threads=intra)
  tf.config.threading.set_inter_op_parallelism_threads(inter)
  tf.config.threading.set_intra_op_parallelism_threads(intra)
  return tf.distribute.Server(
      config.cluster.to_cluster_spec(), job_name=config.cluster.job,
      task_index=config.task, protocol="grpc", config=session_config,
      start=True)


def main(argv=None):
  """Entry point of ``mtf-worker``: starts the server and blocks.

  Returns 0 on Ctrl-C, 2 for invalid arguments.
  """
  try:
    config = parse_args(argv)
  except MtfError as e:
    print(f"mtf-worker: error: {e}", file=sys.stderr)
    return 2
  try:
    start_server(config)
  except Exception as e:  # pylint: disable=broad-except
    # TF raises UnknownError for a busy or unbindable address.
    print(f"mtf-worker: error: cannot start the server of "
          f"{config.cluster.task_name(config.task)} at {config.address}: "
          f"{str(e).splitlines()[0] if str(e) else type(e).__name__}\n"
          f"hint: is the port already in use (another mtf-worker?); pick a "
          f"free port in --cluster", file=sys.stderr)
    return 1
  print(f"mtf-worker: serving {config.cluster.task_name(config.task)} at "
        f"{config.address} with {config.cpu_devices} CPU device(s)",
        flush=True)
  try:
    while True:  # The server runs in its own threads; sleep keeps Ctrl-C.
      time.sleep(3600)
  except KeyboardInterrupt:
    return 0


if __name__ == "__main__":
  sys.exit(main())
