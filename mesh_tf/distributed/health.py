"""Health checks of a cluster's tasks over plain TCP (no TensorFlow)."""

import os
import socket
import time

from mesh_tf.distributed.cluster import convert_to_cluster, split_address
from mesh_tf.distributed.errors import WorkerUnavailableError


def set_fail_fast_default():
  """Makes TensorFlow's gRPC calls fail at once on a broken connection.

  Sets ``GRPC_FAIL_FAST=true`` unless the variable is already set.  With
  TensorFlow's default (``use_caller``), setting up remote execution waits
  for an unreachable task forever; failing fast lets mesh-tf name the task.
  Call it before TensorFlow opens its first remote connection (``connect``
  and ``mtf-worker`` do).
  """
  os.environ.setdefault("GRPC_FAIL_FAST", "true")


def probe_address(address, timeout_s):
  """None if ``address`` (``host:port``) accepts a TCP connection within
  ``timeout_s`` seconds, else the OSError."""
  host, port = split_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout_s):
      return None
  except OSError as e:
    return e


def unreachable_tasks(cluster, timeout_s=2.0):
  """``{task: "not reachable (...)"}`` for each task of the mesh job that
  does not accept a TCP connection now (one probe each)."""
  return {k: f"not reachable ({e})"
          for k in range(cluster.num_tasks)
          for e in [probe_address(cluster.addresses[k], timeout_s)]
          if e is not None}


def check_health(cluster, timeout_s=10.0):
  """Waits until every task of the mesh job accepts connections.

  Probes each task's ``host:port`` over TCP, retrying until all answer or
  ``timeout_s`` has passed (so workers that are still starting are waited
  for).  Pure Python; does not import TensorFlow.

  Raises:
    WorkerUnavailableError: naming each task that did not answer in time.
  """
  cluster = convert_to_cluster(cluster)
  start = time.monotonic()
  deadline = start + timeout_s
  pending = {k: None for k in range(cluster.num_tasks)}
  while True:
    for k in list(pending):
      left = deadline - time.monotonic()
      err = probe_address(cluster.addresses[k], max(0.05, min(2.0, left)))
      if err is None:
        del pending[k]
      else:
        pending[k] = err
    if not pending or time.monotonic() >= deadline:
      break
    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
  if pending:
    problems = {k: f"not reachable ({e})" for k, e in pending.items()}
    raise WorkerUnavailableError.for_tasks(cluster, problems,
                                           time.monotonic() - start)
