"""Benchmark: the memory model's per-device peak and variables against what
TensorFlow's allocator measures, for every layout of the truth benchmark.

What ``tf.config.experimental.get_memory_info`` reports on CPU: ``import
mesh_tf`` turns on TF's BFC host allocator, and TF has **one** such
allocator per process, shared by every logical CPU device.  Asked for
``CPU:0`` .. ``CPU:7``, it gives the same ``current`` and ``peak`` for all
eight (measured: 32 MiB made on ``CPU:3`` shows as 32 MiB current on every
device; 16 MiB more on ``CPU:5`` shows as 48 MiB on every device).  So the
allocator measures the *sum over the devices*, and ``sum / 8`` (the
"allocator/8" column) is exact for the variables of an even layout but
not a per-device peak: logical CPU devices share the host's cores and do
not run in lockstep, so their peaks fall at different moments and the sum
at its peak is lower than eight devices at theirs -- by how much depends
on how the executor interleaves them, hence on the machine's load (the
replicated Transformer: 5 MiB allocator/8 against 14 MiB on its busiest
device).

The per-device peak -- what the memory model predicts -- comes from the
same allocator's own events: :mod:`benchmarks.allocator_events` charges
each allocation of a steady step to the device of the op that made it
and follows each device's bytes through the step.  A device's peak is the
variables it holds plus the most its step added at once; the largest over
the devices is compared with ``CostReport.peak_memory_bytes`` ("peak",
the headline).  The allocator hands out a free chunk whole unless it is
twice the request, so a buffer can weigh up to 2x its tensor: "tensors"
is the same device peak with each buffer weighed by its tensor's own
bytes (``requested_bytes``), what the memory model counts.

Per layout (each built alone, the others freed): the variables are the
bytes of the slices the runtime holds on each device after the first call
(which creates them), the largest over the devices, against
``CostReport.variable_bytes_per_device`` summed; the allocator's
``current`` after that call, less before the step was built, is shown
beside them (the variables and the step's constants); the allocator's
peak over a steady step, over the bytes held before the step was built,
divided by the devices; then the per-device peak of two more steps,
profiled.  The prediction is on the topology of the devices at hand
(``--topology``, default a quick calibration of them), whose devices do
not run in lockstep (:mod:`costmodels.sync_hold`); "schedule alone" is
the prediction as if they did, the model before that term.  Ends with
one JSON line: per model the median and worst absolute error of the
per-device peak, of the allocator/8 peak, of both for the schedule alone,
and of the variables.

Reproduce:
  python benchmarks/memory_truth.py                      # every model
  python benchmarks/memory_truth.py --models mlp conv3d
  python benchmarks/memory_truth.py --topology host-8.json  # calibrated
"""

import argparse
import gc
import json
import os
import re
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


def variable_bytes_by_device(step):
  """``{device: bytes}`` of the step's variable slices, as the runtime
  holds them (each slice a TF variable on its device)."""
  by_device = {}
  for laid in step.mesh_impl.variables.values():
    for v in laid.slices or ():
      by_device[v.device] = by_device.get(v.device, 0) + (
          v.shape.num_elements() * v.dtype.size)
  return by_device


def variable_bytes(step):
  """The largest per-device bytes of the step's variable slices."""
  by_device = variable_bytes_by_device(step)
  return max(by_device.values()) if by_device else 0


def measure_layout(tf, build, mesh, rules, devices):
  """``(variables, held, peak, device_peak, unattributed, tensor_peak)``: bytes per
  device of the variable slices the runtime holds, and of what the
  allocator holds after the first call (variables and the step's
  constants) and its peak over a steady step (its totals over the devices,
  see the module docstring); the largest over the devices of the
  variables a device holds plus the most its steady step added at once
  (:func:`benchmarks.allocator_events.device_peaks`), the bytes of
  allocations no device was found for, and the device peak again with
  each buffer weighed by its tensor's bytes (``requested_bytes``) rather
  than the allocator's chunk."""
  from benchmarks import allocator_events
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
  by_device = {int(re.search(r"CPU:(\d+)$", k).group(1)): b
               for k, b in variable_bytes_by_device(step).items()}
  events, mark = allocator_events.profile_step(
      tf, lambda: step(**feeds).numpy())
  owners = allocator_events.op_devices(step.concrete_function().graph)
  device_peak = {}
  for weight in allocator_events.WEIGHTS:
    peaks, unattributed = allocator_events.device_peaks(events, mark, owners,
                                                        weight)
    device_peak[weight] = max(by_device.get(d, 0) + b
                              for d, b in peaks.items())
  step = model = feeds = None   # the call above holds them: free them now
  gc.collect()
  return (variables, held / len(devices), peak / len(devices),
          device_peak["allocation_bytes"], unattributed,
          device_peak["requested_bytes"])


def predict(build, mesh, rules, topology):
  """``(variables, peak, schedule_peak)`` bytes per device the cost model
  predicts; the last with the devices taken to run in lockstep (the
  schedule's liveness alone, without :mod:`costmodels.sync_hold`: the
  model before that term)."""
  import costmodels
  graph = training_graph(build).graph
  r = costmodels.evaluate(graph, mesh, rules, topology)
  lockstep = topology._replace(chip=topology.chip._replace(
      devices_in_lockstep=True))
  s = costmodels.evaluate(graph, mesh, rules, lockstep)
  return (sum(r.variable_bytes_per_device.values()), r.peak_memory_bytes,
          s.peak_memory_bytes)


def host_topology(path):
  """The topology of the devices at hand: the file ``path``, or a quick
  calibration of 8 logical CPU devices (in a subprocess) written there."""
  import costmodels
  if not os.path.exists(path):
    from costmodels.calibrate.calibration import calibrate
    calibrate(output=path, cpu_devices=DEVICES, quick=True)
  return costmodels.get_topology(path)


def _err(pred, meas):
  return (pred - meas) / meas


def _stats(errs):
  return (statistics.median(abs(e) for e in errs), max(abs(e) for e in errs))


def main(argv=None):
  from benchmarks.cost_model_truth import zoo_layouts
  zoo = zoo_layouts()
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", nargs="+", default=list(zoo), choices=list(zoo))
  p.add_argument("--topology", default=None,
                 help="topology file of these devices (default: a quick "
                      "calibration of them, kept in a temporary file)")
  args = p.parse_args(argv)
  import tempfile
  with tempfile.TemporaryDirectory() as tmp:
    topology = host_topology(args.topology
                             or os.path.join(tmp, "host-8.json"))
  print(f"topology {topology.name}: devices in lockstep "
        f"{topology.chip.devices_in_lockstep}")
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(DEVICES)
  from mesh_tf.lowering.lazy_tf import tf
  devices = mtf.logical_cpu_devices(DEVICES)
  shared = shared_allocator(tf, devices)
  print(f"one allocator shared by the {DEVICES} logical CPU devices: "
        f"{shared}")
  out = {"shared_allocator": shared}
  mib = 2 ** 20
  for name in args.models:
    build, layouts = zoo[name]
    var_err, sum_err, dev_err, old_sum, old_dev, req_err = ([], [], [], [],
                                                            [], [])
    for label, mesh, rules in layouts:
      pv, pp, po = predict(build, mesh, rules, topology)
      mv, mh, ms, md, lost, mr = measure_layout(tf, build, mesh, rules,
                                                devices)
      var_err.append(_err(pv, mv))
      sum_err.append(_err(pp, ms))
      dev_err.append(_err(pp, md))
      old_sum.append(_err(po, ms))
      old_dev.append(_err(po, md))
      req_err.append(_err(pp, mr))
      print(f"{name:16s} {label:14s} variables {pv / mib:7.3f} MiB "
            f"({var_err[-1]:+.1%}); peak predicted {pp / mib:7.3f}, "
            f"measured per device {md / mib:7.3f} ({dev_err[-1]:+.1%}), "
            f"tensors {mr / mib:7.3f} ({req_err[-1]:+.1%}), "
            f"allocator/8 {ms / mib:7.3f} ({sum_err[-1]:+.1%}; holds "
            f"{mh / mib:.3f} between steps; unattributed "
            f"{lost / mib:.3f}); schedule alone {po / mib:7.3f} "
            f"({old_dev[-1]:+.1%} per device, {old_sum[-1]:+.1%} "
            "allocator/8)", flush=True)
    out[name] = {}
    for key, errs in (("peak", dev_err), ("tensor_peak", req_err),
                      ("allocator_peak", sum_err),
                      ("schedule_peak", old_dev),
                      ("schedule_allocator_peak", old_sum),
                      ("variables", var_err)):
      median, worst = _stats(errs)
      out[name].update({f"{key}_median_abs_err": round(median, 4),
                        f"{key}_worst_abs_err": round(worst, 4)})
  print(json.dumps(out))


if __name__ == "__main__":
  main()
