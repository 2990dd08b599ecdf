"""Mesh TensorFlow's op classes: splittable/unsplittable dims on every op,
the original's class names and constructors, and slicewise/cwise -- each
checked against NumPy under several layouts."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from tests.layout_harness import check_layouts

MESHES = ["x:2", "rows:2;cols:4"]
RNG = np.random.RandomState(0)
XV = RNG.randn(4, 8).astype(np.float32)
YV = RNG.randn(8).astype(np.float32)


def _xy(mesh):
  x = mtf.import_tf_tensor(mesh, XV, "a:4;b:8")
  y = mtf.import_tf_tensor(mesh, YV, "b:8")
  return x, y


def test_every_op_has_splittable_and_unsplittable_dims():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x, y = _xy(mesh)
  h = mtf.layers.dense(x, mtf.Dimension("h", 6), name="d")
  z = mtf.layers.layer_norm(h, "h")
  z = mtf.slicewise(lambda t: tf.nn.softmax(t, axis=-1), [z],
                    splittable_dims=["a"])
  loss = mtf.reduce_sum(mtf.softmax(z, "h") * 2.0 + y * 0.0)
  mtf.gradients([loss], [v.outputs[0] for v in graph.trainable_variables])
  for op in graph.operations:
    names = {d.name for t in op.inputs + op.outputs for d in t.shape}
    assert isinstance(op.splittable_dims, frozenset)
    assert isinstance(op.unsplittable_dims, frozenset)
    assert op.splittable_dims | op.unsplittable_dims <= names | \
        op.unsplittable_dims
    assert op.splittable_dims == frozenset(names) - op.unsplittable_dims
  assert any(op.unsplittable_dims for op in graph.operations)


def test_alias_classes_say_what_they_alias():
  for name in ["Constant", "StopGradient", "Depend", "Assign",
               "ScalarMultiplyOperation", "ScalarAddOperation",
               "BinaryOpWithBroadcasting", "AddOperation", "MinMaxOperation"]:
    cls = getattr(mtf, name)
    assert issubclass(cls, mtf.Operation)
    assert "alias" in inspect.getdoc(cls).lower(), name
  for name in ["EinsumOperation", "ReduceOperation", "ConcatOperation",
               "SplitOperation", "StackOperation", "UnstackOperation",
               "ReshapeOperation", "ShiftOperation", "SliceOperation",
               "PadOperation", "OneHotOperation", "RangeOperation",
               "ImportOperation", "BroadcastOperation", "ReadVariable",
               "CustomGradientOperation", "SlicewiseOperation"]:
    assert issubclass(getattr(mtf, name), mtf.Operation), name


def test_original_constructors_build_the_same_values():
  def build(mesh):
    x, y = _xy(mesh)
    c = mtf.Constant(mesh, 1.5, mtf.convert_to_shape("b:8"), "float32")
    imp = mtf.ImportOperation(mesh, YV, mtf.convert_to_shape("b:8"),
                              name="imp").outputs[0]
    s = mtf.ScalarMultiplyOperation(x, 3.0).outputs[0]
    a = mtf.ScalarAddOperation(x, -1.0).outputs[0]
    b = mtf.BinaryOpWithBroadcasting(
        tf.math.squared_difference, x, y,
        output_shape=mtf.convert_to_shape("b:8;a:4")).outputs[0]
    add = mtf.AddOperation(x, c.outputs[0]).outputs[0]
    mx = mtf.MinMaxOperation(tf.maximum, x, y).outputs[0]
    sg = mtf.StopGradient(x).outputs[0]
    dep = mtf.Depend(y, [x]).outputs[0]
    loss = mtf.reduce_sum(s * a + b)
    gx = mtf.gradients([loss], [x])[0]
    return [imp, s, a, b, add, mx, sg, dep, gx]

  def reference():
    s, a = 3 * XV, XV - 1
    b = ((XV - YV) ** 2).T
    gx = 3 * a + s + 2 * (XV - YV)
    return [YV, s, a, b, XV + 1.5, np.maximum(XV, YV), XV, YV, gx]
  check_layouts(build, ["a:4", "b:8"], reference, meshes=MESHES, limit=6,
                rtol=1e-4, atol=1e-4)


def test_constructor_errors_name_the_problem():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x, y = _xy(mesh)
  with pytest.raises(mtf.ShapeError, match="takes a Python number"):
    mtf.ScalarMultiplyOperation(x, y)
  with pytest.raises(mtf.MtfError, match="tf.minimum or tf.maximum"):
    mtf.MinMaxOperation(tf.add, x, y)
  with pytest.raises(mtf.ShapeError, match="exactly the dims"):
    mtf.AddOperation(x, y, output_shape=mtf.convert_to_shape("a:4"))
  with pytest.raises(mtf.ShapeError, match=r"splittable dims \['q'\]"):
    mtf.slicewise(tf.nn.relu, [x], splittable_dims=["q"])


def test_slicewise_and_cwise_match_numpy_with_gradients():
  def build(mesh):
    x, y = _xy(mesh)
    # A row-wise function: "b" must stay whole, "a" may be split.
    sm = mtf.slicewise(lambda t: tf.nn.softmax(t, axis=1), [x],
                       splittable_dims=["a"])
    cw = mtf.cwise(lambda u, v: u * tf.sin(v), [x, y])
    loss = mtf.reduce_sum(sm * x) + mtf.reduce_sum(cw)
    gx, gy = mtf.gradients([loss], [x, y])
    return [sm, cw, gx, gy]

  def reference():
    e = np.exp(XV - XV.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    # d/dx sum(softmax(x) * x) = sm * (x - sum(sm * x)) + sm
    g_sm = sm * (XV - (sm * XV).sum(1, keepdims=True)) + sm
    return [sm, XV * np.sin(YV), g_sm + np.sin(YV),
            (XV * np.cos(YV)).sum(0)]
  n = check_layouts(build, ["a:4"], reference, meshes=MESHES, rtol=1e-4,
                    atol=1e-5)
  assert n >= 3

  def build_cwise(mesh):
    x, y = _xy(mesh)
    cw = mtf.cwise(lambda u, v: u * tf.sin(v), [x, y])
    return [cw, mtf.gradients([mtf.reduce_sum(cw)], [y])[0]]
  n = check_layouts(build_cwise, ["a:4", "b:8"],
                    lambda: [reference()[1], reference()[3]],
                    meshes=MESHES, limit=6, rtol=1e-4, atol=1e-5)
  assert n >= 5


def test_slicewise_refuses_a_split_unsplittable_dim():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x, _ = _xy(mesh)
  op = mtf.slicewise(lambda t: tf.nn.softmax(t, axis=1), [x],
                     splittable_dims=["a"]).operation
  assert op.splittable_dims == {"a"} and op.unsplittable_dims == {"b"}
  impl = mtf.PlacementMeshImpl("x:2", "b:x", mtf.logical_cpu_devices(2))
  with pytest.raises(mtf.UnsplittableDimError, match="b=8"):
    mtf.Lowering(graph, {mesh: impl})


@pytest.mark.parametrize("mesh_shape,layout", [("x:2", "a:x"),
                                               ("rows:2;cols:4", "b:cols"),
                                               ("x:8", "")])
def test_import_laid_out_tensor(mesh_shape, layout):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout,
                               mtf.logical_cpu_devices(n))
  shape = mtf.convert_to_shape("a:4;b:8")

  def slices(mesh_impl):
    sl = mesh_impl.slice_shape(shape)
    return [tf.constant(XV[b[0]:b[0] + sl[0], b[1]:b[1] + sl[1]])
            for b in (mesh_impl.slice_begin(shape, p)
                      for p in range(mesh_impl.size))]
  x = mtf.import_laid_out_tensor(mesh, slices, shape)
  y = x * 2.0
  lowering = mtf.Lowering(graph, {mesh: impl})
  np.testing.assert_array_equal(lowering.export_to_tf_tensor(y).numpy(),
                                2 * XV)
  graph2 = mtf.Graph()
  mesh2 = mtf.Mesh(graph2, "m")
  mtf.import_laid_out_tensor(mesh2, [tf.zeros([1])] * n, shape)
  with pytest.raises(mtf.MtfError, match="slice 0 has shape"):
    mtf.Lowering(graph2, {mesh2: impl})


def test_print_passes_its_value_and_gradient_through(capfd):
  def build(mesh):
    x, y = _xy(mesh)
    p = mtf.Print(x, [y], "values of y:")
    return [p, mtf.gradients([mtf.reduce_sum(p * p)], [x])[0]]
  check_layouts(build, ["a:4", "b:8"], lambda: [XV, 2 * XV],
                meshes=["x:2"], limit=3)
  assert "values of y:" in capfd.readouterr().err
