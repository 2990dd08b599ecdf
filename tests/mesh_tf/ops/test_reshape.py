"""reshape, transpose, rename_dimension, replace_dimensions and broadcast."""

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.ops.reshape import RelayoutStep, reshape_plan
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(0)
X = RNG.randn(4, 8).astype(np.float32)
Y = RNG.randn(2, 4, 4).astype(np.float32)


def _shape_trace(build, mesh_shape, layout):
  """The collectives of the shape-only lowering (no TensorFlow)."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  outs = build(mesh)
  impl = mtf.ShapeMeshImpl(mesh_shape, layout)
  lowering = mtf.Lowering(graph, {mesh: impl})
  for t in outs if isinstance(outs, list) else [outs]:
    lowering.laid_out(t)
  return [(c.kind, c.mesh_axes) for c in impl.trace.collectives]


def _reshaper(value, in_shape, out_shape):
  def build(mesh):
    return mtf.reshape(mtf.import_tf_tensor(mesh, value, in_shape), out_shape)
  return build


# --- values under every layout ------------------------------------------------
@pytest.mark.parametrize("in_shape,out_shape,dims", [
    ("a:4,b:8", "c:8,d:4", ["a:4", "b:8", "c:8", "d:4"]),
    ("a:4,b:8", "c:32", ["a:4", "b:8", "c:32"]),
    # The same names with other sizes: rules keyed by name move the data.
    ("a:4,b:8", "a:8,b:4", ["a:4", "b:4"]),
])
def test_reshape_2d_matches_numpy_under_every_layout(in_shape, out_shape,
                                                     dims):
  out = mtf.convert_to_shape(out_shape).to_integer_list()
  assert check_layouts(_reshaper(X, in_shape, out_shape), dims,
                       lambda: X.reshape(out), limit=10, exact=True) > 15


def test_reshape_3d_merge_and_split_under_every_layout():
  assert check_layouts(_reshaper(Y, "a:2,b:4,c:4", "d:8,e:4"),
                       ["a:2", "b:4", "c:4", "d:8", "e:4"],
                       lambda: Y.reshape(8, 4), limit=10, exact=True) > 25


@hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
@hypothesis.given(st.data())
def test_reshape_random_shapes_and_layouts_match_numpy(data):
  def factorization(prefix):
    sizes, left = [], 32
    while left > 1:
      f = data.draw(st.sampled_from([f for f in (2, 4, 8) if left % f == 0]))
      sizes.append(f)
      left //= f
    return [mtf.Dimension(f"{prefix}{i}", s) for i, s in enumerate(sizes)]
  ins, outs = factorization("i"), factorization("o")
  mesh_shape = mtf.convert_to_shape(data.draw(st.sampled_from(
      ["rows:2;cols:4", "x:2;y:2;z:2"])))
  axes = [(a.name, a.size) for a in mesh_shape]
  rules = []
  for dims in (ins, outs):
    free = list(range(len(dims)))
    for name, size in axes:
      choice = data.draw(st.sampled_from([None] + free))
      if choice is not None and dims[choice].size % size == 0:
        rules.append(f"{dims[choice].name}:{name}")
        free.remove(choice)
  value = np.arange(32, dtype=np.float32).reshape([d.size for d in ins])
  (got,), trace = run(_reshaper(value, mtf.Shape(ins), mtf.Shape(outs)),
                      mesh_shape, ";".join(rules))
  np.testing.assert_array_equal(got, value.reshape([d.size for d in outs]))
  # At most one collective per mesh axis.
  used = [c.mesh_axes for c in trace.collectives]
  assert len(used) == len(set(used)) <= len(axes)


# --- the relayout plan --------------------------------------------------------
def test_renaming_reshape_that_keeps_the_split_is_local():
  build = _reshaper(X.T, "b:8,s:4", "b:8,s2:4")
  assert _shape_trace(build, "rows:2;cols:4", "b:rows") == []
  assert _shape_trace(build, "rows:2;cols:4", "b:rows;s:cols;s2:cols") == []


def test_reshape_that_moves_a_split_to_a_free_input_dim_uses_alltoall():
  build = _reshaper(np.zeros((4, 4), np.float32), "a:4,b:4", "c:4,d:4")
  assert _shape_trace(build, "x:2", "a:x;d:x") == [("alltoall", ("x",))]
  s = mtf.convert_to_shape
  plan = reshape_plan(s("a:4,b:4"), s("c:4,d:4"), s("x:2"), (0, None),
                      (None, 0))
  assert plan.before == (RelayoutStep("alltoall", 0, 1, 0),)
  assert plan.middle_layout == (None, 0) and plan.after == ()


def test_reshape_that_splits_a_merged_dim_uses_alltoall_after():
  # The output's split has no counterpart in the input space, but the input's
  # split is a block split of output dim a: carry it, then all-to-all.
  build = _reshaper(np.zeros(16, np.float32), "c:16", "a:4,b:4")
  assert _shape_trace(build, "x:2", "c:x;b:x") == [("alltoall", ("x",))]
  s = mtf.convert_to_shape
  plan = reshape_plan(s("c:16"), s("a:4,b:4"), s("x:2"), (0,), (None, 0))
  assert plan.before == () and plan.middle_layout == (0, None)
  assert plan.after == (RelayoutStep("alltoall", 0, 1, 0),)


def test_rename_onto_another_mesh_axis_gathers_then_splits():
  build = lambda mesh: mtf.rename_dimension(
      mtf.import_tf_tensor(mesh, X.T, "b:8,s:4"), "s", "s2")
  assert _shape_trace(build, "rows:2;cols:4", "s:rows;s2:cols") == [
      ("allconcat", ("rows",))]
  assert _shape_trace(build, "rows:2;cols:4", "s2:cols") == []


def test_swapping_two_splits_breaks_the_cycle():
  build = _reshaper(np.zeros((4, 4), np.float32), "a:4,b:4", "c:4,d:4")
  kinds = _shape_trace(build, "x:2;y:2", "a:x;b:y;c:y;d:x")
  assert kinds == [("allconcat", ("x",)), ("alltoall", ("y",))]


def test_reshape_plan_of_unsplit_tensors_is_a_local_reshape():
  s = mtf.convert_to_shape
  plan = reshape_plan(s("a:4,b:4"), s("c:16"), s("x:2"), (None, None),
                      (None,))
  assert plan == ((), (None,), ())


def test_new_split_of_a_free_input_dim_is_made_before_the_reshape():
  s = mtf.convert_to_shape
  plan = reshape_plan(s("a:4,b:4"), s("c:16"), s("x:2"), (None, None), (0,))
  assert plan == ((RelayoutStep("allsplit", 0, 0),), (0,), ())
  # c's digit (1, 4) is no block split of a:2: split after the reshape.
  plan = reshape_plan(s("a:2,b:8"), s("c:16"), s("x:4"), (None, None), (0,))
  assert plan == ((), (None,), (RelayoutStep("allsplit", 0, 0),))


def test_reshape_records_no_flops():
  (v,), trace = run(_reshaper(X, "a:4,b:8", "c:8,d:4"), "x:2", "a:x;c:x")
  np.testing.assert_array_equal(v, X.reshape(8, 4))
  assert trace.collectives == []
  assert trace.total_flops_per_device == 0


# --- transpose, rename, replace, broadcast ------------------------------------
def test_transpose_under_every_layout():
  def build(mesh):
    y = mtf.import_tf_tensor(mesh, Y, "a:2,b:4,c:4")
    return mtf.transpose(y, "c:4,a:2,b:4")
  assert check_layouts(build, ["a:2", "b:4", "c:4"],
                       lambda: Y.transpose(2, 0, 1), limit=10,
                       exact=True) > 25


def test_transpose_is_local():
  def build(mesh):
    return mtf.transpose(mtf.import_tf_tensor(mesh, X, "a:4,b:8"), "b:8,a:4")
  (v,), trace = run(build, "rows:2;cols:4", "a:rows;b:cols")
  np.testing.assert_array_equal(v, X.T)
  assert trace.collectives == []


def test_rename_dimension_under_every_layout():
  def build(mesh):
    return mtf.rename_dimension(mtf.import_tf_tensor(mesh, X, "a:4,b:8"),
                                "b", "c")
  assert check_layouts(build, ["a:4", "b:8", "c:8"], lambda: X, limit=10,
                       exact=True) > 25


def test_rename_dimension_of_a_shape():
  assert mtf.rename_dimension(mtf.convert_to_shape("a:4,b:8"), "b", "c") == (
      mtf.convert_to_shape("a:4,c:8"))


def test_replace_dimensions_on_shapes_and_tensors():
  s = mtf.convert_to_shape("b:2,h:4,d:8")
  hd = mtf.Dimension("hd", 32)
  assert mtf.replace_dimensions(s, s.dims[1:], hd) == mtf.convert_to_shape(
      "b:2,hd:32")
  assert mtf.replace_dimensions(s, s.dims[0], []) == mtf.convert_to_shape(
      "h:4,d:8")
  assert mtf.replace_dimensions(s, s.dims[2], [mtf.Dimension("x", 2),
                                               mtf.Dimension("y", 4)]) == (
                                                   mtf.convert_to_shape(
                                                       "b:2,h:4,x:2,y:4"))
  def build(mesh):
    y = mtf.import_tf_tensor(mesh, Y, "a:2,b:4,c:4")
    out = mtf.replace_dimensions(y, y.shape.dims[:2], mtf.Dimension("ab", 8))
    assert out.shape == mtf.convert_to_shape("ab:8,c:4")
    return out
  assert check_layouts(build, ["a:2", "b:4", "c:4", "ab:8"],
                       lambda: Y.reshape(8, 4), limit=6, exact=True) > 15


def test_broadcast_under_every_layout():
  v = RNG.randn(4).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, v, "b:4")
    return mtf.broadcast(x, "a:2,c:4,b:4")
  assert check_layouts(build, ["a:2", "b:4", "c:4"],
                       lambda: np.broadcast_to(v[None, None, :], (2, 4, 4)),
                       limit=10, exact=True) > 25


def test_broadcast_is_local_and_a_no_op_on_equal_shapes():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:4,b:8")
    assert mtf.broadcast(x, x.shape) is x
    return mtf.broadcast(x, "b:8,c:2,a:4")
  (v,), trace = run(build, "rows:2;cols:4", "c:rows;a:cols")
  np.testing.assert_array_equal(
      v, np.broadcast_to(X.T[:, None, :], (8, 2, 4)))
  assert trace.collectives == []


# --- errors ------------------------------------------------------------------
def _x():
  mesh = mtf.Mesh(mtf.Graph(), "mesh")
  return mtf.import_tf_tensor(mesh, X, "a:4,b:8")


def test_reshape_to_another_size_raises():
  with pytest.raises(mtf.ShapeError, match=r"reshape: cannot reshape .*"
                     r"32 elements.* to .*c=30.*must not change"):
    mtf.reshape(_x(), "c:30")


def test_transpose_to_other_dims_raises():
  with pytest.raises(mtf.ShapeError, match=r"not a permutation of the dims"):
    mtf.transpose(_x(), "b:8,c:4")


def test_rename_of_a_missing_dim_raises():
  with pytest.raises(mtf.UnknownNameError, match=r"dim z is not in"):
    mtf.rename_dimension(_x(), "z", "y")


def test_replace_dimensions_errors():
  s = mtf.convert_to_shape("b:2,h:4,d:8")
  with pytest.raises(mtf.ShapeError, match=r"not consecutive and in order"):
    mtf.replace_dimensions(s, [s[0], s[2]], mtf.Dimension("z", 16))
  with pytest.raises(mtf.ShapeError, match=r"not consecutive and in order"):
    mtf.replace_dimensions(s, [s[1], s[0]], mtf.Dimension("z", 8))
  with pytest.raises(mtf.UnknownNameError, match=r"dim q=3 is not in"):
    mtf.replace_dimensions(s, mtf.Dimension("q", 3), [])
  with pytest.raises(mtf.ShapeError, match=r"at least one dim"):
    mtf.replace_dimensions(s, [], [])


def test_broadcast_that_drops_a_dim_raises():
  with pytest.raises(mtf.ShapeError,
                     match=r"dim b=8 is missing from the new shape"):
    mtf.broadcast(_x(), "a:4,c:2")


def test_reshape_under_invalid_output_layout_raises():
  def build(mesh):
    return mtf.reshape(mtf.import_tf_tensor(mesh, X, "a:4,b:8"), "c:2,d:16")
  with pytest.raises(mtf.IndivisibleDimError, match=r"c=2.*mesh axis x=8"):
    run(build, "x:8", "c:x")
