"""Calibration probes on remote devices: real ``mtf-worker`` processes on
127.0.0.1, probed from a client subprocess (connecting changes TF's
process-wide context, which the other tests of this process share).

Remote eager enqueues a function on one remote device and returns before it
has run, so an unsynced one-device probe timed its chain as nothing against
its empty call (every one-device sample of a cluster calibration came out
at the 1 ns floor, and the fits built on them were wrong).  Here the probes'
default sync must make them time the work.  No timing is asserted beyond
"more than a microsecond for a 2 MiB multiply", which any real run is by
two orders of magnitude.
"""

import json
import os
import subprocess
import sys

from mesh_tf.distributed import local

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _client(cluster, out_path):
  """Connects to ``cluster`` (two tasks of one device) and writes the
  seconds per rep of the one-device launch and elementwise probes, timed
  with the probes' default sync."""
  from costmodels.calibrate import measure, probes
  from mesh_tf import distributed as dist
  from mesh_tf.lowering.placement import PlacementMeshImpl
  conn = dist.connect(cluster, devices_per_task=1, timeout_s=60)
  devices = conn.mesh_devices("x:2")
  plan = measure.make_plan(("x:2",), True)._replace(
      einsums=(), convs=(), elementwise_bytes=(2 * 2**20,))
  alone = PlacementMeshImpl("x:1", "", devices[:1])
  out = {}
  for p in probes.compute_probes(alone, plan, "float32", 4,
                                 measure.default_sync(devices)):
    p.warm()
    out[p.sample.what] = sorted(p.once() for _ in range(5))[2]
  with open(out_path, "w", encoding="utf-8") as f:
    json.dump(out, f)


def test_one_device_probes_on_a_remote_worker_time_their_work(tmp_path):
  addresses = [f"127.0.0.1:{p}" for p in local.free_ports(2)]
  procs = [local.start_worker(addresses, k, 1, str(tmp_path / f"w{k}.log"),
                              root=ROOT) for k in range(2)]
  out = tmp_path / "out.json"
  try:
    run = subprocess.run(
        [sys.executable, os.path.abspath(__file__), ",".join(addresses),
         str(out)], cwd=ROOT, env=local.worker_env(ROOT),
        capture_output=True, text=True, timeout=240)
  finally:
    local.stop(procs)
  assert run.returncode == 0, run.stderr[-3000:]
  got = json.loads(out.read_text())
  assert got["elementwise"] > 1e-6, got
  assert got["launch"] > 1e-8, got


def test_a_probes_empty_call_copies_each_slice_on_its_own_device():
  # Unplaced, the empty call's copies ran on the default device: on
  # mtf-worker tasks every slice then went to the client, and the pairs
  # mistimed the chains (a fused multiply at 1 GB/s a device, not 6-8).
  import mesh_tf as mtf
  from costmodels.calibrate import measure, probes
  from mesh_tf.lowering.placement import PlacementMeshImpl
  devices = mtf.logical_cpu_devices(4)
  impl = PlacementMeshImpl("x:4", "", devices)
  plan = measure.make_plan(("x:4",), True)._replace(
      einsums=(), convs=(), elementwise_bytes=(4096,))
  probe = [p for p in probes.compute_probes(impl, plan, "float32", 4,
                                            lambda o: None)
           if p.sample.what == "elementwise"][0]
  empty = probe._fns[1]  # pylint: disable=protected-access
  graph = empty.get_concrete_function().graph
  copies = [op for op in graph.get_operations() if op.type == "Identity"
            and op.inputs and op.inputs[0].op.type == "ReadVariableOp"]
  assert len(copies) == 4
  placed = sorted(op.device.split("device:")[-1] for op in copies)
  assert placed == sorted(d.split("device:")[-1] for d in devices)


if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  _client(sys.argv[1], sys.argv[2])
  os._exit(0)  # pylint: disable=protected-access
