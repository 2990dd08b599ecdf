"""Mesh TensorFlow spellings that ported code uses keep working."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import run


def test_shape_lists_are_properties_that_may_also_be_called():
  s = mtf.convert_to_shape("a:2,b:3,c:4")
  assert s.to_integer_list == [2, 3, 4] and s.to_integer_list() == [2, 3, 4]
  assert s.to_integer_list[1] == 3
  assert s.cumprod == [1, 2, 6] and s.cumprod() == [1, 2, 6]
  assert s.to_string() == "a:2,b:3,c:4"


def test_placement_mesh_impl_module_path():
  from mesh_tf.compat import placement_mesh_impl
  assert placement_mesh_impl.PlacementMeshImpl is mtf.PlacementMeshImpl


def test_get_variable_activation_and_storage_dtypes():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  v = mtf.get_variable(mesh, "w", "a:4", activation_dtype="bfloat16")
  assert v.dtype == "bfloat16"
  assert g.all_variables[0].dtype == "float32"
  u = mtf.get_variable(mesh, "u", "a:4", master_dtype="float16")
  assert u.dtype == "float16"
  with pytest.raises(TypeError):
    mtf.get_variable(mesh, "z", "a:4", no_such_argument=1)  # pylint: disable=unexpected-keyword-arg


def test_lowering_accepts_autostack_and_names_unlowered_tensors():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.constant(mesh, 2.0, "a:4")
  impl = mtf.PlacementMeshImpl("r:2", "a:r", mtf.logical_cpu_devices(2))
  lowering = mtf.Lowering(g, {mesh: impl}, autostack=False)
  np.testing.assert_allclose(lowering.export_to_tf_tensor(x).numpy(), [2] * 4)
  late = x * 3.0
  with pytest.raises(mtf.MtfError, match="was not lowered"):
    lowering.export_to_tf_tensor(late)


def test_dropout_with_is_training_argument():
  def build(mesh):
    x = mtf.ones(mesh, "a:64")
    return [mtf.dropout(x, False, rate=0.5), mtf.dropout(x, True, rate=0.5,
                                                          seed=3)]
  (off, on), _ = run(build, "r:2", "a:r")
  np.testing.assert_array_equal(off, np.ones(64))
  assert set(np.unique(on)) <= {0.0, 2.0} and 0 < (on == 0).sum() < 64


def test_einsum_rejects_a_reduced_dim_no_input_has():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.ones(mesh, "a:4,b:2")
  with pytest.raises(mtf.ShapeError, match="reduced dim q=2 is not a dim"):
    mtf.einsum([x], reduced_dims=[mtf.Dimension("q", 2)])


def test_set_logical_cpu_devices_after_start():
  # conftest started TensorFlow with 8 devices: asking again for 8 is fine,
  # asking for another count says why it cannot be done.
  tf = mtf.set_logical_cpu_devices(8)
  assert len(tf.config.list_logical_devices("CPU")) == 8
  with pytest.raises(mtf.MeshSizeError, match="already started with 8"):
    mtf.set_logical_cpu_devices(4)
