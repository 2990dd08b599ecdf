"""Variables: initializers, read, assign/assign_add/assign_sub, depend.

A variable's initial value must not depend on the layout or the mesh: every
processor computes only its slice, yet the assembled value is the same
everywhere and equals ``Variable.initial_value_numpy()``.
"""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf.ops import variables as var_lib
from tests.layout_harness import check_layouts, valid_layouts

A, B = mtf.Dimension("a", 8), mtf.Dimension("b", 4)
AB = mtf.Shape([A, B])
VALUE = np.arange(32, dtype=np.float32).reshape(8, 4) / 7.0

INITIALIZERS = {
    "default": lambda: None,
    "constant": lambda: mtf.constant_initializer(2.5),
    "scalar": lambda: 1.25,
    "zeros": mtf.zeros_initializer,
    "ones": mtf.ones_initializer,
    "random_normal": lambda: mtf.random_normal_initializer(stddev=0.5),
    "random_normal_seeded": lambda: mtf.random_normal_initializer(seed=7),
    "random_uniform": lambda: mtf.random_uniform_initializer(-1.0, 1.0),
    "truncated_normal": lambda: mtf.truncated_normal_initializer(stddev=0.5),
    "tf_truncated_normal": lambda: var_lib.tf_truncated_normal_initializer(
        stddev=0.5),
    "numpy": lambda: VALUE,
    "keras": lambda: tf.keras.initializers.GlorotUniform(seed=3),
}
# Every layout for two kinds; the others (the random kernel is ~100 eager ops
# per slice) a sample, or one mesh for kinds that share a kernel.
LAYOUTS = {"random_uniform": {}, "keras": {},
           "default": dict(meshes=["rows:2;cols:4"], limit=3),
           "random_normal_seeded": dict(meshes=["rows:2;cols:4"], limit=3)}


def _variable(initializer, name="w", dtype="float32", shape=AB):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  v = mtf.get_variable(mesh, name, shape, dtype=dtype,
                       initializer=initializer)
  return graph, mesh, v


@pytest.mark.parametrize("kind", sorted(INITIALIZERS))
def test_initial_value_is_identical_across_layouts_and_meshes(kind):
  make = INITIALIZERS[kind]
  _, _, v = _variable(make())
  expected = v.operation.initial_value_numpy()
  assert expected.shape == (8, 4) and expected.dtype == np.float32

  def build(mesh):
    return mtf.read(mtf.get_variable(mesh, "w", AB, initializer=make()))
  # exact: the 1-device value is bitwise equal to every other layout's.
  n = check_layouts(build, [A, B], lambda: expected, exact=kind not in (
      "random_normal", "random_normal_seeded", "random_uniform", "default",
      "truncated_normal", "tf_truncated_normal"),
                    **LAYOUTS.get(kind, dict(limit=3)))
  assert n >= 3


def test_initializer_values():
  def init_value(init, **kw):
    return _variable(init, **kw)[2].operation.initial_value_numpy()
  np.testing.assert_array_equal(init_value(mtf.constant_initializer(2.5)),
                                np.full((8, 4), 2.5))
  np.testing.assert_array_equal(init_value(1.25), np.full((8, 4), 1.25))
  np.testing.assert_array_equal(init_value(mtf.zeros_initializer()), 0)
  np.testing.assert_array_equal(init_value(mtf.ones_initializer()), 1)
  np.testing.assert_array_equal(init_value(VALUE), VALUE)
  keras = tf.keras.initializers.GlorotUniform(seed=3)
  np.testing.assert_allclose(init_value(keras), keras([8, 4], "float32"))
  u = init_value(mtf.random_uniform_initializer(-1.0, 1.0))
  assert -1 <= u.min() < -0.5 and 0.5 < u.max() < 1
  big = init_value(mtf.random_normal_initializer(mean=3.0, stddev=2.0),
                   shape="a:64,b:64")
  assert abs(big.mean() - 3.0) < 0.15 and abs(big.std() - 2.0) < 0.15
  assert len(np.unique(big)) > 4000  # no repeated values
  ints = init_value(mtf.constant_initializer(3), dtype="int32")
  assert ints.dtype == np.int32 and (ints == 3).all()


def test_truncated_normal_stays_within_two_standard_deviations():
  def init_value(init):
    return _variable(init, shape="a:64,b:64")[2].operation.initial_value_numpy()
  big = init_value(mtf.truncated_normal_initializer(mean=1.0, stddev=2.0))
  assert big.min() >= 1.0 - 4.0 and big.max() <= 1.0 + 4.0
  assert big.min() < 1.0 - 3.9 and big.max() > 1.0 + 3.9
  # A normal cut at two sigmas keeps 0.8796 of its standard deviation.
  assert abs(big.mean() - 1.0) < 0.1 and abs(big.std() - 2.0 * 0.8796) < 0.1
  # While the name is TF's own initializer, the layers' kernels are these.
  np.testing.assert_array_equal(
      init_value(var_lib.tf_truncated_normal_initializer(stddev=2.0)),
      init_value(mtf.truncated_normal_initializer(stddev=2.0)))


def test_a_replaced_tf_truncated_normal_initializer_is_what_layers_draw(
    monkeypatch):
  # Mesh TF's layers call tf.truncated_normal_initializer(stddev=...); a
  # program that puts its own initializer under that name gets its values.
  calls = []

  def factory(stddev):
    calls.append(stddev)
    return lambda shape, dtype=None: tf.fill(shape, tf.constant(stddev,
                                                                 dtype))
  monkeypatch.setattr(tf.compat.v1, "truncated_normal_initializer", factory)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  kernel = mtf.layers.VarianceScalingInitializer(scale=4.0)([A], [B])
  v = mtf.get_variable(mesh, "w", AB, initializer=kernel)
  np.testing.assert_allclose(v.operation.initial_value_numpy(),
                             np.full((8, 4), (4.0 / 8) ** 0.5))
  assert calls == [(4.0 / 8) ** 0.5]


def test_seeds_depend_on_name_unless_given():
  def init_value(name, init):
    return _variable(init, name=name)[2].operation.initial_value_numpy()
  normal = mtf.random_normal_initializer
  assert not np.array_equal(init_value("w1", normal()),
                            init_value("w2", normal()))
  np.testing.assert_array_equal(init_value("w1", normal()),
                                init_value("w1", normal()))
  np.testing.assert_array_equal(init_value("w1", normal(seed=5)),
                                init_value("w2", normal(seed=5)))


def _lower(graph, mesh, mesh_shape, layout):
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  return impl, mtf.Lowering(graph, {mesh: impl})


def _device(name):
  spec = tf.DeviceSpec.from_string(name)
  return spec.device_type, spec.device_index


def _value(impl, name, shape):
  return impl.export_to_tf_tensor(impl.variables[name].value(), shape).numpy()


@pytest.mark.parametrize("mesh_shape", ["x:2", "rows:2;cols:2",
                                        "rows:2;cols:4", "x:8"])
def test_per_device_variable_slices(mesh_shape):
  for layout in valid_layouts([A, B], mesh_shape):
    graph, mesh, _ = _variable(mtf.random_uniform_initializer(), name="w")
    impl, _ = _lower(graph, mesh, mesh_shape, layout)
    lv = impl.variables["w"]
    expected = impl.slice_shape(AB)
    assert lv.slice_shape == expected
    assert len(lv.slices) == impl.size
    full = graph.all_variables[0].initial_value_numpy()
    for p, s in enumerate(lv.slices):
      assert tuple(s.shape) == expected
      assert _device(s.device) == _device(impl.devices[p]) == ("CPU", p)
      begin = impl.slice_begin(AB, p)
      np.testing.assert_array_equal(
          s.numpy(), full[begin[0]:begin[0] + expected[0],
                          begin[1]:begin[1] + expected[1]])
    assert impl.trace.variables == {"w": int(np.prod(expected)) * 4}


def test_graph_lists_variables():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  w = mtf.get_variable(mesh, "w", AB)
  s = mtf.get_variable(mesh, "step", "", dtype="int32", initializer=0,
                       trainable=False)
  w2 = mtf.get_variable(mesh, "w", AB)
  assert w2.operation.name == "w_1"  # names are made unique
  assert [v.name for v in graph.all_variables] == ["w", "step", "w_1"]
  assert [v.name for v in graph.trainable_variables] == ["w", "w_1"]
  assert mtf.read(w) is w and mtf.read(w.operation) is w
  assert w.operation.shape == AB and s.operation.dtype == "int32"
  assert s.operation.value is s


@pytest.mark.parametrize("mesh_shape,layout", [
    ("all:1", ""), ("rows:2;cols:4", "a:rows;b:cols"), ("x:8", "a:x")])
def test_assign_assign_add_assign_sub(mesh_shape, layout):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  w = mtf.get_variable(mesh, "w", AB, initializer=VALUE)
  c = mtf.get_variable(mesh, "c", AB, initializer=0.0)
  d = mtf.get_variable(mesh, "d", AB, initializer=10.0)
  x = mtf.import_tf_tensor(mesh, np.ones((8, 4), np.float32), AB)
  mtf.assign_add(w, x * 2.0)
  mtf.assign(c, mtf.read(w) * 3.0)  # reads the value from before the add
  mtf.assign_sub(d, mtf.to_int32(x))  # cast to the variable's dtype
  impl, _ = _lower(graph, mesh, mesh_shape, layout)  # eager: assigns ran
  np.testing.assert_allclose(_value(impl, "w", AB), VALUE + 2, rtol=1e-6)
  np.testing.assert_allclose(_value(impl, "c", AB), VALUE * 3, rtol=1e-6)
  np.testing.assert_allclose(_value(impl, "d", AB), 9.0)
  # Lowering again on the same backend reuses the slices: one more step.
  mtf.Lowering(graph, {mesh: impl})
  np.testing.assert_allclose(_value(impl, "w", AB), VALUE + 4, rtol=1e-6)
  np.testing.assert_allclose(_value(impl, "c", AB), (VALUE + 2) * 3,
                             rtol=1e-6)
  np.testing.assert_allclose(_value(impl, "d", AB), 8.0)


def test_assign_returns_per_slice_ops():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  w = mtf.get_variable(mesh, "w", AB, initializer=0.0)
  op = mtf.assign(w, mtf.ones(mesh, AB))
  impl, lowering = _lower(graph, mesh, "rows:2;cols:4", "a:rows;b:cols")
  assert len(lowering.lowered_operation(op)) == 8
  shape_impl = mtf.ShapeMeshImpl("rows:2;cols:4", "a:rows;b:cols")
  shape_lowering = mtf.Lowering(graph, {mesh: shape_impl})
  assert shape_lowering.lowered_operation(op) == []
  assert shape_impl.trace == impl.trace


def test_depend_passes_its_input_through():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, VALUE, AB)
    w = mtf.get_variable(mesh, "w", AB, initializer=0.0)
    op = mtf.assign_add(w, x)
    return mtf.depend(x * 2.0, [op, w])
  check_layouts(build, [A, B], lambda: VALUE * 2, limit=6)


def test_initial_value_numpy_bfloat16_and_int():
  _, _, v = _variable(mtf.random_uniform_initializer(), dtype="bfloat16")
  graph, mesh, _ = _variable(mtf.random_uniform_initializer(),
                             dtype="bfloat16")
  impl, _ = _lower(graph, mesh, "x:2", "a:x")
  got = _value(impl, "w", AB).astype(np.float32)
  ref = tf.cast(v.operation.initial_value_numpy(), tf.bfloat16)
  np.testing.assert_array_equal(got, tf.cast(ref, tf.float32).numpy())
