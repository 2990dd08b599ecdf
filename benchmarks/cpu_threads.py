"""Benchmark: TensorFlow's own thread pools against mesh_tf's for logical CPU
devices that share the host's cores (``placement.cpu_thread_pools``).

Each configuration runs in its own process (thread pools are fixed once per
process), the two alternating for ``--rounds`` rounds so that the machine's
drift falls on both.  A process builds the truth benchmark's layouts of
each model of ``--models`` (``benchmarks/cost_model_truth.py``) on 8 logical
CPU devices, warms them up, then times ``--blocks`` blocks of ``--calls``
steady steps of every layout, in a shuffled order.  Per layout it prints the
median step under each configuration and their ratio, and the step's
*instability*: the spread (largest less smallest) of its block medians over
their median, the part of a step's time that no calibration made at another
moment can predict.  Ends with one JSON line: the median and range of the
ratio (TensorFlow's / mesh_tf's) and the median instability under each.

Reproduce:
  python benchmarks/cpu_threads.py                  # about 4 min here
  python benchmarks/cpu_threads.py --models conv3d moe --rounds 2
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(models, blocks, calls, share):
  """Times the layouts in this process; prints {model/label: [block
  medians, seconds]} as JSON."""
  sys.path.insert(0, ROOT)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(8, share_cores=share)
  devices = mtf.logical_cpu_devices(8)
  from benchmarks.cost_model_truth import _make_step, zoo_layouts
  from benchmarks.truth_timing import steady_times
  zoo = zoo_layouts()
  steps = []
  for name in models:
    build, layouts = zoo[name]
    for label, mesh, rules in layouts:
      step, feeds = _make_step(build, mesh, rules, devices)
      step(**feeds).numpy()
      steps.append((f"{name}/{label}",
                    lambda s=step, f=feeds: s(**f).numpy()))
  out = {key: [] for key, _ in steps}
  rng = random.Random(0)
  for _ in range(blocks):
    rng.shuffle(steps)
    for key, call in steps:
      out[key].append(statistics.median(steady_times(call, calls)))
  print(json.dumps(out))


def run_config(models, blocks, calls, share):
  cmd = [sys.executable, os.path.abspath(__file__), "--child",
         "--blocks", str(blocks), "--calls", str(calls),
         "--models", *models] + ([] if share else ["--tf-default"])
  res = subprocess.run(cmd, capture_output=True, text=True, check=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", nargs="+", default=["transformer", "mlp"])
  p.add_argument("--rounds", type=int, default=2,
                 help="processes per configuration, alternating")
  p.add_argument("--blocks", type=int, default=4)
  p.add_argument("--calls", type=int, default=5)
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--tf-default", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:
    child(args.models, args.blocks, args.calls, not args.tf_default)
    return
  blocks = {True: {}, False: {}}
  for r in range(args.rounds):
    for share in ((True, False) if r % 2 == 0 else (False, True)):
      got = run_config(args.models, args.blocks, args.calls, share)
      for key, b in got.items():
        blocks[share].setdefault(key, []).extend(b)
  print(f"{'layout':34s} {'TF default':>11s} {'mesh_tf':>9s} {'ratio':>6s}"
        f" {'unstable TF':>12s} {'mesh_tf':>8s}")
  ratios, unstable = [], {True: [], False: []}
  for key in blocks[True]:
    med = {s: statistics.median(blocks[s][key]) for s in (True, False)}
    spread = {s: (max(blocks[s][key]) - min(blocks[s][key])) / med[s]
              for s in (True, False)}
    ratios.append(med[False] / med[True])
    for s in (True, False):
      unstable[s].append(spread[s])
    print(f"{key:34s} {med[False] * 1e3:8.2f} ms {med[True] * 1e3:6.2f} ms "
          f"{ratios[-1]:6.2f} {spread[False]:11.0%} {spread[True]:8.0%}")
  print(json.dumps({
      "ratio_median": round(statistics.median(ratios), 3),
      "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
      "instability_tf_default": round(statistics.median(unstable[False]), 3),
      "instability_mesh_tf": round(statistics.median(unstable[True]), 3)}))


if __name__ == "__main__":
  main()
