import numpy as np

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 4), mtf.Dimension("n", 8)
RNG = np.random.RandomState(0)
XV = RNG.randn(8, 4).astype(np.float32)
WV = RNG.randn(4, 8).astype(np.float32)


def test_einsum_matches_numpy_under_every_layout():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]))
    return mtf.einsum([x, w], reduced_dims=[K])
  assert check_layouts(build, [B, K, N], lambda: XV @ WV) > 20


def test_einsum_over_split_dim_records_one_sum_allreduce():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]))
    return mtf.einsum([x, w], reduced_dims=[K])
  _, trace = run(build, "rows:2;cols:4", "k:cols")
  assert [c.key() for c in trace.collectives] == [
      ("allreduce", ("cols",), 4, 8 * 8 * 4, "SUM")]


def test_einsum_plus_einsum_allreduces_once():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]))
    return mtf.einsum([x, w], reduced_dims=[K]) + mtf.einsum(
        [x, w * 2.0], reduced_dims=[K])
  (v,), trace = run(build, "rows:2;cols:4", "k:cols;b:rows")
  np.testing.assert_allclose(v, 3 * XV @ WV, rtol=1e-5)
  assert len(trace.collectives) == 1


def test_large_allreduce_matches():
  big = mtf.Dimension("n", 1 << 14)
  xv = RNG.randn(8, 4).astype(np.float32)
  wv = RNG.randn(4, 1 << 14).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([B, K]))
    w = mtf.import_tf_tensor(mesh, wv, mtf.Shape([K, big]))
    y = mtf.einsum([x, w], reduced_dims=[K])
    return mtf.reduce_max(y, reduced_dim=B)
  (v,), trace = run(build, "rows:2;cols:4", "k:cols")
  assert max(c.bytes_per_device for c in trace.collectives) >= 256 * 1024
  np.testing.assert_allclose(v, (xv @ wv).max(0), rtol=1e-5, atol=1e-5)


def test_scalar_import_and_feed():
  def build(mesh):
    s = mtf.import_tf_tensor(mesh, np.float32(3.0), mtf.Shape([]))
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    return x * s
  (v,), _ = run(build, "rows:2;cols:4", "b:rows;k:cols")
  np.testing.assert_allclose(v, 3 * XV)


def test_reduced_dims_of_different_inputs_on_one_axis():
  # x[b,d] and w[f,d] summed over b and f: with b and f on the same axis a
  # device holds x[b_p] and w[f_p] only, so one of them must be gathered.
  F = mtf.Dimension("f", 8)
  D = mtf.Dimension("d", 3)
  xv = RNG.randn(8, 3).astype(np.float32)
  wv = RNG.randn(8, 3).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([B, D]))
    w = mtf.import_tf_tensor(mesh, wv, mtf.Shape([F, D]))
    return mtf.einsum([x, w], output_shape=[D])
  expected = xv.sum(0) * wv.sum(0)
  (v,), trace = run(build, "c:8", "b:c;f:c")
  np.testing.assert_allclose(v, expected, rtol=1e-5)
  assert [c.kind for c in trace.collectives] == ["allconcat", "allreduce"]
  assert check_layouts(build, [B, F, D], lambda: expected) > 10
