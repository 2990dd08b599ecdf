import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.lowering import random_kernels
from tests.layout_harness import check_layouts, run

A, B, C = mtf.Dimension("a", 4), mtf.Dimension("b", 8), mtf.Dimension("c", 2)
# ~100k samples for the statistics: 256 x 400.
BIG = mtf.Shape([mtf.Dimension("r", 256), mtf.Dimension("q", 400)])


def _np(shape, seed, **kw):
  return random_kernels.numpy_random(tuple(shape.to_integer_list()), seed,
                                     **kw)


def test_random_tensors_are_the_same_on_every_layout_and_match_numpy():
  shape = mtf.Shape([A, B, C])

  def build(mesh):
    return [mtf.random_uniform(mesh, shape, minval=-1.0, maxval=3.0, seed=5),
            mtf.random_normal(mesh, shape, mean=2.0, stddev=0.5, seed=5)]

  def ref():
    return [_np(shape, 5, minval=-1.0, maxval=3.0),
            _np(shape, 5, kind="normal", mean=2.0, stddev=0.5)]
  assert check_layouts(build, [A, B, C], ref, rtol=1e-6, atol=1e-6,
                       limit=6) > 15


def test_integer_and_float64_random_tensors_match_numpy_on_split_layouts():
  shape = mtf.Shape([A, B, C])

  def build(mesh):
    return [mtf.random_uniform(mesh, shape, minval=-3, maxval=4,
                               dtype="int32", seed=9),
            mtf.random_normal(mesh, shape, dtype="float64", seed=11)]
  ints = np.floor(_np(shape, 9, minval=-3.0, maxval=4.0, dtype="float64"))
  normal = _np(shape, 11, kind="normal", dtype="float64")
  for mesh_shape, layout in [("all:1", ""), ("x:8", "b:x"),
                             ("rows:2;cols:4", "a:rows;b:cols"),
                             ("rows:2;cols:2", "c:rows;a:cols")]:
    (i, n), _ = run(build, mesh_shape, layout)
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i, ints.astype(np.int32))
    np.testing.assert_allclose(n, normal, rtol=1e-12)


def test_no_element_is_the_same_for_every_seed():
  # Regression: element 0 used to hash to 0 whatever the seed.
  firsts = [random_kernels.numpy_random((2,), seed)[0] for seed in range(64)]
  assert len(set(firsts)) == 64
  normals = random_kernels.numpy_random((64,), 0, kind="normal")
  assert np.abs(normals).max() < 4.0


def test_random_uniform_and_normal_statistics():
  def build(mesh):
    return [mtf.random_uniform(mesh, BIG, minval=-2.0, maxval=3.0, seed=1),
            mtf.random_normal(mesh, BIG, mean=1.0, stddev=2.0, seed=2),
            mtf.random_uniform(mesh, BIG, minval=-3, maxval=4, dtype="int32",
                               seed=3)]
  (u, n, k), _ = run(build, "rows:2;cols:4", "r:rows;q:cols")
  assert u.shape == (256, 400) and u.dtype == np.float32
  assert -2.0 <= u.min() and u.max() < 3.0
  assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - 5 / 12 ** 0.5) < 0.02
  assert abs(n.mean() - 1.0) < 0.03 and abs(n.std() - 2.0) < 0.03
  # ~68.3% within one stddev.
  assert abs(np.mean(np.abs(n - 1.0) < 2.0) - 0.683) < 0.01
  assert set(np.unique(k)) == set(range(-3, 4))
  counts = np.bincount(k.ravel() + 3) / k.size
  np.testing.assert_allclose(counts, 1 / 7, atol=0.01)
  # Neighbouring elements are not correlated.
  assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.02


def test_seeds_and_names():
  def build(mesh):
    return [mtf.random_uniform(mesh, [A, B], seed=1),
            mtf.random_uniform(mesh, [A, B], seed=2),
            mtf.random_uniform(mesh, [A, B], seed=1),
            mtf.random_uniform(mesh, [A, B], seed=None, name="noise"),
            mtf.random_uniform(mesh, [A, B], seed=None, name="noise")]
  (s1, s2, s1b, n1, n2), _ = run(build, "x:2", "a:x")
  np.testing.assert_array_equal(s1, s1b)
  assert not np.any(s1 == s2)
  # seed=None: a seed from the op's unique name ("noise", "noise_1").
  assert not np.any(n1 == n2)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  op = mtf.random_normal(mesh, [A], seed=None, name="noise").operation
  assert isinstance(op, mtf.RandomOperation)
  assert (op.kind, op.params) == ("normal", {"mean": 0.0, "stddev": 1.0})
  assert isinstance(op.seed, int) and op.inputs == []
  np.testing.assert_array_equal(run(build, "all:1", "")[0][3], _np(
      mtf.Shape([A, B]), op.seed))


def test_random_ops_cost_compute_only():
  def build(mesh):
    return mtf.random_normal(mesh, [A, B, C], seed=0, name="rn")
  _, trace = run(build, "rows:2;cols:4", "b:cols;a:rows")
  assert trace.collectives == []
  # Each device makes its 2 x 2 x 2 float32 slice.
  assert [(r.op_name, r.output_bytes_per_device) for r in trace.compute
          if r.op_name == "rn"] == [("rn", 8 * 4)]


def test_random_ops_reject_bad_arguments():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  with pytest.raises(mtf.ShapeError, match=r"maxval=1\.0 must be greater "
                     r"than minval=2\.0"):
    mtf.random_uniform(mesh, [A], minval=2.0, maxval=1.0)
  with pytest.raises(mtf.DTypeError, match="random_uniform: dtype bool"):
    mtf.random_uniform(mesh, [A], dtype="bool")
  with pytest.raises(mtf.DTypeError, match="random_normal: dtype int32 is "
                     "not a float"):
    mtf.random_normal(mesh, [A], dtype="int32")
  with pytest.raises(mtf.ShapeError, match=r"stddev=-1\.0 must be "
                     "non-negative"):
    mtf.random_normal(mesh, [A], stddev=-1.0)
  with pytest.raises(mtf.MtfError, match=r"seed must be a Python int or None,"
                     r" got 1\.5"):
    mtf.random_normal(mesh, [A], seed=1.5)
  with pytest.raises(mtf.ParseError):
    mtf.random_uniform(mesh, "a:x")
  assert mesh.graph.operations == []


# --- dropout ------------------------------------------------------------------
XV = np.random.RandomState(3).randn(4, 8, 2).astype(np.float32)


def _dropout_ref(x, keep_prob, noise_dims, seed):
  """The mask is uniform(noise_shape, seed) < keep_prob, broadcast by name."""
  u = _np(mtf.Shape(noise_dims), seed)
  names = [d.name for d in noise_dims]
  order = [n for n in "abc" if n in names]
  u = u.transpose([names.index(n) for n in order])
  u = u.reshape([d.size if d.name in names else 1 for d in (A, B, C)])
  keep = (u < np.float32(keep_prob)).astype(np.float32)
  return x * (keep * np.float32(1.0 / keep_prob))


def test_dropout_mask_is_the_same_on_every_layout():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([A, B, C]))
    return [mtf.dropout(x, rate=0.3, seed=4),
            mtf.dropout(x, keep_prob=0.5, noise_shape=[C, A], seed=6)]
  n = check_layouts(build, [A, B, C],
                    lambda: [_dropout_ref(XV, 0.7, [A, B, C], 4),
                             _dropout_ref(XV, 0.5, [C, A], 6)], limit=6)
  assert n > 15


def test_dropout_statistics_and_identity_cases():
  def build(mesh):
    x = mtf.ones(mesh, BIG)
    return [mtf.dropout(x, rate=0.25, seed=8),
            mtf.dropout(x, keep_prob=1.0),
            mtf.dropout(x, rate=0.0)]
  (d, same, same0), _ = run(build, "x:8", "q:x")
  kept = d != 0
  assert abs(kept.mean() - 0.75) < 0.01
  np.testing.assert_allclose(d[kept], 1 / 0.75, rtol=1e-6)
  assert abs(d.mean() - 1.0) < 0.02
  np.testing.assert_array_equal(same, 1.0)
  np.testing.assert_array_equal(same0, 1.0)


def test_dropout_without_dropping_returns_its_input():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, [A])
  assert mtf.dropout(x, keep_prob=1.0) is x
  assert mtf.dropout(x, rate=0.0) is x


def test_dropout_rejects_bad_arguments():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, [A, B], name="x")
  with pytest.raises(mtf.MtfError, match="exactly one of keep_prob and rate"):
    mtf.dropout(x)
  with pytest.raises(mtf.MtfError, match="exactly one of keep_prob and rate"):
    mtf.dropout(x, keep_prob=0.5, rate=0.5)
  with pytest.raises(mtf.ShapeError, match=r"rate=1\.0 must be in \[0, 1\)"):
    mtf.dropout(x, rate=1.0)
  with pytest.raises(mtf.ShapeError, match=r"keep_prob=0 must be in"):
    mtf.dropout(x, keep_prob=0)
  with pytest.raises(mtf.ShapeError, match=r"noise_shape dim c=2 is not a dim "
                     r"of x:0"):
    mtf.dropout(x, rate=0.1, noise_shape=[A, C])
  with pytest.raises(mtf.DTypeError, match=r"dropout: xi:0 has dtype int32"):
    mtf.dropout(mtf.ones(mesh, [A], dtype="int32", name="xi"), rate=0.1)
  with pytest.raises(mtf.MtfError, match="seed must be a Python int"):
    mtf.dropout(x, rate=0.1, seed="7")
  assert [op.name for op in mesh.graph.operations] == ["x", "xi"]
