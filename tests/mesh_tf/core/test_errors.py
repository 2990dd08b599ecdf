"""Every error type, with its message; and nothing else breaks afterwards.

Messages must name the op or tensor, the dim as ``name=size`` and the mesh
axis as ``name=size``, and say what to change.
"""

import re

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.lowering.lazy_tf import tf
from tests.layout_harness import run

B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 4), mtf.Dimension("n", 6)
XV = np.arange(32, dtype=np.float32).reshape(8, 4)


def _graph():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]), name="x")
  return graph, mesh, x


def _impls(mesh_shape, layout):
  n = mtf.convert_to_shape(mesh_shape).size
  return [mtf.ShapeMeshImpl(mesh_shape, layout),
          mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))]


def _lowers_fine(graph, mesh, out, expected):
  impl = mtf.PlacementMeshImpl("rows:2;cols:4", "b:rows;k:cols",
                               mtf.logical_cpu_devices(8))
  v = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(out).numpy()
  np.testing.assert_allclose(v, expected, rtol=1e-6)


def test_error_hierarchy():
  for cls in (mtf.ParseError, mtf.ShapeError, mtf.UnknownNameError,
              mtf.LayoutError, mtf.MeshSizeError, mtf.DTypeError):
    assert issubclass(cls, mtf.MtfError)
  for cls in (mtf.DimMappedTwiceError, mtf.MeshAxisReuseError,
              mtf.IndivisibleDimError, mtf.UnsplittableDimError):
    assert issubclass(cls, mtf.LayoutError)
  # Code written against the original Mesh TensorFlow catches ValueError.
  assert issubclass(mtf.MtfError, ValueError)


# --- layout errors ----------------------------------------------------------
@pytest.mark.parametrize("rules", ["d_ff:rows;d_ff:cols", "d_ff:rows,d_ff:cols",
                                   [("d_ff", "rows"), ("d_ff", "cols")]])
def test_dim_mapped_to_two_mesh_axes(rules):
  with pytest.raises(mtf.DimMappedTwiceError,
                     match="tensor dim 'd_ff' to both mesh axis 'cols' and "
                           "'rows'.*keep one rule"):
    mtf.convert_to_layout_rules(rules)


def test_dim_mapped_twice_is_caught_when_building_a_backend():
  with pytest.raises(mtf.DimMappedTwiceError, match="'b'"):
    mtf.ShapeMeshImpl("rows:2;cols:4", "b:rows;b:cols")
  with pytest.raises(mtf.DimMappedTwiceError, match="'b'"):
    mtf.PlacementMeshImpl("rows:2;cols:4", "b:rows;b:cols",
                          mtf.logical_cpu_devices(8))


@pytest.mark.parametrize("backend", [0, 1])
def test_two_dims_of_one_tensor_on_one_mesh_axis(backend):
  graph, mesh, _ = _graph()
  impl = _impls("rows:2;cols:4", "b:cols;k:cols")[backend]
  with pytest.raises(mtf.MeshAxisReuseError) as e:
    mtf.Lowering(graph, {mesh: impl})
  msg = str(e.value)
  assert "tensor 'x:0'" in msg
  assert "b=8" in msg and "k=4" in msg and "cols=4" in msg
  assert "drop the rule for 'b' or 'k'" in msg


def test_mesh_axis_reuse_from_layout_rules_directly():
  rules = mtf.convert_to_layout_rules("b:rows;k:rows")
  with pytest.raises(mtf.MeshAxisReuseError,
                     match=r"tensor 'w' has dims b=8 and k=4 .* mesh axis "
                           r"rows=2"):
    rules.tensor_layout(mtf.Shape([B, K]), "rows:2;cols:4", "w")


@pytest.mark.parametrize("backend", [0, 1])
def test_indivisible_dim(backend):
  graph, mesh, x = _graph()
  y = mtf.relu(mtf.einsum([x, mtf.ones(mesh, mtf.Shape([K, N]), name="w")],
                          reduced_dims=[K]), name="act")
  assert y.shape == mtf.Shape([B, N])
  impl = _impls("rows:2;cols:4", "n:cols")[backend]
  with pytest.raises(mtf.IndivisibleDimError) as e:
    mtf.Lowering(graph, {mesh: impl})
  msg = str(e.value)
  # The first tensor with dim n is the constant w.
  assert "tensor 'w:0'" in msg
  assert "n=6" in msg and "cols=4" in msg
  assert "change the rule n:cols or make 'n' a multiple of 4" in msg


class _LocalCumsum(mtf.Operation):
  """Cumulative sum along one dim: its lowering cannot split that dim."""

  def __init__(self, x, dim, name=None):
    super().__init__([x], name=name or "local_cumsum")
    x.shape.index(dim)  # Validates after Operation.__init__ recorded the op.
    self.dim = dim
    self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

  @property
  def unsplittable_dims(self):
    return frozenset([self.dim.name])

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    axis = self.inputs[0].shape.index(self.dim)
    lowering.set_tensor_lowering(self.outputs[0], impl.slicewise(
        lambda t: tf.cumsum(t, axis), lowering.laid_out(self.inputs[0]),
        shape=self.outputs[0].shape))


def test_unsplittable_dim_op_works_when_the_dim_is_not_split():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    return _LocalCumsum(x, K).outputs[0]
  (v,), _ = run(build, "rows:2;cols:4", "b:cols")
  np.testing.assert_allclose(v, np.cumsum(XV, 1))


@pytest.mark.parametrize("backend", [0, 1])
def test_unsplittable_dim_split(backend):
  graph, _, x = _graph()
  _LocalCumsum(x, K, name="cs")
  impl = _impls("rows:2;cols:4", "b:rows;k:cols")[backend]
  with pytest.raises(mtf.UnsplittableDimError) as e:
    mtf.Lowering(graph, {x.mesh: impl})
  msg = str(e.value)
  assert "operation cs (_LocalCumsum)" in msg
  assert "k=4" in msg and "tensor x:0" in msg and "cols=4" in msg
  assert "remove the rule k:cols" in msg


# --- unknown names -------------------------------------------------------------
def test_unknown_mesh_axis_in_rules():
  for make in (lambda: mtf.ShapeMeshImpl("rows:2;cols:4", "b:rows;k:colz"),
               lambda: mtf.PlacementMeshImpl("rows:2;cols:4", "k:colz",
                                             mtf.logical_cpu_devices(8))):
    with pytest.raises(mtf.UnknownNameError,
                       match=re.escape("layout rule k:colz names mesh axis "
                                       "'colz', which is not in mesh "
                                       "Shape[rows=2, cols=4]; use one of "
                                       "['rows', 'cols']")):
      make()
  rules = mtf.convert_to_layout_rules("k:colz")
  with pytest.raises(mtf.UnknownNameError, match="'colz'"):
    rules.tensor_dimension_to_mesh_axis(K, "rows:2;cols:4")


def test_unknown_reduced_dim():
  _, _, x = _graph()
  with pytest.raises(mtf.UnknownNameError,
                     match=re.escape("reduced dim zz=3 is not a dim of x:0 "
                                     "Shape[b=8, k=4]")):
    mtf.reduce_sum(x, reduced_dim=mtf.Dimension("zz", 3))
  with pytest.raises(mtf.UnknownNameError, match="reduced dim k=5"):
    mtf.reduce_max(x, reduced_dim=mtf.Dimension("k", 5))
  with pytest.raises(mtf.UnknownNameError, match="zz"):
    mtf.reduce_sum(x, reduced_dim="zz")
  with pytest.raises(mtf.UnknownNameError, match="zz"):
    mtf.softmax(x, mtf.Dimension("zz", 3))


def test_unknown_dim_in_shape_lookup():
  with pytest.raises(mtf.UnknownNameError, match=r"dim zz is not in Shape\["):
    mtf.Shape([B, K]).index("zz")
  with pytest.raises(mtf.UnknownNameError, match="k=5"):
    mtf.Shape([B, K]).index(mtf.Dimension("k", 5))


# --- mesh size ---------------------------------------------------------------------
def test_mesh_size_differs_from_device_count():
  with pytest.raises(mtf.MeshSizeError,
                     match=re.escape("mesh Shape[rows=2, cols=4] has 8 "
                                     "processors but 4 devices were given; "
                                     "pass exactly 8 devices")):
    mtf.PlacementMeshImpl("rows:2;cols:4", "", mtf.logical_cpu_devices(4))


def test_more_devices_requested_than_exist():
  with pytest.raises(mtf.MeshSizeError, match="1000 CPU devices requested but "
                                              "only 8"):
    mtf.logical_cpu_devices(1000)


# --- parse errors ---------------------------------------------------------------
@pytest.mark.parametrize("text,match", [
    ("batch", "item 'batch' is not of the form name:value"),
    ("batch:8,d_model", "item 'd_model' is not of the form name:value"),
    ("batch:eight", "size 'eight' of dim 'batch' is not an integer"),
    ("batch:8:9", "item 'batch:8:9'"),
    (":8", "item ':8'"),
    ("batch:", "item 'batch:'"),
    ("batch:2.5", "size '2.5'"),
])
def test_shape_parse_errors(text, match):
  with pytest.raises(mtf.ParseError, match=re.escape(match)) as e:
    mtf.convert_to_shape(text)
  assert repr(text) in str(e.value)  # the whole input is quoted


@pytest.mark.parametrize("text", ["batch", "batch:rows;d_ff", "a:b:c", ":rows"])
def test_layout_rules_parse_errors(text):
  with pytest.raises(mtf.ParseError, match="cannot parse layout rules"):
    mtf.convert_to_layout_rules(text)


def test_mesh_shape_parse_error_from_backend():
  with pytest.raises(mtf.ParseError, match="size 'two' of dim 'rows'"):
    mtf.ShapeMeshImpl("rows:two;cols:4", "")


def test_dimension_parse_error():
  with pytest.raises(mtf.ParseError, match="expected one dimension"):
    mtf.convert_to_dimension("a:1,b:2")


# --- shape errors -----------------------------------------------------------------
def test_invalid_shapes():
  with pytest.raises(mtf.ShapeError, match=r"repeats the dim name\(s\) \['b'\]"):
    mtf.convert_to_shape("b:8,k:4,b:8")
  with pytest.raises(mtf.ShapeError, match="'b' has invalid size -1"):
    mtf.Shape([("b", -1)])
  with pytest.raises(mtf.ShapeError, match="'b' has invalid size 2.5"):
    mtf.Shape([("b", 2.5)])
  with pytest.raises(mtf.ShapeError, match="invalid dimension name '1b'"):
    mtf.Shape([("1b", 1)])
  with pytest.raises(mtf.ShapeError, match="expected a Dimension"):
    mtf.Shape(["b"])


def test_shape_mismatch_errors_when_building_ops():
  _, mesh, x = _graph()
  with pytest.raises(mtf.ShapeError, match="dim 'b' has sizes 8 and 5"):
    _ = x + mtf.zeros(mesh, "b:5")
  with pytest.raises(mtf.ShapeError,
                     match=r"einsum .*dim 'k' has sizes 4 and 5 .*'x:0'"):
    mtf.einsum([x, mtf.zeros(mesh, "k:5")])
  with pytest.raises(mtf.ShapeError, match="output dim q=3 is not a dim of"):
    mtf.einsum([x], output_shape="q:3")
  with pytest.raises(mtf.ShapeError, match=r"output dim zz=3 is not a dim of "
                                           r"input x:0"):
    mtf.reduce_sum(x, output_shape="zz:3")
  with pytest.raises(mtf.ShapeError, match=r"value of shape \(3,\) does not "
                                           r"match Shape\[b=8\]"):
    mtf.constant(mesh, np.ones(3), "b:8")
  with pytest.raises(mtf.ShapeError, match=r"value of shape \(3,\) does not "
                                           r"match Shape\[b=8\]"):
    mtf.import_tf_tensor(mesh, np.ones(3), "b:8")
  with pytest.raises(mtf.ShapeError, match="needs the mtf shape"):
    mtf.import_tf_tensor(mesh, np.ones(3))
  v = mtf.get_variable(mesh, "v", "b:8")
  with pytest.raises(mtf.ShapeError, match=r"assign to variable v "
                                           r"Shape\[b=8\] from x:0 .* differ"):
    mtf.assign(v, x)
  with pytest.raises(mtf.ShapeError, match="needs at least one mtf Tensor"):
    mtf.add(1.0, 2.0)
  with pytest.raises(mtf.ShapeError, match="add_n needs at least one"):
    mtf.add_n([])
  with pytest.raises(mtf.ShapeError, match="einsum needs at least one"):
    mtf.einsum([])
  with pytest.raises(mtf.ShapeError, match="relu expects an mtf Tensor"):
    mtf.relu(3.0)


def test_other_errors():
  graph, mesh, x = _graph()
  with pytest.raises(mtf.MtfError, match="is not a variable"):
    mtf.assign(x, x)
  with pytest.raises(mtf.DTypeError, match="unknown dtype 'float13'"):
    mtf.zeros(mesh, "b:8", dtype="float13")
  other = mtf.Mesh(mtf.Graph(), "other")
  with pytest.raises(mtf.MtfError, match="mixes tensors of mesh 'mesh' and "
                                         "'other'"):
    _ = x + mtf.zeros(other, "b:8")
  with pytest.raises(mtf.MtfError, match="no MeshImpl was given for mesh "
                                         "'mesh'"):
    mtf.Lowering(graph, {})
  with pytest.raises(mtf.MtfError, match="has no inputs, so it needs a mesh"):
    mtf.Operation([], name="lonely")
  fed = mtf.import_tf_tensor(mesh, None, "b:8", name="fed")
  with pytest.raises(mtf.MtfError, match="without a value; feed one with "
                                         "Lowering"):
    mtf.Lowering(graph, {mesh: mtf.PlacementMeshImpl(
        "r:2", "", mtf.logical_cpu_devices(2))})
  # Feeding it fixes the graph.
  lowering = mtf.Lowering(
      graph, {mesh: mtf.PlacementMeshImpl("r:2", "b:r",
                                          mtf.logical_cpu_devices(2))},
      feeds={fed: np.arange(8, dtype=np.float32)})
  np.testing.assert_array_equal(lowering.export_to_tf_tensor(fed).numpy(),
                                np.arange(8))


# --- nothing else breaks -----------------------------------------------------------
def test_failed_op_construction_leaves_the_graph_lowerable():
  graph, mesh, x = _graph()
  n_ops = len(graph.operations)
  w = mtf.ones(mesh, mtf.Shape([K]), name="w")
  bad = [
      lambda: mtf.einsum([x, w], output_shape="q:3"),
      lambda: mtf.reduce_sum(x, output_shape="zz:3"),
      lambda: mtf.assign(mtf.get_variable(mesh, "v", "b:8"), x),
      lambda: x + mtf.zeros(mesh, "b:6"),
      lambda: _LocalCumsum(x, N),
  ]
  for make in bad:
    with pytest.raises(mtf.MtfError):
      make()
  # Only the valid ops built along the way remain (w, zeros, variable v).
  names = [op.name for op in graph.operations]
  assert len(names) == n_ops + 3, names
  assert all(op.outputs for op in graph.operations)
  y = mtf.einsum([x, w], reduced_dims=[K]) * 2.0
  _lowers_fine(graph, mesh, y, XV.sum(1) * 2)


def test_lowering_errors_do_not_poison_later_lowerings():
  graph, mesh, x = _graph()
  y = mtf.reduce_sum(x, reduced_dim=K)
  for layout in ["b:cols;k:cols", "b:zz", "n:rows;b:rows;b:cols"]:
    with pytest.raises(mtf.MtfError):
      impl = mtf.PlacementMeshImpl("rows:2;cols:4", layout,
                                   mtf.logical_cpu_devices(8))
      mtf.Lowering(graph, {mesh: impl})
  with pytest.raises(mtf.IndivisibleDimError):
    mtf.Lowering(graph, {mesh: mtf.ShapeMeshImpl("x:8", "k:x")})
  _lowers_fine(graph, mesh, y, XV.sum(1))
  # And an unrelated new graph is fine too.
  g2 = mtf.Graph()
  m2 = mtf.Mesh(g2, "mesh")
  z = mtf.exp(mtf.import_tf_tensor(m2, XV, mtf.Shape([B, K])))
  _lowers_fine(g2, m2, z, np.exp(XV))


def test_parse_errors_are_not_cached_as_results():
  for _ in range(2):
    with pytest.raises(mtf.ParseError):
      mtf.convert_to_shape("batch:eight")
  assert mtf.convert_to_shape("batch:8") == mtf.Shape([("batch", 8)])
