"""Elementwise ops: every unary and binary op under every valid layout.

Each case builds a tiny graph, lowers it under all valid layouts on 1, 2, 4
and 8 logical CPU devices (``check_layouts``) and compares with NumPy (or,
for bfloat16, TensorFlow's own cast).  Binary ops broadcast by dim *name*, so
operands have different dim sets and orders.
"""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import MESHES, check_layouts, run

A, B, C = mtf.Dimension("a", 8), mtf.Dimension("b", 4), mtf.Dimension("c", 2)
AB = mtf.Shape([A, B])
CB = mtf.Shape([C, B])  # deliberately not in a, b, c order
ALL = [A, B, C]
# Cheap unary ops run every mesh with a sample of layouts; one per family
# below runs every valid layout of every mesh.
FEW = dict(limit=5)

_rng = np.random.RandomState(0)
X = _rng.randn(8, 4).astype(np.float32)            # any sign
POS = (_rng.rand(8, 4) * 3 + 0.25).astype(np.float32)  # strictly positive
Y = _rng.randn(2, 4).astype(np.float32)
YPOS = (_rng.rand(2, 4) * 2 + 0.5).astype(np.float32)
XI = _rng.randint(-20, 20, size=(8, 4)).astype(np.int32)
YI = _rng.choice([-7, -3, -2, 2, 3, 5], size=(2, 4)).astype(np.int32)
XB = _rng.rand(8, 4) > 0.5
YB = _rng.rand(2, 4) > 0.5


def to_abc(v, names):
  """A NumPy value with dims ``names`` broadcast to the a, b, c order."""
  order = [n for n in "abc" if n in names]
  v = np.transpose(v, [names.index(n) for n in order])
  return v.reshape([{"a": 8, "b": 4, "c": 2}[n] if n in names else 1
                    for n in "abc"])


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805

UNARY = {
    # name: (mtf fn, input, numpy reference)
    "identity": (mtf.identity, X, lambda x: x),
    "negative": (mtf.negative, X, np.negative),
    "abs": (mtf.abs, X, np.abs),
    "sign": (mtf.sign, X, np.sign),
    "square": (mtf.square, X, np.square),
    "sqrt": (mtf.sqrt, POS, np.sqrt),
    "rsqrt": (mtf.rsqrt, POS, lambda x: 1 / np.sqrt(x)),
    "reciprocal": (mtf.reciprocal, POS, np.reciprocal),
    "exp": (mtf.exp, X, np.exp),
    "log": (mtf.log, POS, np.log),
    "sin": (mtf.sin, X, np.sin),
    "cos": (mtf.cos, X, np.cos),
    "tanh": (mtf.tanh, X, np.tanh),
    "sigmoid": (mtf.sigmoid, X, _sigmoid),
    "relu": (mtf.relu, X, lambda x: np.maximum(x, 0)),
    "leaky_relu": (mtf.leaky_relu, X, lambda x: np.where(x > 0, x, 0.2 * x)),
    "leaky_relu_0.05": (lambda x: mtf.leaky_relu(x, alpha=0.05), X,
                        lambda x: np.where(x > 0, x, 0.05 * x)),
    "elu": (mtf.elu, X, lambda x: np.where(x > 0, x, np.expm1(x))),
    "selu": (mtf.selu, X, lambda x: _SELU_SCALE * np.where(
        x > 0, x, _SELU_ALPHA * np.expm1(x))),
    "softplus": (mtf.softplus, X, lambda x: np.logaddexp(0, x)),
    "swish": (mtf.swish, X, lambda x: x * _sigmoid(x)),
    "gelu": (mtf.gelu, X, lambda x: 0.5 * x * (1 + np.tanh(
        np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "logical_not": (mtf.logical_not, XB, np.logical_not),
    "pow_scalar": (lambda x: mtf.pow(x, 3.0), X, lambda x: x ** 3),
    "cast_int32": (lambda x: mtf.cast(x, "int32"), X * 5,
                   lambda x: np.trunc(x).astype(np.int32)),
    "to_float": (mtf.to_float, XI, lambda x: x.astype(np.float32)),
    "to_int32": (mtf.to_int32, X * 5, lambda x: x.astype(np.int32)),
    "cast_bool": (lambda x: mtf.cast(x, "bool"), XI,
                  lambda x: x.astype(bool)),
}
# Ops that run every valid layout of every mesh (one per family).
FULL_UNARY = {"relu", "exp", "to_int32", "logical_not"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_op_matches_numpy_under_layouts(name):
  fn, value, ref = UNARY[name]

  def build(mesh):
    return fn(mtf.import_tf_tensor(mesh, value, AB))
  kw = {} if name in FULL_UNARY else FEW
  n = check_layouts(build, [A, B], lambda: ref(value), **kw)
  assert n >= (20 if name in FULL_UNARY else 10)


def test_unary_output_dtypes():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, X, AB)
  assert mtf.to_int32(x).dtype == "int32"
  assert mtf.to_bfloat16(x).dtype == "bfloat16"
  assert mtf.to_float(mtf.to_int32(x)).dtype == "float32"
  assert mtf.cast(x, "float32") is x  # no-op cast adds no op
  assert mtf.exp(x).shape == AB and mtf.exp(x).dtype == "float32"
  assert mtf.less(x, 0.0).dtype == "bool"


def test_to_bfloat16_matches_tf_cast():
  import tensorflow as tf

  def build(mesh):
    return mtf.to_float(mtf.to_bfloat16(mtf.import_tf_tensor(mesh, X, AB)))
  ref = tf.cast(tf.cast(X, tf.bfloat16), tf.float32).numpy()
  assert not np.array_equal(ref, X)  # the cast really loses precision
  check_layouts(build, [A, B], lambda: ref, exact=True)
  (v,), _ = run(lambda m: mtf.to_bfloat16(mtf.import_tf_tensor(m, X, AB)),
                "rows:2;cols:2", "a:rows;b:cols")
  assert v.dtype.name == "bfloat16"
  np.testing.assert_array_equal(v.astype(np.float32), ref)


def _bin(x_np, y_np):
  return (to_abc(x_np, "ab"), to_abc(y_np, "cb"))


BINARY = {
    # name: (mtf fn, x [a, b], y [c, b], numpy reference on broadcast values)
    "add": (mtf.add, X, Y, np.add),
    "subtract": (mtf.subtract, X, Y, np.subtract),
    "multiply": (mtf.multiply, X, Y, np.multiply),
    "divide": (mtf.divide, X, YPOS, np.divide),
    "floordiv_float": (mtf.floordiv, X * 4, YPOS, np.floor_divide),
    "floordiv_int": (mtf.floordiv, XI, YI, np.floor_divide),
    "mod_float": (mtf.mod, X * 4, YPOS, np.mod),
    "mod_int": (mtf.mod, XI, YI, np.mod),
    "minimum": (mtf.minimum, X, Y, np.minimum),
    "maximum": (mtf.maximum, X, Y, np.maximum),
    "pow": (mtf.pow, POS, Y, np.power),
    "less": (mtf.less, X, Y, np.less),
    "less_equal": (mtf.less_equal, XI, YI, np.less_equal),
    "greater": (mtf.greater, X, Y, np.greater),
    "greater_equal": (mtf.greater_equal, XI, YI, np.greater_equal),
    "equal": (mtf.equal, XI % 3, YI % 3, np.equal),
    "not_equal": (mtf.not_equal, XI % 3, YI % 3, np.not_equal),
    "logical_and": (mtf.logical_and, XB, YB, np.logical_and),
    "logical_or": (mtf.logical_or, XB, YB, np.logical_or),
}
FULL_BINARY = {"add", "mod_int", "less", "logical_and"}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_op_broadcasts_by_name_under_layouts(name):
  fn, xv, yv, ref = BINARY[name]

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, AB)
    y = mtf.import_tf_tensor(mesh, yv, CB)
    out = fn(x, y)
    assert out.shape.dimension_names == ["a", "b", "c"]
    return out
  kw = {} if name in FULL_BINARY else FEW
  n = check_layouts(build, ALL, lambda: ref(*_bin(xv, yv)), **kw)
  assert n >= (25 if name in FULL_BINARY else 12)


def test_binary_ops_with_scalar_on_either_side():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, AB)
    p = mtf.import_tf_tensor(mesh, POS, AB)
    return [mtf.subtract(2.0, x), mtf.divide(1.0, p), mtf.maximum(x, 0.5),
            mtf.less(0.0, x), mtf.pow(2.0, x), mtf.mod(x, 0.75)]
  check_layouts(build, [A, B], lambda: [
      2.0 - X, 1.0 / POS, np.maximum(X, 0.5), 0.0 < X, 2.0 ** X,
      np.mod(X, 0.75)])


def test_operator_overloads():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, AB)
    y = mtf.import_tf_tensor(mesh, YPOS, CB)
    return [x + y, x - y, x * y, x / y, -x, 1.0 + x, 3.0 - x, 2.0 * x,
            1.0 / y, x + 1.0, x - 1.0, x * 0.5, x / 4.0]
  xa, ya = to_abc(X, "ab"), to_abc(YPOS, "cb")
  check_layouts(build, ALL, lambda: [
      xa + ya, xa - ya, xa * ya, xa / ya, -X, 1.0 + X, 3.0 - X, 2.0 * X,
      1.0 / YPOS, X + 1.0, X - 1.0, X * 0.5, X / 4.0], limit=5)


def test_operand_order_gives_first_appearance_dim_order():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.zeros(mesh, AB)
  y = mtf.zeros(mesh, CB)
  assert (x + y).shape.dimension_names == ["a", "b", "c"]
  assert (y + x).shape.dimension_names == ["c", "b", "a"]
  assert mtf.where(mtf.less(y, 0.0), x, 1.0).shape.dimension_names == [
      "c", "b", "a"]


def test_add_n_of_tensors_with_different_dims():
  z = np.arange(8, dtype=np.float32)

  def build(mesh):
    return mtf.add_n([mtf.import_tf_tensor(mesh, X, AB),
                      mtf.import_tf_tensor(mesh, Y, CB),
                      mtf.import_tf_tensor(mesh, z, mtf.Shape([A]))])
  check_layouts(build, ALL, lambda: (to_abc(X, "ab") + to_abc(Y, "cb")
                                     + to_abc(z, "a")))


def test_add_n_of_one_tensor_is_that_tensor():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.zeros(mesh, AB)
  assert mtf.add_n([x]) is x


def test_where_broadcasts_condition_and_branches():
  ya = np.arange(8, dtype=np.float32) * 10

  def build(mesh):
    cond = mtf.import_tf_tensor(mesh, XB, AB)
    x = mtf.import_tf_tensor(mesh, Y, CB)
    y = mtf.import_tf_tensor(mesh, ya, mtf.Shape([A]))
    return [mtf.where(cond, x, y), mtf.where(cond, x, -1.0),
            mtf.where(cond, 2.0, y)]
  c = to_abc(XB, "ab")
  check_layouts(build, ALL, lambda: [
      np.where(c, to_abc(Y, "cb"), to_abc(ya, "a")),
      np.where(c, to_abc(Y, "cb"), -1.0),
      np.where(XB, 2.0, ya[:, None])], limit=8)


def test_elementwise_ops_need_no_communication():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, AB)
    y = mtf.import_tf_tensor(mesh, Y, CB)
    return mtf.tanh(x * y + mtf.exp(x) - y)
  for mesh_shape, layout in [("rows:2;cols:4", "a:rows;b:cols"),
                             ("rows:2;cols:2", "c:rows;a:cols"),
                             ("x:8", "a:x")]:
    _, trace = run(build, mesh_shape, layout)
    assert trace.collectives == []
    # One compute record per op (the two imports are not compute).
    assert len(trace.compute) == 5


def test_elementwise_flops_are_per_device_output_elements():
  def build(mesh):
    return mtf.relu(mtf.import_tf_tensor(mesh, X, AB))
  _, trace = run(build, "rows:2;cols:4", "a:rows;b:cols")
  (rec,) = trace.compute
  assert rec.flops_per_device == (8 // 2) * (4 // 4)
  assert rec.output_bytes_per_device == 4 * 4


def test_meshes_cover_one_two_four_and_eight_devices():
  sizes = sorted({mtf.convert_to_shape(m).size for m in MESHES})
  assert sizes == [1, 2, 4, 8]
