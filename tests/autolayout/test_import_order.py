"""One process that uses both OR-Tools (CP-SAT) and TensorFlow.

Importing TensorFlow before ``ortools.sat.python.cp_model`` can make
CP-SAT's solve segfault (a protobuf clash).  mesh-tf loads TensorFlow
lazily and imports CP-SAT first, and autolayout imports CP-SAT on import,
so a user who builds, lowers on devices and then solves (or the other way
round) in one process is safe.  The test runs in a fresh interpreter,
because pytest's own process already imported both.
"""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import mesh_tf as mtf
    import autolayout
    assert "tensorflow" not in sys.modules, "building/solving must not load TF"

    def build():
      g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
      b, d, f = (mtf.Dimension("batch", 64), mtf.Dimension("d_model", 32),
                 mtf.Dimension("d_ff", 64))
      x = mtf.get_variable(mesh, "x", mtf.Shape([b, d]), trainable=False)
      w = mtf.get_variable(mesh, "w", mtf.Shape([d, f]))
      y = mtf.reduce_sum(mtf.square(mtf.einsum([x, w], reduced_dims=[d])))
      return g, mesh, y

    # TensorFlow first (through mesh-tf's lazy handle), then CP-SAT.
    from mesh_tf.lowering.lazy_tf import tf
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * 8)
    g, mesh, y = build()
    impl = mtf.PlacementMeshImpl("x:2;y:4", "", mtf.logical_cpu_devices(8))
    base = mtf.Lowering(g, {mesh: impl}).export_to_tf_tensor(y).numpy()
    assert "tensorflow" in sys.modules
    r = autolayout.auto_layout(g, "x:2;y:4", [y], "dgx-h100",
                               objective="memory", num_workers=2)
    assert r.status == "optimal" and len(r.rules) == 2, r
    impl = mtf.PlacementMeshImpl("x:2;y:4", r.rules,
                                 mtf.logical_cpu_devices(8))
    got = mtf.Lowering(g, {mesh: impl}).export_to_tf_tensor(y).numpy()
    np.testing.assert_allclose(got, base, rtol=1e-5)
    print("OK", r.rules)
""")


def test_tensorflow_and_cp_sat_in_one_process():
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="2")
  p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr
  assert p.stdout.startswith("OK")


TF_FIRST = textwrap.dedent("""
    import tensorflow as tf          # the order that makes CP-SAT crash
    import mesh_tf as mtf
    import autolayout
    g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    x = mtf.get_variable(mesh, "x", "batch:64,d_model:32", trainable=False)
    w = mtf.get_variable(mesh, "w", "d_model:32,d_ff:64")
    y = mtf.reduce_sum(mtf.einsum([x, w], reduced_dims=[x.shape[1]]))
    try:
      autolayout.auto_layout(g, "x:2;y:4", [y], "dgx-h100")
    except autolayout.ImportOrderError as e:
      print("ImportOrderError:", e)
""")

MESH_TF_FIRST = textwrap.dedent("""
    import mesh_tf as mtf            # imports CP-SAT before TensorFlow
    import tensorflow as tf
    import autolayout
    g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    x = mtf.get_variable(mesh, "x", "batch:64,d_model:32", trainable=False)
    w = mtf.get_variable(mesh, "w", "d_model:32,d_ff:64")
    y = mtf.reduce_sum(mtf.einsum([x, w], reduced_dims=[x.shape[1]]))
    r = autolayout.auto_layout(g, "x:2;y:4", [y], "dgx-h100")
    import gc; gc.collect()
    print("OK", r.status)
""")


def _run(script):
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                        capture_output=True, text=True, timeout=300)


def test_tensorflow_imported_first_is_a_clear_error_not_a_crash():
  p = _run(TF_FIRST)
  assert p.returncode == 0, p.stdout + p.stderr[-2000:]
  assert p.stdout.startswith("ImportOrderError: TensorFlow was imported "
                             "before OR-Tools' CP-SAT"), p.stdout
  assert "import mesh_tf (or ortools.sat.python.cp_model) before" in p.stdout


def test_importing_mesh_tf_first_makes_any_later_order_safe():
  p = _run(MESH_TF_FIRST)
  assert p.returncode == 0, p.stdout + p.stderr[-2000:]
  assert p.stdout.strip() == "OK optimal"
