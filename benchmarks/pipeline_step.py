"""Pipelined training steps on 8 logical CPU devices, side by side.

For the tiny zoo Transformer (4 layers, batch 8) it times, in one run:

* the unpipelined :class:`mesh_tf.training.TrainStep` on ``data:2;model:4``;
* the pipelined step (:class:`mesh_tf.pipeline.PipelineTrainStep`, one
  ``tf.function``) on ``stage:2;data:2;model:2`` for GPipe, 1F1B and
  interleaved 1F1B with 4 microbatches (1F1B also unfused);

each as the median of a few steps after the first (trace and start), with
the ratio to the unpipelined step.  Logical CPU devices share the host's
cores, so the ratio shows the pipeline's extra work (sends, per-microbatch
kernels), not a speed-up.  It then times the shape-only trace that the
cost model prices (:func:`mesh_tf.pipeline.trace_pipeline`) of a 16-layer
GPT-3-sized model, with every microbatch lowered and with one.

Run: ``PYTHONPATH=. python benchmarks/pipeline_step.py [--steps 5]``.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _devices():
  import tensorflow as tf
  cpus = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration()] * 8)
  import mesh_tf as mtf
  return mtf.logical_cpu_devices(8)


def _time(step, values, steps):
  start = time.perf_counter()
  float(step(**values))
  first = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    float(step(**values))
    times.append(time.perf_counter() - start)
  return first, statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=5)
  args = parser.parse_args()
  devices = _devices()
  from mesh_tf import models
  from mesh_tf.pipeline import (Pipeline, PipelineTrainStep, stage_costs,
                                trace_pipeline)
  from mesh_tf.training import optimize, train_step_for_model
  config = models.TransformerConfig(layers=4, batch=8)
  values = config.build().random_values()
  rules = "batch:data;d_ff:model;heads:model;vocab:model"
  base = train_step_for_model(config.build(), "data:2;model:4", rules,
                              devices, optimize.SgdOptimizer(0.1))
  first, base_s = _time(base, values, args.steps)
  print(f"{'step':<28}{'first s':>9}{'step ms':>9}{'ratio':>7}")
  print(f"{'unpipelined data:2;model:4':<28}{first:9.2f}"
        f"{base_s * 1e3:9.1f}{1:7.2f}")
  for schedule, chunks, fuse in (("gpipe", 1, True), ("1f1b", 1, True),
                                 ("1f1b", 1, False),
                                 ("interleaved_1f1b", 2, True)):
    pipe = Pipeline("stage", 2, 4, config.layers, chunks=chunks,
                    schedule=schedule)
    step = PipelineTrainStep(config, pipe, "stage:2;data:2;model:2", rules,
                             devices, optimize.SgdOptimizer(0.1), fuse=fuse)
    first, s = _time(step, values, args.steps)
    name = f"{schedule} p=2 m=4{'' if fuse else ' unfused'}"
    print(f"{name:<28}{first:9.2f}{s * 1e3:9.1f}{s / base_s:7.2f}")
  big = models.get_config("gpt3_175b", layers=16)
  pipe = Pipeline("stage", 4, 16, 16)
  mesh, big_rules = "stage:4;data:8;model:8", rules
  for traced in (None, 1):
    start = time.perf_counter()
    trace = trace_pipeline(big, pipe, mesh, big_rules,
                           optimize.SgdOptimizer(0.1), microbatches=traced)
    took = time.perf_counter() - start
    cost = stage_costs(pipe, trace)[0]
    print(f"shape-only trace, gpt3 16 layers p=4 m=16, microbatches "
          f"lowered {traced or 16:>2}: {took:5.2f} s; stage 0 sends "
          f"{cost.sent_bytes_per_microbatch / 2**20:.0f} MiB/microbatch")


if __name__ == "__main__":
  main()
