"""Mesh TensorFlow's value API: MeshImpl geometry without a backend,
TensorLayout's methods, and "." as a separator in shape/layout strings."""

import pickle

import pytest

import mesh_tf as mtf


def test_shape_mesh_impl_answers_geometry_questions():
  # MeshImpl itself stays abstract (test_backends); the shape-only backend
  # is its geometry without values.
  impl = mtf.ShapeMeshImpl(mtf.convert_to_shape("rows:2;cols:4"),
                           mtf.convert_to_layout_rules("batch:rows;d_ff:cols"))
  assert isinstance(impl, mtf.MeshImpl)
  assert (impl.ndims, impl.size, impl.supports_control_dependencies) == (
      2, 8, True)
  shape = mtf.convert_to_shape("batch:8;d_model:16;d_ff:32")
  assert impl.tensor_dimension_to_mesh_axis(mtf.Dimension("d_ff", 32)) == 1
  assert impl.tensor_dimension_to_mesh_axis(mtf.Dimension("d_model", 16)) \
      is None
  layout = impl.tensor_layout(shape)
  assert tuple(layout) == (0, None, 1)
  assert impl.tensor_layout(layout) is layout
  assert impl.slice_shape(shape) == (4, 16, 8)
  assert impl.slice_size(shape) == 4 * 16 * 8
  assert impl.laid_out_size(shape) == 8 * 4 * 16 * 8
  assert impl.slice_begin(shape, 5) == (4, 0, 8)
  assert impl.pnum_to_processor_coordinates(5) == (1, 1)
  assert impl.processor_coordinates_to_pnum((1, 1)) == 5
  assert impl.mesh_dimension_name_to_size("cols") == 4
  with pytest.raises(mtf.MtfError, match="not divisible"):
    impl.tensor_layout(mtf.convert_to_shape("d_ff:6"))


def test_tensor_layout_methods():
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "batch:rows;d_ff:cols")
  split = impl.tensor_layout(mtf.convert_to_shape("d_ff:8;batch:4;d:2"))
  assert not split.is_fully_replicated
  assert split.mesh_axis_to_tensor_axis(2) == (1, 0)
  assert split.mesh_axes() == (1, 0)
  whole = impl.tensor_layout(mtf.convert_to_shape("d:2"))
  assert whole.is_fully_replicated and whole.mesh_axis_to_tensor_axis(2) == (
      None, None)
  assert pickle.loads(pickle.dumps(split)) == split


def test_dot_separates_items_as_in_mesh_tf():
  assert mtf.convert_to_shape("batch:8.d_model:512") == mtf.convert_to_shape(
      "batch:8;d_model:512")
  assert mtf.convert_to_layout_rules("batch:rows.d_ff:cols") == \
      mtf.convert_to_layout_rules("batch:rows;d_ff:cols")
  with pytest.raises(mtf.ParseError, match="not of the form name:value"):
    mtf.convert_to_shape("batch:8.d_model")
