"""Meshes across processes: real ``mtf-worker`` processes on 127.0.0.1.

Two worker processes (4 logical CPU devices each) form a ``hosts:2;local:4``
mesh.  The client side runs in a subprocess (``python -m
tests.mesh_tf.distributed.test_distributed ...``), because connecting to a cluster
changes TensorFlow's process-wide context, which the other tests of this
pytest process share.  Every process started here is killed in a fixture
teardown, and every wait is bounded.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import distributed as dist
from mesh_tf.distributed import local
from mesh_tf.distributed import worker as worker_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MESH = "hosts:2;local:4"
LAYOUT = "batch:hosts;d_ff:local;heads:local"
DEVICES_PER_TASK = 4
STEPS = 2
CLIENT_S = 150.0


# --- what both the remote client and the local reference run -------------
def make_step(devices, mesh_shape=MESH, layout=LAYOUT, seed=3):
  """A TrainStep of the zoo's tiny Transformer (1 layer) on ``devices``, and
  its inputs (random values of ``seed``)."""
  from mesh_tf import models, training
  from mesh_tf.training import optimize
  model = models.build_model("transformer_tiny", layers=1)
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, devices)
  step = training.TrainStep(
      model.graph, model.mesh, model.loss,
      [model.inputs["inputs"], model.inputs["targets"]], impl,
      optimize.SgdOptimizer(0.5))
  values = model.random_values(seed=seed)
  return step, (values["inputs"], values["targets"])


def train(step, args):
  """Runs STEPS steps; returns (losses, variables after the last)."""
  losses = [float(step(*args).numpy()) for _ in range(STEPS)]
  return losses, step.variable_values()


def trace_summary(impl):
  """The collectives of a lowering, classified, as JSON-able rows."""
  return [{"key": list(map(_jsonable, c.record.key())),
           "op": c.record.op_name, "source_op": c.record.source_op,
           "mesh_axes": list(c.record.mesh_axes),
           "cross_process": c.cross_process,
           "tasks_per_group": c.tasks_per_group}
          for c in dist.classify_collectives(impl.trace, impl.shape,
                                             impl.devices)]


def _jsonable(x):
  return list(x) if isinstance(x, tuple) else x


# --- client side (runs in a subprocess) -----------------------------------
def _client(cluster, victim_pid, client_port, out_dir):
  """Connects, trains, then kills worker 1 and records the errors."""
  report = {}
  client_address = f"127.0.0.1:{client_port}"
  t = time.monotonic()
  try:  # Workers expose 4 devices each: asking for 8 must fail up front.
    dist.connect(cluster, devices_per_task=8, timeout_s=90,
                 client_address=client_address)
  except dist.ClusterMeshMismatchError as e:
    report["mismatch"] = str(e)
  report["mismatch_s"] = time.monotonic() - t
  conn = dist.connect(cluster, devices_per_task=DEVICES_PER_TASK,
                      timeout_s=30, client_address=client_address)
  report["connect_s"] = time.monotonic() - t
  step, args = make_step(conn.mesh_devices(MESH))
  t = time.monotonic()
  losses, variables = conn.run(train, step, args, timeout_s=120)
  report["train_s"] = time.monotonic() - t
  report["losses"] = losses
  report["trace"] = trace_summary(step.mesh_impl)
  report["variable_devices"] = {
      name: [s.device for s in v.slices]
      for name, v in step.mesh_impl.variables.items()}
  np.savez(os.path.join(out_dir, "variables.npz"), **variables)

  os.kill(victim_pid, signal.SIGKILL)
  victim = conn.cluster.addresses[1]
  deadline = time.monotonic() + 10
  while time.monotonic() < deadline and dist.probe_address(victim, 0.5) is None:
    time.sleep(0.05)
  for what, fn in [
      ("run", lambda: conn.run(lambda: float(step(*args).numpy()),
                               timeout_s=20)),
      ("connect", lambda: dist.connect(cluster, timeout_s=3))]:
    t = time.monotonic()
    try:
      fn()
      report[what] = {"error": None}
    except mtf.MtfError as e:
      report[what] = {"error": type(e).__name__, "message": str(e),
                      "tasks": list(getattr(e, "tasks", ()))}
    except Exception as e:  # pylint: disable=broad-except
      report[what] = {"error": type(e).__name__, "message": str(e)[:2000]}
    report[what]["seconds"] = time.monotonic() - t
  return report


def _client_main(argv):
  cluster, victim_pid, client_port, out_dir = argv
  report = _client(cluster, int(victim_pid), int(client_port), out_dir)
  with open(os.path.join(out_dir, "report.json"), "w",
            encoding="utf-8") as f:
    json.dump(report, f)
  # TF's teardown of remote eager contexts can take seconds (or wait on the
  # dead worker); the report is written, so leave at once.
  os._exit(0)  # pylint: disable=protected-access


# --- worker processes -------------------------------------------------------
def _env():
  return local.worker_env(ROOT)


def _worker_argv(cluster, task):
  """Task 0 from --cluster, task 1 from --tf-config: both launcher paths."""
  return {"tf_config": None if task == 0 else cluster.to_tf_config(task)}


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
  """Starts 2 workers and the client (which waits for them), computes the
  single-process reference meanwhile, and returns both results.  Kills
  every process it started, whatever happens."""
  out = str(tmp_path_factory.mktemp("distributed"))
  *ports, client_port = local.free_ports(3)
  cluster = dist.Cluster.from_addresses([f"127.0.0.1:{p}" for p in ports])
  procs, logs = [], []
  try:
    for k in range(2):
      logs.append(os.path.join(out, f"worker{k}.log"))
      procs.append(local.start_worker(cluster.addresses, k, DEVICES_PER_TASK,
                                      logs[-1], root=ROOT,
                                      **_worker_argv(cluster, k)))
    logs.append(os.path.join(out, "client.log"))
    with open(logs[-1], "wb") as log:
      client = subprocess.Popen(
          [sys.executable, "-m", "tests.mesh_tf.distributed.test_distributed",
           ",".join(cluster.addresses), str(procs[1].pid),
           str(client_port), out],
          cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT,
          stdin=subprocess.DEVNULL)
    procs.append(client)

    # Meanwhile, the single-process reference: the same model, data and
    # step on one local device (layout never changes results, so this is
    # what every mesh must give; one device keeps the test fast).
    t = time.monotonic()
    step, args = make_step(mtf.logical_cpu_devices(1), "all:1", "")
    losses, variables = train(step, args)
    local_s = time.monotonic() - t
    try:
      client.wait(timeout=CLIENT_S)
    except subprocess.TimeoutExpired:
      pass
    report_path = os.path.join(out, "report.json")
    if client.returncode != 0 or not os.path.exists(report_path):
      raise AssertionError(
          f"client failed (rc {client.returncode}):\n" + "\n".join(
              f"--- {p}:\n{local.tail(p)}" for p in logs))
    with open(report_path, encoding="utf-8") as f:
      report = json.load(f)
    remote_vars = dict(np.load(os.path.join(out, "variables.npz")))
    yield {"report": report, "cluster": cluster, "worker1": procs[1],
           "local": (losses, variables), "local_s": local_s,
           "remote_vars": remote_vars}
  finally:
    local.stop(procs)


# --- tests with real worker processes --------------------------------------
def test_training_step_on_two_workers_matches_single_process(cluster_run):
  report = cluster_run["report"]
  losses, variables = cluster_run["local"]
  print({k: round(report[k], 1) for k in ("mismatch_s", "connect_s",
                                          "train_s")},
        "local", round(cluster_run["local_s"], 1))
  np.testing.assert_allclose(report["losses"], losses, rtol=1e-5)
  assert report["losses"][1] < report["losses"][0]  # It trained.
  remote = cluster_run["remote_vars"]
  assert sorted(remote) == sorted(variables)
  for name, value in variables.items():
    np.testing.assert_allclose(remote[name], value, rtol=1e-5, atol=1e-6,
                               err_msg=name)
  # Slices live in both workers, in row-major mesh order.
  slices = report["variable_devices"]["layer_0/ffn/wi/kernel"]
  assert slices[0].endswith("/job:worker/replica:0/task:0/device:CPU:0")
  assert slices[7].endswith("/job:worker/replica:0/task:1/device:CPU:3")


def test_trace_marks_cross_process_collectives(cluster_run):
  """With batch:hosts;d_ff:local, gradient all-reduces over ``hosts``
  cross processes; those over ``local`` stay inside one."""
  rows = cluster_run["report"]["trace"]
  # The remote lowering issued exactly the collectives that the shape-only
  # backend records for the same training graph on the same mesh.
  step, _ = make_step(mtf.logical_cpu_devices(8))  # builds, runs nothing
  shape_impl = mtf.ShapeMeshImpl(MESH, LAYOUT)
  lowering = mtf.Lowering(step.graph, {step.mesh: shape_impl})
  lowering.laid_out(step.loss)
  assert sorted(tuple(tuple(x) if isinstance(x, list) else x
                     for x in r["key"]) for r in rows) == (
                         shape_impl.trace.collective_keys())
  by_axes = {}
  for r in rows:
    by_axes.setdefault(tuple(r["mesh_axes"]), set()).add(
        (r["cross_process"], r["tasks_per_group"]))
  assert by_axes == {("hosts",): {(True, 2)}, ("local",): {(False, 1)}}
  grads = [r for r in rows if "_grad" in r["source_op"]]
  assert {tuple(r["mesh_axes"]) for r in grads} == {("hosts",), ("local",)}
  # On one process nothing crosses.
  local_devices = [f"/job:localhost/replica:0/task:0/device:CPU:{i}"
                   for i in range(8)]
  assert not any(c.cross_process for c in dist.classify_collectives(
      shape_impl.trace, MESH, local_devices))
  remote_devices = dist.mesh_devices(MESH, cluster_run["cluster"],
                                     DEVICES_PER_TASK)
  assert dist.process_spanning_axes(MESH, remote_devices) == ("hosts",)
  assert dist.process_spanning_axes(MESH, local_devices) == ()


def test_cluster_not_matching_mesh_rejected_on_connect(cluster_run):
  message = cluster_run["report"]["mismatch"]
  assert "/job:worker/replica:0/task:0 (127.0.0.1:" in message
  assert "exposes 4 CPU device(s) but the mesh needs 8 per task" in message
  assert "--cpu-devices 8" in message


def test_killed_worker_gives_clean_bounded_error(cluster_run):
  report = cluster_run["report"]
  for what in ("run", "connect"):
    r = report[what]
    assert r["error"] == "WorkerUnavailableError", r
    assert r["tasks"] == [1], r
    assert "/job:worker/replica:0/task:1 (127.0.0.1:" in r["message"]
    assert r["seconds"] < 30, r
  assert cluster_run["worker1"].wait(timeout=10) is not None


# --- pure-Python tests (no processes) ---------------------------------------
def test_mesh_devices_are_row_major_with_hosts_across_tasks():
  cluster = dist.Cluster.from_addresses("a:1,b:1")
  devices = dist.mesh_devices("hosts:2;local:4", cluster, 4)
  assert devices == [f"/job:worker/replica:0/task:{k}/device:CPU:{i}"
                     for k in range(2) for i in range(4)]


def test_mesh_size_mismatch_rejected_up_front():
  cluster = dist.Cluster.from_addresses("a:1,b:1,c:1")
  with pytest.raises(dist.ClusterMeshMismatchError,
                     match=r"mesh Shape\[hosts=2, local=4\] has 8 processors "
                           r"but job 'worker' has 3 task\(s\) x 4 CPU "
                           r"device\(s\) = 12 .*multiple of the 3 tasks"):
    dist.mesh_devices("hosts:2;local:4", cluster, 4)
  with pytest.raises(mtf.MeshSizeError, match=r"--cpu-devices 4"):
    dist.mesh_devices("hosts:3;local:4", cluster, 2)


def test_classify_collectives_by_processor_groups():
  # 4 tasks x 2 devices on a 2x4 mesh: "cols" (stride 1) spans tasks in
  # pairs, "rows" (stride 4) always crosses.
  cluster = dist.Cluster.from_addresses([f"h{k}:1" for k in range(4)])
  devices = dist.mesh_devices("rows:2;cols:4", cluster, 2)
  records = [mtf.CollectiveRecord("op", "allreduce", axes, 2, 8, "SUM")
             for axes in [("rows",), ("cols",), ("rows", "cols")]]
  got = [(c.cross_process, c.tasks_per_group)
         for c in dist.classify_collectives(records, "rows:2;cols:4",
                                            devices)]
  assert got == [(True, 2), (True, 2), (True, 4)]
  one_task = dist.mesh_devices("rows:2;cols:4", dist.Cluster.from_addresses(
      "h:1"), 8)
  assert not any(c.cross_process for c in dist.classify_collectives(
      records, "rows:2;cols:4", one_task))
  with pytest.raises(mtf.UnknownNameError, match="mesh axis 'x'"):
    dist.classify_collectives(
        [records[0]._replace(mesh_axes=("x",))], "rows:2;cols:4", devices)
  with pytest.raises(mtf.MeshSizeError, match="8 processors but 3 devices"):
    dist.classify_collectives(records, "rows:2;cols:4", devices[:3])


@pytest.mark.parametrize("mesh_shape", [
    "hosts:2;local:4", "a:4;b:2", "a:2;b:2;c:2", "x:8", "a:2;b:4;c:1"])
def test_process_spanning_axes_agree_with_cost_model_topology(mesh_shape):
  """The axes whose collectives cross workers are the ones the cost model
  puts on the inter-node network of a 2-node x 4-chip cluster (both number
  processors row-major, nodes major)."""
  from costmodels import topology
  cluster = dist.Cluster.from_addresses("a:1,b:1")
  devices = dist.mesh_devices(mesh_shape, cluster, 4)
  mapping = topology.map_mesh(
      topology.gpu_cluster("h100", nodes=2, gpus_per_node=4), mesh_shape)
  assert dist.process_spanning_axes(mesh_shape, devices) == tuple(
      link.axis for link in mapping if link.spans_nodes)


def test_cluster_parsing_and_tf_config():
  c = dist.convert_to_cluster(" 10.0.0.1:2222, host-b:2223 ")
  assert c.addresses == ("10.0.0.1:2222", "host-b:2223")
  assert c.task_name(1) == "/job:worker/replica:0/task:1"
  config = c.to_tf_config(1)
  assert dist.parse_tf_config(config) == (c, 1)
  assert dist.convert_to_cluster(json.loads(config)) == c
  multi = {"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]},
           "task": {"type": "chief", "index": 0}}
  cluster, task = dist.parse_tf_config(multi, job="worker")
  assert (cluster.addresses, task) == (("w0:1", "w1:1"), None)
  assert repr(cluster) == ("Cluster(chief=['c:1'], worker=['w0:1', 'w1:1'], "
                           "job='worker')")
  assert dist.split_address("[::1]:2222") == ("::1", 2222)
  assert hash(c) == hash(dist.Cluster.from_addresses(c.addresses))


@pytest.mark.parametrize("spec,pattern", [
    ("a:1,a:1", "appears twice"),
    ("a:99999", "invalid task address 'a:99999'"),
    ("a", "invalid task address 'a'"),
    ("{not json", "not valid JSON"),
    ('{"task": {}}', 'must be a JSON object with a "cluster"'),
    ('{"cluster": {"Worker": ["a:1"]}}', "invalid job name 'Worker'"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "worker"}}',
     "mesh job 'worker' is not in the cluster"),
])
def test_bad_cluster_specs(spec, pattern):
  with pytest.raises(dist.ClusterSpecError, match=pattern):
    dist.convert_to_cluster(spec)


def test_connect_rejects_client_job_clash_before_any_network():
  with pytest.raises(dist.ClusterSpecError, match="already has a job named "
                                                  "'client'"):
    dist.connect({"client": ["a:1"], "worker": ["b:1"]},
                 client_address="c:1")
  with pytest.raises(dist.ClusterSpecError, match="invalid task address"):
    dist.connect("b:1", client_address="c")


def test_check_health_names_unreachable_task_in_bounded_time():
  (port,) = local.free_ports(1)
  with socket.socket() as live:
    live.bind(("127.0.0.1", 0))
    live.listen()
    cluster = dist.Cluster.from_addresses(
        [f"127.0.0.1:{live.getsockname()[1]}", f"127.0.0.1:{port}"])
    t = time.monotonic()
    with pytest.raises(dist.WorkerUnavailableError,
                       match=r"1 of 2 task\(s\) .* "
                             rf"/job:worker/replica:0/task:1 \(127.0.0.1:"
                             rf"{port}\): not reachable") as info:
      dist.check_health(cluster, timeout_s=1.0)
    assert time.monotonic() - t < 5
    assert info.value.tasks == (1,)
    dist.check_health(dist.Cluster.from_addresses(cluster.addresses[:1]),
                      timeout_s=1.0)


def test_run_bounds_time_and_names_the_dead_task():
  """A run that outlives its timeout is reported against the task that
  does not answer; other errors pass through unchanged.  (No TensorFlow
  cluster here: task 0 is a listening socket, task 1 a closed port.)"""
  (dead,) = local.free_ports(1)
  with socket.socket() as live:
    live.bind(("127.0.0.1", 0))
    live.listen()
    cluster = dist.Cluster.from_addresses(
        [f"127.0.0.1:{live.getsockname()[1]}", f"127.0.0.1:{dead}"])
    conn = dist.Connection(cluster, "CPU", 4, timeout_s=0.5)
    assert conn.run(lambda a, b=0: a + b, 2, b=3) == 5
    t = time.monotonic()
    with pytest.raises(dist.WorkerUnavailableError,
                       match=r"task:1 \(127.0.0.1:\d+\): not reachable.*"
                             r"did not finish within 0.5 s") as info:
      conn.run(time.sleep, 3)
    assert time.monotonic() - t < 2.5
    assert info.value.tasks == (1,)
    with pytest.raises(mtf.ShapeError, match="boom"):
      conn.run(lambda: (_ for _ in ()).throw(mtf.ShapeError("boom")))
    # A TensorFlow error while every task is up is not the cluster's fault.
    import tensorflow as tf
    healthy = dist.Connection(dist.Cluster.from_addresses(
        cluster.addresses[:1]), "CPU", 4, timeout_s=5)
    with pytest.raises(tf.errors.InvalidArgumentError):
      healthy.run(lambda: tf.reshape(tf.ones([3]), [2]).numpy())


def test_worker_argument_errors(monkeypatch, capsys):
  monkeypatch.delenv("TF_CONFIG", raising=False)
  config = worker_lib.parse_args(["--cluster", "a:1,b:2", "--task", "1",
                                  "--cpu-devices", "4"])
  assert (config.address, config.cpu_devices) == ("b:2", 4)
  monkeypatch.setenv("TF_CONFIG", dist.Cluster.from_addresses(
      "a:1,b:2").to_tf_config(0))
  assert worker_lib.parse_args([]).task == 0
  monkeypatch.delenv("TF_CONFIG")
  for argv, pattern in [
      ([], "needs the cluster"),
      (["--cluster", "a:1,b:2"], "needs its task index"),
      (["--cluster", "a:1,b:2", "--task", "2"], "task index 2 is out of range"),
      (["--cluster", "a:1", "--task", "0", "--cpu-devices", "0"],
       "at least 1")]:
    with pytest.raises(dist.ClusterSpecError, match=pattern):
      worker_lib.parse_args(argv)
  assert worker_lib.main(["--cluster", "a:1,b:2"]) == 2
  assert "needs its task index" in capsys.readouterr().err


if __name__ == "__main__":
  _client_main(sys.argv[1:])


def test_worker_on_a_busy_port_is_a_clean_error():
  with socket.socket() as busy:
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    p = subprocess.run(
        [sys.executable, "-m", "mesh_tf.distributed.worker", "--cluster",
         f"127.0.0.1:{port}", "--task", "0"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        cwd=ROOT)
  assert p.returncode == 1, p.stderr[-2000:]
  assert "mtf-worker: error: cannot start the server of " in p.stderr
  assert "hint: is the port already in use" in p.stderr
  assert "Traceback" not in p.stderr
