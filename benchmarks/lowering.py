"""Benchmark: lowering cost and step time of a stack of einsum+relu layers.

Run:  python benchmarks/lowering.py [--layers 16] [--batch 64] [--d 256]

Prints, measured side by side in one run on 8 TF logical CPU devices:
- the lowering time on the shape-only backend (pure Python) and the tracing
  time of the lowered ``tf.function`` (lowering + TF graph construction);
- the number of TF ops in the lowered step;
- the steady step time of the lowered ``tf.function``, fused (the default,
  see mesh_tf/lowering/fusion.py) and unfused, taken in turn;
- the same math in plain single-device TF, and the ratios.
"""

import argparse
import statistics
import sys
import time

import numpy as np


def setup(n):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  tf = mtf.set_logical_cpu_devices(n)
  return tf


def build(mtf, layers, batch, d):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  b = mtf.Dimension("batch", batch)
  dims = [mtf.Dimension("d_model", d), mtf.Dimension("d_ff", d)]
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([b, dims[0]]), name="x",
                           dtype="float32")
  h = x
  for i in range(layers):
    din, dout = dims[i % 2], dims[(i + 1) % 2]
    w = mtf.get_variable(mesh, f"w{i}", [din, dout],
                         initializer=mtf.random_normal_initializer(
                             stddev=1.0 / np.sqrt(d)))
    h = mtf.relu(mtf.einsum([h, w], reduced_dims=[din]))
  return graph, mesh, x, h


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--layers", type=int, default=16)
  p.add_argument("--batch", type=int, default=64)
  p.add_argument("--d", type=int, default=256)
  p.add_argument("--mesh", default="rows:2;cols:4")
  p.add_argument("--layout", default="batch:rows;d_ff:cols")
  p.add_argument("--repeats", type=int, default=20)
  args = p.parse_args(argv)
  import mesh_tf as mtf
  mesh_shape = mtf.convert_to_shape(args.mesh)
  tf = setup(mesh_shape.size)
  devices = mtf.logical_cpu_devices(mesh_shape.size)

  t = time.perf_counter()
  graph, mesh, x, y = build(mtf, args.layers, args.batch, args.d)
  build_s = time.perf_counter() - t

  t = time.perf_counter()
  shape_impl = mtf.ShapeMeshImpl(mesh_shape, args.layout)
  mtf.Lowering(graph, {mesh: shape_impl}).laid_out(y)
  shape_lower_s = time.perf_counter() - t

  xv = tf.constant(np.random.RandomState(0).randn(args.batch, args.d),
                   tf.float32)
  runs = {}
  for fuse in (True, False):
    impl = mtf.PlacementMeshImpl(mesh_shape, args.layout, devices, fuse=fuse)

    @tf.function
    def step(x_tf, impl=impl):
      lowering = mtf.Lowering(graph, {mesh: impl}, feeds={x: x_tf})
      return lowering.export_to_tf_tensor(y)

    t = time.perf_counter()
    concrete = step.get_concrete_function(xv)
    trace_s = time.perf_counter() - t
    t = time.perf_counter()
    with mtf.step_call_options():
      out = step(xv).numpy()
    first_s = time.perf_counter() - t
    runs[fuse] = {"step": step, "trace_s": trace_s, "first_s": first_s,
                  "ops": len(concrete.graph.get_operations()), "out": out}

  # The same math in plain single-device TF, with the same weights.
  ws = [tf.constant(v.initial_value_numpy()) for v in graph.all_variables]

  @tf.function
  def plain(x_tf):
    h = x_tf
    for w in ws:
      h = tf.nn.relu(tf.matmul(h, w))
    return h
  ref = plain(xv).numpy()
  calls = {"fused": lambda: runs[True]["step"](xv).numpy(),
           "unfused": lambda: runs[False]["step"](xv).numpy(),
           "plain": lambda: plain(xv).numpy()}
  times = {k: [] for k in calls}
  with mtf.step_call_options():
    for _ in range(args.repeats):  # in turn, so load drifts over all alike
      for k, call in calls.items():
        t = time.perf_counter()
        call()
        times[k].append(time.perf_counter() - t)
  med = {k: statistics.median(v) for k, v in times.items()}
  err = max(float(np.max(np.abs(r["out"] - ref)) / (np.max(np.abs(ref))
                                                      + 1e-12))
            for r in runs.values())

  print(f"{args.layers} x (einsum+relu), batch {args.batch}, d {args.d}, "
        f"mesh {mesh_shape}, layout {args.layout}")
  print(f"  graph build                  {build_s * 1e3:9.1f} ms "
        f"({len(graph.operations)} mtf ops)")
  print(f"  lowering, shape-only backend {shape_lower_s * 1e3:9.1f} ms")
  for fuse, name in ((True, "fused"), (False, "unfused")):
    r = runs[fuse]
    print(f"  {name:8s} lowering + TF trace {r['trace_s'] * 1e3:9.1f} ms "
          f"({r['ops']} TF ops, {r['ops'] / args.layers:.0f} per layer); "
          f"first call {r['first_s'] * 1e3:.1f} ms")
  print(f"  steady step, fused, 8 dev    {med['fused'] * 1e3:9.2f} ms")
  print(f"  steady step, unfused, 8 dev  {med['unfused'] * 1e3:9.2f} ms")
  print(f"  steady step, plain TF 1 dev  {med['plain'] * 1e3:9.2f} ms")
  print(f"  ratio fused/plain            {med['fused'] / med['plain']:9.2f}x")
  print(f"  ratio unfused/plain          "
        f"{med['unfused'] / med['plain']:9.2f}x")
  print(f"  ratio fused/unfused          "
        f"{med['fused'] / med['unfused']:9.2f}x")
  print(f"  max relative error vs plain  {err:9.2e}")
  return 0 if err < 1e-4 else 1


if __name__ == "__main__":
  sys.exit(main())
