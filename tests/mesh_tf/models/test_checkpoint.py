"""Checkpoints: save under one layout and mesh, restore under another."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf import checkpoint, training
from mesh_tf.training import optimize

B, D, F = (mtf.Dimension("batch", 8), mtf.Dimension("d_model", 8),
           mtf.Dimension("d_ff", 16))
RNG = np.random.RandomState(0)
XV = RNG.randn(8, 8).astype(np.float32)


def _model(d_ff=F, extra=False):
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, None, mtf.Shape([B, D]), dtype="float32")
    w1 = mtf.get_variable(mesh, "w1", mtf.Shape([D, d_ff]),
                          initializer=mtf.random_normal_initializer())
    w2 = mtf.get_variable(mesh, "w2", mtf.Shape([d_ff, D]),
                          initializer=mtf.random_normal_initializer())
    h = mtf.tanh(mtf.einsum([x, w1], reduced_dims=[D]))
    y = mtf.einsum([h, w2], reduced_dims=[d_ff])
    loss = mtf.reduce_mean(mtf.square(y - x))
    if extra:
      loss += mtf.reduce_sum(mtf.get_variable(mesh, "extra", mtf.Shape([D])))
    return loss, [x]
  return build


def _step(mesh_shape, layout, n, build=None):
  return training.make_train_step(build or _model(), mesh_shape, layout,
                                  mtf.logical_cpu_devices(n),
                                  optimize.AdamWeightDecayOptimizer(0.01))


def test_save_on_8_devices_restore_on_4_under_another_layout(tmp_path):
  a = _step("rows:2;cols:4", "batch:rows;d_ff:cols", 8)
  for _ in range(2):
    a(XV)
  prefix = a.save(str(tmp_path / "ckpt" / "model"))
  saved = a.variable_values()
  # TF-readable, keyed by variable name, with full values (slots included).
  reader = tf.train.load_checkpoint(prefix)
  assert sorted(reader.get_variable_to_shape_map()) == sorted(saved)
  assert {"w1/adam_m", "w2/adam_v"} <= set(saved)
  for name, value in saved.items():
    np.testing.assert_array_equal(reader.get_tensor(name), value)

  b = _step("x:4", "d_model:x", 4)  # a new layout, mesh shape and device count
  b.restore(prefix)
  for name, value in b.variable_values().items():
    assert value.dtype == saved[name].dtype
    np.testing.assert_array_equal(value, saved[name], err_msg=name)
  # Training continues from the restored state identically on both meshes.
  np.testing.assert_allclose(float(b(XV)), float(a(XV)), rtol=1e-6)


def test_restore_into_existing_variables_assigns_them(tmp_path):
  a = _step("rows:2;cols:4", "d_ff:rows;d_model:cols", 8)
  a(XV)
  prefix = checkpoint.save(str(tmp_path / "m"), a.mesh_impl, a.graph)
  c = _step("x:2", "d_ff:x", 2)
  c(XV)  # variables exist and differ now
  checkpoint.restore(prefix, c.mesh_impl, c.graph)
  want = checkpoint.load_values(prefix)
  for name, value in c.variable_values().items():
    np.testing.assert_array_equal(value, want[name], err_msg=name)


def test_mismatched_checkpoint_names_the_variable(tmp_path):
  a = _step("x:2", "d_ff:x", 2)
  a(XV)
  prefix = a.save(str(tmp_path / "m"))
  missing = _step("x:2", "", 2, build=_model(extra=True))
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=r"variable 'extra' .* is not in checkpoint"):
    missing.restore(prefix)
  wider = _step("x:2", "", 2, build=_model(d_ff=mtf.Dimension("d_ff", 32)))
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=r"variable 'w1' has shape .*d_ff=32.* but \[8, 16\]"):
    wider.restore(prefix)
  assert issubclass(checkpoint.CheckpointMismatchError, mtf.MtfError)
  with pytest.raises(checkpoint.CheckpointError, match="cannot read"):
    checkpoint.load_values(str(tmp_path / "nothing_here"))


def test_save_before_variables_exist_is_an_error(tmp_path):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  mtf.get_variable(mesh, "w", mtf.Shape([D]))
  impl = mtf.PlacementMeshImpl("x:2", "", mtf.logical_cpu_devices(2))
  with pytest.raises(checkpoint.CheckpointError, match="'w' has no values"):
    checkpoint.save(str(tmp_path / "m"), impl, graph)
  with pytest.raises(checkpoint.CheckpointError, match="holds no variable"):
    checkpoint.save(str(tmp_path / "m"), mtf.ShapeMeshImpl("x:2", ""), graph)
