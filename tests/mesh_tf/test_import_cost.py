"""Building and shape-lowering a graph is cheap and does not load TensorFlow.

The cost model and the layout solver lower graphs on ``ShapeMeshImpl`` many
times; this must stay pure Python and fast.
"""

import os
import subprocess
import sys
import textwrap
import time

import mesh_tf as mtf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def test_building_and_shape_lowering_do_not_import_tensorflow():
  script = textwrap.dedent("""
      import sys, time
      t0 = time.perf_counter()
      import mesh_tf as mtf
      t1 = time.perf_counter()
      graph = mtf.Graph()
      mesh = mtf.Mesh(graph, "mesh")
      b, d, f = mtf.Dimension("b", 8), mtf.Dimension("d", 16), mtf.Dimension(
          "f", 32)
      x = mtf.import_tf_tensor(mesh, None, mtf.Shape([b, d]),
                               dtype="float32")
      w1 = mtf.get_variable(mesh, "w1", mtf.Shape([d, f]))
      w2 = mtf.get_variable(mesh, "w2", mtf.Shape([f, d]),
                            initializer=mtf.random_uniform_initializer())
      h = mtf.relu(mtf.einsum([x, w1], reduced_dims=[d]))
      y = mtf.einsum([h, w2], reduced_dims=[f]) + x
      loss = mtf.reduce_mean(mtf.softmax(y, d) * 2.0 - 1.0)
      mtf.assign_sub(w1, w1 * 0.1)
      impl = mtf.ShapeMeshImpl("rows:2;cols:4", "b:rows;f:cols")
      lowering = mtf.Lowering(graph, {mesh: impl})
      lowering.laid_out(loss)
      assert len(impl.trace.collectives) >= 2, impl.trace.collectives
      assert "tensorflow" not in sys.modules, "tensorflow was imported"
      print(f"import mesh_tf: {t1 - t0:.3f} s")
      """)
  env = dict(os.environ)
  env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
  r = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                     capture_output=True, text=True, timeout=120,
                     check=False)
  assert r.returncode == 0, r.stdout + r.stderr
  print(r.stdout.strip())


def _deep_graph(layers):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  b, d = mtf.Dimension("b", 64), mtf.Dimension("d", 512)
  f = mtf.Dimension("f", 2048)
  h = mtf.import_tf_tensor(mesh, None, mtf.Shape([b, d]), dtype="float32")
  w_in = mtf.import_tf_tensor(mesh, None, mtf.Shape([d, f]), dtype="float32")
  w_out = mtf.import_tf_tensor(mesh, None, mtf.Shape([f, d]),
                               dtype="float32")
  for i in range(layers):
    w = w_in if i % 2 == 0 else w_out
    h = mtf.relu(mtf.einsum([h, w], reduced_dims=[h.shape[-1]]))
  return graph, mesh


def test_shape_lowering_of_thousands_of_ops_is_fast():
  graph, mesh = _deep_graph(1000)
  assert len(graph.operations) == 2003
  times = []
  for _ in range(2):  # best of two: the machine is shared and noisy
    impl = mtf.ShapeMeshImpl("rows:2;cols:4", "b:rows;f:cols")
    t0 = time.perf_counter()
    mtf.Lowering(graph, {mesh: impl})
    times.append(time.perf_counter() - t0)
  print(f"ShapeMeshImpl lowering of {len(graph.operations)} ops: "
        f"{min(times):.3f} s (best of {len(times)})")
  # Every second einsum sums out the split f: one all-reduce each.
  assert len(impl.trace.collectives) == 500
  assert min(times) < 2.0
