"""MeshImpl(shape, layout) as Mesh TF programs use it: geometry only."""

import doctest

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.lowering import mesh_impl as mesh_impl_lib

CASES = [("rows:2;cols:4", "batch:rows;d:cols", "batch:8;len:3;d:12"),
         ("x:8", "d:x", "batch:8;d:16"),
         ("a:2;b:2;c:2", "batch:c;len:a", "batch:4;len:6;d:5"),
         ("x:4", "", "d:8")]


@pytest.mark.parametrize("mesh,layout,shape", CASES)
def test_bare_mesh_impl_geometry_equals_a_backends(mesh, layout, shape):
  bare = mtf.MeshImpl(mesh, layout)
  backend = mtf.ShapeMeshImpl(mesh, layout)
  shape = mtf.convert_to_shape(shape)
  assert type(bare) is mtf.MeshImpl
  assert bare.shape == backend.shape and bare.ndims == backend.ndims
  assert bare.size == mtf.convert_to_shape(mesh).size
  assert bare.supports_control_dependencies
  assert bare.layout_rules == mtf.convert_to_layout_rules(layout)
  layout_of = bare.tensor_layout(shape)
  assert layout_of == backend.tensor_layout(shape)
  assert bare.tensor_layout(layout_of) is layout_of
  for d in shape:
    assert (bare.tensor_dimension_to_mesh_axis(d)
            == backend.tensor_dimension_to_mesh_axis(d))
  assert bare.slice_shape(shape) == backend.slice_shape(shape)
  assert bare.slice_size(shape) == int(np.prod(bare.slice_shape(shape)))
  assert bare.laid_out_size(shape) == bare.size * bare.slice_size(shape)
  for p in range(bare.size):
    assert bare.slice_begin(shape, p) == backend.slice_begin(shape, p)
    coords = bare.pnum_to_processor_coordinates(p)
    assert bare.processor_coordinates_to_pnum(coords) == p
  assert bare.processor_groups((0,)) == backend.processor_groups((0,))
  assert layout_of.is_fully_replicated == (layout_of.mesh_axes() == ())


def test_slice_numbers_and_cumprod():
  impl = mtf.MeshImpl("rows:2;cols:4", "batch:rows;d:cols")
  shape = mtf.convert_to_shape("batch:8;len:3;d:12")
  # rows splits batch (dims before it: none), cols splits d (8 * 3 before).
  assert impl.mesh_axis_to_cumprod(shape) == [1, 24]
  assert impl.mesh_axis_to_cumprod("len:3") == [None, None]
  # batch over rows, d over cols: slice number = row * 4 + col, i.e. pnum.
  assert [impl.slice_num(shape, p) for p in range(8)] == list(range(8))
  # d only: replicas along rows share a number.
  assert [impl.slice_num("d:12", p) for p in range(8)] == [0, 1, 2, 3] * 2
  placed = mtf.PlacementMeshImpl("rows:2;cols:4", "batch:rows;d:cols",
                                 mtf.logical_cpu_devices(8))
  nums = placed.laid_out_slice_num("d:12")
  assert [int(t.numpy()) for t in nums.tensor_list] == [0, 1, 2, 3] * 2


def test_bare_mesh_impl_primitives_raise_a_typed_error():
  bare = mtf.MeshImpl("x:2", "")
  x = mtf.LaidOutTensor((4,), "float32")  # a slice shape, no values
  calls = {
      "allreduce": lambda: bare.allreduce(x, "x"),
      "allconcat": lambda: bare.allconcat(x, "x", 0),
      "alltoall": lambda: bare.alltoall(x, "x", 0, 0),
      "receive": lambda: bare.receive(x, "x", [1, 0]),
      "slicewise": lambda: bare.slicewise(lambda t: t, x, shape="d:4"),
      "import_laid_out": lambda: bare.import_laid_out(np.zeros(2), "d:2",
                                                      "float32"),
      "export_to_tf_tensor": lambda: bare.export_to_tf_tensor(x, "d:2"),
      "make_variable": lambda: bare.make_variable("v", "d:2", "float32",
                                                  None),
  }
  for what, call in calls.items():
    with pytest.raises(mtf.BackendRequiredError,
                       match=rf"{what} needs a backend, but this is a bare "
                             r"MeshImpl.*mtf.PlacementMeshImpl\(shape, "
                             r"layout, devices\).*mtf.ShapeMeshImpl"):
      call()
  assert issubclass(mtf.BackendRequiredError, mtf.MtfError)
  with pytest.raises(mtf.UnknownNameError, match="mesh axis 'y'"):
    mtf.MeshImpl("x:2", "d:y")


def test_lowering_onto_a_bare_mesh_impl_names_the_backends():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.ones(mesh, "d:4")
  mtf.reduce_sum(x * 2.0)
  with pytest.raises(mtf.BackendRequiredError, match="ShapeMeshImpl"):
    mtf.Lowering(graph, {mesh: mtf.MeshImpl("x:2", "d:x")})


def test_doctest():
  finder = doctest.DocTestFinder()
  runner = doctest.DocTestRunner()
  for test in finder.find(mesh_impl_lib.MeshImpl, "MeshImpl",
                          globs={"MeshImpl": mtf.MeshImpl}):
    runner.run(test)
  assert runner.failures == 0 and runner.tries > 0
