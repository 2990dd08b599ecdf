"""Benchmark: the memory model's per-device peak and variables against what
TensorFlow's allocator measures, for every layout of the truth benchmark.

What ``tf.config.experimental.get_memory_info`` reports on CPU: ``import
mesh_tf`` turns on TF's BFC host allocator, and TF has **one** such
allocator per process, shared by every logical CPU device.  Asked for
``CPU:0`` .. ``CPU:7``, it gives the same ``current`` and ``peak`` for all
eight (measured: 32 MiB made on ``CPU:3`` shows as 32 MiB current on every
device; 16 MiB more on ``CPU:5`` shows as 48 MiB on every device).  So the
allocator measures the *sum over the devices*, and a per-device figure is
that sum over the device count: exact for the variables of an even layout,
and for the peak an estimate, since the devices' executors need not reach
their peaks at the same moment (the sum of per-device peaks bounds the
measured one from above).

Per layout (each built alone, the others freed): the variables are the
bytes of the slices the runtime holds on each device after the first call
(which creates them), the largest over the devices, against
``CostReport.variable_bytes_per_device`` summed; the allocator's
``current`` after that call, less before the step was built, is shown
beside them (the variables and the step's constants); then the
allocator's peak is reset and one steady step runs: its peak over the bytes held before the step was built, over the
devices, against ``CostReport.peak_memory_bytes``.  Ends with one JSON
line: per model the median and worst absolute error of the peak and of the
variables.

Reproduce:
  python benchmarks/memory_truth.py                      # every model
  python benchmarks/memory_truth.py --models mlp conv3d
"""

import argparse
import gc
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.truth_timing import training_graph  # noqa: E402

DEVICES = 8


def shared_allocator(tf, devices):
  """Whether the logical CPU devices share one allocator: bytes made on
  the last device show as current on the first."""
  before = tf.config.experimental.get_memory_info("CPU:0")["current"]
  with tf.device(devices[-1]):
    x = tf.zeros([1 << 20]) + 1.0    # 4 MiB
  after = tf.config.experimental.get_memory_info("CPU:0")["current"]
  del x
  return after - before >= 1 << 22


def variable_bytes(step):
  """The largest per-device bytes of the step's variable slices, as the
  runtime holds them (each slice a TF variable on its device)."""
  by_device = {}
  for laid in step.mesh_impl.variables.values():
    for v in laid.slices or ():
      by_device[v.device] = by_device.get(v.device, 0) + (
          v.shape.num_elements() * v.dtype.size)
  return max(by_device.values()) if by_device else 0


def measure_layout(tf, build, mesh, rules, devices):
  """``(variables, held, peak)``: bytes per device of the variable slices
  the runtime holds, and of what the allocator holds after the first call
  (variables and the step's constants) and its peak over a steady step
  (its totals over the devices, see the module docstring)."""
  from mesh_tf import training
  from mesh_tf.training import optimize
  gc.collect()
  base = tf.config.experimental.get_memory_info("CPU:0")["current"]
  model = build()
  step = training.train_step_for_model(model, mesh, rules, devices,
                                       optimize.SgdOptimizer(0.01))
  feeds = model.random_values(seed=1)
  step(**feeds).numpy()
  held = tf.config.experimental.get_memory_info("CPU:0")["current"] - base
  step(**feeds).numpy()
  tf.config.experimental.reset_memory_stats("CPU:0")
  step(**feeds).numpy()
  peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - base
  variables = variable_bytes(step)
  del step, model, feeds
  gc.collect()
  return variables, held / len(devices), peak / len(devices)


def predict(build, mesh, rules):
  """``(variables, peak)`` bytes per device the cost model predicts."""
  import costmodels
  r = costmodels.evaluate(training_graph(build).graph, mesh, rules,
                          "dgx-h100")
  return sum(r.variable_bytes_per_device.values()), r.peak_memory_bytes


def main(argv=None):
  from benchmarks.cost_model_truth import zoo_layouts
  zoo = zoo_layouts()
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", nargs="+", default=list(zoo), choices=list(zoo))
  args = p.parse_args(argv)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(DEVICES)
  from mesh_tf.lowering.lazy_tf import tf
  devices = mtf.logical_cpu_devices(DEVICES)
  shared = shared_allocator(tf, devices)
  print(f"one allocator shared by the {DEVICES} logical CPU devices: "
        f"{shared}")
  out = {"shared_allocator": shared}
  for name in args.models:
    build, layouts = zoo[name]
    var_err, peak_err = [], []
    for label, mesh, rules in layouts:
      pv, pp = predict(build, mesh, rules)
      mv, mh, mp = measure_layout(tf, build, mesh, rules, devices)
      var_err.append(abs(pv - mv) / mv)
      peak_err.append(abs(pp - mp) / mp)
      print(f"{name:16s} {label:14s} variables predicted {pv / 2**20:8.3f} "
            f"measured {mv / 2**20:8.3f} MiB ({(pv - mv) / mv:+.1%}; "
            f"allocator holds {mh / 2**20:.3f}); peak "
            f"predicted {pp / 2**20:8.3f} measured {mp / 2**20:8.3f} MiB "
            f"({(pp - mp) / mp:+.1%})", flush=True)
    out[name] = {"peak_median_abs_err": statistics.median(peak_err),
                 "peak_worst_abs_err": max(peak_err),
                 "variables_median_abs_err": statistics.median(var_err),
                 "variables_worst_abs_err": max(var_err)}
  print(json.dumps(out))


if __name__ == "__main__":
  main()
