"""Benchmark: per-token decoding latency of the zoo Transformer LM, measured
on logical CPU devices and predicted by the cost model on real hardware.

Part 1 (measured).  The one-token greedy step (``mesh_tf.decoding``) of a
small Transformer (4 layers, d_model 512, 8 heads of 64, d_ff 2048, vocab
8192, cache 256) is lowered once and called repeatedly; the median time of
a call is the per-token latency.  Side by side in one run:

  * 1 device;
  * 8 devices, model parallel: ``heads:model;d_ff:model;vocab:model``;
  * 8 devices, replicated (data parallelism has nothing to split at batch
    1: every device computes the same token);
  * at batch 8 also data parallel ``batch:model``.

The 8 logical devices of this machine share its CPU cores, so splitting
cannot make a token come sooner here; these numbers show the overhead of the
split step, not a speed-up.

Part 2 (predicted).  ``costmodels.evaluate`` of the decoding graphs of
``mtf_5b`` (the widest LM of the Mesh-TensorFlow paper: 256 heads, d_ff
262144; cache 256) and ``gpt2_small`` (12 heads; cache 1024) on an 8xH100
node (``dgx-h100``) and a TPU v5e 2x4 slice (``tpu-v5e-2x4``), on mesh
``model:8`` (``x:2;y:4`` when the heads do not split 8 ways):
replicated (batch 1) or data parallel (batch 8), Megatron model parallel,
and the layout ``auto_layout(objective="latency")`` picks.  The cost
model's roofline counts the bytes each kernel reads (weights and cache
included) and writes, so the weight streaming that bounds real decoding is
in the latency; ``weights us`` shows its floor alone (per-device variable
bytes / HBM bandwidth).  The auto layout is solved under the chip's HBM
capacity as memory budget.

Reproduce:
  python benchmarks/decode.py
  python benchmarks/decode.py --calls 20 --skip-measured
"""

import argparse
import os
import statistics
import sys
import time

SMALL = dict(layers=4, d_model=512, heads=8, d_kv=64, d_ff=2048, vocab=8192,
             length=256, batch=8)
MP = "heads:model;d_ff:model;vocab:model"


def _setup_tf(num_devices=8):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  tf = mtf.set_logical_cpu_devices(num_devices)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  # Six DecodeSteps each trace their step once; TF would warn of retracing.
  tf.get_logger().setLevel("ERROR")
  return tf


def measure(calls):
  """Rows of (batch, setup, devices, layout, first call s, ms per token)."""
  import numpy as np
  import mesh_tf as mtf
  from mesh_tf import models
  from mesh_tf.decoding import DecodeStep, decoding_graph
  config = models.TransformerConfig(**SMALL)
  devices = mtf.logical_cpu_devices(8)
  runs = [(1, "1 device", "single:1", ""),
          (1, "8 dev model parallel", "model:8", MP),
          (1, "8 dev replicated", "model:8", ""),
          (8, "1 device", "single:1", ""),
          (8, "8 dev model parallel", "model:8", MP),
          (8, "8 dev data parallel", "model:8", "batch:model")]
  steps, firsts, feeds = [], [], []
  for batch, _what, mesh, layout in runs:
    d = decoding_graph(config, batch=batch)
    n = mtf.convert_to_shape(mesh).size
    step = DecodeStep(d, mesh, layout, devices[:n])
    ids = np.arange(batch, dtype=np.int32)
    t0 = time.perf_counter()
    step(ids=ids, position=np.zeros(batch, np.int32))["next_ids"].numpy()
    firsts.append(time.perf_counter() - t0)
    steps.append(step)
    feeds.append(ids)
  # Round robin, so that the load of a shared machine hits every setup alike.
  times = [[] for _ in runs]
  for t in range(1, calls + 1):
    for i, step in enumerate(steps):
      batch = runs[i][0]
      t0 = time.perf_counter()
      out = step(ids=feeds[i], position=np.full(batch, t, np.int32))
      feeds[i] = out["next_ids"].numpy()
      times[i].append(time.perf_counter() - t0)
  return [(batch, what, mtf.convert_to_shape(mesh).size,
           layout or "(replicated)", first, 1e3 * statistics.median(ts))
          for (batch, what, mesh, layout), first, ts in zip(runs, firsts,
                                                            times)]


PREDICTED = (("mtf_5b", 256), ("gpt2_small", 1024))
TOPOLOGIES = ("dgx-h100", "tpu-v5e-2x4")


def _meshes(heads):
  """The 8-device mesh and its model-parallel rules for ``heads`` heads."""
  if heads % 8 == 0:
    return "model:8", MP, "model"
  return "x:2;y:4", "heads:y;d_kv:x;d_ff:y;vocab:y", "y"


def predict():
  """Rows of predicted per-token latency on dgx-h100 and tpu-v5e-2x4."""
  import costmodels
  import autolayout
  from mesh_tf.models import decoding as dl
  from mesh_tf.models.configs import get_config
  rows = []
  for name, memory in PREDICTED:
    mesh, mp, axis = _meshes(get_config(name).heads)
    for topology in TOPOLOGIES:
      chip = costmodels.get_topology(topology).chip
      for batch in (1, 8):
        full = dl.decoding_model(name, batch=batch, memory_length=memory)
        auto = autolayout.auto_layout(
            full.graph, mesh, full.cost_outputs(), topology=topology,
            objective="latency", memory_budget=chip.hbm_bytes,
            time_limit_s=60)
        layouts = [("replicated", "") if batch == 1 else
                   ("data parallel", f"batch:{axis}"),
                   ("model parallel", mp), ("auto (latency)",
                                            str(auto.rules))]
        for what, rules in layouts:
          r = costmodels.evaluate(full.graph, mesh, rules, topology,
                                  outputs=full.cost_outputs())
          var_bytes = sum(r.trace.variables.values())
          rows.append((name, topology, mesh, batch, what,
                       rules or "(replicated)", 1e6 * r.step_time_s,
                       1e6 * r.comm_time_s, r.peak_memory_bytes / 2**30,
                       1e6 * var_bytes / chip.hbm_bandwidth_bytes_per_s,
                       "yes" if r.fits_in_memory else "no"))
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--calls", type=int, default=30)
  parser.add_argument("--skip-measured", action="store_true")
  args = parser.parse_args(argv)
  _setup_tf(8)
  from rich.console import Console
  from rich.table import Table
  console = Console(width=250)
  if not args.skip_measured:
    rows = measure(args.calls)
    t = Table(title="Measured per-token latency, greedy step, logical CPU "
              f"devices ({os.cpu_count()} cores), model {SMALL}")
    for c in ("batch", "setup", "devices", "layout", "first call s",
              "ms/token", "vs 1 device"):
      t.add_column(c)
    base = {r[0]: r[5] for r in rows if r[2] == 1}
    for r in rows:
      t.add_row(str(r[0]), r[1], str(r[2]), r[3], f"{r[4]:.2f}",
                f"{r[5]:.2f}", f"{r[5] / base[r[0]]:.2f}x")
    console.print(t)
  rows = predict()
  t = Table(title="Predicted per-token latency (cost model), float32, "
            "greedy step; weights us = weights+cache bytes per device / HBM "
            "bandwidth (a floor, already inside the latency)")
  for c in ("model", "topology", "mesh", "batch", "layout", "rules",
            "latency us", "comm us", "peak GiB/dev", "fits", "weights us",
            "latency vs DP/repl."):
    t.add_column(c)
  base = {r[:4]: r for r in rows
          if r[4] in ("replicated", "data parallel")}
  for r in rows:
    b = base[r[:4]]
    t.add_row(r[0], r[1], r[2], str(r[3]), r[4], r[5], f"{r[6]:.1f}",
              f"{r[7]:.1f}", f"{r[8]:.2f}", r[10], f"{r[9]:.0f}",
              f"{r[6] / b[6]:.2f}x")
  console.print(t)
  return 0


if __name__ == "__main__":
  sys.exit(main())
