import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

B, V = mtf.Dimension("b", 4), mtf.Dimension("v", 8)
K4, K6 = mtf.Dimension("k", 4), mtf.Dimension("k", 6)
RNG = np.random.RandomState(2)
# Few distinct values, so that ties are everywhere: the lowest index wins.
XV = RNG.randint(-2, 3, size=(4, 8)).astype(np.float32)   # [b, v]


def _topk_ref(x, k):
  """Values sorted decreasingly, equal values in increasing index order."""
  idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
  return np.take_along_axis(x, idx, -1), idx.astype(np.int32)


def _import(mesh, value, shape):
  return mtf.import_tf_tensor(mesh, value, mtf.Shape(shape))


# --- top_k, top_1, argmax -----------------------------------------------------
def test_top_k_top_1_argmax_break_ties_like_one_device_under_every_layout():
  def build(mesh):
    x = _import(mesh, XV, [B, V])
    v, i = mtf.top_k(x, V, K4)
    v1, i1 = mtf.top_1(x, "v")
    return [v, i, v1, i1, mtf.argmax(x, V)]

  def ref():
    v, i = _topk_ref(XV, 4)
    return [v, i, v[:, 0], i[:, 0], i[:, 0]]
  assert check_layouts(build, [B, V, K4], ref, exact=True) > 20


def test_top_k_larger_than_a_local_slice_and_reduced_dim_not_last():
  xt = np.ascontiguousarray(XV.T)  # [v, b]

  def build(mesh):
    v, i = mtf.top_k(_import(mesh, xt, [V, B]), V, K6)
    assert v.shape == mtf.Shape([B, K6])
    return [v, i]
  # On x:8 with v:x each processor holds one entry of v and k = 6.
  assert check_layouts(build, [B, V], lambda: _topk_ref(XV, 6),
                       exact=True) > 8


def test_top_k_with_k_dim_named_like_reduced_dim_is_a_sort():
  def build(mesh):
    return list(mtf.top_k(_import(mesh, XV, [B, V]), V, V))
  check_layouts(build, [B, V], lambda: _topk_ref(XV, 8), exact=True,
                meshes=["x:2", "rows:2;cols:4"])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32",
                                   "int64", "int8"])
def test_top_k_of_every_dtype_over_a_split_dim(dtype):
  # Negative values, -0.0 and repeats all survive packing into int bits.
  x = np.array([[3, -1, -0.0, 2.5, -7, 3, 0, 2.5]] * 2, np.float64)
  x[1] = -x[1]
  if dtype.startswith("int"):
    x = np.trunc(x)

  def build(mesh):
    t = mtf.cast(_import(mesh, x.astype(np.float32), [mtf.Dimension("b", 2),
                                                      V]), dtype)
    v, i = mtf.top_k(t, V, K4)
    return [mtf.cast(v, "float64"), i]
  ref_v, ref_i = _topk_ref(x, 4)
  for mesh_shape, layout in [("x:8", "v:x"), ("rows:2;cols:4", "v:cols;b:rows"),
                             ("all:1", "")]:
    (v, i), _ = run(build, mesh_shape, layout)
    np.testing.assert_array_equal(v, ref_v)
    np.testing.assert_array_equal(i, ref_i)


def test_top_k_over_a_split_dim_records_one_allconcat():
  def build(mesh):
    return list(mtf.top_k(_import(mesh, XV, [B, V]), V, K4, name="tk"))
  (v, i), trace = run(build, "rows:2;cols:4", "v:cols;b:rows")
  ref_v, ref_i = _topk_ref(XV, 4)
  np.testing.assert_array_equal(v, ref_v)
  np.testing.assert_array_equal(i, ref_i)
  # Each of 4 processors on cols holds v=8/4=2 candidates (k=4 > 2) for
  # b=4/2 rows, packed as (value bits, index) int32 pairs.
  assert [(c.op_name,) + c.key() for c in trace.collectives] == [
      ("tk", "allconcat", ("cols",), 4, 2 * 2 * 2 * 4, None)]


def test_top_1_over_a_split_dim_records_one_allconcat():
  def build(mesh):
    return list(mtf.top_1(_import(mesh, XV, [B, V]), V))
  _, trace = run(build, "x:8", "v:x")
  assert [c.key() for c in trace.collectives] == [
      ("allconcat", ("x",), 8, 4 * 1 * 2 * 4, None)]


def test_top_k_with_only_k_dim_split_needs_no_communication():
  def build(mesh):
    return list(mtf.top_k(_import(mesh, XV, [B, V]), V, K4))
  (v, _), trace = run(build, "x:2", "k:x")
  np.testing.assert_array_equal(v, _topk_ref(XV, 4)[0])
  assert trace.collectives == []


def test_top_k_rejects_bad_inputs():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.zeros(mesh, [B, V], name="x")
  with pytest.raises(mtf.ShapeError, match=r"top_k: k_dim k=9 asks for 9 "
                     r"entries but reduced_dim v=8 of x:0 has 8"):
    mtf.top_k(x, V, mtf.Dimension("k", 9))
  with pytest.raises(mtf.ShapeError, match=r"k_dim b=4 is already a dim"):
    mtf.top_k(x, V, B)
  with pytest.raises(mtf.ShapeError, match=r"reuses the name of reduced_dim "
                     r"v=8"):
    mtf.top_k(x, V, mtf.Dimension("v", 2))
  with pytest.raises(mtf.ShapeError, match="k_dim must be a Dimension"):
    mtf.top_k(x, V, None)
  with pytest.raises(mtf.UnknownNameError, match=r"reduced_dim 'w' is not a "
                     r"dim of x:0 .*\['b', 'v'\]"):
    mtf.argmax(x, "w")
  with pytest.raises(mtf.UnknownNameError, match=r"reduced_dim v=3 is not"):
    mtf.top_1(x, mtf.Dimension("v", 3))
  xb = mtf.zeros(mesh, [B, V], dtype="bool", name="xb")
  with pytest.raises(mtf.DTypeError, match=r"top_1: xb:0 has dtype bool"):
    mtf.top_1(xb, V)
  with pytest.raises(mtf.ShapeError, match="expected an mtf Tensor"):
    mtf.top_1(XV, V)
  assert [op.name for op in graph.operations] == ["x", "xb"]


def test_top_k_records_its_gradient_attributes():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  v, i = mtf.top_k(mtf.zeros(mesh, [B, V]), V, K4)
  op = v.operation
  assert isinstance(op, mtf.TopKOperation) and i.operation is op
  assert (op.reduced_dim, op.k_dim, op.k) == (V, K4, 4)
  assert i.dtype == "int32" and op.unsplittable_dims == frozenset()
  v1, _ = mtf.top_1(mtf.zeros(mesh, [B, V]), V)
  assert (v1.operation.k_dim, v1.operation.k, v1.shape) == (None, 1,
                                                            mtf.Shape([B]))


# --- cumsum -------------------------------------------------------------------
def test_cumsum_inclusive_and_exclusive_under_every_layout():
  xi = XV.astype(np.int32)

  def build(mesh):
    x = _import(mesh, XV, [B, V])
    n = _import(mesh, xi, [B, V])
    return [mtf.cumsum(x, V), mtf.cumsum(x, "v", exclusive=True),
            mtf.cumsum(n, V), mtf.cumsum(n, B, exclusive=True)]

  def ref():
    c, cb = np.cumsum(XV, 1), np.cumsum(xi, 0)
    return [c, c - XV, np.cumsum(xi, 1), cb - xi]
  assert check_layouts(build, [B, V], ref) > 8


def test_cumsum_over_a_split_dim_records_one_allconcat_of_slice_totals():
  def build(mesh):
    return mtf.cumsum(_import(mesh, XV, [B, V]), V, name="cs")
  (v,), trace = run(build, "rows:2;cols:4", "v:cols;b:rows")
  np.testing.assert_allclose(v, np.cumsum(XV, 1))
  # Per-processor totals: b=4/2 rows x 1 float32.
  assert [(c.op_name,) + c.key() for c in trace.collectives] == [
      ("cs", "allconcat", ("cols",), 4, 2 * 1 * 4, None)]
  (v,), trace = run(build, "rows:2;cols:4", "b:rows")
  assert trace.collectives == []


def test_cumsum_rejects_bad_inputs_and_records_attributes():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.zeros(mesh, [B, V], name="x")
  with pytest.raises(mtf.UnknownNameError, match=r"cumsum: dim 'q' is not a "
                     r"dim of x"):
    mtf.cumsum(x, "q")
  with pytest.raises(mtf.DTypeError, match=r"cumsum: xb:0 has dtype bool"):
    mtf.cumsum(mtf.zeros(mesh, [V], dtype="bool", name="xb"), V)
  op = mtf.cumsum(x, V, exclusive=True).operation
  assert isinstance(op, mtf.CumsumOperation)
  assert (op.dim, op.exclusive) == (V, True)
