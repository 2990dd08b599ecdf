"""The one constructor of WorkerUnavailableError, and the package layout
of mesh_tf.distributed (no workers needed)."""

import mesh_tf as mtf
from mesh_tf import distributed as dist


def test_for_tasks_names_each_task_and_why():
  cluster = dist.Cluster.from_addresses("a:1,b:2,c:3")
  e = dist.WorkerUnavailableError.for_tasks(
      cluster, {2: "not reachable (refused)", 0: "lost during the run"}, 1.25,
      "; restart them")
  assert isinstance(e, dist.ClusterError) and isinstance(e, mtf.MtfError)
  assert e.tasks == (0, 2) and e.addresses == ("a:1", "c:3")
  assert str(e) == (
      "2 of 3 task(s) of job 'worker' unavailable after 1.2 s: "
      "/job:worker/replica:0/task:0 (a:1): lost during the run; "
      "/job:worker/replica:0/task:2 (c:3): not reachable (refused). Check "
      "that `mtf-worker` runs for each listed task with the same cluster, "
      "and that its port is open; restart them")


def test_health_check_of_a_closed_port_uses_it():
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  # Nothing listens on the port now.
  cluster = dist.Cluster.from_addresses(f"127.0.0.1:{port}")
  assert dist.probe_address(cluster.addresses[0], 0.5) is not None
  assert list(dist.unreachable_tasks(cluster, 0.5)) == [0]
  try:
    dist.check_health(cluster, timeout_s=0.3)
  except dist.WorkerUnavailableError as e:
    assert e.tasks == (0,) and "not reachable" in str(e)
  else:
    raise AssertionError("check_health passed on a closed port")


def test_modules_one_concept_each():
  from mesh_tf.distributed import cluster, connection, errors, health, mesh
  assert dist.Cluster is cluster.Cluster
  assert dist.connect is connection.connect
  assert dist.check_health is health.check_health
  assert dist.mesh_devices is mesh.mesh_devices
  assert dist.StepTimeoutError is errors.StepTimeoutError
