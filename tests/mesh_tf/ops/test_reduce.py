"""Reductions and the softmax family over split and unsplit dims."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

A, B, C = mtf.Dimension("a", 8), mtf.Dimension("b", 4), mtf.Dimension("c", 2)
ABC = mtf.Shape([A, B, C])
ALL = [A, B, C]

_rng = np.random.RandomState(1)
X = (_rng.randn(8, 4, 2) * 3).astype(np.float32)
XI = _rng.randint(-5, 5, size=(8, 4, 2)).astype(np.int32)
XB = _rng.rand(8, 4, 2) > 0.3


def _np_logsumexp(x, axis):
  m = np.max(x, axis=axis, keepdims=True)
  return np.squeeze(m, axis) + np.log(np.sum(np.exp(x - m), axis=axis))


REDUCTIONS = {
    "sum": (mtf.reduce_sum, X, np.sum),
    "sum_int": (mtf.reduce_sum, XI, np.sum),
    "mean": (mtf.reduce_mean, X, np.mean),
    "max": (mtf.reduce_max, X, np.max),
    "max_int": (mtf.reduce_max, XI, np.max),
    "min": (mtf.reduce_min, X, np.min),
    "all": (mtf.reduce_all, XB, np.all),
    "any": (mtf.reduce_any, ~XB, np.any),
    "all_of_float": (mtf.reduce_all, XI.astype(np.float32), np.all),
}

# (output dims, numpy axes reduced): reduce one split-or-not dim, two dims
# with the output transposed, and everything.
CASES = {
    "over_b": ("a,c", (1,)),
    "over_a_and_c_to_b": ("b", (0, 2)),
    "over_b_transposed": ("c,a", (1,)),
    "over_all": ("", (0, 1, 2)),
}
FULL = {"sum", "max", "any"}


def _out_shape(names):
  return mtf.Shape([d for n in names.split(",") if n
                    for d in ALL if d.name == n])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_reduction_matches_numpy_under_layouts(kind, case):
  fn, value, ref = REDUCTIONS[kind]
  names, axes = CASES[case]
  out_shape = _out_shape(names)

  def build(mesh):
    y = fn(mtf.import_tf_tensor(mesh, value, ABC), output_shape=out_shape)
    assert y.shape == out_shape
    return y

  def reference():
    r = ref(value, axis=axes)
    if case == "over_b_transposed":
      r = r.T
    return r
  kw = {} if kind in FULL and case != "over_all" else dict(limit=6)
  check_layouts(build, ALL, reference, **kw)


def test_reduced_dim_argument_forms_agree():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.zeros(mesh, ABC)
  assert mtf.reduce_sum(x, reduced_dim=B).shape == mtf.Shape([A, C])
  assert mtf.reduce_sum(x, reduced_dim="b").shape == mtf.Shape([A, C])
  assert mtf.reduce_sum(x, reduced_dim=[A, C]).shape == mtf.Shape([B])
  assert mtf.reduce_max(x).shape == mtf.Shape([])
  assert mtf.reduce_any(x, reduced_dim=C).dtype == "bool"


def test_reduce_mean_with_reduced_dim_under_layouts():
  def build(mesh):
    return mtf.reduce_mean(mtf.import_tf_tensor(mesh, X, ABC),
                           reduced_dim=[A, C])
  check_layouts(build, ALL, lambda: X.mean(axis=(0, 2)))


@pytest.mark.parametrize("dim", ["a", "b", "c"])
def test_logsumexp_softmax_log_softmax_under_layouts(dim):
  axis = "abc".index(dim)
  d = ALL[axis]

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, ABC)
    return [mtf.reduce_logsumexp(x, d), mtf.softmax(x, d),
            mtf.log_softmax(x, d)]

  def reference():
    lse = _np_logsumexp(X.astype(np.float64), axis)
    ls = X - np.expand_dims(lse, axis)
    return [lse, np.exp(ls), ls]
  check_layouts(build, ALL, reference, limit=12 if dim == "a" else 5)


def test_softmax_sums_to_one_and_is_stable_for_huge_logits():
  big = (X * 1000).astype(np.float32)

  def build(mesh):
    return mtf.reduce_sum(mtf.softmax(mtf.import_tf_tensor(mesh, big, ABC), B),
                          reduced_dim=B)
  check_layouts(build, ALL, lambda: np.ones((8, 2)), limit=5)


def test_logsumexp_and_softmax_with_extra_logit():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, ABC)
    return [mtf.reduce_logsumexp(x, A, extra_logit=0.0),
            mtf.softmax(x, A, extra_logit=0.0)]

  def reference():
    z = np.concatenate([X.astype(np.float64), np.zeros((1, 4, 2))], 0)
    lse = _np_logsumexp(z, 0)
    return [lse, np.exp(X - lse)]
  check_layouts(build, ALL, reference, limit=5)


def test_reduction_of_split_dim_allreduces_and_of_unsplit_does_not():
  def build(mesh):
    return mtf.reduce_sum(mtf.import_tf_tensor(mesh, X, ABC), reduced_dim=B)
  (v,), trace = run(build, "rows:2;cols:4", "a:rows;b:cols")
  np.testing.assert_allclose(v, X.sum(1), rtol=1e-5)
  assert [c.key() for c in trace.collectives] == [
      ("allreduce", ("cols",), 4, (8 // 2) * 2 * 4, "SUM")]
  (v,), trace = run(build, "rows:2;cols:2", "a:rows;c:cols")
  np.testing.assert_allclose(v, X.sum(1), rtol=1e-5)
  assert trace.collectives == []
