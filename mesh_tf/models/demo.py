"""A small end-to-end demo: build an MLP, lower it on 8 logical CPU devices
under a data+model-parallel layout, and print what each device holds and
which collectives ran.  ``mtf-demo`` runs it.
"""

import argparse
import sys
import time

import numpy as np


def _setup_devices(n):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  tf = mtf.set_logical_cpu_devices(n)
  return tf


def build_mlp(mtf, mesh, batch=16, d_model=32, d_ff=64):
  """A two-layer MLP with a squared-error loss; returns (inputs, outputs)."""
  b = mtf.Dimension("batch", batch)
  d = mtf.Dimension("d_model", d_model)
  f = mtf.Dimension("d_ff", d_ff)
  rng = np.random.RandomState(0)
  x = mtf.import_tf_tensor(mesh, rng.randn(batch, d_model).astype("float32"),
                           mtf.Shape([b, d]), name="x")
  w1 = mtf.get_variable(mesh, "w1", [d, f],
                        initializer=mtf.random_normal_initializer(stddev=0.2))
  w2 = mtf.get_variable(mesh, "w2", [f, d],
                        initializer=mtf.random_normal_initializer(stddev=0.2))
  h = mtf.relu(mtf.einsum([x, w1], reduced_dims=[d]))
  y = mtf.einsum([h, w2], reduced_dims=[f])
  loss = mtf.reduce_mean(mtf.square(y - x))
  return x, [y, loss]


def main(argv=None):
  p = argparse.ArgumentParser(prog="mtf-demo", description=__doc__)
  p.add_argument("--mesh", default="rows:2;cols:4")
  p.add_argument("--layout", default="batch:rows;d_ff:cols")
  args = p.parse_args(argv)
  import mesh_tf as mtf
  mesh_shape = mtf.convert_to_shape(args.mesh)
  _setup_devices(mesh_shape.size)

  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  _, (y, loss) = build_mlp(mtf, mesh)
  t0 = time.perf_counter()
  impl = mtf.PlacementMeshImpl(mesh_shape, args.layout,
                               mtf.logical_cpu_devices(mesh_shape.size))
  lowering = mtf.lower(graph, {mesh: impl})
  y_full = lowering.export_to_tf_tensor(y).numpy()
  loss_full = float(lowering.export_to_tf_tensor(loss).numpy())
  dt = time.perf_counter() - t0

  # The same graph on one device, as the reference.
  ref_impl = mtf.PlacementMeshImpl("all:1", "", mtf.logical_cpu_devices(1))
  ref = mtf.lower(graph, {mesh: ref_impl})
  y_ref = ref.export_to_tf_tensor(y).numpy()

  print(f"mesh {mesh_shape}  layout {impl.layout_rules}  "
        f"({len(graph.operations)} mtf ops, lowered+run in {dt:.2f} s)")
  print(f"{'device':<40} {'w1 slice':>10} {'w2 slice':>10} {'y slice':>9}"
        f" {'bytes held':>11}")
  w1 = lowering.variables[graph.all_variables[0]]
  w2 = lowering.variables[graph.all_variables[1]]
  ys = lowering.laid_out(y)
  for p_ in range(impl.size):
    held = sum(int(np.prod(t.shape)) * 4 for t in
               (w1.slices[p_], w2.slices[p_], ys.tensor_list[p_]))
    print(f"{impl.devices[p_]:<40} {str(tuple(w1.slice_shape)):>10} "
          f"{str(tuple(w2.slice_shape)):>10} {str(ys.slice_shape):>9} "
          f"{held:>11,}")
  print("collectives:")
  for c in impl.trace.collectives:
    print(f"  {c.op_name:<14} {c.kind:<10} over {','.join(c.mesh_axes):<6} "
          f"group {c.group_size}  {c.bytes_per_device:,} B/device")
  err = float(np.max(np.abs(y_full - y_ref)))
  print(f"loss {loss_full:.6f}; max |y - y_1device| = {err:.2e}")
  return 0 if err < 1e-4 else 1


if __name__ == "__main__":
  sys.exit(main())
