"""The 2-process part of ``cost_model_truth.py``: an MLP on hosts:2;local:4.

Starts two real ``mtf-worker`` processes on 127.0.0.1 (4 logical CPU devices
each), calibrates them (``costmodels.calibrate`` with ``cluster=``, so the
cross-process axis gets its own measured collectives; the solver's auto
layout is chosen with that file), then, in a client subprocess connected to
them, times the MLP's training step under at least 12 layouts and the auto
layout, in shuffled rounds with every calibration probe, and predicts from
the probes' fit, as the single-process part does (the up-front file's
prediction is kept beside it).  Every process started here is killed
before :func:`run` returns.

Reproduce (through the main benchmark):
  python benchmarks/cost_model_truth.py --cluster --models mlp
"""

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from mesh_tf.distributed import local

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESH = "hosts:2;local:4"
LAYOUTS = [
    ("replicated", ""),
    ("data-hosts", "batch:hosts"),
    ("data-local", "batch:local"),
    ("data-2d", "batch:hosts;d_ff:local"),
    ("model-local", "d_ff:local"),
    ("model-hosts", "d_ff:hosts"),
    ("mixed-swap", "d_ff:hosts;batch:local"),
    ("model-2d", "d_ff:local;classes:hosts"),
    ("data+classes", "batch:hosts;classes:local"),
    ("bad-d_model-hosts", "d_model:hosts"),
    ("bad-d_model-local", "d_model:local;batch:hosts"),
    ("bad-both", "d_model:hosts;d_ff:local"),
]


def _build():
  from mesh_tf import models
  return models.mlp(layers=4, batch=64, d_model=256, d_ff=1024, classes=64)


def _env():
  return local.worker_env(ROOT)


def _client(addresses, topo_path, rounds, runoff_rounds, out_path,
            quick=False, step_passes=1):
  """Runs in the client subprocess: connect, lower, time the steps and
  every calibration probe in the same shuffled rounds, fit the probes,
  write rows (as ``cost_model_truth.run_model`` does (``benchmarks/truth_timing.py``) in one process)."""
  import autolayout  # OR-Tools before TensorFlow  # noqa: F401
  import costmodels
  from benchmarks.truth_timing import (more_passes, runoff, statistic,
                                       steady_times, time_probe,
                                       training_graph, with_auto)
  from costmodels.calibrate import calibration as cal_mod
  from costmodels.calibrate import measure, topology_file
  from costmodels.calibrate.timings import CalibrationError
  from mesh_tf import distributed as dist
  from mesh_tf import training
  from mesh_tf.training import optimize
  topology = costmodels.get_topology(topo_path)
  model = training_graph(_build)
  auto = autolayout.auto_layout(model.graph, MESH, None, topology=topology,
                                time_limit_s=30.0)
  conn = dist.connect(addresses, devices_per_task=4, timeout_s=60)
  devices = conn.mesh_devices(MESH)
  steps = []
  layouts = [(label, rules) for label, _, rules in with_auto(
      [(label, MESH, rules) for label, rules in LAYOUTS], MESH,
      str(auto.rules))]
  for label, rules in layouts:
    pred = costmodels.evaluate(training_graph(_build).graph, MESH, rules,
                               topology).wall_step_time_s
    m = _build()
    step = training.train_step_for_model(m, MESH, rules, devices,
                                         optimize.SgdOptimizer(0.01))
    feeds = m.random_values(seed=1)
    for _ in range(2):
      step(**feeds).numpy()
    steps.append([label, rules, pred,
                  lambda step=step, f=feeds: step(**f).numpy(), []])
  probes = measure.prepare(measure.make_plan((MESH,), quick), devices)
  for p in probes:
    p.warm()
  probe_times = [[] for _ in probes]
  order = list(range(len(steps) + len(probes)))
  passes = [(s[3], s[4]) for s in steps]
  rng = random.Random(0)
  for _ in range(rounds):
    rng.shuffle(order)
    for i in order:
      if i < len(steps):
        # The steady steps, as in the single-process part (run_model).
        steps[i][4].extend(steady_times(steps[i][3]))
      else:
        k = i - len(steps)
        probe_times[k].extend(time_probe(probes[k]))
    more_passes(passes, step_passes, rng)
  # As the single-process part (see cost_model_truth.run_model).
  before = runoff([(s[0], s[3], s[4]) for s in steps], runoff_rounds, rng)
  samples = [p.measured(t, statistic(p, "mean"))
             for p, t in zip(probes, probe_times)]
  info = {"devices": list(devices), "device_types": ["CPU"]}
  fallback = None
  try:
    fitted, _ = cal_mod.fit_topology(samples, info, "cluster-interleaved")
    inter_path = topo_path[:-5] + "-interleaved.json"
    topology_file.write_topology(inter_path, fitted, cal_mod.json_safe(
        {"interleaved_with": "mlp", "rounds": rounds, "devices": info,
         "samples": [x._asdict() for x in samples]}))
    interleaved = costmodels.get_topology(inter_path)
  except CalibrationError as e:
    # A loaded machine can leave the interleaved timings unfittable (e.g.
    # a larger einsum no slower than a smaller one): say so and predict
    # from the up-front file instead of losing the run.
    fallback, interleaved = str(e), topology
  rows = [(s[0], MESH, s[1], costmodels.evaluate(
      training_graph(_build).graph, MESH, s[1], interleaved).wall_step_time_s,
           statistics.median(s[4]), min(s[4]), s[2], s[4], before[s[0]])
          for s in steps]
  with open(out_path, "w", encoding="utf-8") as f:
    json.dump({"rows": rows, "fallback": fallback}, f)


def run(rounds, runoff_rounds, quick, console, step_passes=1):
  """Returns ``(name, rows)`` as ``cost_model_truth.run_model`` does."""
  from costmodels import calibrate as cal_lib
  ports = local.free_ports(2)
  addresses = ",".join(f"127.0.0.1:{p}" for p in ports)
  tmp = tempfile.mkdtemp()
  procs = []
  try:
    for k in range(2):
      procs.append(local.start_worker(
          addresses.split(","), k, 4, os.path.join(tmp, f"worker{k}.log"),
          root=ROOT))
    topo_path = os.path.join(tmp, "cluster.json")
    t0 = time.perf_counter()
    cal_lib.calibrate(topo_path, cluster=addresses, devices_per_task=4,
                      quick=quick, progress=console, cluster_timeout_s=60)
    console.print(f"calibrated {MESH} across 2 mtf-workers in "
                  f"{time.perf_counter() - t0:.1f} s -> {topo_path}")
    out = os.path.join(tmp, "rows.json")
    client = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--client", addresses,
         topo_path, str(rounds), str(runoff_rounds), str(step_passes),
         out]
        + (["--quick"] if quick else []),
        cwd=ROOT, env=_env(),
        capture_output=True, text=True, timeout=1200)
    if client.returncode != 0 or not os.path.exists(out):
      raise RuntimeError("the cluster client failed:\n"
                         + client.stderr[-3000:])
    with open(out, encoding="utf-8") as f:
      got = json.load(f)
    from benchmarks.truth_timing import Row
    rows = [Row(*r[:7], tuple(r[7]), r[8]) for r in got["rows"]]
    if got["fallback"]:
      console.print(f"[yellow]{MESH}: the interleaved probes could not be "
                    f"fitted ({got['fallback']}); predicted from the "
                    "up-front calibration[/yellow]")
    return f"mlp@{MESH}", rows
  finally:
    local.stop(procs)


if __name__ == "__main__":
  if len(sys.argv) in (8, 9) and sys.argv[1] == "--client":
    sys.path.insert(0, ROOT)
    _client(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
            sys.argv[7], quick=sys.argv[8:] == ["--quick"],
            step_passes=int(sys.argv[6]))
    # Remote eager contexts can take seconds to tear down; rows are written.
    os._exit(0)  # pylint: disable=protected-access
  sys.exit(__doc__)
