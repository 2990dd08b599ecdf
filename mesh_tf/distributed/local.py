"""Real ``mtf-worker`` processes on this machine (127.0.0.1), for trying a
multi-process mesh without a cluster: the tests, the cost-model benchmark
and calibration's ``--cluster`` checks start their workers through here.

Example:
  >>> ports = free_ports(2)                                # doctest: +SKIP
  >>> addresses = [f"127.0.0.1:{p}" for p in ports]        # doctest: +SKIP
  >>> procs = [start_worker(addresses, k, cpu_devices=4,   # doctest: +SKIP
  ...                       log_path=f"/tmp/w{k}.log") for k in range(2)]
  >>> stop(procs)                                          # doctest: +SKIP
"""

import os
import socket
import subprocess
import sys


def free_ports(n):
  """``n`` TCP ports of 127.0.0.1 that were free a moment ago (bound
  together, so they differ)."""
  socks = [socket.socket() for _ in range(n)]
  try:
    for s in socks:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in socks]
  finally:
    for s in socks:
      s.close()


def worker_env(root=None):
  """The environment of a child process: this one's, with ``root`` first on
  PYTHONPATH (so it imports the same mesh_tf), TF's C++ logging quiet, and
  no TF_CONFIG (a worker takes its cluster from its arguments)."""
  env = dict(os.environ)
  if root is not None:
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env.pop("TF_CONFIG", None)
  return env


def start_worker(addresses, task, cpu_devices, log_path, root=None,
                 tf_config=None):
  """Starts task ``task`` of the cluster ``addresses`` (``host:port``
  strings) as ``python -m mesh_tf.distributed.worker`` with ``cpu_devices`` logical CPU
  devices, its output appended to ``log_path``.  ``tf_config``: a
  TF_CONFIG JSON string to pass instead of ``--cluster``/``--task`` (the
  other launcher path).  Returns the ``subprocess.Popen``."""
  if tf_config is None:
    where = ["--cluster", ",".join(addresses), "--task", str(task)]
  else:
    where = ["--tf-config", tf_config]
  with open(log_path, "ab") as log:
    return subprocess.Popen(
        [sys.executable, "-m", "mesh_tf.distributed.worker", *where, "--cpu-devices",
         str(cpu_devices)], cwd=root, env=worker_env(root), stdout=log,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop(procs, timeout_s=10):
  """Kills every process of ``procs`` that still runs and waits for it."""
  for p in procs:
    if p.poll() is None:
      p.kill()
  for p in procs:
    try:
      p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      pass


def tail(path, n=3000):
  """The last ``n`` characters of a log file ("" if it cannot be read)."""
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.read()[-n:]
  except OSError:
    return ""
