import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

B, S = mtf.Dimension("b", 4), mtf.Dimension("s", 2)
V, M = mtf.Dimension("v", 8), mtf.Dimension("m", 2)
RNG = np.random.RandomState(1)
WV = RNG.randn(8, 2).astype(np.float32)          # [v, m]
WBV = RNG.randn(4, 8, 2).astype(np.float32)      # [b, v, m]
# Includes an out-of-range (9) and a negative (-1) index: both give zeros.
IV = np.array([[3, 0], [7, 9], [-1, 5], [5, 2]], np.int32)  # [b, s]
VALID = (IV >= 0) & (IV < 8)
SAFE = np.clip(IV, 0, 7)


def _one_hot_ref(on=1.0, off=0.0, dtype=np.float32):
  out = np.full((4, 2, 8), off, dtype)
  for (i, j), c in np.ndenumerate(IV):
    if 0 <= c < 8:
      out[i, j, c] = on
  return out


def _import(mesh, value, shape):
  return mtf.import_tf_tensor(mesh, value, mtf.Shape(shape))


# --- one_hot -----------------------------------------------------------------
def test_one_hot_matches_numpy_under_every_layout():
  def build(mesh):
    i = _import(mesh, IV, [B, S])
    return [mtf.one_hot(i, V),
            mtf.one_hot(i, V, on_value=5, off_value=-1, dtype="int32")]
  n = check_layouts(build, [B, S, V],
                    lambda: [_one_hot_ref(), _one_hot_ref(5, -1, np.int32)])
  assert n > 20


def test_one_hot_needs_no_communication_when_the_class_dim_is_split():
  def build(mesh):
    return mtf.one_hot(_import(mesh, IV, [B, S]), V)
  (v,), trace = run(build, "rows:2;cols:4", "v:cols;b:rows")
  np.testing.assert_array_equal(v, _one_hot_ref())
  assert trace.collectives == []


def test_one_hot_rejects_float_indices_and_a_reused_dim():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  f = mtf.zeros(mesh, [B], name="fidx")
  with pytest.raises(mtf.DTypeError, match=r"one_hot: indices fidx.* float32"
                     r".*to_int32"):
    mtf.one_hot(f, V)
  i = mtf.zeros(mesh, [B, V], dtype="int32")
  with pytest.raises(mtf.ShapeError, match=r"output dim v=8 is already a dim"
                     r".*new name"):
    mtf.one_hot(i, V)
  with pytest.raises(mtf.ShapeError, match="expects an mtf Tensor"):
    mtf.one_hot([1, 2], V)


# --- gather ------------------------------------------------------------------
def _gather_ref():
  return np.where(VALID[..., None], WV[SAFE], 0.0).astype(np.float32)


def test_gather_embedding_lookup_under_every_layout():
  def build(mesh):
    w = _import(mesh, WV, [V, M])
    return mtf.gather(w, _import(mesh, IV, [B, S]), V)
  assert check_layouts(build, [B, S, V, M], _gather_ref, limit=12) > 20


def test_gather_with_batch_dims_and_output_order_under_every_layout():
  def ref():
    g = WBV[np.arange(4)[:, None], SAFE]  # [b, s, m]
    g = np.where(VALID[..., None], g, 0.0).astype(np.float32)
    return [g, g.transpose(2, 0, 1)]

  def build(mesh):
    w = _import(mesh, WBV, [B, V, M])
    i = _import(mesh, IV, [B, S])
    g = mtf.gather(w, i, "v")
    assert g.shape == mtf.Shape([B, S, M])
    return [g, mtf.gather(w, i, V, output_shape=[M, B, S])]
  assert check_layouts(build, [B, S, V, M], ref, limit=12) > 20


def test_gather_of_split_dim_records_one_lazy_sum_allreduce():
  def build(mesh):
    w = _import(mesh, WV, [V, M])
    return mtf.gather(w, _import(mesh, IV, [B, S]), V, name="emb")
  (v,), trace = run(build, "rows:2;cols:4", "v:cols;b:rows")
  np.testing.assert_allclose(v, _gather_ref())
  # Output slice: b=4/2, s=2, m=2, float32.
  assert [c.key() for c in trace.collectives] == [
      ("allreduce", ("cols",), 4, 2 * 2 * 2 * 4, "SUM")]
  assert trace.collectives[0].source_op == "emb"


def test_gather_partial_sums_merge_with_a_following_add():
  def build(mesh):
    w = _import(mesh, WV, [V, M])
    i = _import(mesh, IV, [B, S])
    return mtf.gather(w, i, V) + mtf.gather(w * 2.0, i, V)
  (v,), trace = run(build, "x:8", "v:x")
  np.testing.assert_allclose(v, 3 * _gather_ref(), rtol=1e-6)
  assert len(trace.collectives) == 1


def test_gather_when_indices_and_weights_split_on_the_same_axis():
  def build(mesh):
    w = _import(mesh, WV, [V, M])
    return mtf.gather(w, _import(mesh, IV, [B, S]), V)
  (v,), trace = run(build, "rows:2;cols:4", "v:cols;b:cols;m:rows")
  np.testing.assert_allclose(v, _gather_ref())
  # Indices [b=4/4, s=2] int32 gathered whole, then the [b=4, s=2, m=2/2]
  # partial sums are all-reduced and split again.
  assert [c.key() for c in trace.collectives] == [
      ("allconcat", ("cols",), 4, 1 * 2 * 4, None),
      ("allreduce", ("cols",), 4, 4 * 2 * 1 * 4, "SUM")]


def test_gather_of_bool_weights_and_of_a_python_int_index():
  wb = WV > 0

  def build(mesh):
    w = _import(mesh, WV, [V, M])
    return [mtf.gather(mtf.greater(w, 0.0), _import(mesh, IV, [B, S]), V),
            mtf.gather(w, 6, V)]
  n = check_layouts(build, [B, S, V, M],
                    lambda: [np.where(VALID[..., None], wb[SAFE], False),
                             WV[6]], limit=6)
  assert n > 10


def test_gather_rejects_bad_inputs():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.zeros(mesh, [V, M], name="w")
  i = mtf.zeros(mesh, [B], dtype="int32", name="i")
  with pytest.raises(mtf.UnknownNameError,
                     match=r"gather: dim 'q' is not a dim of w.*\['v', 'm'\]"):
    mtf.gather(w, i, "q")
  with pytest.raises(mtf.UnknownNameError, match=r"dim v=9 is not a dim"):
    mtf.gather(w, i, mtf.Dimension("v", 9))
  with pytest.raises(mtf.DTypeError, match=r"indices f.*float32"):
    mtf.gather(w, mtf.zeros(mesh, [B], name="f"), V)
  with pytest.raises(mtf.ShapeError, match=r"has the gathered dim 'v'"):
    mtf.gather(w, mtf.zeros(mesh, [V], dtype="int32"), V)
  with pytest.raises(mtf.ShapeError, match=r"dim 'm' of indices .* size 3 "
                     r"but size 2 in weights w"):
    mtf.gather(w, mtf.zeros(mesh, [mtf.Dimension("m", 3)], dtype="int32"), V)
  with pytest.raises(mtf.ShapeError, match=r"output_shape .* must hold "
                     r"exactly the dims"):
    mtf.gather(w, i, V, output_shape=[B])
  with pytest.raises(mtf.ShapeError, match="indices must be an mtf Tensor or"):
    mtf.gather(w, [1, 2], V)
  with pytest.raises(mtf.ShapeError, match="weights must be an mtf Tensor"):
    mtf.gather(WV, i, V)
  # Failed builds leave nothing behind in the graph.
  assert [op.name for op in graph.operations] == ["w", "i", "f", "zeros",
                                                  "zeros_1"]


def test_gather_records_its_gradient_attributes():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.zeros(mesh, [B, V, M])
  i = mtf.zeros(mesh, [B, S], dtype="int32")
  op = mtf.gather(w, i, V).operation
  assert isinstance(op, mtf.GatherOperation)
  assert (op.dim, op.weights, op.indices) == (V, w, i)
  assert op.batch_dim_names == ("b",)
  assert op.unsplittable_dims == frozenset()
