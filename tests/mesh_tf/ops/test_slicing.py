"""concat, split, stack, unstack, slice and pad under every layout."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(1)
A = RNG.randn(2, 8).astype(np.float32)     # a:2, c:8
B = RNG.randn(2, 16).astype(np.float32)    # a:2, c:16
X = RNG.randn(4, 16).astype(np.float32)    # a:4, b:16


def _kinds(trace):
  return [(c.kind, c.mesh_axes) for c in trace.collectives]


def test_concat_under_every_layout():
  def build(mesh):
    a = mtf.import_tf_tensor(mesh, A, "a:2,c:8")
    b = mtf.import_tf_tensor(mesh, B, "a:2,c:16")
    return mtf.concat([a, b, a], "c")
  # c=8 stands for every size of c (8, 16, 32): all divisible alike.
  assert check_layouts(build, ["a:2", "c:8"],
                       lambda: np.concatenate([A, B, A], 1), exact=True) > 12


def test_concat_of_a_split_dim_gathers_each_operand_once():
  def build(mesh):
    a = mtf.import_tf_tensor(mesh, A, "a:2,c:8")
    b = mtf.import_tf_tensor(mesh, B, "a:2,c:16")
    return mtf.concat([a, b], "c")
  (v,), trace = run(build, "rows:2;cols:4", "c:cols;a:rows")
  np.testing.assert_array_equal(v, np.concatenate([A, B], 1))
  assert _kinds(trace) == [("allconcat", ("cols",))] * 2
  (_,), trace = run(build, "rows:2;cols:4", "a:rows")
  assert trace.collectives == []
  assert trace.total_flops_per_device == 0


def test_split_under_every_layout():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, np.concatenate([A, B], 1), "a:2,c:24")
    return mtf.split(x, mtf.Dimension("c", 24), [8, 16]) + mtf.split(
        x, "c", 3)
  v = np.concatenate([A, B], 1)
  assert check_layouts(build, ["a:2", "c:8"],
                       lambda: [A, B, v[:, :8], v[:, 8:16], v[:, 16:]],
                       exact=True) > 12


def test_split_of_an_unsplit_dim_is_local():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:4,b:16")
    return mtf.split(x, "b", [4, 12])
  (p, q), trace = run(build, "rows:2;cols:4", "a:rows")
  np.testing.assert_array_equal(p, X[:, :4])
  np.testing.assert_array_equal(q, X[:, 4:])
  assert trace.collectives == []


def test_stack_under_every_layout():
  parts = [RNG.randn(4, 2).astype(np.float32) for _ in range(8)]

  def build(mesh):
    xs = [mtf.import_tf_tensor(mesh, p, "a:4,b:2") for p in parts]
    return [mtf.stack(xs, "s", 1), mtf.stack(xs[:4], "t", axis=-1)]
  assert check_layouts(
      build, ["a:4", "b:2", "s:8", "t:4"],
      lambda: [np.stack(parts, 1), np.stack(parts[:4], -1)], limit=10,
      exact=True) > 25


def test_stack_along_a_split_new_dim_is_local():
  def build(mesh):
    xs = [mtf.import_tf_tensor(mesh, X * i, "a:4,b:16") for i in range(4)]
    return mtf.stack(xs, "s")
  (v,), trace = run(build, "rows:2;cols:4", "s:cols;a:rows")
  np.testing.assert_array_equal(v, np.stack([X * i for i in range(4)]))
  assert trace.collectives == []


def test_unstack_under_every_layout():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:4,b:16")
    return mtf.unstack(x, x.shape[0]) + mtf.unstack(x, "b")[:3]
  assert check_layouts(build, ["a:4", "b:16"],
                       lambda: list(X) + list(X.T[:3]), exact=True) > 12


def test_unstack_of_a_dim_of_size_one():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X[:1], "a:1,b:16")
    return mtf.unstack(x, "a")
  (v,), _ = run(build, "x:2", "b:x")
  np.testing.assert_array_equal(v, X[0])


def test_slice_under_every_layout():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:4,b:16")
    return [mtf.slice(x, 3, 8, "b"), mtf.slice(x, 1, 2, "a"),
            mtf.mtf_slice(x, 0, 16, "b")]
  assert check_layouts(build, ["a:2", "b:8"],
                       lambda: [X[:, 3:11], X[1:3], X], exact=True) > 12


def test_slice_of_an_unsplit_dim_is_local_and_free():
  def build(mesh):
    return mtf.slice(mtf.import_tf_tensor(mesh, X, "a:4,b:16"), 5, 3, "b")
  (v,), trace = run(build, "rows:2;cols:4", "a:rows")
  np.testing.assert_array_equal(v, X[:, 5:8])
  assert trace.collectives == [] and trace.total_flops_per_device == 0


def test_pad_under_every_layout():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:4,b:16")
    return [mtf.pad(x, [3, 5], "b"), mtf.pad(x, [0, 4], "a", 7.0)]
  assert check_layouts(
      build, ["a:4", "b:8"],
      lambda: [np.pad(X, [[0, 0], [3, 5]]),
               np.pad(X, [[0, 4], [0, 0]], constant_values=7.0)],
      exact=True) > 12


def test_pad_of_a_split_dim_gathers_once():
  def build(mesh):
    return mtf.pad(mtf.import_tf_tensor(mesh, X, "a:4,b:16"), [1, 7], "b")
  (v,), trace = run(build, "x:8", "b:x")
  np.testing.assert_array_equal(v, np.pad(X, [[0, 0], [1, 7]]))
  assert _kinds(trace) == [("allconcat", ("x",))]


# --- errors ------------------------------------------------------------------
def _x():
  mesh = mtf.Mesh(mtf.Graph(), "mesh")
  return mtf.import_tf_tensor(mesh, X, "a:4,b:16")


def test_concat_errors():
  x = _x()
  y = mtf.import_tf_tensor(x.mesh, X.T, "b:16,a:4")
  with pytest.raises(mtf.ShapeError, match=r"same dims, in the same order"):
    mtf.concat([x, y], "a")
  with pytest.raises(mtf.UnknownNameError, match=r"has no dim named 'z'"):
    mtf.concat([x, x], "z")
  with pytest.raises(mtf.ShapeError, match=r"at least one tensor"):
    mtf.concat([], "a")


def test_split_errors():
  x = _x()
  with pytest.raises(mtf.ShapeError, match=r"cannot split dim b=16 .* into 3"):
    mtf.split(x, "b", 3)
  with pytest.raises(mtf.ShapeError, match=r"sum to 15, not to the size of "
                     r"dim b=16"):
    mtf.split(x, "b", [5, 10])
  with pytest.raises(mtf.ShapeError, match=r"dim b=8 does not match dim b=16"):
    mtf.split(x, mtf.Dimension("b", 8), 2)


def test_stack_errors():
  x = _x()
  with pytest.raises(mtf.ShapeError, match=r"'a' is already a dim"):
    mtf.stack([x, x], "a")
  with pytest.raises(mtf.ShapeError, match=r"axis 4 is out of range"):
    mtf.stack([x, x], "s", axis=4)
  with pytest.raises(mtf.ShapeError, match=r"must have the same shape"):
    mtf.stack([x, mtf.transpose(x, "b:16,a:4")], "s")


def test_slice_and_pad_errors():
  x = _x()
  with pytest.raises(mtf.ShapeError, match=r"slice \[10, 20\) is out of range "
                     r"for dim b=16"):
    mtf.slice(x, 10, 10, "b")
  with pytest.raises(mtf.ShapeError, match=r"begin must be an integer >= 0"):
    mtf.slice(x, -1, 2, "b")
  with pytest.raises(mtf.ShapeError, match=r"paddings must be \[before, "
                     r"after\]"):
    mtf.pad(x, [1], "b")
  with pytest.raises(mtf.ShapeError, match=r"each padding must be an integer"):
    mtf.pad(x, [1, -1], "b")
  with pytest.raises(mtf.UnknownNameError, match=r"has no dim named 'q'"):
    mtf.unstack(x, "q")


def test_pad_to_a_size_the_layout_cannot_split_raises():
  def build(mesh):
    return mtf.pad(mtf.import_tf_tensor(mesh, X, "a:4,b:16"), [1, 0], "b")
  with pytest.raises(mtf.IndivisibleDimError, match=r"b=17.*mesh axis x=2"):
    run(build, "x:2", "b:x")
