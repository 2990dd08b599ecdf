"""A worker killed in the middle of a training step: the client gets a
``WorkerUnavailableError`` naming the task within seconds; after the
worker is restarted, reconnecting and restoring the last checkpoint resumes
training with exactly the loss curve of an uninterrupted run.

Real ``mtf-worker`` processes on 127.0.0.1 (2 tasks x 2 CPU devices) and a
client subprocess (connecting changes TensorFlow's process-wide context).
The client and this test talk over the client's stdin/stdout, so every
step of the scenario happens in a fixed order; every wait is bounded and
every process is killed at teardown.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import mesh_tf as mtf
from mesh_tf.distributed import local
from tests.mesh_tf.distributed import test_distributed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MESH = "hosts:2;local:2"
LAYOUT = "batch:hosts;d_ff:local;heads:local"
DEVICES_PER_TASK = 2
STEPS_BEFORE, STEPS_AFTER = 2, 2


def make_step(devices, mesh_shape=MESH, layout=LAYOUT):
  """The distributed test's TrainStep, on this test's mesh and data."""
  return test_distributed.make_step(devices, mesh_shape, layout, seed=5)


# --- the client (a subprocess) ---------------------------------------------
def _say(message):
  sys.stdout.write(json.dumps(message) + "\n")
  sys.stdout.flush()


def _client(cluster, victim_pid, client_port, ckpt):
  from mesh_tf import distributed as dist
  report = {}
  conn = dist.connect(cluster, devices_per_task=DEVICES_PER_TASK,
                      timeout_s=60,
                      client_address=f"127.0.0.1:{client_port}")
  step, args = make_step(conn.mesh_devices(MESH))
  report["before"] = [conn.run(lambda: float(step(*args).numpy()),
                               timeout_s=60) for _ in range(STEPS_BEFORE)]
  step.save(ckpt)

  # Kill task 1 as the next step starts: the step is in flight (the client
  # is dispatching its ops to both tasks) when the worker dies.
  started = threading.Event()

  def killer():
    started.wait(60)
    os.kill(victim_pid, signal.SIGKILL)
    report["killed_at"] = time.monotonic()

  threading.Thread(target=killer, daemon=True).start()

  def doomed_step():
    started.set()
    return [float(step(*args).numpy()) for _ in range(5)]
  t = time.monotonic()
  try:
    conn.run(doomed_step, timeout_s=20)
    report["error"] = None
  except mtf.MtfError as e:
    report["error"] = {"type": type(e).__name__, "message": str(e),
                       "tasks": list(getattr(e, "tasks", ()))}
  except Exception as e:  # pylint: disable=broad-except
    report["error"] = {"type": type(e).__name__, "message": str(e)[:2000]}
  report["error_s"] = time.monotonic() - t
  _say({"restart": 1})
  assert sys.stdin.readline().strip() == "restarted"

  t = time.monotonic()
  conn = dist.connect(cluster, devices_per_task=DEVICES_PER_TASK,
                      timeout_s=60,
                      client_address=f"127.0.0.1:{client_port}")
  report["reconnect_s"] = time.monotonic() - t
  step, args = make_step(conn.mesh_devices(MESH))
  step.restore(ckpt)
  report["after"] = [conn.run(lambda: float(step(*args).numpy()),
                              timeout_s=60) for _ in range(STEPS_AFTER)]
  report["resume_s"] = time.monotonic() - t
  _say({"report": report})


def _client_main(argv):
  cluster, victim_pid, client_port, ckpt = argv
  try:
    _client(cluster, int(victim_pid), int(client_port), ckpt)
  except BaseException as e:  # pylint: disable=broad-except
    import traceback
    cause = e.__cause__ or e
    _say({"failed": f"{type(e).__name__}: {e}"[:2000] + "\n" + "".join(
        traceback.format_exception(type(cause), cause,
                                   cause.__traceback__))[-4000:]})
  os._exit(0)  # pylint: disable=protected-access  (skip TF's slow teardown)


# --- the test ---------------------------------------------------------------
def _env():
  return local.worker_env(ROOT)


def _worker(addresses, task, log_path):
  return local.start_worker(addresses, task, DEVICES_PER_TASK, log_path,
                            root=ROOT)


def _read_message(proc, deadline, logs):
  box = {}
  reader = threading.Thread(
      target=lambda: box.__setitem__("line", proc.stdout.readline()),
      daemon=True)
  reader.start()
  reader.join(max(0.0, deadline - time.monotonic()))
  line = box.get("line", "")
  if not line:
    raise AssertionError("client did not answer in time:\n" + "\n".join(
        f"--- {p}:\n{local.tail(p)}" for p in logs))
  message = json.loads(line)
  if "failed" in message:
    raise AssertionError(f"client failed: {message['failed']}\n" + "\n".join(
        f"--- {p}:\n{local.tail(p)}" for p in logs))
  return message


def test_worker_killed_mid_step_then_restarted_resumes_same_losses(tmp_path):
  *ports, client_port = local.free_ports(3)
  addresses = [f"127.0.0.1:{p}" for p in ports]
  logs = [str(tmp_path / f"worker{k}.log") for k in range(2)]
  procs = []
  try:
    procs = [_worker(addresses, k, logs[k]) for k in range(2)]
    client = subprocess.Popen(
        [sys.executable, "-m", "tests.mesh_tf.distributed.test_worker_faults",
         ",".join(addresses), str(procs[1].pid), str(client_port),
         str(tmp_path / "ckpt")],
        cwd=ROOT, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=open(tmp_path / "client.log", "wb"), text=True)  # pylint: disable=consider-using-with
    procs.append(client)
    logs.append(str(tmp_path / "client.log"))

    # Meanwhile, the reference: the same steps without a fault, on one
    # local device (layout never changes results).
    step, args = make_step(mtf.logical_cpu_devices(1), "all:1", "")
    want = [float(step(*args).numpy())
            for _ in range(STEPS_BEFORE + STEPS_AFTER)]

    deadline = time.monotonic() + 150
    assert _read_message(client, deadline, logs) == {"restart": 1}
    assert procs[1].wait(timeout=10) == -signal.SIGKILL
    procs[1] = _worker(addresses, 1, logs[1])
    client.stdin.write("restarted\n")
    client.stdin.flush()
    report = _read_message(client, deadline, logs)["report"]
  finally:
    local.stop(procs)

  print({k: round(report[k], 2) for k in ("error_s", "reconnect_s",
                                          "resume_s")})
  error = report["error"]
  assert error is not None and error["type"] == "WorkerUnavailableError", error
  assert error["tasks"] == [1], error
  assert f"/job:worker/replica:0/task:1 ({addresses[1]})" in error["message"]
  assert report["error_s"] < 15, report
  np.testing.assert_allclose(report["before"] + report["after"], want,
                             rtol=1e-5)
  assert report["after"][-1] < report["before"][0]  # it kept training


if __name__ == "__main__":
  _client_main(sys.argv[1:])
