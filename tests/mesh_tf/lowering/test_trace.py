"""The collective trace of known cases: kinds, mesh axes, group sizes,
bytes per device (the size of each participant's input slice) and FLOPs."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import run

B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 4), mtf.Dimension("n", 8)
_rng = np.random.RandomState(3)
XV = _rng.randn(8, 4).astype(np.float32)
WV = _rng.randn(4, 8).astype(np.float32)
YV = _rng.randn(8, 8).astype(np.float32)


def _xw(mesh):
  return (mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]), name="x"),
          mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]), name="w"))


def _keys(trace):
  return [c.key() for c in trace.collectives]


def _shape_trace(build, mesh_shape, layout):
  """The trace on the shape-only backend, forcing the outputs."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  outs = build(mesh)
  outs = outs if isinstance(outs, list) else [outs]
  impl = mtf.ShapeMeshImpl(mesh_shape, layout)
  lowering = mtf.Lowering(graph, {mesh: impl})
  for t in outs:
    lowering.laid_out(t)
  return impl.trace


@pytest.mark.parametrize("layout,bytes_", [
    ("k:cols", 8 * 8 * 4),                 # output replicated
    ("k:cols;b:rows", 4 * 8 * 4),          # output split on rows: half
])
def test_einsum_over_split_dim_is_one_sum_allreduce(layout, bytes_):
  def build(mesh):
    x, w = _xw(mesh)
    return mtf.einsum([x, w], reduced_dims=[K], name="mm")
  (v,), trace = run(build, "rows:2;cols:4", layout)
  np.testing.assert_allclose(v, XV @ WV, rtol=1e-5, atol=1e-5)
  assert _keys(trace) == [("allreduce", ("cols",), 4, bytes_, "SUM")]
  (rec,) = trace.collectives
  assert rec.source_op == "mm"  # forced later, attributed to the einsum
  assert rec.op_name == "<outside op>"  # forced by the export, outside ops


def test_einsum_flops_are_twice_the_product_of_slice_sizes():
  def build(mesh):
    x, w = _xw(mesh)
    return mtf.einsum([x, w], reduced_dims=[K], name="mm")
  _, trace = run(build, "rows:2;cols:4", "k:cols;b:rows")
  (mm,) = [c for c in trace.compute if c.op_name == "mm"]
  assert mm.flops_per_device == 2 * (8 // 2) * (4 // 4) * 8
  assert mm.output_bytes_per_device == (8 // 2) * 8 * 4


def test_einsum_over_two_split_dims_reduces_over_both_axes_at_once():
  j = mtf.Dimension("j", 2)
  xv = _rng.randn(8, 4, 2).astype(np.float32)
  wv = _rng.randn(4, 2, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([B, K, j]))
    w = mtf.import_tf_tensor(mesh, wv, mtf.Shape([K, j, N]))
    return mtf.einsum([x, w], reduced_dims=[K, j])
  (v,), trace = run(build, "rows:2;cols:4", "j:rows;k:cols")
  np.testing.assert_allclose(v, np.einsum("bkj,kjn->bn", xv, wv), rtol=1e-5,
                             atol=1e-5)
  assert _keys(trace) == [("allreduce", ("rows", "cols"), 8, 8 * 8 * 4,
                           "SUM")]


def test_einsum_with_unsplit_reduced_dim_needs_no_collective():
  def build(mesh):
    x, w = _xw(mesh)
    return mtf.einsum([x, w], reduced_dims=[K])
  for layout in ["b:rows;n:cols", "b:cols", "n:rows", ""]:
    _, trace = run(build, "rows:2;cols:4", layout)
    assert trace.collectives == [], layout


def test_output_dim_on_the_axis_of_a_reduced_dim_is_gathered_then_split():
  # x[b, k] with k on cols, y[b, n] with n on cols; out[n] sums out b and k.
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    y = mtf.import_tf_tensor(mesh, YV, mtf.Shape([B, N]))
    return mtf.einsum([x, y], mtf.Shape([N]))
  (v,), trace = run(build, "rows:2;cols:4", "k:cols;n:cols")
  np.testing.assert_allclose(v, np.einsum("bk,bn->n", XV, YV), rtol=1e-5,
                             atol=1e-5)
  assert _keys(trace) == [
      ("allconcat", ("cols",), 4, 8 * 2 * 4, None),   # y's n gathered
      ("allreduce", ("cols",), 4, 8 * 4, "SUM"),      # full out[n]
  ]


def test_einsum_plus_einsum_merges_into_one_allreduce():
  def build(mesh):
    x, w = _xw(mesh)
    a = mtf.einsum([x, w], reduced_dims=[K])
    b = mtf.einsum([x * 2.0, w], reduced_dims=[K])
    c = mtf.einsum([x, w * 3.0], reduced_dims=[K])
    return a + b - c
  (v,), trace = run(build, "rows:2;cols:4", "k:cols;b:rows")
  np.testing.assert_allclose(v, 0 * XV @ WV, atol=1e-4)
  assert _keys(trace) == [("allreduce", ("cols",), 4, 4 * 8 * 4, "SUM")]


def test_sums_over_different_axes_do_not_merge():
  j = mtf.Dimension("j", 2)
  zv = _rng.randn(8, 2).astype(np.float32)
  vv = _rng.randn(2, 8).astype(np.float32)

  def build(mesh):
    x, w = _xw(mesh)
    z = mtf.import_tf_tensor(mesh, zv, mtf.Shape([B, j]))
    v = mtf.import_tf_tensor(mesh, vv, mtf.Shape([j, N]))
    return (mtf.einsum([x, w], reduced_dims=[K])
            + mtf.einsum([z, v], reduced_dims=[j]))
  (v,), trace = run(build, "rows:2;cols:4", "k:cols;j:rows")
  np.testing.assert_allclose(v, XV @ WV + zv @ vv, rtol=1e-5, atol=1e-5)
  assert sorted(_keys(trace)) == [
      ("allreduce", ("cols",), 4, 8 * 8 * 4, "SUM"),
      ("allreduce", ("rows",), 2, 8 * 8 * 4, "SUM")]


def test_unused_partial_sum_is_never_reduced():
  def build(mesh):
    x, w = _xw(mesh)
    mtf.einsum([x, w], reduced_dims=[K])  # nobody reads it
    return mtf.relu(x)
  trace = _shape_trace(build, "rows:2;cols:4", "k:cols")
  assert trace.collectives == []


def test_lazy_allreduce_is_recorded_at_its_first_reader():
  def build(mesh):
    x, w = _xw(mesh)
    y = mtf.einsum([x, w], reduced_dims=[K], name="mm")
    return mtf.relu(y, name="act") + mtf.exp(y, name="ex")
  trace = _shape_trace(build, "rows:2;cols:4", "k:cols")
  (rec,) = trace.collectives  # both readers share one reduction
  assert (rec.op_name, rec.source_op) == ("act", "mm")
  assert list(trace.by_op()) == ["act"]


@pytest.mark.parametrize("fn,reduction,itemsize", [
    (mtf.reduce_max, "MAX", 4), (mtf.reduce_min, "MIN", 4),
    (mtf.reduce_sum, "SUM", 4),
    # Booleans all-reduce as int32: ANY as MAX, ALL as MIN.
    (mtf.reduce_any, "MAX", 4), (mtf.reduce_all, "MIN", 4)])
def test_reduction_over_split_dim_records_its_allreduce(fn, reduction,
                                                        itemsize):
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    if fn in (mtf.reduce_any, mtf.reduce_all):
      x = mtf.greater(x, 0.0)
    return fn(x, reduced_dim=B)
  (v,), trace = run(build, "rows:2;cols:4", "b:cols;k:rows")
  ref = {"MAX": XV.max(0), "MIN": XV.min(0), "SUM": XV.sum(0)}[reduction]
  if fn is mtf.reduce_any:
    ref = (XV > 0).any(0)
  elif fn is mtf.reduce_all:
    ref = (XV > 0).all(0)
  np.testing.assert_allclose(v, ref, rtol=1e-5, atol=1e-5)
  assert _keys(trace) == [("allreduce", ("cols",), 4, (4 // 2) * itemsize,
                           reduction)]


def test_reduction_over_two_split_dims():
  def build(mesh):
    return mtf.reduce_max(mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K])))
  (v,), trace = run(build, "rows:2;cols:4", "b:rows;k:cols")
  assert v == XV.max()
  assert _keys(trace) == [("allreduce", ("rows", "cols"), 8, 4, "MAX")]


def test_softmax_over_split_dim_needs_a_max_and_a_sum():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, YV, mtf.Shape([B, N]))
    return mtf.softmax(x, N)
  (v,), trace = run(build, "x:8", "n:x")
  e = np.exp(YV - YV.max(1, keepdims=True))
  np.testing.assert_allclose(v, e / e.sum(1, keepdims=True), rtol=1e-5)
  assert _keys(trace) == [("allreduce", ("x",), 8, 8 * 4, "MAX"),
                          ("allreduce", ("x",), 8, 8 * 4, "SUM")]


def test_size_one_axes_never_communicate():
  def build(mesh):
    x, w = _xw(mesh)
    return mtf.reduce_sum(mtf.einsum([x, w], reduced_dims=[K]),
                          reduced_dim=B)
  trace = _shape_trace(build, "rows:1;cols:8", "k:rows")
  assert trace.collectives == []


def test_trace_totals_and_variables():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    w = mtf.get_variable(mesh, "w", mtf.Shape([K, N]), initializer=0.5)
    return mtf.reduce_sum(mtf.einsum([x, w], reduced_dims=[K]),
                          reduced_dim=B)
  _, trace = run(build, "rows:2;cols:4", "b:rows;k:cols")
  assert trace.variables == {"w": (4 // 4) * 8 * 4}
  assert trace.total_collective_bytes == sum(
      c.bytes_per_device for c in trace.collectives)
  # einsum partial sums over cols, then b over rows: lazy sums over
  # different axes stay separate.
  assert _keys(trace) == [("allreduce", ("cols",), 4, 4 * 8 * 4, "SUM"),
                          ("allreduce", ("rows",), 2, 8 * 4, "SUM")]
  assert trace.total_flops_per_device == sum(
      c.flops_per_device for c in trace.compute)
  assert repr(trace) == (f"CollectiveTrace(2 collectives, {len(trace.compute)}"
                         " compute records, 1 variables)")
